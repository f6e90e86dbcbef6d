/* cli_jobs.c: `warren jobs`: the jobs in the database, their schedule, next
 * fire time, where they came from (config file, template, API job), pause
 * and broken marks (src/ops.c, warren_ops_jobs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/ops.h>
#include <warren/store.h>
#include <warren/timefmt.h>

#include "cli.h"

static void jobs_usage(FILE *f)
{
    fprintf(f, "usage: warren jobs [-c FILE] [--broken] [--limit N] [--template T] [--tenant X]\n"
               "                   [--origin config|api]\n\n"
               "Lists the jobs in the database by name: schedule, zone, queue, the next fire\n"
               "time the planner will materialise, whether it is paused (or removed from the\n"
               "config), and why it is broken (the planner cannot compute its fire times: it\n"
               "keeps the job's place, retries, and plans what it missed through its misfire\n"
               "policy once the cause is gone). --broken lists only broken jobs.\n"
               "ORIGIN is \"config\" (the config file), \"template\" (a config template: it\n"
               "fires nothing itself) or \"api:T\" (an API job made from template T by\n"
               "warren.upsert_job, docs/api-jobs.md). --template T lists T's API jobs,\n"
               "--tenant X the jobs of tenant X, --origin config|api one kind. `warren show JOB`\n"
               "shows one job in full.\n");
}

static const char *when(warren_us t, char *buf, size_t len)
{
    return t == 0 ? "-" : warren_time_format(t, buf, len);
}

int cli_jobs(int argc, char **argv)
{
    const char *given = NULL;
    warren_ops_jobs_query q = {0};
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    warren_ops_job *rows = NULL;
    size_t n = 0;
    int rc, code = WARREN_EXIT_OK;

    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            jobs_usage(stdout);
            return WARREN_EXIT_OK;
        } else if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) &&
                   i + 1 < argc) {
            given = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            given = argv[i] + 9;
        } else if (strcmp(argv[i], "--template") == 0 && i + 1 < argc) {
            q.template = argv[++i];
        } else if (strcmp(argv[i], "--tenant") == 0 && i + 1 < argc) {
            q.tenant = argv[++i];
        } else if (strcmp(argv[i], "--origin") == 0 && i + 1 < argc) {
            q.origin = argv[++i];
            if (strcmp(q.origin, "config") != 0 && strcmp(q.origin, "api") != 0) {
                fprintf(stderr,
                        "warren jobs: --origin takes \"config\" (the config file's jobs and "
                        "templates) or \"api\" (API jobs), not \"%s\"\n",
                        q.origin);
                return WARREN_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--broken") == 0) {
            q.broken_only = 1;
        } else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*argv[i] == '\0' || *end != '\0' || v < 1 || v > 1000000) {
                fprintf(stderr, "warren jobs: --limit takes a positive number, not \"%s\"\n",
                        argv[i]);
                return WARREN_EXIT_USAGE;
            }
            q.limit = (int)v;
        } else {
            fprintf(stderr, "warren jobs: unexpected argument \"%s\"\n", argv[i]);
            jobs_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    if ((cfg = cli_load_config(cli_config_path(given))) == NULL)
        return WARREN_EXIT_USAGE;
    if ((rc = warren_store_open(cfg->database_url, &lg, &st, &err)) != 0) {
        fprintf(stderr, "warren jobs: %s\n", err.message);
        warren_config_free(cfg);
        return cli_exit_code(rc);
    }
    if ((rc = warren_ops_jobs(st, &q, &rows, &n, &err)) != 0) {
        fprintf(stderr, "warren jobs: %s\n", err.message);
        code = cli_exit_code(rc);
    } else {
        printf("%-24s %-28s %-20s %-16s %-20s %-16s %-7s %s\n", "NAME", "SCHEDULE", "ZONE", "QUEUE",
               "NEXT FIRE", "ORIGIN", "STATE", "BROKEN");
        for (size_t i = 0; i < n; i++) {
            const warren_ops_job *j = &rows[i];
            char sched[512], next[WARREN_TIME_BUF], since[WARREN_TIME_BUF], origin[256];
            if (j->is_template)
                snprintf(sched, sizeof(sched), "(template)");
            else
                snprintf(sched, sizeof(sched), "%s %s", j->kind, j->expression);
            if (j->template != NULL)
                snprintf(origin, sizeof(origin), "api:%s", j->template);
            else
                snprintf(origin, sizeof(origin), "%s", j->is_template ? "template" : "config");
            printf("%-24s %-28s %-20s %-16s %-20s %-16s %-7s ", j->name, sched,
                   j->is_template ? "-" : j->timezone, j->queue,
                   j->is_template ? "-"
                   : j->exhausted ? "never (fired)"
                                  : when(j->next_fire_at, next, sizeof(next)),
                   origin,
                   j->removed  ? "removed"
                   : j->paused ? "paused"
                               : "active");
            if (j->broken_reason != NULL)
                printf("broken since %s: %s\n", when(j->broken_since, since, sizeof(since)),
                       j->broken_reason);
            else
                printf("-\n");
        }
        warren_ops_jobs_free(rows, n);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return code;
}
