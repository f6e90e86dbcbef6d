/* cli_grant.c: `warren grant` and `warren revoke`: which queues a worker login
 * may work on (docs/worker-protocol.md, "Privileges"), thin wrappers over
 * warren_ops_grant / warren_ops_revoke / warren_ops_grants (src/ops.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/codec.h>
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
    /* The store keeps a pointer to its logger: it must outlive this call. */
    static warren_logger lg;
    warren_config *cfg = NULL;
    warren_error err = {0};
    int rc;

    lg = cli_logger();

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

/* What the command line of one of these commands holds. The arrays point
 * into argv and hold at most argc entries each. */
typedef struct args {
    const char *cfg_path, *url;
    const char **pos; /* positional arguments */
    int npos;
    const char **templates, **jobs; /* --template T, --job J (producer grants) */
    size_t ntemplates, njobs;
    const char *tenant_prefix; /* --tenant-prefix P; NULL: not given */
    int remove;                /* --remove (tenant-cap) */
} args;

/* Which options a command takes besides -c and --database. */
#define OPT_SCOPE 1  /* --template, --job */
#define OPT_PREFIX 2 /* --tenant-prefix */
#define OPT_REMOVE 4 /* --remove */

static void args_free(args *a)
{
    free(a->pos);
    free(a->templates);
    free(a->jobs);
}

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i]: 1 and *val set
 * (borrowed), 0 if it is not this option, -1 if the value is missing. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);

    if (strncmp(a, name, n) == 0 && a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (strcmp(a, name) != 0)
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *val = argv[++*i];
    return 1;
}

/* Parses the command line into *a (free it with args_free, also after an
 * error). Returns -1 to go on, or the exit code to return now: 0 after
 * printing the usage for -h/--help (before anything else is looked at, so
 * help never needs a database), 2 after a usage error. */
static int parse(int argc, char **argv, const char *usage, int opts, args *a)
{
    const char *val;
    int r;

    memset(a, 0, sizeof(*a));
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return WARREN_EXIT_OK;
    }
    a->pos = calloc((size_t)argc, sizeof(*a->pos));
    a->templates = calloc((size_t)argc, sizeof(*a->templates));
    a->jobs = calloc((size_t)argc, sizeof(*a->jobs));
    if (a->pos == NULL || a->templates == NULL || a->jobs == NULL) {
        fprintf(stderr, "warren %s: out of memory\n", argv[0]);
        return WARREN_EXIT_FAIL;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        val = NULL;
        if ((r = opt_value(argc, argv, &i, "--config", &val)) != 0 ||
            (strcmp(arg, "-c") == 0 && (r = opt_value(argc, argv, &i, "-c", &val)) != 0)) {
            a->cfg_path = val;
        } else if ((r = opt_value(argc, argv, &i, "--database", &val)) != 0) {
            a->url = val;
        } else if ((opts & OPT_SCOPE) && (r = opt_value(argc, argv, &i, "--template", &val)) != 0) {
            a->templates[a->ntemplates++] = val;
        } else if ((opts & OPT_SCOPE) && (r = opt_value(argc, argv, &i, "--job", &val)) != 0) {
            a->jobs[a->njobs++] = val;
        } else if ((opts & OPT_PREFIX) &&
                   (r = opt_value(argc, argv, &i, "--tenant-prefix", &val)) != 0) {
            a->tenant_prefix = val;
        } else if ((opts & OPT_REMOVE) && strcmp(arg, "--remove") == 0) {
            a->remove = 1;
            r = 1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "warren %s: unknown argument \"%.80s\"\n%s", argv[0], arg, usage);
            return WARREN_EXIT_USAGE;
        } else {
            a->pos[a->npos++] = arg;
            r = 1;
        }
        if (r < 0) {
            fprintf(stderr, "warren %s: missing value for \"%s\"\n%s", argv[0], arg, usage);
            return WARREN_EXIT_USAGE;
        }
    }
    return -1;
}

/* A usage error: the problem, then the usage, on stderr. */
static int usage_error(const char *cmd, const char *usage, const char *problem)
{
    fprintf(stderr, "warren %s: %s\n%s", cmd, problem, usage);
    return WARREN_EXIT_USAGE;
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
    warren_store *st = NULL;
    warren_ops_grant_result r;
    warren_error err = {0};
    args a;
    int code, rc;

    code = parse(argc, argv, usage, 0, &a);
    if (code == -1 && !grant && a.npos < 2)
        code = usage_error(argv[0], usage, "give a LOGIN and at least one QUEUE");
    if (code == -1 && a.npos >= 1 && a.pos[0][0] == '\0')
        code = usage_error(argv[0], usage, "LOGIN is empty");
    if (code == -1)
        code = open_db(argv[0], a.cfg_path, a.url, &st);
    if (code != WARREN_EXIT_OK || st == NULL) {
        args_free(&a);
        return code;
    }
    if (grant && a.npos < 2) {
        code = list_grants(st, a.npos == 1 ? a.pos[0] : NULL);
    } else {
        const char *const *queues = (const char *const *)a.pos + 1;
        rc = grant ? warren_ops_grant(st, a.pos[0], queues, (size_t)a.npos - 1, &r, &err)
                   : warren_ops_revoke(st, a.pos[0], queues, (size_t)a.npos - 1, &r, &err);
        if (rc != 0) {
            fprintf(stderr, "warren %s: %s\n", argv[0], err.message);
            code = cli_exit_code(rc);
        } else {
            printf("%s %s: %d queue%s %s (%d given)\n", argv[0], a.pos[0], r.changed,
                   r.changed == 1 ? "" : "s", grant ? "granted" : "revoked", a.npos - 1);
            if (grant)
                note_login(a.pos[0], &r);
        }
    }
    warren_store_free(st);
    args_free(&a);
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

/* ------------------------------------------------------- producer grants */

static const char grant_producer_usage[] =
    "usage: warren grant-producer [-c FILE] [--database URL] LOGIN [--template T]...\n"
    "                             [--job J]... [--tenant-prefix P]\n"
    "       warren grant-producer [-c FILE] [--database URL] [LOGIN]\n"
    "\n"
    "Lets the PostgreSQL login LOGIN (a member of warren_producer) use the Job API in\n"
    "this database: create and change API jobs from each template T and enqueue runs\n"
    "on it, and enqueue runs of each config job J. With --tenant-prefix P, every job\n"
    "and run it makes or touches has a tenant starting with P (--tenant-prefix \"\"\n"
    "removes the binding). It acts only on API jobs made by a login with the same\n"
    "grants. Without --template, --job or --tenant-prefix, lists the producer grants\n"
    "(of LOGIN, or of every login). A superuser or a member of the schema's owner is\n"
    "not limited by grants. Create the login first:\n"
    "  CREATE ROLE billing_app LOGIN PASSWORD '...' IN ROLE warren_producer;\n"
    "\n"
    "  --template T       a template (template = true in the config); repeatable\n"
    "  --job J            a config job that is not a template; repeatable\n"
    "  --tenant-prefix P  bind the login to tenants starting with P\n"
    "  -c, --config FILE  config file for database.url (default $WARREN_CONFIG or\n"
    "                     warren.cfg; not needed when WARREN_DATABASE_URL is set)\n"
    "  --database URL     connect here instead\n"
    "\n"
    "exit codes: 0 ok, 1 no such login, 2 usage error or a name that cannot be\n"
    "granted, 69 PostgreSQL unreachable\n";

static const char revoke_producer_usage[] =
    "usage: warren revoke-producer [-c FILE] [--database URL] LOGIN [--template T]...\n"
    "                              [--job J]...\n"
    "\n"
    "Takes each template T and config job J away from the producer login LOGIN in\n"
    "this database, from its next API call on (its API jobs stay, and keep running).\n"
    "Without --template and --job, takes everything, the tenant prefix too: LOGIN can\n"
    "no longer call the Job API in this database.\n"
    "\n"
    "  --template T       a template to take away; repeatable\n"
    "  --job J            a config job to take away; repeatable\n"
    "  -c, --config FILE  config file for database.url (default $WARREN_CONFIG or\n"
    "                     warren.cfg; not needed when WARREN_DATABASE_URL is set)\n"
    "  --database URL     connect here instead\n"
    "\n"
    "exit codes: 0 ok, 2 usage error, 69 PostgreSQL unreachable\n";

static void print_producer_rows(const warren_ops_producer_row *rows, size_t n)
{
    printf("%-24s %-9s %-32s %-16s %-20s %s\n", "LOGIN", "KIND", "NAME", "TENANT PREFIX",
           "GRANTED AT (UTC)", "BY");
    for (size_t i = 0; i < n; i++) {
        char tb[WARREN_TIME_BUF];
        warren_time_format(rows[i].granted_at, tb, sizeof(tb));
        printf("%-24s %-9s %-32s %-16s %-20s %s\n", rows[i].login,
               rows[i].kind ? rows[i].kind : "-", rows[i].name ? rows[i].name : "-",
               rows[i].tenant_prefix ? rows[i].tenant_prefix : "(any)", tb, rows[i].granted_by);
    }
}

static int list_producer_grants(warren_store *st, const char *cmd, const char *login)
{
    warren_ops_producer_row *rows = NULL;
    warren_error err = {0};
    size_t n = 0;
    int rc = warren_ops_producer_grants(st, login, &rows, &n, &err);

    if (rc != 0) {
        fprintf(stderr, "warren %s: %s\n", cmd, err.message);
        return cli_exit_code(rc);
    }
    if (n == 0)
        printf("no producer grants%s%s\n", login ? " for " : "", login ? login : "");
    else
        print_producer_rows(rows, n);
    warren_ops_producer_rows_free(rows, n);
    return WARREN_EXIT_OK;
}

static int producer_cmd(int argc, char **argv, int grant)
{
    const char *usage = grant ? grant_producer_usage : revoke_producer_usage;
    warren_store *st = NULL;
    warren_ops_producer_result r;
    warren_error err = {0};
    args a;
    int code, rc, listing;

    code = parse(argc, argv, usage, OPT_SCOPE | (grant ? OPT_PREFIX : 0), &a);
    listing = grant && a.ntemplates == 0 && a.njobs == 0 && a.tenant_prefix == NULL;
    if (code == -1 && a.npos > 1)
        code =
            usage_error(argv[0], usage,
                        "give one LOGIN (templates with --template T, config jobs with --job J)");
    if (code == -1 && !grant && a.npos != 1)
        code = usage_error(argv[0], usage, "give the LOGIN");
    if (code == -1 && !listing && a.npos != 1)
        code = usage_error(argv[0], usage, "give the LOGIN to grant to");
    if (code == -1 && a.npos == 1 && (a.pos[0][0] == '\0' || strlen(a.pos[0]) > 63))
        code = usage_error(argv[0], usage, "a login name has 1 to 63 characters");
    if (code == -1)
        code = open_db(argv[0], a.cfg_path, a.url, &st);
    if (code != WARREN_EXIT_OK || st == NULL) {
        args_free(&a);
        return code;
    }
    if (listing) {
        code = list_producer_grants(st, argv[0], a.npos == 1 ? a.pos[0] : NULL);
        goto out;
    }
    rc = grant ? warren_ops_grant_producer(st, a.pos[0], a.templates, a.ntemplates, a.jobs, a.njobs,
                                           a.tenant_prefix, &r, &err)
               : warren_ops_revoke_producer(st, a.pos[0], a.templates, a.ntemplates, a.jobs,
                                            a.njobs, &r, &err);
    if (rc != 0) {
        fprintf(stderr, "warren %s: %s\n", argv[0], err.message);
        code = cli_exit_code(rc);
        goto out;
    }
    if (grant) {
        printf("grant-producer %s: %d grant%s added (%zu given)\n", a.pos[0], r.changed,
               r.changed == 1 ? "" : "s", a.ntemplates + a.njobs);
        if (r.privileged)
            printf("note: %s is a superuser or a member of the schema's owner: grants do not "
                   "limit it\n",
                   a.pos[0]);
        else if (!r.is_producer)
            printf("note: %s is not a member of warren_producer yet: GRANT warren_producer TO "
                   "%s;\n",
                   a.pos[0], a.pos[0]);
        code = list_producer_grants(st, argv[0], a.pos[0]);
    } else if (a.ntemplates + a.njobs == 0) {
        printf("revoke-producer %s: %s (%d grant%s removed): it can no longer call the Job API "
               "in this database\n",
               a.pos[0], r.had_login ? "every grant revoked" : "it had no producer grants",
               r.changed, r.changed == 1 ? "" : "s");
    } else {
        printf("revoke-producer %s: %d grant%s removed (%zu given)\n", a.pos[0], r.changed,
               r.changed == 1 ? "" : "s", a.ntemplates + a.njobs);
    }
out:
    warren_store_free(st);
    args_free(&a);
    return code;
}

int cli_grant_producer(int argc, char **argv)
{
    return producer_cmd(argc, argv, 1);
}

int cli_revoke_producer(int argc, char **argv)
{
    return producer_cmd(argc, argv, 0);
}

/* ------------------------------------------------------------ tenant caps */

/* `warren tenant-cap`: warren.set_tenant_cap (migration 020,
 * sql/functions/caps.sql), read by every claim as the template caps are. */

static const char tenant_cap_usage[] =
    "usage: warren tenant-cap [-c FILE] [--database URL] TENANT N\n"
    "       warren tenant-cap [-c FILE] [--database URL] TENANT off|--remove\n"
    "       warren tenant-cap [-c FILE] [--database URL] [TENANT]\n"
    "\n"
    "Caps the runs of TENANT running at once at N (1 to 1000000) in each template\n"
    "(over all its API jobs) and each config job, in place of its\n"
    "max_running_per_tenant, higher or lower; its max_running still applies. A\n"
    "run over the cap waits and starts in due order when a slot frees. `off` or\n"
    "--remove takes the cap away. With TENANT alone, or nothing, lists the\n"
    "tenant caps. Only the operator (the schema's owner) sets them.\n"
    "\n"
    "  --remove           remove TENANT's cap (as `off`)\n"
    "  -c, --config FILE  config file for database.url (default $WARREN_CONFIG or\n"
    "                     warren.cfg; not needed when WARREN_DATABASE_URL is set)\n"
    "  --database URL     connect here instead\n"
    "\n"
    "exit codes: 0 ok, 1 failure, 2 usage error, 69 PostgreSQL unreachable\n";

/* N of `tenant-cap TENANT N`: 1 to 1,000,000; 0 for off. -1 if neither. */
static int cap_value(const char *s)
{
    char *end;
    long v;

    if (strcmp(s, "off") == 0)
        return 0;
    if (s[0] < '0' || s[0] > '9')
        return -1;
    v = strtol(s, &end, 10);
    if (*end != '\0' || v < 1 || v > 1000000)
        return -1;
    return (int)v;
}

static int list_tenant_caps(warren_store *st, const char *tenant)
{
    warren_ops_tenant_cap *rows = NULL;
    warren_error err = {0};
    size_t n = 0;
    int rc = warren_ops_tenant_caps(st, tenant, &rows, &n, &err);

    if (rc != 0) {
        fprintf(stderr, "warren tenant-cap: %s\n", err.message);
        return cli_exit_code(rc);
    }
    if (n == 0)
        printf("no tenant caps%s%s\n", tenant ? " for " : "", tenant ? tenant : "");
    else
        printf("%-40s %s\n", "TENANT", "MAX RUNNING");
    for (size_t i = 0; i < n; i++)
        printf("%-40s %d\n", rows[i].tenant, rows[i].max_running);
    warren_ops_tenant_caps_free(rows, n);
    return WARREN_EXIT_OK;
}

int cli_tenant_cap(int argc, char **argv)
{
    warren_store *st = NULL;
    warren_error err = {0};
    args a;
    int code, rc, cap = -1, had = 0;

    code = parse(argc, argv, tenant_cap_usage, OPT_REMOVE, &a);
    if (code == -1 && a.npos > (a.remove ? 1 : 2))
        code = usage_error(argv[0], tenant_cap_usage,
                           a.remove ? "--remove takes the TENANT alone" : "too many arguments");
    if (code == -1 && a.remove && a.npos != 1)
        code = usage_error(argv[0], tenant_cap_usage, "--remove needs the TENANT");
    if (code == -1 && a.npos >= 1 && !warren_tenant_valid(a.pos[0])) {
        fprintf(stderr,
                "warren %s: \"%.80s\" is not a tenant name ([A-Za-z0-9][A-Za-z0-9._:@-]{0,199})\n",
                argv[0], a.pos[0]);
        code = WARREN_EXIT_USAGE;
    }
    if (code == -1 && a.npos == 2 && (cap = cap_value(a.pos[1])) < 0) {
        fprintf(stderr,
                "warren %s: N \"%.20s\" is not a cap: give 1 to 1000000 runs, or `off` to remove "
                "the cap\n%s",
                argv[0], a.pos[1], tenant_cap_usage);
        code = WARREN_EXIT_USAGE;
    }
    if (code == -1 && a.remove)
        cap = 0;
    if (code == -1)
        code = open_db(argv[0], a.cfg_path, a.url, &st);
    if (code != WARREN_EXIT_OK || st == NULL) {
        args_free(&a);
        return code;
    }
    if (cap < 0) {
        code = list_tenant_caps(st, a.npos == 1 ? a.pos[0] : NULL);
    } else if ((rc = warren_ops_set_tenant_cap(st, a.pos[0], cap, &had, &err)) != 0) {
        fprintf(stderr, "warren %s: %s\n", argv[0], err.message);
        code = cli_exit_code(rc);
    } else if (cap == 0) {
        if (had > 0)
            printf("tenant-cap %s: removed (it was %d)\n", a.pos[0], had);
        else
            printf("tenant-cap %s: had no cap\n", a.pos[0]);
    } else if (had > 0) {
        printf("tenant-cap %s: %d runs at once (it was %d)\n", a.pos[0], cap, had);
    } else {
        printf("tenant-cap %s: %d runs at once\n", a.pos[0], cap);
    }
    warren_store_free(st);
    args_free(&a);
    return code;
}
