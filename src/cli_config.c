/* cli_config.c: `warren check`: validate a config file, print every error
 * (exit 2) or a one-line summary per job (exit 0). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <unistd.h>

#include <warren/cron.h>
#include <warren/duration.h>
#include <warren/tz.h>

#include "cli.h"

/* libconfig 1.5 leaks a string buffer when a file ends inside an unclosed
 * string; in sanitizer builds that turned `warren check`'s exit status 2 into
 * LeakSanitizer's 1. This hook (read by LeakSanitizer at startup, unused
 * otherwise) ignores allocations made inside libconfig only. It belongs in
 * main.c; it lives here because this file owns the config commands. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libconfig.so\n";
}
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "print_suppressions=0";
}

static void check_usage(FILE *f)
{
    fprintf(f, "usage: warren check [-c FILE] [-q]\n\n"
               "Validates the configuration file and prints one line per job.\n"
               "Every error is printed to stderr as FILE:LINE: job \"NAME\": setting \"X\": ...\n"
               "An exec handler program missing on this machine is a warning, not an error.\n\n"
               "  -c, --config FILE  the configuration (default: $WARREN_CONFIG, else warren.cfg)\n"
               "  -q, --quiet        no summary (errors and warnings still go to stderr)\n\n"
               "exit codes: 0 valid, 2 invalid or usage error, 1 other failure\n");
}

/* The path rule of cli.h (-c, else $WARREN_CONFIG, else warren.cfg). Kept
 * here until src/cli_common.c provides cli_config_path. */
static const char *config_path_of(const char *given)
{
    const char *env = getenv("WARREN_CONFIG");
    if (given != NULL)
        return given;
    if (env != NULL && *env != '\0')
        return env;
    return "warren.cfg";
}

/* The next fire instant after now, for the summary (display only: the
 * planner decides with PostgreSQL's clock). "every" fire times are the epoch
 * grid (planner.h); a past "at" has none. */
static void next_fire(const warren_job *j, warren_tzdb *db, char *buf, size_t len)
{
    struct timespec ts;
    warren_us now;
    int64_t next = 0;
    const warren_tz *tz = NULL;
    warren_cron *c = NULL;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (warren_us)ts.tv_sec * WARREN_US_PER_S + ts.tv_nsec / 1000;
    snprintf(buf, len, "-");
    if (j->is_template)
        return;
    switch (j->kind) {
    case WARREN_SCHED_CRON:
        if (db != NULL && warren_tzdb_get(db, j->timezone, &tz, NULL) == 0 &&
            warren_cron_parse(j->schedule, j->name, &c, NULL) == 0 &&
            warren_cron_next(c, tz, now, &next, NULL, NULL) == 0)
            warren_time_format(next * WARREN_US_PER_S, buf, len);
        warren_cron_free(c);
        break;
    case WARREN_SCHED_EVERY:
        next = warren_interval_next(0, j->every_ms / 1000, now);
        warren_time_format(next * WARREN_US_PER_S, buf, len);
        break;
    case WARREN_SCHED_AT:
        snprintf(buf, len, "%s", j->at > now ? "at" : "past");
        break;
    }
}

static void print_job(const warren_job *j, warren_tzdb *db)
{
    char sched[300], buf[64], when[WARREN_TIME_BUF], next[WARREN_TIME_BUF];
    const char *handler = "none";
    char hbuf[300];

    next_fire(j, db, next, sizeof(next));
    if (j->is_template)
        snprintf(sched, sizeof(sched), "template");
    else
        switch (j->kind) {
        case WARREN_SCHED_CRON:
            snprintf(sched, sizeof(sched), "cron \"%s\"", j->schedule);
            break;
        case WARREN_SCHED_EVERY:
            snprintf(sched, sizeof(sched), "every %s",
                     warren_duration_format(j->every_ms, buf, sizeof(buf)));
            break;
        case WARREN_SCHED_AT:
            snprintf(sched, sizeof(sched), "at %s", warren_time_format(j->at, when, sizeof(when)));
            break;
        }
    switch (j->handler) {
    case WARREN_HANDLER_EXEC:
        snprintf(hbuf, sizeof(hbuf), "exec%s %s%s", j->exec_shell ? " (shell)" : "",
                 j->exec_argv[0], j->exec_argv[1] ? " ..." : "");
        handler = hbuf;
        break;
    case WARREN_HANDLER_SQL:
        handler = "sql";
        break;
    case WARREN_HANDLER_C:
        snprintf(hbuf, sizeof(hbuf), "c %s", j->c_handler);
        handler = hbuf;
        break;
    case WARREN_HANDLER_NONE:
        handler = "none (external worker)";
        break;
    }
    printf("%-24s %-28s tz=%s queue=%s next=%s misfire=%s overlap=%s handler=%s%s\n", j->name,
           sched, j->timezone, j->queue, next, warren_misfire_name(j->misfire),
           warren_overlap_name(j->overlap), handler, j->paused ? " [paused]" : "");
}

/* Handlers run where the workers run, so a missing program is not an error
 * of the file; on this machine it is still worth a warning. */
static void warn_missing_programs(const warren_config *cfg)
{
    for (size_t i = 0; i < cfg->njobs; i++) {
        const warren_job *j = &cfg->jobs[i];
        if (j->handler != WARREN_HANDLER_EXEC || j->exec_shell || j->exec_argv[0][0] != '/')
            continue;
        if (access(j->exec_argv[0], X_OK) != 0)
            fprintf(stderr,
                    "%s:%d: warning: job \"%s\": handler program %s is not executable "
                    "here (%s)\n",
                    j->file, j->line, j->name, j->exec_argv[0], strerror(errno));
    }
}

int cli_check(int argc, char **argv)
{
    const char *given = NULL;
    int quiet = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            check_usage(stdout);
            return WARREN_EXIT_OK;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if ((strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) && i + 1 < argc) {
            given = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            given = a + 9;
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            fprintf(stderr, "warren check: %s needs a value: %s FILE\n", a, a);
            return WARREN_EXIT_USAGE;
        } else {
            fprintf(stderr, "warren check: unexpected argument \"%s\"\n", a);
            check_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }

    const char *path = config_path_of(given);
    warren_config *cfg = NULL;
    warren_diags diags = {0};
    warren_error err = {0};
    int rc = warren_config_load(path, &cfg, &diags, &err);
    if (rc != 0) {
        if (diags.count == 0) {
            fprintf(stderr, "%s\n", err.message);
        } else {
            for (size_t i = 0; i < diags.count; i++)
                fprintf(stderr, "%s\n", diags.items[i]);
            fprintf(stderr, "warren check: %s is invalid: %zu error%s\n", path, diags.count,
                    diags.count == 1 ? "" : "s");
        }
        warren_diags_free(&diags);
        return rc == WARREN_ECONFIG || rc == WARREN_EINVAL ? WARREN_EXIT_USAGE : WARREN_EXIT_FAIL;
    }
    warn_missing_programs(cfg);
    if (!quiet) {
        size_t nq = 0;
        const char **qs = warren_config_queues(cfg, &nq);
        warren_tzdb *db = warren_tzdb_new(NULL);
        for (size_t i = 0; i < cfg->njobs; i++)
            print_job(&cfg->jobs[i], db);
        warren_tzdb_free(db);
        printf("%s: valid, %zu job%s, %zu queue%s\n", path, cfg->njobs, cfg->njobs == 1 ? "" : "s",
               nq, nq == 1 ? "" : "s");
        free(qs);
    }
    warren_config_free(cfg);
    return WARREN_EXIT_OK;
}
