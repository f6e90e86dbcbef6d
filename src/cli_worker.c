/* cli_worker.c: `warren worker`, `warren run` (planner and workers in one
 * process), `warren replay`, `warren runs` and `warren show`. Thin: parse
 * arguments, load the config, wire the modules (the operator's commands call
 * ops.h), print. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/ops.h>
#include <warren/planner.h>
#include <warren/store.h>
#include <warren/timefmt.h>
#include <warren/worker.h>

#include "cli.h"

/* ------------------------------------------------------------ shared conventions */

static volatile sig_atomic_t stop_flag;

/* -c FILE / --config FILE / --config=FILE at argv[*i]: 1 if consumed. */
static int config_arg(int argc, char **argv, int *i, const char **given)
{
    if ((strcmp(argv[*i], "-c") == 0 || strcmp(argv[*i], "--config") == 0) && *i + 1 < argc) {
        *given = argv[++*i];
        return 1;
    }
    if (strncmp(argv[*i], "--config=", 9) == 0) {
        *given = argv[*i] + 9;
        return 1;
    }
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* ------------------------------------------------------------ warren worker */

static void worker_usage(FILE *f)
{
    fprintf(f,
            "usage: warren worker [-c FILE] [--queue Q ...] [--concurrency N] [--id ID]\n\n"
            "Consumes the ready queues of the config's jobs (every queue that has a job with a\n"
            "handler, or the --queue ones), claims each run in PostgreSQL, runs its handler\n"
            "(exec, sql), heartbeats, completes, and only then acknowledges the message.\n"
            "SIGTERM/SIGINT: stop taking runs, let running handlers finish within\n"
            "worker.shutdown_grace, stop the rest, exit 0.\n\n"
            "  -c, --config FILE    the configuration (default: $WARREN_CONFIG, else warren.cfg)\n"
            "  --queue Q            consume warren.ready.Q (repeatable)\n"
            "  --concurrency N      handler slots (default worker.concurrency)\n"
            "  --id ID              lease owner id (default worker.id, else host:pid)\n\n"
            "exit codes: 0 stopped by a signal, 1 runtime failure, 2 usage or config error,\n"
            "69 PostgreSQL or RabbitMQ unreachable at start\n");
}

int cli_worker(int argc, char **argv)
{
    const char *given = NULL, *id = NULL;
    const char **queues = calloc((size_t)argc + 1, sizeof(char *));
    size_t nq = 0;
    int conc = 0;
    warren_config *cfg = NULL;
    warren_worker *w = NULL;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    int rc;

    if (queues == NULL)
        return WARREN_EXIT_FAIL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            worker_usage(stdout);
            free(queues);
            return WARREN_EXIT_OK;
        } else if (config_arg(argc, argv, &i, &given)) {
        } else if (strcmp(argv[i], "--queue") == 0 && i + 1 < argc) {
            queues[nq++] = argv[++i];
        } else if (strncmp(argv[i], "--queue=", 8) == 0) {
            queues[nq++] = argv[i] + 8;
        } else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc) {
            if (parse_int(argv[++i], 1, 4096, &conc) != 0) {
                fprintf(stderr, "warren worker: --concurrency takes 1..4096, not \"%s\"\n",
                        argv[i]);
                free(queues);
                return WARREN_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--id") == 0 && i + 1 < argc) {
            id = argv[++i];
        } else {
            fprintf(stderr, "warren worker: unexpected argument \"%s\"\n", argv[i]);
            worker_usage(stderr);
            free(queues);
            return WARREN_EXIT_USAGE;
        }
    }
    if ((cfg = cli_load_config(cli_config_path(given))) == NULL) {
        free(queues);
        return WARREN_EXIT_USAGE;
    }
    cli_stop_signals(&stop_flag, 1);
    rc = warren_worker_new(cfg, &lg, &w, &err);
    if (rc == 0 && nq > 0)
        rc = warren_worker_set_queues(w, queues, nq, &err);
    if (rc == 0 && conc > 0)
        rc = warren_worker_set_concurrency(w, conc, &err);
    if (rc == 0 && id != NULL)
        rc = warren_worker_set_id(w, id, &err);
    if (rc == 0)
        rc = warren_worker_run(w, &stop_flag, &err);
    if (rc != 0)
        fprintf(stderr, "warren worker: %s\n", err.message);
    warren_worker_free(w);
    warren_config_free(cfg);
    free(queues);
    return cli_exit_code(rc);
}

/* ------------------------------------------------------------ warren run */

static const char *hms(warren_us t, char *buf, size_t len)
{
    if (t == 0)
        return "-";
    warren_time_format_ms(t, buf, len);
    /* "YYYY-MM-DDTHH:MM:SS.mmmZ" -> "HH:MM:SS.mmm" */
    if (strlen(buf) >= 23) {
        memmove(buf, buf + 11, 12);
        buf[12] = '\0';
    }
    return buf;
}

/* One human line per finished run (stdout, line-buffered). */
static void print_report(void *ud, const warren_run_report *r)
{
    char a[WARREN_TIME_BUF], b[WARREN_TIME_BUF], c[WARREN_TIME_BUF], d[WARREN_TIME_BUF];
    char late[32] = "-";
    (void)ud;
    if (r->started_at != 0 && r->due_at != 0)
        snprintf(late, sizeof(late), "%lld ms", (long long)((r->started_at - r->due_at) / 1000));
    printf("%s: scheduled %s, released %s, started %s, finished %s, %s%s%s (attempt %d, run %s), "
           "lateness %s\n",
           r->run_key, hms(r->scheduled_at, a, sizeof(a)), hms(r->released_at, b, sizeof(b)),
           hms(r->started_at, c, sizeof(c)), hms(r->finished_at, d, sizeof(d)), r->outcome,
           r->error ? ": " : "", r->error ? r->error : "", r->attempt, r->state, late);
    fflush(stdout);
}

typedef struct planner_thread {
    warren_planner *p;
    int rc;
    warren_error err;
} planner_thread;

static void *run_planner(void *arg)
{
    planner_thread *pt = arg;
    pt->rc = warren_planner_run(pt->p, &stop_flag, &pt->err);
    if (pt->rc != 0)
        __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED); /* the planner died: stop the worker */
    return NULL;
}

static void run_usage(FILE *f)
{
    fprintf(f, "usage: warren run [-c FILE] [--concurrency N]\n\n"
               "A planner and a worker for every queue of the config in one process (small\n"
               "installs, the demo). Prints one line per finished run: scheduled, released,\n"
               "started, finished (database clock, UTC), outcome and start lateness.\n"
               "Run `warren migrate`, `warren topology` and `warren sync` first.\n\n"
               "  -c, --config FILE    the configuration (default: $WARREN_CONFIG, else "
               "warren.cfg)\n"
               "  --concurrency N      worker handler slots (default worker.concurrency)\n\n"
               "exit codes: 0 stopped by a signal, 1 runtime failure, 2 usage or config error,\n"
               "69 PostgreSQL or RabbitMQ unreachable at start\n");
}

int cli_run(int argc, char **argv)
{
    const char *given = NULL;
    int conc = 0;
    warren_config *cfg = NULL;
    warren_worker *w = NULL;
    planner_thread pt;
    pthread_t th;
    int have_thread = 0;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    int rc;

    memset(&pt, 0, sizeof(pt));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            run_usage(stdout);
            return WARREN_EXIT_OK;
        } else if (config_arg(argc, argv, &i, &given)) {
        } else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc) {
            if (parse_int(argv[++i], 1, 4096, &conc) != 0) {
                fprintf(stderr, "warren run: --concurrency takes 1..4096, not \"%s\"\n", argv[i]);
                return WARREN_EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "warren run: unexpected argument \"%s\"\n", argv[i]);
            run_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    if ((cfg = cli_load_config(cli_config_path(given))) == NULL)
        return WARREN_EXIT_USAGE;
    cli_stop_signals(&stop_flag, 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    rc = warren_planner_new(cfg, cfg->database_url, cfg->amqp_url, &lg, &pt.p, &err);
    if (rc != 0) {
        fprintf(stderr, "warren run: planner: %s\n", err.message);
        goto out;
    }
    rc = warren_worker_new(cfg, &lg, &w, &err);
    if (rc == 0 && conc > 0)
        rc = warren_worker_set_concurrency(w, conc, &err);
    if (rc != 0) {
        fprintf(stderr, "warren run: %s\n", err.message);
        goto out;
    }
    warren_worker_on_finished(w, print_report, NULL);
    /* The planner's thread blocks the stop signals: they interrupt the
     * worker loop's wait on this thread (warren_worker_run). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&th, NULL, run_planner, &pt);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        fprintf(stderr, "warren run: cannot start the planner thread\n");
        rc = WARREN_ESYS;
        goto out;
    }
    have_thread = 1;
    rc = warren_worker_run(w, &stop_flag, &err);
    if (rc != 0)
        fprintf(stderr, "warren run: worker: %s\n", err.message);
    /* Atomic: the planner thread reads it (a plain store races, TSan). */
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
out:
    if (have_thread) {
        pthread_join(th, NULL);
        if (pt.rc != 0) {
            fprintf(stderr, "warren run: planner: %s\n", pt.err.message);
            if (rc == 0)
                rc = pt.rc;
        }
    }
    warren_worker_free(w);
    warren_planner_free(pt.p);
    warren_config_free(cfg);
    return cli_exit_code(rc);
}

/* ------------------------------------------------------------ replay, runs, show */

/* Opens the config's database (for the admin commands). */
static int open_store(const char *given, warren_config **cfg, warren_store **st,
                      const warren_logger *lg)
{
    warren_error err = {0};
    int rc;
    if ((*cfg = cli_load_config(cli_config_path(given))) == NULL)
        return WARREN_EXIT_USAGE;
    rc = warren_store_open((*cfg)->database_url, lg, st, &err);
    if (rc != 0) {
        fprintf(stderr, "warren: %s\n", err.message);
        warren_config_free(*cfg);
        *cfg = NULL;
        return cli_exit_code(rc);
    }
    return WARREN_EXIT_OK;
}

static void replay_usage(FILE *f)
{
    fprintf(f,
            "usage: warren replay [-c FILE] RUN_KEY\n"
            "       warren replay [-c FILE] --job JOB --dead\n\n"
            "Sends a dead run (or every dead run of JOB) back to planned, due now, under the\n"
            "same run key; its attempts and notes are kept and its retry budget starts again.\n\n"
            "exit codes: 0 replayed, 1 the run is not dead (or unknown), 2 usage or config\n"
            "error, 69 PostgreSQL unreachable\n");
}

int cli_replay(int argc, char **argv)
{
    const char *given = NULL, *key = NULL, *job = NULL;
    int dead = 0, code;
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    char who[64];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            replay_usage(stdout);
            return WARREN_EXIT_OK;
        } else if (config_arg(argc, argv, &i, &given)) {
        } else if (strcmp(argv[i], "--job") == 0 && i + 1 < argc) {
            job = argv[++i];
        } else if (strcmp(argv[i], "--dead") == 0) {
            dead = 1;
        } else if (argv[i][0] != '-' && key == NULL) {
            key = argv[i];
        } else {
            fprintf(stderr, "warren replay: unexpected argument \"%s\"\n", argv[i]);
            replay_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    if ((key == NULL) == (job == NULL) || (job != NULL && !dead)) {
        fprintf(stderr, "warren replay: give a RUN_KEY, or --job JOB --dead\n");
        replay_usage(stderr);
        return WARREN_EXIT_USAGE;
    }
    if (key != NULL && warren_run_key_check(key, NULL, 0, NULL, &err) != 0) {
        fprintf(stderr, "warren replay: %s\n", err.message);
        return WARREN_EXIT_USAGE;
    }
    if ((code = open_store(given, &cfg, &st, &lg)) != WARREN_EXIT_OK)
        return code;
    snprintf(who, sizeof(who), "warren replay (pid %ld)", (long)getpid());
    if (key != NULL) {
        int replayed = 0;
        int rc = warren_ops_replay(st, key, who, &replayed, &err);
        if (rc != 0) {
            fprintf(stderr, "warren replay: %s\n", err.message);
            code = cli_exit_code(rc);
        } else if (!replayed) {
            fprintf(stderr, "warren replay: %s is not dead (see `warren show %s`)\n", key, key);
            code = WARREN_EXIT_FAIL;
        } else {
            printf("replayed %s: planned, due now\n", key);
        }
    } else {
        int64_t n = 0;
        int rc = warren_ops_replay_dead(st, job, who, &n, &err);
        if (rc != 0) {
            fprintf(stderr, "warren replay: %s\n", err.message);
            code = cli_exit_code(rc);
        } else {
            printf("replayed %lld dead run(s) of %s\n", (long long)n, job);
        }
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return code;
}

static void runs_usage(FILE *f)
{
    fprintf(f, "usage: warren runs [-c FILE] [--job J] [--state S] [--limit N]\n\n"
               "Lists runs, newest scheduled time first (default limit 50). States: planned,\n"
               "published, running, retrying, waiting, succeeded, dead, skipped, cancelled.\n");
}

static const char *utc(warren_us t, char *buf, size_t len)
{
    if (t == 0)
        return "-";
    return warren_time_format_ms(t, buf, len);
}

int cli_runs(int argc, char **argv)
{
    const char *given = NULL, *job = NULL, *state = NULL;
    int limit = 50, code, rc;
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    warren_ops_run *rows = NULL;
    size_t n = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            runs_usage(stdout);
            return WARREN_EXIT_OK;
        } else if (config_arg(argc, argv, &i, &given)) {
        } else if (strcmp(argv[i], "--job") == 0 && i + 1 < argc) {
            job = argv[++i];
        } else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) {
            state = argv[++i];
            if (!warren_ops_state_valid(state)) {
                fprintf(stderr,
                        "warren runs: --state takes planned, published, running, retrying, "
                        "waiting, succeeded, dead, skipped or cancelled, not \"%s\"\n",
                        state);
                return WARREN_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
            if (parse_int(argv[++i], 1, 1000000, &limit) != 0) {
                fprintf(stderr, "warren runs: --limit takes a positive number, not \"%s\"\n",
                        argv[i]);
                return WARREN_EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "warren runs: unexpected argument \"%s\"\n", argv[i]);
            runs_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    if ((code = open_store(given, &cfg, &st, &lg)) != WARREN_EXIT_OK)
        return code;
    rc = warren_ops_runs(st, job, state, limit, &rows, &n, &err);
    if (rc != 0) {
        fprintf(stderr, "warren runs: %s\n", err.message);
        code = cli_exit_code(rc);
    } else {
        printf("%-44s %-10s %7s %-24s %-24s %s\n", "RUN KEY", "STATE", "ATTEMPT", "DUE", "FINISHED",
               "ERROR / NOTE");
        for (size_t i = 0; i < n; i++) {
            char a[WARREN_TIME_BUF], b[WARREN_TIME_BUF];
            const warren_ops_run *r = &rows[i];
            const char *extra = r->last_error ? r->last_error : r->note ? r->note : "";
            const char *nl = strchr(extra, '\n');
            printf("%-44s %-10s %7d %-24s %-24s %.*s\n", r->run_key, r->state, r->attempt,
                   utc(r->due_at, a, sizeof(a)), utc(r->finished_at, b, sizeof(b)),
                   nl ? (int)(nl - extra) : (int)strlen(extra), extra);
        }
        warren_ops_runs_free(rows, n);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return code;
}

static void show_usage(FILE *f)
{
    fprintf(f, "usage: warren show [-c FILE] RUN_KEY\n"
               "       warren show [-c FILE] JOB\n\n"
               "One run with its history: state, times, attempts (worker, outcome, error) and\n"
               "notes (what a misfire, overlap or DST rule, the reconciler or replay did).\n"
               "Given a job name (no '@'): the job, where it came from (the config file, or an\n"
               "API job made from a template: by whom, for which tenant) and its note.\n");
}

/* `warren show JOB`: one job and where it came from (docs/api-jobs.md). */
static int show_job(warren_store *st, const char *name)
{
    warren_ops_job j;
    warren_error err = {0};
    char t[WARREN_TIME_BUF];
    int rc = warren_ops_job_get(st, name, &j, &err);

    if (rc != 0) {
        fprintf(stderr, "warren show: %s\n", err.message);
        return rc == WARREN_ENOENT ? WARREN_EXIT_FAIL : cli_exit_code(rc);
    }
    printf("job          %s\n", j.name);
    if (j.is_template)
        printf("origin       config file: a template (fires nothing itself; API jobs are made "
               "from it)\n");
    else if (j.template != NULL)
        printf("origin       API job from template %s (warren.upsert_job)\n", j.template);
    else
        printf("origin       config file (warren sync)\n");
    printf("created      %s%s%s\n", utc(j.created_at, t, sizeof(t)), j.created_by ? " by " : "",
           j.created_by ? j.created_by : "");
    printf("updated      %s\n", utc(j.updated_at, t, sizeof(t)));
    if (j.tenant != NULL)
        printf("tenant       %s\n", j.tenant);
    if (!j.is_template)
        printf("schedule     %s %s (%s)\n", j.kind, j.expression, j.timezone);
    printf("queue        %s\n", j.queue);
    printf("misfire      %s\n", j.misfire);
    if (j.max_running > 0 || j.max_running_per_tenant > 0)
        printf("caps         max_running %d, max_running_per_tenant %d (0: none)\n", j.max_running,
               j.max_running_per_tenant);
    if (!j.is_template)
        printf("next fire    %s\n",
               j.exhausted ? "never (fired)" : utc(j.next_fire_at, t, sizeof(t)));
    printf("state        %s%s\n",
           j.removed  ? (j.origin != NULL && strcmp(j.origin, "api") == 0
                             ? "deleted (warren.delete_job; kept as history)"
                             : "removed from the config (paused)")
           : j.paused ? "paused"
                      : "active",
           j.paused_by_template ? " (by warren sync: its template was removed)" : "");
    if (j.broken_reason != NULL)
        printf("broken       since %s: %s\n", utc(j.broken_since, t, sizeof(t)), j.broken_reason);
    if (j.note != NULL) {
        printf("notes\n");
        for (const char *p = j.note; *p;) {
            const char *nl = strchr(p, '\n');
            int len = nl ? (int)(nl - p) : (int)strlen(p);
            printf("  %.*s\n", len, p);
            p += len + (nl ? 1 : 0);
        }
    }
    warren_ops_job_clear(&j);
    return WARREN_EXIT_OK;
}

int cli_show(int argc, char **argv)
{
    const char *given = NULL, *key = NULL;
    int code, rc;
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    warren_ops_run_detail d;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            show_usage(stdout);
            return WARREN_EXIT_OK;
        } else if (config_arg(argc, argv, &i, &given)) {
        } else if (argv[i][0] != '-' && key == NULL) {
            key = argv[i];
        } else {
            fprintf(stderr, "warren show: unexpected argument \"%s\"\n", argv[i]);
            show_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    if (key == NULL) {
        show_usage(stderr);
        return WARREN_EXIT_USAGE;
    }
    if ((code = open_store(given, &cfg, &st, &lg)) != WARREN_EXIT_OK)
        return code;
    if (strchr(key, '@') == NULL) { /* run keys have one, job names cannot */
        code = show_job(st, key);
        warren_store_free(st);
        warren_config_free(cfg);
        return code;
    }
    rc = warren_ops_show(st, key, &d, &err);
    if (rc != 0) {
        fprintf(stderr, "warren show: %s\n", err.message);
        code = rc == WARREN_ENOENT ? WARREN_EXIT_FAIL : cli_exit_code(rc);
    } else {
        char t[WARREN_TIME_BUF];
        const warren_ops_run *r = &d.run;
        printf("run          %s\n", r->run_key);
        if (d.job_broken_reason != NULL)
            printf("job          %s (broken since %s: %s)\n", r->job,
                   utc(d.job_broken_since, t, sizeof(t)), d.job_broken_reason);
        else
            printf("job          %s\n", r->job);
        printf("state        %s\n", r->state);
        printf("origin       %s\n", r->origin);
        printf("attempt      %d\n", r->attempt);
        printf("scheduled    %s\n", utc(r->scheduled_at, t, sizeof(t)));
        printf("due          %s\n", utc(r->due_at, t, sizeof(t)));
        printf("published    %s (%d publish%s)\n", utc(r->published_at, t, sizeof(t)),
               r->publish_count, r->publish_count == 1 ? "" : "es");
        printf("started      %s\n", utc(r->started_at, t, sizeof(t)));
        printf("finished     %s\n", utc(r->finished_at, t, sizeof(t)));
        if (r->lease_owner != NULL && r->lease_until != 0)
            printf("lease        %s until %s\n", r->lease_owner, utc(r->lease_until, t, sizeof(t)));
        else if (r->lease_owner != NULL)
            printf("worker       %s\n", r->lease_owner);
        if (r->last_error != NULL)
            printf("last error   %s\n", r->last_error);
        if (r->note != NULL) {
            printf("notes\n");
            const char *p = r->note;
            while (*p) {
                const char *nl = strchr(p, '\n');
                int len = nl ? (int)(nl - p) : (int)strlen(p);
                printf("  %.*s\n", len, p);
                p += len + (nl ? 1 : 0);
            }
        }
        printf("attempts\n");
        if (d.nattempts == 0)
            printf("  (none)\n");
        for (size_t i = 0; i < d.nattempts; i++) {
            char a[WARREN_TIME_BUF], b[WARREN_TIME_BUF];
            const warren_ops_attempt *at = &d.attempts[i];
            printf("  #%d %s  %s -> %s  %s%s%s\n", at->attempt, at->worker,
                   utc(at->started_at, a, sizeof(a)), utc(at->finished_at, b, sizeof(b)),
                   at->outcome ? at->outcome : "running", at->error ? ": " : "",
                   at->error ? at->error : "");
        }
        warren_ops_run_detail_clear(&d);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    return code;
}
