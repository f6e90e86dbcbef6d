/* cli_planner.c: `warren planner`, `trigger`, `pause`, `resume`, `backfill`:
 * parse arguments, load the config, call the planner and ops APIs, print. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/codec.h>
#include <warren/ops.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "cli.h"

static volatile sig_atomic_t stop_flag;

/* Options shared by the commands. */
typedef struct opts {
    const char *config;
    const char *job;
    const char *at;
    const char *payload;
    const char *from;
    const char *to;
    int dry_run;
} opts;

static int usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "warren %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: warren %s %s\n", cmd, usage);
    return WARREN_EXIT_USAGE;
}

/* Parses argv into o; allowed names the options this command takes
 * ("atpfTd": --at, --payload, --from, --to, --dry-run). need_job: one
 * positional JOB. Returns -1 when ok, else an exit code. */
static int parse(int argc, char **argv, const char *usage, const char *allowed, int need_job,
                 opts *o)
{
    const char *cmd = argv[0];
    memset(o, 0, sizeof(*o));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        char key = 0;
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0)
            slot = &o->config, key = 'c';
        else if (strcmp(a, "--at") == 0)
            slot = &o->at, key = 'a';
        else if (strcmp(a, "--payload") == 0)
            slot = &o->payload, key = 'p';
        else if (strcmp(a, "--from") == 0)
            slot = &o->from, key = 'f';
        else if (strcmp(a, "--to") == 0)
            slot = &o->to, key = 'T';
        else if (strcmp(a, "--dry-run") == 0 || strcmp(a, "-n") == 0) {
            if (strchr(allowed, 'd') == NULL)
                return usage_error(cmd, usage, "unknown option \"%s\"", a);
            o->dry_run = 1;
            continue;
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error(cmd, usage, "unknown option \"%s\"", a);
        } else if (need_job && o->job == NULL) {
            o->job = a;
            continue;
        } else {
            return usage_error(cmd, usage, "unexpected argument \"%s\"", a);
        }
        if (key != 'c' && strchr(allowed, key) == NULL)
            return usage_error(cmd, usage, "unknown option \"%s\"", a);
        if (i + 1 >= argc)
            return usage_error(cmd, usage, "option %s needs a value", a);
        *slot = argv[++i];
    }
    if (need_job && o->job == NULL)
        return usage_error(cmd, usage, "%s", "missing JOB");
    if (need_job && !warren_job_name_valid(o->job))
        return usage_error(cmd, usage, "\"%s\" is not a job name", o->job);
    return -1;
}

/* Loads the config and opens the database. Returns -1 when ok, else an exit code. */
static int open_store(const char *cmd, const opts *o, warren_config **cfg, warren_store **st)
{
    warren_error err = {0};
    int rc;

    *st = NULL;
    if ((*cfg = cli_load_config(cli_config_path(o->config))) == NULL)
        return WARREN_EXIT_USAGE;
    if ((rc = warren_store_open((*cfg)->database_url, NULL, st, &err)) != 0) {
        fprintf(stderr, "warren %s: %s\n", cmd, err.message);
        warren_config_free(*cfg);
        *cfg = NULL;
        return cli_exit_code(rc);
    }
    return -1;
}

static int fail(const char *cmd, int rc, const warren_error *err)
{
    fprintf(stderr, "warren %s: %s\n", cmd, err->message);
    return cli_exit_code(rc);
}

/* ---------------------------------------------------------------- planner */

int cli_planner(int argc, char **argv)
{
    static const char usage[] = "[-c FILE]";
    warren_config *cfg = NULL;
    warren_planner *p = NULL;
    warren_logger lg = cli_logger();
    warren_error err = {0};
    const char *stall;
    opts o;
    int rc;

    if (cli_wants_help(argc, argv)) {
        printf("usage: warren planner %s\n\n"
               "Runs a planner: leases job partitions, materialises runs up to the horizon,\n"
               "publishes them (delay queues, publisher confirms), publishes the outbox and\n"
               "reconciles lost or abandoned runs. Any number may run at once. SIGTERM or\n"
               "SIGINT: finish the current batch, release the partition leases, exit 0.\n",
               usage);
        return WARREN_EXIT_OK;
    }
    if ((rc = parse(argc, argv, usage, "", 0, &o)) >= 0)
        return rc;
    if ((cfg = cli_load_config(cli_config_path(o.config))) == NULL)
        return WARREN_EXIT_USAGE;

    cli_stop_signals(&stop_flag, 0); /* the planner never ignored SIGPIPE */

    rc = warren_planner_new(cfg, cfg->database_url, cfg->amqp_url, &lg, &p, &err);
    if (rc != 0) {
        warren_config_free(cfg);
        return fail(argv[0], rc, &err);
    }
    /* Fault tests only: stall between publishing a batch and its confirms. */
    if ((stall = getenv("WARREN_PLANNER_TEST_STALL_MS")) != NULL && atoll(stall) > 0)
        warren_planner_set_stall(p, atoll(stall));
    warren_log(&lg, WARREN_LOG_INFO, "planner %s started", warren_planner_id(p));
    rc = warren_planner_run(p, &stop_flag, &err);
    warren_planner_free(p);
    warren_config_free(cfg);
    if (rc != 0)
        return fail(argv[0], rc, &err);
    return WARREN_EXIT_OK;
}

/* ---------------------------------------------------------------- trigger */

int cli_trigger(int argc, char **argv)
{
    static const char usage[] = "JOB [--at TIME] [--payload JSON] [-c FILE]";
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_ops_trigger_result r;
    char when[WARREN_TIME_BUF];
    char *payload = NULL;
    warren_us at = 0;
    int rc;
    opts o;

    if (cli_wants_help(argc, argv)) {
        printf("usage: warren trigger %s\n\n"
               "Creates a one-shot run of a defined job, keyed JOB@TIME (TIME: RFC 3339,\n"
               "whole seconds; default now, by the database's clock). The payload overrides\n"
               "the job's. Triggering the same key twice creates one run and says so.\n",
               usage);
        return WARREN_EXIT_OK;
    }
    if ((rc = parse(argc, argv, usage, "ap", 1, &o)) >= 0)
        return rc;
    if (o.at != NULL) {
        if (warren_time_parse(o.at, &at, &err) != 0)
            return usage_error(argv[0], usage, "%s", err.message);
        if (at % WARREN_US_PER_S != 0)
            return usage_error(argv[0], usage,
                               "--at \"%s\" has fractional seconds: run keys have whole seconds",
                               o.at);
    }
    if (o.payload != NULL && warren_json_object_check(o.payload, &payload, &err) != 0)
        return usage_error(argv[0], usage, "--payload: %s", err.message);
    if ((rc = open_store(argv[0], &o, &cfg, &st)) >= 0) {
        free(payload);
        return rc;
    }
    rc = warren_ops_trigger(st, o.job, o.at != NULL ? &at : NULL, payload, &r, &err);
    if (rc == 0) {
        warren_time_format(r.at, when, sizeof(when));
        if (r.created)
            printf("created run %s (due %s)\n", r.run_key, when);
        else
            printf("run %s already exists (state %s): not created again\n", r.run_key,
                   r.state[0] ? r.state : "unknown");
    }
    free(payload);
    warren_store_free(st);
    warren_config_free(cfg);
    return rc == 0 ? WARREN_EXIT_OK : fail(argv[0], rc, &err);
}

/* ---------------------------------------------------------- pause, resume */

int cli_pause(int argc, char **argv)
{
    static const char usage[] = "JOB [-c FILE]";
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_ops_pause_result r;
    int rc;
    opts o;

    if (cli_wants_help(argc, argv)) {
        printf("usage: warren pause %s\n\n"
               "Pauses a job: no runs are planned; its scheduled runs not yet due are\n"
               "cancelled (a message already in a delay queue finds nothing to claim).\n",
               usage);
        return WARREN_EXIT_OK;
    }
    if ((rc = parse(argc, argv, usage, "", 1, &o)) >= 0)
        return rc;
    if ((rc = open_store(argv[0], &o, &cfg, &st)) >= 0)
        return rc;
    rc = warren_ops_pause(st, o.job, &r, &err);
    if (rc == 0) {
        if (r.was_paused)
            printf("job %s was already paused", o.job);
        else
            printf("paused job %s", o.job);
        printf(" (%d planned run(s) cancelled)\n", r.cancelled);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return rc == 0 ? WARREN_EXIT_OK : fail(argv[0], rc, &err);
}

int cli_resume(int argc, char **argv)
{
    static const char usage[] = "JOB [-c FILE]";
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_ops_resume_result r;
    int rc;
    opts o;

    if (cli_wants_help(argc, argv)) {
        printf("usage: warren resume %s\n\n"
               "Resumes a paused job. Fire times missed while it was paused by more than the\n"
               "misfire threshold go through the job's misfire policy (run_once, skip,\n"
               "catch_up); later ones are planned as usual.\n",
               usage);
        return WARREN_EXIT_OK;
    }
    if ((rc = parse(argc, argv, usage, "", 1, &o)) >= 0)
        return rc;
    if ((rc = open_store(argv[0], &o, &cfg, &st)) >= 0)
        return rc;
    rc = warren_ops_resume(st, o.job, &r, &err);
    if (rc == 0) {
        if (!r.was_paused)
            printf("job %s was not paused\n", o.job);
        else
            printf("resumed job %s (missed fire times: misfire policy %s)\n", o.job, r.misfire);
        if (r.removed)
            printf("note: job %s is no longer in the config (removed); sync keeps it paused\n",
                   o.job);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return rc == 0 ? WARREN_EXIT_OK : fail(argv[0], rc, &err);
}

/* --------------------------------------------------------------- backfill */

int cli_backfill(int argc, char **argv)
{
    static const char usage[] = "JOB --from TIME --to TIME [--dry-run] [-c FILE]";
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_ops_backfill_result r;
    warren_us from = 0, to = 0;
    int rc;
    opts o;

    if (cli_wants_help(argc, argv)) {
        printf("usage: warren backfill %s\n\n"
               "Creates a run for every fire time of JOB in [--from, --to] (RFC 3339), keyed\n"
               "as the planner would key it; fire times that already have a run are left\n"
               "alone. --dry-run lists them (new or exists) and writes nothing.\n",
               usage);
        return WARREN_EXIT_OK;
    }
    if ((rc = parse(argc, argv, usage, "fTd", 1, &o)) >= 0)
        return rc;
    if (o.from == NULL || o.to == NULL)
        return usage_error(argv[0], usage, "%s", "--from and --to are required");
    if (warren_time_parse(o.from, &from, &err) != 0)
        return usage_error(argv[0], usage, "--from: %s", err.message);
    if (warren_time_parse(o.to, &to, &err) != 0)
        return usage_error(argv[0], usage, "--to: %s", err.message);
    if (to < from)
        return usage_error(argv[0], usage, "--to \"%s\" is before --from", o.to);
    if ((rc = open_store(argv[0], &o, &cfg, &st)) >= 0)
        return rc;
    rc = warren_ops_backfill(st, o.job, from, to, o.dry_run, &r, &err);
    if (rc == 0 && o.dry_run) {
        for (size_t i = 0; i < r.n; i++) {
            char key[WARREN_RUN_KEY_MAX];
            warren_run_key_build(r.job, r.times[i], key, sizeof(key), NULL);
            printf("%s\t%s\n", key, r.exists[i] ? "exists" : "new");
        }
        printf("dry run: %zu fire time(s) of %s in range, %zu new, %zu already have a run; "
               "nothing written\n",
               r.n, r.job, r.n - r.existing, r.existing);
    } else if (rc == 0) {
        printf("backfilled %d run(s) of %s; %zu fire time(s) already had a run\n", r.inserted,
               r.job, r.n - (size_t)r.inserted);
    }
    warren_ops_backfill_result_clear(&r);
    warren_store_free(st);
    warren_config_free(cfg);
    return rc == 0 ? WARREN_EXIT_OK : fail(argv[0], rc, &err);
}
