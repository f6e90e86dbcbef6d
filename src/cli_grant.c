/* cli_grant.c: `warren grant` and `warren revoke`: which queues a worker login
 * may work on (docs/worker-protocol.md, "Privileges"), thin wrappers over
 * warren_ops_grant / warren_ops_revoke / warren_ops_grants (src/ops.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/ops.h>
#include <warren/store.h>
#include <warren/timefmt.h>

#include "cli.h"

static const char grant_usage[] =
    "usage: warren grant [-c FILE] [--database URL] LOGIN QUEUE...\n"
    "       warren grant [-c FILE] [--database URL] [LOGIN]\n"
    "\n"
    "Lets the PostgreSQL login LOGIN (a member of warren_worker) claim, heartbeat,\n"
    "complete and reclaim the runs of the jobs of each QUEUE; without a QUEUE, lists\n"
    "the grants (of LOGIN, or of every login). A superuser or a member of the schema's\n"
    "owner is not limited by grants. Create the login first:\n"
    "  CREATE ROLE report_worker LOGIN PASSWORD '...' IN ROLE warren_worker;\n"
    "\n"
    "  -c, --config FILE  config file for database.url (default $WARREN_CONFIG or\n"
    "                     warren.cfg; not needed when WARREN_DATABASE_URL is set)\n"
    "  --database URL     connect here instead\n"
    "\n"
    "exit codes: 0 ok, 1 no such login, 2 usage or config error, 69 PostgreSQL\n"
    "unreachable\n";

static const char revoke_usage[] =
    "usage: warren revoke [-c FILE] [--database URL] LOGIN QUEUE...\n"
    "\n"
    "Takes each QUEUE away from LOGIN: from its next call on, it can no longer claim,\n"
    "heartbeat, complete or reclaim runs of those queues (runs it holds are reaped\n"
    "when their lease ends, and run again elsewhere).\n"
    "\n"
    "  -c, --config FILE  config file for database.url (default $WARREN_CONFIG or\n"
    "                     warren.cfg; not needed when WARREN_DATABASE_URL is set)\n"
    "  --database URL     connect here instead\n"
    "\n"
    "exit codes: 0 ok, 2 usage or config error, 69 PostgreSQL unreachable\n";

/* Opens the store from --database, WARREN_DATABASE_URL (when no config file
 * is given or present) or the config's database.url; an exit code. */
static int open_db(const char *cmd, const char *cfg_path, const char *url, warren_store **st)
{
    warren_config *cfg = NULL;
    warren_logger lg = cli_logger();
    warren_error err = {0};
    int rc;

    if (url == NULL) {
        const char *env = getenv("WARREN_DATABASE_URL");
        const char *path = cli_config_path(cfg_path);
        if (cfg_path == NULL && env != NULL && env[0] != '\0' && access(path, F_OK) != 0) {
            url = env;
        } else {
            if ((cfg = cli_load_config(path)) == NULL)
                return WARREN_EXIT_USAGE;
            url = cfg->database_url;
        }
    }
    if (url == NULL || url[0] == '\0') {
        fprintf(stderr,
                "warren %s: no database URL: set database.url in the config, "
                "WARREN_DATABASE_URL, or --database\n",
                cmd);
        warren_config_free(cfg);
        return WARREN_EXIT_USAGE;
    }
    rc = warren_store_open(url, &lg, st, &err);
    warren_config_free(cfg);
    if (rc != 0) {
        fprintf(stderr, "warren %s: %s\n", cmd, err.message);
        return cli_exit_code(rc);
    }
    return WARREN_EXIT_OK;
}

/* Parses [-c FILE] [--database URL] and the positional arguments (into
 * args, at most argc of them). An exit code, or -1 to go on. */
static int parse(int argc, char **argv, const char *usage, const char **cfg_path, const char **url,
                 const char **args, int *nargs)
{
    *nargs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return WARREN_EXIT_OK;
        } else if ((strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) && i + 1 < argc) {
            *cfg_path = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            *cfg_path = a + 9;
        } else if (strcmp(a, "--database") == 0 && i + 1 < argc) {
            *url = argv[++i];
        } else if (strncmp(a, "--database=", 11) == 0) {
            *url = a + 11;
        } else if (a[0] == '-') {
            fprintf(stderr, "warren %s: unknown or incomplete argument \"%s\"\n%s", argv[0], a,
                    usage);
            return WARREN_EXIT_USAGE;
        } else {
            args[(*nargs)++] = a;
        }
    }
    return -1;
}

static void note_login(const char *login, const warren_ops_grant_result *r)
{
    if (r->privileged)
        printf("note: %s is a superuser or a member of the schema's owner: grants do not "
               "limit it\n",
               login);
    else if (!r->is_worker)
        printf("note: %s is not a member of warren_worker yet: GRANT warren_worker TO %s;\n", login,
               login);
}

static int list_grants(warren_store *st, const char *login)
{
    warren_ops_grant_row *rows = NULL;
    warren_error err = {0};
    size_t n = 0;
    int rc = warren_ops_grants(st, login, &rows, &n, &err);

    if (rc != 0) {
        fprintf(stderr, "warren grant: %s\n", err.message);
        return cli_exit_code(rc);
    }
    if (n == 0)
        printf("no grants%s%s\n", login ? " for " : "", login ? login : "");
    else
        printf("%-24s %-24s %-20s %s\n", "LOGIN", "QUEUE", "GRANTED AT (UTC)", "BY");
    for (size_t i = 0; i < n; i++) {
        char tb[WARREN_TIME_BUF];
        warren_time_format(rows[i].granted_at, tb, sizeof(tb));
        printf("%-24s %-24s %-20s %s\n", rows[i].login, rows[i].queue, tb, rows[i].granted_by);
    }
    warren_ops_grant_rows_free(rows, n);
    return WARREN_EXIT_OK;
}

static int grant_or_revoke(int argc, char **argv, int grant)
{
    const char *usage = grant ? grant_usage : revoke_usage;
    const char *cfg_path = NULL, *url = NULL, **args;
    warren_store *st = NULL;
    warren_ops_grant_result r;
    warren_error err = {0};
    int nargs = 0, code, rc;

    if ((args = calloc((size_t)argc, sizeof(*args))) == NULL) {
        fprintf(stderr, "warren %s: out of memory\n", argv[0]);
        return WARREN_EXIT_FAIL;
    }
    code = parse(argc, argv, usage, &cfg_path, &url, args, &nargs);
    if (code == -1 && !grant && nargs < 2) {
        fprintf(stderr, "warren revoke: give a LOGIN and at least one QUEUE\n%s", usage);
        code = WARREN_EXIT_USAGE;
    }
    if (code == -1 && nargs >= 1 && args[0][0] == '\0') {
        fprintf(stderr, "warren %s: LOGIN is empty\n%s", argv[0], usage);
        code = WARREN_EXIT_USAGE;
    }
    if (code == -1)
        code = open_db(argv[0], cfg_path, url, &st);
    if (code != WARREN_EXIT_OK) {
        free(args);
        return code;
    }
    if (grant && nargs < 2) {
        code = list_grants(st, nargs == 1 ? args[0] : NULL);
    } else {
        rc = grant ? warren_ops_grant(st, args[0], args + 1, (size_t)nargs - 1, &r, &err)
                   : warren_ops_revoke(st, args[0], args + 1, (size_t)nargs - 1, &r, &err);
        if (rc != 0) {
            fprintf(stderr, "warren %s: %s\n", argv[0], err.message);
            code = rc == WARREN_EINVAL ? WARREN_EXIT_USAGE : cli_exit_code(rc);
        } else {
            printf("%s %s: %d queue%s %s (%d given)\n", argv[0], args[0], r.changed,
                   r.changed == 1 ? "" : "s", grant ? "granted" : "revoked", nargs - 1);
            if (grant)
                note_login(args[0], &r);
        }
    }
    warren_store_free(st);
    free(args);
    return code;
}

int cli_grant(int argc, char **argv)
{
    return grant_or_revoke(argc, argv, 1);
}

int cli_revoke(int argc, char **argv)
{
    return grant_or_revoke(argc, argv, 0);
}
