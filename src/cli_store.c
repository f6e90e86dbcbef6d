/* cli_store.c: `warren migrate` (apply sql/migrations/NNN_*.sql, then sql/functions/) and `warren
 * sync` (upsert the config's jobs), thin wrappers over include/warren/store.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/duration.h>
#include <warren/ops.h>
#include <warren/store.h>

#include "cli.h"

#ifndef WARREN_SQL_DIR
#define WARREN_SQL_DIR "sql"
#endif

static const char migrate_usage[] =
    "usage: warren migrate [-c FILE] [--database URL] [--sql-dir DIR]\n"
    "\n"
    "Applies the SQL migrations (DIR/migrations/NNN_*.sql) not yet recorded in\n"
    "warren.schema_migrations, then every function file DIR/functions.sql lists,\n"
    "in one transaction under a lock of warren.schema_migrations (safe to run\n"
    "twice, and from several processes at once).\n"
    "\n"
    "  -c, --config FILE  config file for database.url (default $WARREN_CONFIG "
    "or\n"
    "                     warren.cfg; not needed when WARREN_DATABASE_URL is "
    "set\n"
    "                     and the file does not exist)\n"
    "  --database URL     PostgreSQL URL; overrides the config and "
    "WARREN_DATABASE_URL\n"
    "  --sql-dir DIR      the directory holding migrations/ and functions.sql\n"
    "                     (default $WARREN_SQL_DIR, else\n"
    "                     " WARREN_SQL_DIR ")\n"
    "\n"
    "exit codes: 0 ok, 1 failure, 2 usage or config error, 69 database "
    "unreachable\n";

static const char sync_usage[] =
    "usage: warren sync [-c FILE] [--lock-timeout DURATION] [--take-over NAME]...\n"
    "\n"
    "Upserts the config's jobs into warren.jobs in one transaction and prints\n"
    "what was added, changed and removed. A job no longer in the file is paused\n"
    "and marked removed, never deleted (its runs are history); putting it back\n"
    "restores it. Planners are notified (NOTIFY " WARREN_NOTIFY_CHANNEL ").\n"
    "\n"
    "A config job may not have the name of an API job (one an application made\n"
    "with warren.upsert_job): sync stops, naming it and who made it. --take-over\n"
    "NAME makes that API job the config's job: its future scheduled runs are\n"
    "planned again from the config, its other unclaimed runs are cancelled with a\n"
    "note, its history is kept and its note says who took it over when.\n"
    "\n"
    "An application's open transaction that called the Job API holds locks sync\n"
    "needs until it ends. sync waits at most --lock-timeout for any one lock, then\n"
    "gives up with nothing changed, naming the sessions holding locks on\n"
    "warren's tables (exit 1).\n"
    "\n"
    "  -c, --config FILE        config file (default $WARREN_CONFIG or warren.cfg);\n"
    "                           WARREN_DATABASE_URL overrides its database.url\n"
    "  --lock-timeout DURATION  longest wait for one lock (default 10s; e.g. 500ms,\n"
    "                           1m)\n"
    "  --take-over NAME         the config job NAME takes over the API job of that\n"
    "                           name; repeatable\n"
    "\n"
    "exit codes: 0 ok, 1 failure (a lock wait timed out), 2 usage or config error\n"
    "(a config job named like an API job), 69 database unreachable\n";

/* Matches "--name VALUE", "--name=VALUE" or, when short is set, "-s VALUE".
 * Returns 1 and sets *val (borrowed), 0 if argv[*i] is not this option,
 * -1 if the value is missing. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char *shortopt,
                     const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);

    if (strncmp(a, name, n) == 0 && a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (strcmp(a, name) != 0 && (shortopt == NULL || strcmp(a, shortopt) != 0))
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *val = argv[++*i];
    return 1;
}

/* Prints 'warren CMD: PROBLEM "ARG"' and the usage to stderr. */
static int usage_error(const char *cmd, const char *usage, const char *problem, const char *arg)
{
    fprintf(stderr, "warren %s: %s \"%s\"\n%s", cmd, problem, arg, usage);
    return WARREN_EXIT_USAGE;
}

static int fail(const char *cmd, const warren_error *err, int rc)
{
    fprintf(stderr, "warren %s: %s\n", cmd, err->message[0] ? err->message : warren_strerror(rc));
    return cli_exit_code(rc);
}

int cli_migrate(int argc, char **argv)
{
    const char *cfg_path = NULL, *url = NULL, *sql_dir = NULL, *val;
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_logger lg = cli_logger();
    warren_error err = {0};
    int applied = 0, rc, r;

    if (cli_wants_help(argc, argv)) {
        fputs(migrate_usage, stdout);
        return WARREN_EXIT_OK;
    }
    for (int i = 1; i < argc; i++) {
        if ((r = opt_value(argc, argv, &i, "--config", "-c", &val)) != 0)
            cfg_path = val;
        else if ((r = opt_value(argc, argv, &i, "--database", NULL, &val)) != 0)
            url = val;
        else if ((r = opt_value(argc, argv, &i, "--sql-dir", NULL, &val)) != 0)
            sql_dir = val;
        else
            return usage_error(argv[0], migrate_usage, "unknown argument", argv[i]);
        if (r < 0)
            return usage_error(argv[0], migrate_usage, "missing value for", argv[i]);
    }
    if (sql_dir == NULL)
        sql_dir = getenv("WARREN_SQL_DIR");
    if (sql_dir == NULL || sql_dir[0] == '\0')
        sql_dir = WARREN_SQL_DIR;
    if (url == NULL) {
        const char *env = getenv("WARREN_DATABASE_URL");
        const char *path = cli_config_path(cfg_path);
        /* migrate needs only a URL: without a config file the environment will do.
         */
        if (cfg_path == NULL && env != NULL && env[0] != '\0' && access(path, F_OK) != 0) {
            url = env;
        } else {
            cfg = cli_load_config(path);
            if (cfg == NULL)
                return WARREN_EXIT_USAGE;
            url = cfg->database_url;
        }
    }
    if (url == NULL || url[0] == '\0') {
        fprintf(stderr,
                "warren %s: no database URL: set database.url in the config, "
                "WARREN_DATABASE_URL, or --database\n",
                argv[0]);
        warren_config_free(cfg);
        return WARREN_EXIT_USAGE;
    }
    rc = warren_store_open(url, &lg, &st, &err);
    if (rc == 0)
        rc = warren_store_migrate(st, sql_dir, &applied, &err);
    if (rc == 0) {
        if (applied == 0)
            printf("migrate: %s has every migration; functions re-applied (%s)\n",
                   warren_store_where(st), sql_dir);
        else
            printf("migrate: applied %d migration%s and the functions to %s (%s)\n", applied,
                   applied == 1 ? "" : "s", warren_store_where(st), sql_dir);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return rc == 0 ? WARREN_EXIT_OK : fail(argv[0], &err, rc);
}

static void print_names(const char *label, char **names, size_t n, const char *suffix)
{
    for (size_t i = 0; i < n; i++)
        printf("%-8s %s%s\n", label, names[i], suffix);
}

int cli_sync(int argc, char **argv)
{
    const char *cfg_path = NULL, *val, **take = NULL;
    warren_config *cfg;
    warren_store *st = NULL;
    warren_ops_sync_options opts = {0};
    warren_ops_sync_result res = {0};
    warren_logger lg = cli_logger();
    warren_error err = {0};
    int rc, r;

    if (cli_wants_help(argc, argv)) {
        fputs(sync_usage, stdout);
        return WARREN_EXIT_OK;
    }
    if ((take = calloc((size_t)argc, sizeof(*take))) == NULL) {
        fprintf(stderr, "warren %s: out of memory\n", argv[0]);
        return WARREN_EXIT_FAIL;
    }
    opts.take_over = take;
    for (int i = 1; i < argc; i++) {
        if ((r = opt_value(argc, argv, &i, "--config", "-c", &val)) != 0) {
            cfg_path = val;
        } else if ((r = opt_value(argc, argv, &i, "--take-over", NULL, &val)) != 0) {
            take[opts.ntake_over++] = val;
        } else if ((r = opt_value(argc, argv, &i, "--lock-timeout", NULL, &val)) != 0) {
            if (r > 0 && (warren_duration_parse(val, &opts.lock_timeout_ms, &err) != 0 ||
                          opts.lock_timeout_ms < 1 || opts.lock_timeout_ms > INT32_MAX)) {
                fprintf(stderr,
                        "warren %s: --lock-timeout \"%.40s\" is not a duration from 1ms to 24d "
                        "(e.g. 500ms, 10s, 1m)\n",
                        argv[0], val);
                free(take);
                return WARREN_EXIT_USAGE;
            }
        } else {
            free(take);
            return usage_error(argv[0], sync_usage, "unknown argument", argv[i]);
        }
        if (r < 0) {
            free(take);
            return usage_error(argv[0], sync_usage, "missing value for", argv[i]);
        }
    }
    cfg = cli_load_config(cli_config_path(cfg_path));
    if (cfg == NULL) {
        free(take);
        return WARREN_EXIT_USAGE;
    }
    if (cfg->database_url == NULL || cfg->database_url[0] == '\0') {
        fprintf(stderr,
                "warren %s: no database URL: set database.url in %s or "
                "WARREN_DATABASE_URL\n",
                argv[0], cfg->path ? cfg->path : "the config");
        warren_config_free(cfg);
        free(take);
        return WARREN_EXIT_USAGE;
    }
    rc = warren_store_open(cfg->database_url, &lg, &st, &err);
    if (rc == 0)
        rc = warren_ops_sync(st, cfg, &opts, &res, &err);
    if (rc == 0) {
        const warren_sync_report *rep = &res.report;
        size_t unchanged = cfg->njobs - rep->nadded - rep->nchanged;
        for (size_t i = 0; i < res.ntaken_over; i++) {
            const warren_ops_taken_over *t = &res.taken_over[i];
            printf("taken    %s (an API job of template %s made by %s: %d unclaimed runs "
                   "cancelled, %d planned runs dropped)\n",
                   t->name, t->template ? t->template : "?", t->created_by ? t->created_by : "?",
                   t->runs_cancelled, t->runs_dropped);
        }
        print_names("added", rep->added, rep->nadded, "");
        print_names("changed", rep->changed, rep->nchanged, "");
        print_names("removed", rep->removed, rep->nremoved, " (paused; its runs are kept)");
        printf("sync: %zu added, %zu changed, %zu removed, %zu unchanged (%s)\n", rep->nadded,
               rep->nchanged, rep->nremoved, unchanged, warren_store_where(st));
        if (rep->api_updated + rep->api_paused + rep->api_resumed > 0)
            printf("sync: API jobs: %zu given their changed template's settings, %zu paused (their "
                   "template was removed), %zu resumed (their template is back)\n",
                   rep->api_updated, rep->api_paused, rep->api_resumed);
        else if (opts.ntake_over > 0 && res.ntaken_over == 0)
            printf("sync: no API job to take over (--take-over names config jobs already)\n");
    }
    warren_ops_sync_result_clear(&res);
    warren_store_free(st);
    warren_config_free(cfg);
    free(take);
    return rc == 0 ? WARREN_EXIT_OK : fail(argv[0], &err, rc);
}
