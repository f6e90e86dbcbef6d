/* check_worker.c: the C worker against real PostgreSQL and RabbitMQ, with the
 * real planner relaying runs: end to end with an idempotent sink keyed by run
 * key, kill -9 and SIGSTOP of a worker (leases, fencing), retries to success
 * and to dead (warren.dead), replay, timeouts, graceful stop, in-process C
 * and sql handlers, malformed and poison messages. Every handler also appends
 * each execution to `execs`, which has no unique key: the sink's key makes
 * "one effect per run" true by construction, the log shows a run executed
 * twice (assert_executions). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>
#include <warren/worker.h>

#include "store_work.h"
#include "testenv.h"

/* ------------------------------------------------------------ harness */

typedef testenv_stack env;

static warren_logger test_logger = {warren_log_stderr, NULL, WARREN_LOG_WARN};

/* A fresh database and vhost, a config with the given planner settings,
 * jobs (libconfig list body) and worker settings, the config synced and the
 * topology declared. */
static void env_setup_planner(env *e, const char *planner, const char *jobs,
                              const char *worker_settings, int delivery_limit)
{
    testenv_stack_init(e, "warren-check-worker");
    char *text = testenv_fmt("database = { url = \"%s\"; };\n"
                             "broker = { url = \"%s\"; delivery_limit = %d; };\n"
                             "planner = { %s };\n"
                             /* exec handlers get only what the config names (and the
                              * allow-list): the test handlers' knobs */
                             "worker = { %s exec_env = [\"SINK_URL\", \"MARK_DIR\", "
                             "\"SLOW\", \"SLOW_KEY\", \"SLEEP\", \"CODE\", \"CODE_*\"]; };\n"
                             "jobs = ( %s );\n",
                             e->db, e->amqp, delivery_limit, planner,
                             /* heartbeat_margin 1.5 s (here and in the tests that set
                              * their own worker settings): the loop's PostgreSQL calls get
                              * 375 ms and their answers 750 ms (db_timeout in
                              * src/worker.c; a job with a 2 s lease gets 166 / 333 ms).
                              * With 500 ms (125 / 250 ms) a claim on this 2-core machine
                              * now and then got no answer in time and its run went to a
                              * second attempt (correct, but not what these tests check);
                              * production's default margin of 5 s allows 2.5 s. */
                             worker_settings ? worker_settings
                                             : "concurrency = 4; shutdown_grace = \"3s\"; "
                                               "heartbeat_margin = \"1500ms\";",
                             jobs);
    testenv_stack_config(e, text);
    free(text);
    /* The sink: effects keyed by run key (exactly once), and every execution
     * (no key: a second execution of a run is a second row). */
    testenv_exec(e->db, "CREATE TABLE sink (run_key text PRIMARY KEY, attempt int, who text, "
                        "at timestamptz DEFAULT clock_timestamp());"
                        "CREATE TABLE execs (run_key text, attempt int, who text, "
                        "at timestamptz DEFAULT clock_timestamp())");
    setenv("SINK_URL", e->db, 1);
    setenv("PATH", "/usr/bin:/bin", 1);
    /* `$MARK_DIR/log-exec WHO`, the first command of every inline exec
     * handler: one line per execution in DIR/execs.log (a file append, so
     * that even a handler killed at its 500 ms timeout has logged). */
    testenv_execlog_create(e->db);
    char *log_exec = testenv_fmt("%s/log-exec", e->dir);
    testenv_write_file(log_exec,
                       "#!/bin/sh\n"
                       "echo \"$WARREN_RUN_KEY $WARREN_ATTEMPT $1\" >> \"$MARK_DIR/execs.log\"\n",
                       0755);
    free(log_exec);
    setenv("MARK_DIR", e->dir, 1);
}

/* Every execution so far, one row each: handler.sh and the sql handlers
 * insert into execs; DIR/execs.log (the inline exec handlers') is moved into
 * TESTENV_EXECLOG here, so each line is loaded once. */
static const char *all_executions(env *e, int by_attempt)
{
    char *log = testenv_fmt("%s/execs.log", e->dir);
    char *taken = testenv_fmt("%s/execs.log.loaded", e->dir);
    if (rename(log, taken) == 0) {
        testenv_execlog_load(e->db, taken);
        unlink(taken);
    }
    free(taken);
    free(log);
    return by_attempt ? "SELECT run_key || '#' || attempt FROM execs UNION ALL SELECT run_key || "
                        "'#' || attempt FROM " TESTENV_EXECLOG
                      : "SELECT run_key FROM execs UNION ALL SELECT run_key FROM " TESTENV_EXECLOG;
}

/* The execution log against what should have run: runs_sql selects run keys,
 * explained_sql (NULL: none) the runs the test itself made execute again (a
 * killed or paused holder's). */
static void assert_executions_of(env *e, const char *runs_sql, const char *explained_sql)
{
    char *why = testenv_executions_mismatch(e->db, runs_sql, all_executions(e, 0), explained_sql);
    ck_assert_msg(why == NULL, "executions: %s", why);
}

/* The attempts a handler was given: all but those whose claim's answer never
 * reached the worker (a claim that outlived its bound on a stalled machine;
 * the worker takes the run back as a new attempt, warren.reclaim_many, and
 * the lost one never runs). */
#define SQL_ATTEMPTS_GIVEN                                                                         \
    "FROM warren.attempts WHERE outcome IS DISTINCT FROM 'lease_lost' OR error NOT LIKE 'the "     \
    "answer to this claim did not reach%'"

/* Each attempt warren gave a handler executed exactly once, and nothing else did. */
static void assert_one_execution_per_attempt(env *e)
{
    char *why = testenv_executions_mismatch(
        e->db, "SELECT run_key || '#' || attempt " SQL_ATTEMPTS_GIVEN, all_executions(e, 1), NULL);
    ck_assert_msg(why == NULL, "executions per attempt: %s", why);
}

/* env_setup_planner with a fast planner (100 ms tick). */
static void env_setup(env *e, const char *jobs, const char *worker_settings, int delivery_limit)
{
    env_setup_planner(e, "tick = \"100ms\"; reconcile_grace = \"2s\"; horizon = \"10s\";", jobs,
                      worker_settings, delivery_limit);
}

/* Inserts planned runs of job (due now, scheduled at distinct past seconds)
 * and wakes the planner. Returns nothing; keys are JOB@<base + i s>. */
static void add_runs(env *e, const char *job, int n, int base_offset_s)
{
    char *sql =
        testenv_fmt("INSERT INTO warren.runs (job, scheduled_at, due_at, origin) "
                    "SELECT '%s', date_trunc('second', now()) - make_interval(secs => %d + g), "
                    "now(), 'trigger' FROM generate_series(1, %d) g; NOTIFY warren_jobs",
                    job, base_offset_s, n);
    testenv_exec(e->db, sql);
    free(sql);
}

static char *first_key(env *e, const char *job)
{
    return testenv_sql1f(
        e->db, "SELECT run_key FROM warren.runs WHERE job = '%s' ORDER BY scheduled_at LIMIT 1",
        job);
}

/* An exec handler script: records each execution, sleeps SLEEP seconds on
 * attempts listed in SLOW (e.g. "1"), exits CODE_<attempt> if given, and
 * writes the effect to the sink (idempotent: keyed by run key). */
static const char *handler_script =
    "#!/bin/sh\n"
    "payload=$(cat)\n"
    "psql \"$SINK_URL\" -qAtc \"INSERT INTO execs VALUES ('$WARREN_RUN_KEY', $WARREN_ATTEMPT, "
    "'$$ $WARREN_JOB $WARREN_SCHEDULED_AT')\" >/dev/null\n"
    "case \" $SLOW \" in *\" $WARREN_ATTEMPT \"*) echo $$ > \"$MARK_DIR/slow.pid\"; sleep "
    "${SLEEP:-30};; esac\n"
    "if [ -n \"$SLOW_KEY\" ] && [ \"$WARREN_RUN_KEY\" = \"$SLOW_KEY\" ]; then echo $$ > "
    "\"$MARK_DIR/slow.pid\"; sleep 30; fi\n"
    "eval code=\\${CODE_$WARREN_ATTEMPT:-${CODE:-0}}\n"
    "if [ \"$code\" = 0 ]; then\n"
    "  psql \"$SINK_URL\" -qAtc \"INSERT INTO sink (run_key, attempt, who) VALUES "
    "('$WARREN_RUN_KEY', $WARREN_ATTEMPT, '$payload') ON CONFLICT (run_key) DO NOTHING\" "
    ">/dev/null\n"
    "fi\n"
    "echo \"handler $WARREN_JOB attempt $WARREN_ATTEMPT exits $code\" >&2\n"
    "exit $code\n";

static char *install_handler(env *e)
{
    char *path = testenv_fmt("%s/handler.sh", e->dir);
    testenv_write_file(path, handler_script, 0755);
    setenv("MARK_DIR", e->dir, 1);
    return path;
}

/* ------------------------------------------------------------ end to end */

START_TEST(test_worker_end_to_end_sink_gets_one_row_per_run)
{
    env e;
    char jobs[2048];
    /* The handler path is known only after env_setup made the directory:
     * use a shell command that finds it through MARK_DIR. */
    snprintf(jobs, sizeof(jobs),
             "{ name = \"ex\"; every = \"1s\"; queue = \"q1\"; payload = { v = 1; };"
             "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
             "  overlap = \"allow\"; lease = \"5s\"; },"
             "{ name = \"sq\"; every = \"1s\"; queue = \"q1\"; overlap = \"allow\";"
             "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sq')) "
             "INSERT INTO sink (run_key, attempt, who) VALUES ($1, 0, $3::text) ON CONFLICT DO "
             "NOTHING\"; }; }");
    env_setup(&e, jobs, NULL, 5);
    free(install_handler(&e));
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    pid_t b = testenv_stack_worker(&e, NULL, "wb", "b.log", 0);
    /* Jobs fire every second: let them run until each has run a few times. */
    ck_assert(
        testenv_wait_for(e.db, "t", 60000,
                         "SELECT count(*) FILTER (WHERE job = 'ex') >= 5 AND count(*) FILTER "
                         "(WHERE job = 'sq') >= 5 FROM warren.runs WHERE state = 'succeeded'"));
    /* Stop planning (pause) and let the workers drain what was due by then. */
    testenv_exec(e.db, "UPDATE warren.jobs SET paused = true; CREATE TABLE paused_at AS SELECT "
                       "clock_timestamp() AS t");
    ck_assert(testenv_wait_for(e.db, "0", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state NOT IN ('succeeded', "
                               "'skipped') AND due_at <= (SELECT t FROM paused_at)"));
    kill(a, SIGTERM);
    kill(b, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    ck_assert_int_eq(testenv_wait_exit(b, 10000), 0);
    char *n = testenv_sql1f(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'");
    ck_assert_int_ge(atoi(n), 8);
    free(n);
    /* Every succeeded run has exactly one sink row and nothing else has one. */
    ck_assert(
        testenv_wait_for(e.db, "0", 1000,
                         "SELECT count(*) FROM warren.runs r FULL JOIN sink s USING (run_key) "
                         "WHERE r.state = 'succeeded' AND s.run_key IS NULL "
                         "OR s.run_key IS NOT NULL AND r.state IS DISTINCT FROM 'succeeded'"));
    ck_assert(
        testenv_wait_for(e.db, "t", 1000,
                         "SELECT (SELECT count(*) FROM sink) = (SELECT count(*) FROM warren.runs "
                         "WHERE state = 'succeeded')"));
    /* The payload reached the exec handler on stdin; both handler kinds ran. */
    ck_assert(testenv_wait_for(e.db, "t", 1000,
                               "SELECT bool_and(who = '{\"v\":1}' OR who = '{\"v\": 1}') FROM sink "
                               "WHERE run_key LIKE 'ex@%'"));
    ck_assert(testenv_wait_for(e.db, "t", 1000,
                               "SELECT count(*) FILTER (WHERE run_key LIKE 'ex@%') > 0 AND "
                               "count(*) FILTER (WHERE run_key LIKE 'sq@%') > 0 FROM sink"));
    /* Nothing went wrong here, so the handlers executed exactly once per
     * succeeded run: a duplicate execution (which the sink's key would hide)
     * fails the test, and each one was attempt 1. */
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE state = 'succeeded'", NULL);
    if (!testenv_wait_for(e.db, "0", 1000,
                          "SELECT count(*) FROM warren.attempts WHERE attempt <> 1 OR outcome IS "
                          "DISTINCT FROM 'succeeded'")) {
        char *bad = testenv_sql1f(e.db, "SELECT string_agg(concat_ws(' | ', run_key, attempt, "
                                        "worker, outcome, started_at, finished_at, error), E'\n') "
                                        "FROM warren.attempts WHERE attempt <> 1 OR outcome IS "
                                        "DISTINCT FROM 'succeeded'");
        ck_abort_msg("attempts other than a first that succeeded:\n%s", bad);
    }
    /* Each success is in the outbox or already published as an event. */
    ck_assert(testenv_wait_for(e.db, "t", 1000,
                               "SELECT count(*) = 0 FROM warren.attempts WHERE outcome IS NULL"));
    testenv_stack_free(&e);
}
END_TEST

/* overlap = "queue" end to end: of two runs of a job released together, the
 * newer is held back while the older runs (retrying, republished every
 * second) and starts only after the older finished; both succeed once. */
START_TEST(test_worker_queue_policy_runs_the_newer_run_after_the_older)
{
    env e;
    env_setup(&e,
              "{ name = \"qj\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qo\"; overlap = "
              "\"queue\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; }; }",
              NULL, 5);
    free(install_handler(&e));
    setenv("SLOW", "1", 1); /* every first attempt sleeps SLEEP seconds */
    setenv("SLEEP", "2", 1);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a =
        testenv_stack_worker(&e, NULL, "wa", "a.log", 0); /* 4 slots: both could run at once */
    add_runs(&e, "qj", 1, 10);                            /* the older run: running first */
    char *older = first_key(&e, "qj");
    ck_assert(
        testenv_wait_for(e.db, "running", 15000, "SELECT state FROM warren.runs WHERE job = 'qj'"));
    add_runs(&e, "qj", 1, 5); /* the newer run, released while the older runs */
    ck_assert(testenv_wait_for(e.db, "succeeded,succeeded", 20000,
                               "SELECT string_agg(state, ',') FROM warren.runs WHERE job = 'qj'"));
    /* the newer one was held back, and started after the older one's effect */
    ck_assert(
        testenv_wait_for(e.db, "t", 1000,
                         "SELECT note LIKE '%held back by overlap policy queue%' FROM warren.runs "
                         "WHERE job = 'qj' AND run_key <> (SELECT min(run_key) FROM warren.runs)"));
    char *sql = testenv_fmt("SELECT (SELECT min(at) FROM execs WHERE run_key <> '%s') > "
                            "(SELECT at FROM sink WHERE run_key = '%s')",
                            older, older);
    ck_assert(testenv_wait_for(e.db, "t", 1000, sql));
    ck_assert(testenv_wait_for(
        e.db, "2|2", 1000,
        "SELECT (SELECT count(*) FROM sink) || '|' || (SELECT count(*) FROM execs)"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    free(sql);
    free(older);
    unsetenv("SLOW");
    unsetenv("SLEEP");
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    testenv_stack_free(&e);
}
END_TEST

/* Exit status 64 and 65 are permanent failures: the run is dead after one
 * attempt whatever its retry budget; the handler saw its run in the
 * environment (WARREN_RUN_KEY, WARREN_ATTEMPT, WARREN_JOB, WARREN_SCHEDULED_AT). */
START_TEST(test_worker_exec_exit_64_and_65_fail_permanently)
{
    env e;
    env_setup(&e,
              "{ name = \"perm\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qp\"; overlap = "
              "\"allow\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
              "  retry = { max_attempts = 5; base = \"100ms\"; cap = \"200ms\"; }; }",
              NULL, 5);
    free(install_handler(&e));
    testenv_stack_planner_start(&e, &test_logger);
    setenv("CODE", "64", 1);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    setenv("CODE", "65", 1);
    pid_t b = testenv_stack_worker(&e, NULL, "wb", "b.log", 0);
    unsetenv("CODE");
    add_runs(&e, "perm", 6, 5);
    ck_assert(
        testenv_wait_for(e.db, "6|6", 20000,
                         "SELECT count(*) FILTER (WHERE state = 'dead' AND attempt = 1) || '|' || "
                         "count(*) FROM warren.runs WHERE job = 'perm'"));
    ck_assert(testenv_wait_for(e.db, "6", 1000,
                               "SELECT count(*) FROM warren.attempts WHERE outcome = 'failed' AND "
                               "(error LIKE 'exit status 64%' OR error LIKE 'exit status 65%')"));
    /* one execution per run, each with its own run in its environment */
    ck_assert(
        testenv_wait_for(e.db, "6", 1000,
                         "SELECT count(*) FROM execs x JOIN warren.runs r USING (run_key) WHERE "
                         "x.attempt = 1 AND x.who LIKE '% perm ' || to_char(r.scheduled_at AT TIME "
                         "ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"));
    ck_assert(testenv_wait_for(e.db, "0", 1000, "SELECT count(*) FROM sink"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    kill(a, SIGTERM);
    kill(b, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    ck_assert_int_eq(testenv_wait_exit(b, 10000), 0);
    testenv_stack_free(&e);
}
END_TEST

/* `warren run`: planner and worker in one process, one line per finished run. */
START_TEST(test_warren_run_prints_one_line_per_finished_run)
{
    env e;
    env_setup(&e,
              "{ name = \"tick\"; every = \"1s\"; queue = \"qrun\"; overlap = \"allow\";"
              "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'tick')) "
              "INSERT INTO sink (run_key, attempt) VALUES ($1, 0) ON CONFLICT DO NOTHING\"; }; }",
              NULL, 5);
    char *out = testenv_fmt("%s/run.out", e.dir);
    char *log = testenv_fmt("%s/run.log", e.dir);
    char *argv[] = {WARREN_BINARY, "run", "-c", e.cfg_path, NULL};
    pid_t pid = testenv_spawn(argv, out, log, 0);
    ck_assert(testenv_wait_for(e.db, "t", 20000,
                               "SELECT count(*) >= 3 FROM warren.runs WHERE state = 'succeeded'"));
    kill(pid, SIGINT);
    ck_assert_int_eq(testenv_wait_exit(pid, 15000), 0);
    char *text = testenv_read_file_or_empty(out);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        ck_assert_msg(strncmp(line, "tick@", 5) == 0, "line: %s", line);
        ck_assert_msg(strstr(line, ": scheduled ") && strstr(line, ", released ") &&
                          strstr(line, ", started ") && strstr(line, ", finished ") &&
                          strstr(line, ", succeeded (attempt 1, run succeeded), lateness ") &&
                          strstr(line, " ms"),
                      "line: %s", line);
        lines++;
    }
    free(text);
    char *n = testenv_sql1f(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'");
    ck_assert_int_eq(lines, atoi(n));
    ck_assert(testenv_wait_for(e.db, n, 1000, "SELECT count(*) FROM sink"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE state = 'succeeded'", NULL);
    free(n);
    free(out);
    free(log);
    testenv_stack_free(&e);
}
END_TEST

/* In-process C handlers: context fields, outcomes, errors. */
typedef struct c_calls {
    pthread_mutex_t mu;
    int calls;
    char last_key[128];
    char last_payload[256];
    int last_attempt;
} c_calls;

static warren_outcome c_handler(warren_handler_ctx *ctx, void *ud)
{
    c_calls *c = ud;
    pthread_mutex_lock(&c->mu);
    c->calls++;
    snprintf(c->last_key, sizeof(c->last_key), "%s", warren_handler_run_key(ctx));
    snprintf(c->last_payload, sizeof(c->last_payload), "%s", warren_handler_payload(ctx));
    c->last_attempt = warren_handler_attempt(ctx);
    pthread_mutex_unlock(&c->mu);
    if (warren_handler_attempt(ctx) < 2) {
        warren_handler_set_error(ctx, "first attempt of %s fails", warren_handler_job(ctx));
        return WARREN_OUTCOME_RETRY;
    }
    return WARREN_OUTCOME_SUCCEEDED;
}

/* What c_waits_for_stop saw: should_stop, and how often it ran. */
typedef struct stop_seen {
    atomic_int saw;
    atomic_int calls;
} stop_seen;

/* Waits for should_stop and reports whether it saw it. */
static warren_outcome c_waits_for_stop(warren_handler_ctx *ctx, void *ud)
{
    stop_seen *seen = ud;
    atomic_fetch_add(&seen->calls, 1);
    for (int i = 0; i < 300 && !warren_handler_should_stop(ctx); i++)
        testenv_sleep_ms(10);
    atomic_store(&seen->saw, warren_handler_should_stop(ctx));
    return WARREN_OUTCOME_SUCCEEDED;
}

typedef struct worker_thread {
    warren_worker *w;
    volatile sig_atomic_t stop;
    pthread_t th;
    int rc;
} worker_thread;

static void *worker_main(void *arg)
{
    worker_thread *wt = arg;
    warren_error err = {0};
    wt->rc = warren_worker_run(wt->w, &wt->stop, &err);
    if (wt->rc != 0)
        fprintf(stderr, "worker: %s\n", err.message);
    return NULL;
}

/* warren_worker_run for e's config on a thread of its own, with one C
 * handler registered under name (NULL: none). */
static void worker_thread_start(env *e, worker_thread *wt, const char *name, warren_handler_fn fn,
                                void *ud)
{
    warren_error err = {0};
    ck_assert_int_eq(warren_worker_new(e->cfg, &test_logger, &wt->w, &err), 0);
    if (name != NULL)
        ck_assert_int_eq(warren_worker_register(wt->w, name, fn, ud), 0);
    ck_assert_int_eq(pthread_create(&wt->th, NULL, worker_main, wt), 0);
}

/* For the tests of handlers left behind: jobs with a short shutdown grace,
 * an in-process worker (C handler name/fn/ud, may be NULL), the planner, and
 * one run of job due now. */
static void leave_behind_start(env *e, worker_thread *wt, const char *jobs, const char *job,
                               const char *name, warren_handler_fn fn, void *ud)
{
    /* margin 500 ms: the kill grace (half the margin) these tests check is 250 ms */
    env_setup(e, jobs, "concurrency = 2; shutdown_grace = \"200ms\"; heartbeat_margin = \"500ms\";",
              5);
    worker_thread_start(e, wt, name, fn, ud);
    testenv_stack_planner_start(e, &test_logger);
    add_runs(e, job, 1, 5);
}

/* Stops it and waits for warren_worker_run to return 0 (the worker is not
 * freed: its stats stay readable). */
static void worker_thread_join(worker_thread *wt)
{
    __atomic_store_n(&wt->stop, 1, __ATOMIC_RELAXED);
    warren_worker_wake(wt->w);
    pthread_join(wt->th, NULL);
    ck_assert_int_eq(wt->rc, 0);
}

START_TEST(test_worker_c_handler_retries_then_succeeds_with_context)
{
    env e;
    c_calls calls = {PTHREAD_MUTEX_INITIALIZER, 0, "", "", 0};
    stop_seen saw_stop = {0, 0};
    warren_error err = {0};
    worker_thread wt = {0};

    env_setup(&e,
              "{ name = \"cj\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qc\"; payload = { x = "
              "\"y\"; };  handler = { c = \"flaky\"; }; retry = { base = \"10ms\"; cap = "
              "\"20ms\"; }; },"
              "{ name = \"slow\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qc\"; "
              "  handler = { c = \"waiter\"; }; timeout = \"300ms\"; retry = { max_attempts = 1; "
              "}; }",
              NULL, 5);
    ck_assert_int_eq(warren_worker_new(e.cfg, &test_logger, &wt.w, &err), 0);
    ck_assert_int_eq(warren_worker_register(wt.w, "flaky", c_handler, &calls), 0);
    ck_assert_int_eq(warren_worker_register(wt.w, "flaky", c_handler, &calls), WARREN_EINVAL);
    ck_assert_int_eq(warren_worker_register(wt.w, "waiter", c_waits_for_stop, &saw_stop), 0);
    ck_assert_int_eq(pthread_create(&wt.th, NULL, worker_main, &wt), 0);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "cj", 1, 10);
    add_runs(&e, "slow", 1, 10);
    char *key = first_key(&e, "cj");
    ck_assert(testenv_wait_for(e.db, "succeeded|2", 15000,
                               "SELECT state || '|' || attempt FROM warren.runs WHERE job = 'cj'"));
    ck_assert(
        testenv_wait_for(e.db, "retry|first attempt of cj fails,succeeded|", 1000,
                         "SELECT string_agg(outcome || '|' || coalesce(error, ''), ',' ORDER BY "
                         "attempt) FROM warren.attempts WHERE run_key LIKE 'cj@%'"));
    /* The in-process handler timed out: should_stop was set, the attempt is a retry
     * (max_attempts 1: dead). */
    ck_assert(
        testenv_wait_for(e.db, "dead|timed out after 300 ms", 15000,
                         "SELECT state || '|' || last_error FROM warren.runs WHERE job = 'slow'"));
    worker_thread_join(&wt);
    pthread_mutex_lock(&calls.mu);
    ck_assert_int_eq(calls.calls, 2);
    ck_assert_str_eq(calls.last_key, key);
    ck_assert_str_eq(calls.last_payload, "{\"x\":\"y\"}");
    ck_assert_int_eq(calls.last_attempt, 2);
    pthread_mutex_unlock(&calls.mu);
    ck_assert_int_eq(atomic_load(&saw_stop.saw), 1);
    ck_assert_int_eq(atomic_load(&saw_stop.calls), 1); /* max_attempts 1: one execution */
    warren_worker_stats st;
    warren_worker_stats_get(wt.w, &st);
    ck_assert_uint_eq(st.succeeded, 1);
    ck_assert_uint_ge(st.retried, 2);
    ck_assert_uint_eq(st.timeouts, 1);
    warren_worker_free(wt.w);
    free(key);
    testenv_stack_free(&e);
}
END_TEST

/* Counts its executions in ud (an atomic_int). */
static warren_outcome c_ok(warren_handler_ctx *ctx, void *ud)
{
    (void)ctx;
    atomic_fetch_add((atomic_int *)ud, 1);
    return WARREN_OUTCOME_SUCCEEDED;
}

/* planner.release_lead: runs reach the worker 2 s before due. The worker
 * holds them, unclaimed (no claim waits in PostgreSQL meanwhile), and
 * claims each when it is due: started_at (the claim, database clock) is at
 * or after due_at, never before. How soon after is a
 * number for the benchmarks (bench_worker's start lateness percentiles,
 * steady mode, release_lead 3 s); here it only has to be well before any
 * lease or republish could have started it instead (5 s). */
START_TEST(test_worker_holds_an_early_delivery_and_starts_it_when_due)
{
    env e;
    worker_thread wt = {0};

    env_setup_planner(&e,
                      "tick = \"100ms\"; reconcile_grace = \"2s\"; horizon = \"10s\"; "
                      "release_lead = \"2s\";",
                      "{ name = \"ej\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qe\"; overlap = "
                      "\"allow\"; handler = { c = \"ok\"; }; }",
                      NULL, 5);
    atomic_int calls;
    atomic_init(&calls, 0);
    worker_thread_start(&e, &wt, "ok", c_ok, &calls);
    testenv_stack_planner_start(&e, &test_logger);
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT 'ej', "
                       "'2026-01-01'::timestamptz + make_interval(secs => g), clock_timestamp() + "
                       "interval '4.5 s' + g * interval '300 ms' FROM generate_series(1, 3) g; "
                       "NOTIFY warren_jobs");
    /* Released 2.8-3.4 s from now, due 4.8-5.4 s: from 3.6 s on, all three
     * have left their delay queues and the ready queue (the management API's
     * unacknowledged count of a quorum queue lags by seconds) while the first
     * is not due yet: held by the worker, still published, no claim
     * sleeping. */
    ck_assert(testenv_wait_for(e.db, "t", 6000,
                               "SELECT clock_timestamp() >= max(due_at) - interval '1.8 s' FROM "
                               "warren.runs"));
    char *secs = testenv_sql1f(e.db, "SELECT string_agg(DISTINCT floor(extract(epoch FROM due_at "
                                     "- interval '2 s'))::bigint::text, ' ') FROM warren.runs");
    ck_assert_ptr_nonnull(secs);
    /* (a loaded broker may expire them a little late: up to 0.8 s more) */
    long left = -1;
    for (int i = 0; i < 16 && left != 0; i++) {
        char *copy = strdup(secs);
        left = testenv_queue_depth(e.amqp, "warren.ready.qe");
        for (char *sv = copy, *tok; (tok = strtok_r(sv, " ", &sv)) != NULL;) {
            char q[64];
            snprintf(q, sizeof(q), "warren.delay.%s", tok);
            left += testenv_queue_depth(e.amqp, q);
        }
        free(copy);
        if (left != 0)
            testenv_sleep_ms(50);
    }
    ck_assert_msg(left == 0, "%ld runs still in the delay or ready queue", left);
    free(secs);
    char *held = testenv_sql1f(
        e.db, "SELECT count(*) FILTER (WHERE state = 'published') || '|' || (SELECT count(*) FROM "
              "pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()) "
              "|| '|' || (min(due_at) > clock_timestamp() + interval '100 ms') FROM warren.runs");
    ck_assert_msg(held != NULL && strcmp(held, "3|0|true") == 0,
                  "published|claims sleeping|first not due yet: %s", held);
    free(held);
    ck_assert(testenv_wait_for(e.db, "3", 10000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    char *late = testenv_sql1f(e.db, "SELECT min(started_at - due_at) >= interval '0' AND "
                                     "max(started_at - due_at) < interval '5 s' FROM "
                                     "warren.runs");
    char *spread = testenv_sql1f(e.db, "SELECT string_agg(extract(milliseconds FROM started_at - "
                                       "due_at)::text, ' ' ORDER BY due_at) FROM warren.runs");
    fprintf(stderr, "held early deliveries started after due (ms): %s\n", spread);
    ck_assert_msg(late != NULL && strcmp(late, "t") == 0, "started - due (ms): %s", spread);
    free(late);
    free(spread);
    worker_thread_join(&wt);
    ck_assert_int_eq(atomic_load(&calls), 3); /* each held run executed once */
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* c_stubborn's ud: the test sets release; the handler counts its
 * executions and those that returned. */
typedef struct stubborn {
    atomic_int release;
    atomic_int calls;
    atomic_int returned;
} stubborn;

/* Ignores should_stop: runs until told through ud (a stubborn). */
static warren_outcome c_stubborn(warren_handler_ctx *ctx, void *ud)
{
    stubborn *sb = ud;
    (void)ctx;
    atomic_fetch_add(&sb->calls, 1);
    for (int i = 0; i < 3000 && !atomic_load(&sb->release); i++)
        testenv_sleep_ms(10);
    atomic_fetch_add(&sb->returned, 1);
    return WARREN_OUTCOME_SUCCEEDED;
}

/* Releases a stubborn handler and waits until it has returned; its pool
 * thread frees the context right after (nothing observable), which the
 * short pause covers before the test process exits and LSan looks. */
static void stubborn_release(stubborn *sb)
{
    atomic_store(&sb->release, 1);
    for (int i = 0; i < 500 && atomic_load(&sb->returned) < atomic_load(&sb->calls); i++)
        testenv_sleep_ms(10);
    ck_assert_int_eq(atomic_load(&sb->returned), atomic_load(&sb->calls));
    testenv_sleep_ms(100);
}

/* A handler that ignores should_stop is left behind when the worker stops:
 * warren_worker_run returns, the worker is freed, and when the handler
 * returns later its pool thread frees what it still holds (ASan: no use
 * after free, no leak). */
START_TEST(test_worker_leaves_a_handler_that_ignores_should_stop)
{
    env e;
    stubborn sb = {0, 0, 0};
    worker_thread wt = {0};

    leave_behind_start(&e, &wt,
                       "{ name = \"mule\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qm\";"
                       "  handler = { c = \"stubborn\"; }; }",
                       "mule", "stubborn", c_stubborn, &sb);
    ck_assert(testenv_wait_for(e.db, "running", 15000,
                               "SELECT state FROM warren.runs WHERE job = 'mule'"));
    int64_t t0 = testenv_mono_ms();
    worker_thread_join(&wt);
    /* grace 200 ms + kill grace 250 ms + 5 s for completions, then it leaves */
    ck_assert_int_lt(testenv_mono_ms() - t0, 15000);
    warren_worker_free(wt.w);
    /* The run is not completed: it stays running until its lease expires. */
    ck_assert(testenv_wait_for(e.db, "running", 1000,
                               "SELECT state FROM warren.runs WHERE job = 'mule'"));
    ck_assert_int_eq(atomic_load(&sb.calls), 1);
    stubborn_release(&sb); /* the handler returns now, after its worker is gone */
    testenv_stack_free(&e);
}
END_TEST

/* An sql handler still in its statement when the worker gives up at shutdown
 * is left behind too: the worker is freed, and when the statement ends its
 * thread still returns its connection to the pool it came from (ASan: no use
 * after free). The statement and the run's completion commit together. */
START_TEST(test_worker_leaves_a_running_sql_handler_at_shutdown)
{
    env e;
    worker_thread wt = {0};

    leave_behind_start(&e, &wt,
                       "{ name = \"nap\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qn\";"
                       "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'nap')) "
                       "SELECT pg_sleep(7)\"; }; }",
                       "nap", NULL, NULL, NULL);
    const char *nap = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'WITH x AS (INSERT "
                      "INTO execs%pg_sleep(7)' AND pid <> pg_backend_pid()";
    ck_assert(testenv_wait_for(e.db, "1", 15000, nap));
    worker_thread_join(&wt); /* grace + kill grace + 5 s, then it leaves */
    warren_worker_free(wt.w);
    ck_assert(testenv_wait_for(e.db, "1", 1000, nap));
    /* the statement ends; its thread puts the connection back into the pool */
    char *active = testenv_fmt("%s AND state = 'active'", nap);
    ck_assert(testenv_wait_for(e.db, "0", 10000, active));
    free(active);
    ck_assert(testenv_wait_for(e.db, "succeeded", 2000,
                               "SELECT state FROM warren.runs WHERE job = 'nap'"));
    /* the statement's execution committed once, with the completion */
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    /* the completion committed just before the pool got the connection back:
     * nothing to observe, so a short pause before the process exits */
    testenv_sleep_ms(300);
    testenv_stack_free(&e);
}
END_TEST

/* A C handler that times out and ignores should_stop cannot be killed: after
 * the kill grace it is left behind and its run completed as a retry, instead
 * of being heartbeated (and held) forever. */
START_TEST(test_worker_leaves_a_timed_out_handler_that_ignores_should_stop)
{
    env e;
    stubborn sb = {0, 0, 0};
    worker_thread wt = {0};

    leave_behind_start(&e, &wt,
                       "{ name = \"stuck\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qs\";"
                       "  handler = { c = \"stubborn\"; }; timeout = \"300ms\";"
                       "  retry = { max_attempts = 1; }; }",
                       "stuck", "stubborn", c_stubborn, &sb);
    /* timeout 300 ms + kill grace 250 ms, while the handler keeps running */
    ck_assert(
        testenv_wait_for(e.db, "dead|true", 15000,
                         "SELECT state || '|' || (last_error LIKE 'timed out after 300 ms and did "
                         "not stop within 250 ms%') FROM warren.runs WHERE job = 'stuck'"));
    ck_assert(testenv_wait_for(e.db, "retry", 1000,
                               "SELECT string_agg(outcome, ',') FROM warren.attempts"));
    ck_assert_int_eq(atomic_load(&sb.returned), 0); /* the handler never returned */
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    ck_assert_int_eq(atomic_load(&sb.calls), 1); /* max_attempts 1: one execution */
    stubborn_release(&sb); /* it returns now: its pool thread frees the context */
    testenv_stack_free(&e);
}
END_TEST

/* What PostgreSQL refuses to store must not jam a slot: a handler's output
 * that is not valid UTF-8 (cut mid-character, or binary) is cleaned, and an
 * sql handler whose COMMIT fails (a deferred foreign key) is recorded as a
 * retry with that error instead of being run again and again. */
START_TEST(test_worker_records_unstorable_errors_and_commit_failures)
{
    env e;
    worker_thread wt = {0};
    env_setup(
        &e,
        "{ name = \"bin\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qb\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec bin; printf 'bad "
        "\\\\377\\\\376 bytes "
        "\\\\346\\\\227'; exit 1\"]; };"
        "  retry = { max_attempts = 1; }; },"
        "{ name = \"dfk\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qb\";"
        "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'dfk')) INSERT INTO "
        "child VALUES (42)\"; };"
        "  retry = { max_attempts = 1; }; }",
        NULL, 5);
    testenv_exec(e.db,
                 "CREATE TABLE parent (id int PRIMARY KEY);"
                 "CREATE TABLE child (ref int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)");
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "bin", 1, 5);
    add_runs(&e, "dfk", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "dead|exit status 1: bad ?? bytes ??", 15000,
                         "SELECT state || '|' || last_error FROM warren.runs WHERE job = 'bin'"));
    ck_assert(testenv_wait_for(e.db, "dead|true", 15000,
                               "SELECT state || '|' || (last_error LIKE '%foreign key%') FROM "
                               "warren.runs WHERE job = 'dfk'"));
    ck_assert(testenv_wait_for(e.db, "0", 1000, "SELECT count(*) FROM child"));
    ck_assert(testenv_wait_for(e.db, "2", 1000,
                               "SELECT count(*) FROM warren.attempts WHERE outcome = 'retry'"));
    /* bin executed once; dfk's execution rolled back with its failed commit */
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE job = 'bin'", NULL);
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ leases and fencing */

START_TEST(test_worker_killed_mid_run_another_completes_after_lease_expiry)
{
    env e;
    env_setup(&e,
              "{ name = \"k9\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qk\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
              "  lease = \"2s\"; retry = { base = \"10ms\"; cap = \"10ms\"; }; }",
              NULL, 5);
    free(install_handler(&e));
    setenv("SLOW", "1", 1); /* attempt 1 hangs (30 s): it is the one we kill */
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "k9", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "running|1|wa", 15000,
                         "SELECT concat_ws('|', state, attempt, lease_owner) FROM warren.runs"));
    ck_assert(testenv_wait_for(e.db, "1", 5000, "SELECT count(*) FROM execs"));
    /* what the killed worker held: the one run allowed a second execution */
    testenv_exec(
        e.db, "CREATE TABLE held AS SELECT run_key FROM warren.runs WHERE lease_owner = 'wa' AND "
              "state = 'running'");
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    pid_t b = testenv_stack_worker(&e, NULL, "wb", "b.log", 0);
    /* The planner's reconciler reaps the expired lease; the relay republishes; b runs it. */
    ck_assert(testenv_wait_for(
        e.db, "succeeded|2|wb", 20000,
        "SELECT concat_ws('|', r.state, r.attempt, a.worker) FROM warren.runs r "
        "JOIN warren.attempts a ON a.run_key = r.run_key AND a.attempt = r.attempt"));
    ck_assert(
        testenv_wait_for(e.db, "1|2", 1000, "SELECT count(*) || '|' || max(attempt) FROM sink"));
    ck_assert(testenv_wait_for(e.db, "lease_lost", 1000,
                               "SELECT outcome FROM warren.attempts WHERE attempt = 1"));
    ck_assert(testenv_wait_for(e.db, "1", 0, "SELECT count(*) FROM held"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", "SELECT run_key FROM held");
    assert_one_execution_per_attempt(&e);
    kill(b, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(b, 10000), 0);
    /* The orphaned handler of the killed worker: its process group outlived it. */
    char *pidf = testenv_fmt("%s/slow.pid", e.dir);
    char *pidt = testenv_read_file_or_empty(pidf);
    if (atoi(pidt) > 0)
        kill(-atoi(pidt), SIGKILL);
    free(pidt);
    free(pidf);
    unsetenv("SLOW");
    testenv_stack_free(&e);
}
END_TEST

/* The other order: the handler finishes (exit 0, its idempotent effect
 * written) while its worker is stopped past the lease; another worker runs
 * the newer attempt. Resumed, the stale worker's overdue heartbeat is
 * refused and it does not complete: attempt 1 stays lease_lost, the effect
 * exists once. */
START_TEST(test_worker_stopped_while_its_handler_finishes_does_not_complete)
{
    env e;
    env_setup(&e,
              "{ name = \"sf\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qf\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
              "  lease = \"2s\"; retry = { base = \"10ms\"; cap = \"10ms\"; }; }",
              NULL, 5);
    free(install_handler(&e));
    setenv("SLOW", "1", 1); /* attempt 1 sleeps 3 s, then succeeds */
    setenv("SLEEP", "3", 1);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "sf", 1, 5);
    ck_assert(testenv_wait_for(e.db, "1", 15000, "SELECT count(*) FROM execs"));
    /* what the paused worker held: the one run allowed a second execution */
    testenv_exec(
        e.db, "CREATE TABLE held AS SELECT run_key FROM warren.runs WHERE lease_owner = 'wa' AND "
              "state = 'running'");
    kill(a, SIGSTOP);
    pid_t b = testenv_stack_worker(&e, NULL, "wb", "b.log", 0);
    /* attempt 1's handler ends while wa is stopped: its effect is written */
    ck_assert(
        testenv_wait_for(e.db, "1|1", 10000, "SELECT count(*) || '|' || max(attempt) FROM sink"));
    ck_assert(testenv_wait_for(
        e.db, "succeeded|2|wb", 20000,
        "SELECT concat_ws('|', r.state, r.attempt, a.worker) FROM warren.runs r "
        "JOIN warren.attempts a ON a.run_key = r.run_key AND a.attempt = r.attempt"));
    kill(a, SIGCONT);
    /* Resumed, it stops the handler without completing: its overdue
     * heartbeat is refused ("heartbeat refused"), or, when the stop caught a
     * heartbeat in flight (accepted before wb took over, answered after the
     * resume), the lease deadline counted from that heartbeat has passed
     * ("no successful heartbeat"). Either way: "stopping the handler, not
     * completing". */
    ck_assert(testenv_stack_log_wait(&e, "a.log", "stopping the handler, not completing", 10000));
    ck_assert(testenv_stack_log_wait(&e, "a.log", "not completing", 10000));
    ck_assert(
        testenv_wait_for(e.db, "1|lease_lost,2|succeeded", 1000,
                         "SELECT string_agg(attempt || '|' || outcome, ',' ORDER BY attempt) FROM "
                         "warren.attempts"));
    ck_assert(
        testenv_wait_for(e.db, "1|1", 1000, "SELECT count(*) || '|' || max(attempt) FROM sink"));
    ck_assert(testenv_wait_for(e.db, "1", 0, "SELECT count(*) FROM held"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", "SELECT run_key FROM held");
    assert_one_execution_per_attempt(&e);
    kill(a, SIGTERM);
    kill(b, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    ck_assert_int_eq(testenv_wait_exit(b, 10000), 0);
    unsetenv("SLOW");
    unsetenv("SLEEP");
    testenv_stack_free(&e);
}
END_TEST

START_TEST(test_worker_stopped_past_its_lease_is_fenced_off)
{
    env e;
    env_setup(&e,
              "{ name = \"st\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qs\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
              "  lease = \"2s\"; retry = { base = \"10ms\"; cap = \"10ms\"; }; }",
              NULL, 5);
    free(install_handler(&e));
    setenv("SLOW", "1", 1); /* attempt 1 sleeps 30 s: stopped by its worker on SIGCONT */
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "st", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "running|1|wa", 15000,
                         "SELECT concat_ws('|', state, attempt, lease_owner) FROM warren.runs"));
    ck_assert(testenv_wait_for(e.db, "1", 5000, "SELECT count(*) FROM execs"));
    /* what the paused worker held: the one run allowed a second execution */
    testenv_exec(
        e.db, "CREATE TABLE held AS SELECT run_key FROM warren.runs WHERE lease_owner = 'wa' AND "
              "state = 'running'");
    kill(a, SIGSTOP);
    pid_t b = testenv_stack_worker(&e, NULL, "wb", "b.log", 0);
    ck_assert(testenv_wait_for(
        e.db, "succeeded|2|wb", 20000,
        "SELECT concat_ws('|', r.state, r.attempt, a.worker) FROM warren.runs r "
        "JOIN warren.attempts a ON a.run_key = r.run_key AND a.attempt = r.attempt"));
    kill(a, SIGCONT);
    /* a finds its heartbeat refused, stops its handler (SIGTERM to the group) and
     * does not complete: the newer attempt's result stands. */
    ck_assert(testenv_stack_log_wait(&e, "a.log", "heartbeat refused", 10000));
    /* logged once the handler was reaped (the heartbeat line comes before
     * the signal is even sent) */
    ck_assert(
        testenv_stack_log_wait(&e, "a.log", "handler stopped after the lease was lost", 10000));
    char *pidf = testenv_fmt("%s/slow.pid", e.dir);
    char *pidt = testenv_read_file_or_empty(pidf);
    ck_assert_int_gt(atoi(pidt), 0);
    ck_assert_msg(!testenv_pid_alive(atoi(pidt)), "the stale handler %s still runs", pidt);
    free(pidt);
    free(pidf);
    ck_assert(testenv_wait_for(e.db, "succeeded|2", 1000,
                               "SELECT state || '|' || attempt FROM warren.runs"));
    ck_assert(
        testenv_wait_for(e.db, "1|2", 1000, "SELECT count(*) || '|' || max(attempt) FROM sink"));
    ck_assert(
        testenv_wait_for(e.db, "1|lease_lost,2|succeeded", 1000,
                         "SELECT string_agg(attempt || '|' || outcome, ',' ORDER BY attempt) FROM "
                         "warren.attempts"));
    ck_assert(testenv_wait_for(e.db, "1", 0, "SELECT count(*) FROM held"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", "SELECT run_key FROM held");
    assert_one_execution_per_attempt(&e);
    kill(a, SIGTERM);
    kill(b, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    ck_assert_int_eq(testenv_wait_exit(b, 10000), 0);
    unsetenv("SLOW");
    testenv_stack_free(&e);
}
END_TEST

/* cancel_previous: a newer run revokes the older run's lease; the worker
 * holding the older one sees its heartbeat refused, stops the handler and
 * does not complete it. */
START_TEST(test_worker_stops_a_handler_whose_run_was_cancelled_by_a_newer_run)
{
    env e;
    env_setup(&e,
              "{ name = \"cp\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qcp\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
              "  overlap = \"cancel_previous\"; lease = \"3s\"; }",
              NULL, 5);
    free(install_handler(&e));
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "cp", 1, 20);
    char *old = first_key(&e, "cp");
    setenv("SLOW_KEY", old, 1); /* the older run's handler hangs; the worker inherits this */
    free(old);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a2.log", 0);
    ck_assert(testenv_wait_for(e.db, "running", 15000,
                               "SELECT state FROM warren.runs ORDER BY scheduled_at LIMIT 1"));
    ck_assert(testenv_wait_for(e.db, "1", 5000, "SELECT count(*) FROM execs"));
    add_runs(&e, "cp", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "cancelled,succeeded", 15000,
                         "SELECT string_agg(state, ',' ORDER BY scheduled_at) FROM warren.runs"));
    /* a heartbeat of the old run is due within a third of the lease (1 s) */
    ck_assert(testenv_stack_log_wait(&e, "a2.log", "heartbeat refused", 10000));
    /* logged once the handler was reaped (the heartbeat line comes before
     * the signal is even sent) */
    ck_assert(
        testenv_stack_log_wait(&e, "a2.log", "handler stopped after the lease was lost", 10000));
    char *pidf = testenv_fmt("%s/slow.pid", e.dir);
    char *pidt = testenv_read_file_or_empty(pidf);
    ck_assert_int_gt(atoi(pidt), 0);
    ck_assert_msg(!testenv_pid_alive(atoi(pidt)), "the cancelled handler %s still runs", pidt);
    free(pidt);
    free(pidf);
    ck_assert(
        testenv_wait_for(e.db, "cancelled|succeeded", 1000,
                         "SELECT string_agg(outcome, '|' ORDER BY run_key) FROM warren.attempts"));
    ck_assert(testenv_wait_for(e.db, "1", 1000, "SELECT count(*) FROM sink"));
    /* each run executed once: the cancelled one was stopped, not run again */
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    unsetenv("SLOW_KEY");
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ retries, dead, replay */

/* Reads one message from warren.dead (on the env's vhost): its body and a header. */
static int get_dead(env *e, char **body, const char *hdr, char **hval)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    warren_delivery d;
    int got = 0;
    ck_assert_int_eq(warren_broker_open(e->amqp, NULL, &b, &err), 0);
    ck_assert_int_eq(warren_broker_qos(b, 1, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, WARREN_DEAD_QUEUE, &err), 0);
    ck_assert_int_eq(warren_broker_next(b, 10000, &d, &got, &err), 0);
    if (got) {
        *body = strdup(d.body);
        const char *v = hdr ? warren_delivery_header(&d, hdr) : NULL;
        if (hval != NULL)
            *hval = v ? strdup(v) : NULL;
        warren_broker_ack(b, d.tag, &err);
        warren_delivery_clear(&d);
    }
    warren_broker_free(b);
    return got;
}

START_TEST(test_worker_retries_until_success_then_until_dead_and_replay)
{
    env e;
    env_setup(&e,
              "{ name = \"ok3\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qr\";"
              "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
              "  retry = { max_attempts = 5; base = \"50ms\"; cap = \"200ms\"; }; },"
              "{ name = \"die\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qr\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"echo boom $WARREN_ATTEMPT >&2; "
              "test -e \\\"$MARK_DIR/fixed\\\" || { $MARK_DIR/log-exec die; exit 3; }; "
              "$MARK_DIR/handler.sh\"]; };"
              "  retry = { max_attempts = 3; base = \"50ms\"; cap = \"200ms\"; }; }",
              NULL, 5);
    free(install_handler(&e));
    setenv("CODE_1", "75", 1);
    setenv("CODE_2", "1", 1);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "ok3", 1, 5);
    add_runs(&e, "die", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "succeeded|3", 20000,
                         "SELECT state || '|' || attempt FROM warren.runs WHERE job = 'ok3'"));
    ck_assert(
        testenv_wait_for(e.db, "retry,retry,succeeded", 1000,
                         "SELECT string_agg(outcome, ',' ORDER BY attempt) FROM warren.attempts "
                         "WHERE run_key LIKE 'ok3@%'"));
    ck_assert(
        testenv_wait_for(e.db, "1", 1000, "SELECT count(*) FROM sink WHERE run_key LIKE 'ok3@%'"));
    /* die: three attempts exit 3, then dead with a dead letter in warren.dead. */
    ck_assert(
        testenv_wait_for(e.db, "dead|3", 20000,
                         "SELECT state || '|' || attempt FROM warren.runs WHERE job = 'die'"));
    char *key = first_key(&e, "die");
    ck_assert(testenv_wait_for(e.db, "0", 10000, "SELECT count(*) FROM warren.outbox"));
    char *body = NULL, *herr = NULL;
    ck_assert(get_dead(&e, &body, "x-warren-error", &herr));
    ck_assert_ptr_nonnull(strstr(body, key));
    ck_assert_ptr_nonnull(strstr(body, "\"attempts\":3"));
    ck_assert_ptr_nonnull(strstr(body, "exit status 3: boom 3"));
    ck_assert_ptr_nonnull(herr);
    ck_assert_ptr_nonnull(strstr(herr, "exit status 3"));
    free(body);
    free(herr);
    /* Replay after the fix: same run key, history kept, a fresh budget. */
    char *fixed = testenv_fmt("%s/fixed", e.dir);
    testenv_write_file(fixed, "", 0644);
    free(fixed);
    unsetenv("CODE_1");
    unsetenv("CODE_2");
    char *cmd = testenv_fmt("%s replay -c %s %s >/dev/null", WARREN_BINARY, e.cfg_path, key);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    cmd = testenv_fmt("%s replay -c %s %s 2>/dev/null >/dev/null", WARREN_BINARY, e.cfg_path, key);
    ck_assert_int_ne(system(cmd), 0); /* not dead any more */
    free(cmd);
    ck_assert(
        testenv_wait_for(e.db, "succeeded|4", 20000,
                         "SELECT state || '|' || attempt FROM warren.runs WHERE job = 'die'"));
    ck_assert(
        testenv_wait_for(e.db, "retry,retry,retry,succeeded", 1000,
                         "SELECT string_agg(outcome, ',' ORDER BY attempt) FROM warren.attempts "
                         "WHERE run_key LIKE 'die@%'"));
    ck_assert(
        testenv_wait_for(e.db, "1", 1000, "SELECT count(*) FROM sink WHERE run_key LIKE 'die@%'"));
    assert_one_execution_per_attempt(&e);
    /* show prints the history. */
    cmd = testenv_fmt("%s show -c %s %s > %s/show.log", WARREN_BINARY, e.cfg_path, key, e.dir);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    ck_assert(testenv_stack_log_wait(&e, "show.log", "replayed at", 0));
    ck_assert(testenv_stack_log_wait(&e, "show.log", "#3 wa", 0));
    ck_assert(testenv_stack_log_wait(&e, "show.log", "exit status 3: boom 3", 0));
    free(key);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    testenv_stack_free(&e);
}
END_TEST

/* A retry due before the planner's next tick is not late by that tick: the
 * failed completion wakes the planner (NOTIFY), whose relay publishes the
 * retry to its delay queue at once. The tick here is 30 s, so without the
 * wake-up attempt 2 would start about 30 s after attempt 1. */
START_TEST(test_worker_retry_wakes_the_relay_before_its_tick)
{
    env e;
    env_setup_planner(&e, "tick = \"30s\"; reconcile_grace = \"60s\"; horizon = \"60s\";",
                      "{ name = \"again\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qw\";"
                      "  handler = { exec = \"exec \\\"$MARK_DIR/handler.sh\\\"\"; shell = true; };"
                      "  retry = { max_attempts = 3; base = \"500ms\"; cap = \"1s\"; }; }",
                      NULL, 5);
    free(install_handler(&e));
    setenv("CODE_1", "75", 1);
    unsetenv("CODE_2");
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "again", 1, 5); /* its NOTIFY wakes the planner for attempt 1 */
    ck_assert(
        testenv_wait_for(e.db, "succeeded|2", 10000,
                         "SELECT state || '|' || attempt FROM warren.runs WHERE job = 'again'"));
    assert_one_execution_per_attempt(&e);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 15000), 0);
    testenv_stack_free(&e);
}
END_TEST

START_TEST(test_worker_timeout_kills_the_process_group_and_retries)
{
    env e;
    env_setup(
        &e,
        "{ name = \"to\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qt\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec to; sleep 30 & echo $! > "
        "$MARK_DIR/child.pid; wait\"]; };"
        "  timeout = \"500ms\"; retry = { max_attempts = 1; }; }",
        NULL, 5);
    setenv("MARK_DIR", e.dir, 1);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "to", 1, 5);
    ck_assert(testenv_wait_for(e.db, "dead", 15000, "SELECT state FROM warren.runs"));
    ck_assert(testenv_wait_for(
        e.db, "t", 1000, "SELECT last_error LIKE 'timed out after 500 ms%' FROM warren.runs"));
    /* The grandchild (sleep 30) was in the handler's process group: gone too. */
    char *pidf = testenv_fmt("%s/child.pid", e.dir);
    char *pidt = testenv_read_file_or_empty(pidf);
    ck_assert_int_gt(atoi(pidt), 0);
    /* killed with the group when the run was recorded; give a loaded
     * machine up to 5 s to reap it */
    for (int i = 0; i < 100 && testenv_pid_alive(atoi(pidt)); i++)
        testenv_sleep_ms(50);
    ck_assert_msg(!testenv_pid_alive(atoi(pidt)), "grandchild %s survived the timeout", pidt);
    free(pidt);
    free(pidf);
    assert_one_execution_per_attempt(&e);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    testenv_stack_free(&e);
}
END_TEST

START_TEST(test_worker_sigterm_lets_handlers_finish_then_stops_the_rest)
{
    env e;
    env_setup(
        &e,
        "{ name = \"quick\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qg\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec quick; sleep 1\"]; }; },"
        "{ name = \"long\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qg\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec long; sleep 60\"]; }; }",
        "concurrency = 4; shutdown_grace = \"2s\"; heartbeat_margin = \"1s\";", 5);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "quick", 1, 5);
    add_runs(&e, "long", 1, 5);
    ck_assert(testenv_wait_for(e.db, "2", 15000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'running'"));
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 15000), 0);
    ck_assert(testenv_wait_for(e.db, "succeeded", 1000,
                               "SELECT state FROM warren.runs WHERE job = 'quick'"));
    /* Stopped after the grace and completed as a retry (the relay may already
     * have republished it). */
    ck_assert(testenv_wait_for(
        e.db, "retry|stopped: worker wa shutting down", 1000,
        "SELECT outcome || '|' || error FROM warren.attempts WHERE run_key LIKE 'long@%'"));
    assert_one_execution_per_attempt(&e);
    testenv_stack_free(&e);
}
END_TEST

/* A stopping worker stops consuming: a run released during its grace goes to
 * another worker at once instead of waiting, unacknowledged, for the
 * stopping one to exit. */
START_TEST(test_worker_stopping_hands_new_deliveries_to_other_workers)
{
    env e;
    /* long has one attempt: killed below, it is dead, not retried. (Retried,
     * with full jitter it could come back within a second, to b, whose 40 s
     * grace then outlasted the wait for b's exit: an intermittent failure.) */
    env_setup(
        &e,
        "{ name = \"long\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qh\";"
        "  retry = { max_attempts = 1; };"
        "  handler = { exec = [\"/bin/sh\", \"-c\", "
        "\"$MARK_DIR/log-exec long; echo $$ > \\\"$MARK_DIR/long.pid\\\"; exec sleep 60\"]; }; },"
        "{ name = \"fresh\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qh\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec fresh\"]; }; }",
        "concurrency = 4; shutdown_grace = \"40s\"; heartbeat_margin = \"1s\";", 5);
    setenv("MARK_DIR", e.dir, 1);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "long", 1, 5);
    ck_assert(testenv_wait_for(e.db, "running", 15000,
                               "SELECT state FROM warren.runs WHERE job = 'long'"));
    kill(a, SIGTERM);
    ck_assert(testenv_stack_log_wait(&e, "a.log", "stopping:", 5000));
    /* Released while a is in its grace; a has three free slots. */
    add_runs(&e, "fresh", 1, 5);
    ck_assert(testenv_wait_for(e.db, "published", 5000,
                               "SELECT state FROM warren.runs WHERE job = 'fresh'"));
    /* deliberately idle: 1.5 s in which a, consuming still, would have taken it */
    testenv_sleep_ms(1500);
    pid_t b = testenv_stack_worker(&e, NULL, "wb", "b.log", 0);
    ck_assert(testenv_wait_for(e.db, "succeeded|wb", 20000,
                               "SELECT r.state || '|' || a.worker FROM warren.runs r "
                               "JOIN warren.attempts a USING (run_key) WHERE r.job = 'fresh'"));
    ck_assert_msg(testenv_pid_alive(a),
                  "a exited before the fresh run was taken: the test proves nothing");
    /* End the long handler instead of waiting out the grace: a records it
     * (killed by a signal: its only attempt, so dead) and exits 0. */
    char *path = testenv_fmt("%s/long.pid", e.dir);
    char *pid_text = testenv_read_file_or_empty(path);
    free(path);
    ck_assert_int_gt(atoi(pid_text), 1);
    kill(atoi(pid_text), SIGKILL);
    free(pid_text);
    ck_assert_int_eq(testenv_wait_exit(a, 15000), 0);
    /* The broker never sent a the fresh run: its consumer was cancelled.
     * (Without the cancel, a gets it and gives it back over and over, each
     * time counted towards x-delivery-limit.) */
    ck_assert(testenv_stack_log_wait(&e, "a.log", "stopped (received 1, started 1,", 0));
    ck_assert(testenv_stack_log_wait(&e, "a.log", "given back 0)", 0));
    ck_assert(
        testenv_wait_for(e.db, "dead", 5000, "SELECT state FROM warren.runs WHERE job = 'long'"));
    kill(b, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(b, 15000), 0);
    assert_one_execution_per_attempt(&e);
    testenv_stack_free(&e);
}
END_TEST

START_TEST(test_worker_sql_handler_failure_rolls_back_and_retries)
{
    env e;
    worker_thread wt = {0};
    env_setup(
        &e,
        "{ name = \"sqf\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qq\";"
        "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sqf')) INSERT INTO "
        "sink (run_key, attempt) VALUES ($1, (SELECT 1 / (count(*) - 1)::int FROM gate))\"; "
        "};"
        "  retry = { max_attempts = 1000; base = \"50ms\"; cap = \"100ms\"; }; }",
        NULL, 5);
    /* Fast retries without a budget that five quick failures could use up
     * before the gate row below is in (the run would then be dead). */
    /* gate empty: 1 / (0 - 1) = -1 works... make the first attempt divide by zero. */
    testenv_exec(e.db, "CREATE TABLE gate (x int); INSERT INTO gate VALUES (0)");
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "sqf", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "t", 15000,
                         "SELECT count(*) >= 1 FROM warren.attempts WHERE outcome = 'retry' AND "
                         "error LIKE '%division by zero%'"));
    ck_assert(testenv_wait_for(e.db, "0", 1000, "SELECT count(*) FROM sink"));
    testenv_exec(e.db, "INSERT INTO gate VALUES (1)");
    ck_assert(testenv_wait_for(e.db, "succeeded", 15000, "SELECT state FROM warren.runs"));
    ck_assert(testenv_wait_for(e.db, "1", 1000, "SELECT count(*) FROM sink"));
    /* the failed attempts' executions rolled back with them: one committed */
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* An sql handler's statement holds no lock on its run (the completion comes
 * last): a claim of the job's next run is judged by the overlap policy at once
 * instead of waiting for the statement, and heartbeats keep a 2 s lease over
 * a 4 s statement. */
START_TEST(test_worker_sql_handler_holds_no_lock_while_its_statement_runs)
{
    env e;
    worker_thread wt = {0};
    env_setup(
        &e,
        "{ name = \"sl\"; at = \"2099-01-01T00:00:00Z\"; queue = \"ql\"; lease = \"2s\";"
        "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sl')) INSERT INTO "
        "sink (run_key, attempt) SELECT $1, 0 FROM pg_sleep(4)\"; };"
        "  retry = { max_attempts = 1; }; }",
        NULL, 5);
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "sl", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "1", 15000,
                         "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query "
                         "LIKE 'WITH x AS (INSERT INTO execs%INSERT INTO sink%pg_sleep(4)'"));
    /* The job's next run, claimed by hand while the statement runs: skipped
     * at once (it used to wait for the statement's transaction; lock_timeout
     * turns that wait into an error). */
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('sl', "
                       "date_trunc('second', now()), now() + interval '1 hour')");
    /* (due in an hour so that the planner leaves it alone; due now for the
     * claim, which does not take runs due more than 15 s ahead) */
    ck_assert(
        testenv_wait_for(e.db, "0", 0,
                         "UPDATE warren.runs SET due_at = now() WHERE job = 'sl' AND due_at > "
                         "now() + interval '1 minute'; SET lock_timeout = '1s'; SELECT count(*) "
                         "FROM warren.claim((SELECT run_key FROM warren.runs WHERE job = 'sl' "
                         "ORDER BY scheduled_at DESC LIMIT 1), 'other')"));
    ck_assert(
        testenv_wait_for(e.db, "skipped", 0,
                         "SELECT state FROM warren.runs WHERE job = 'sl' ORDER BY scheduled_at "
                         "DESC LIMIT 1"));
    /* The statement outlasts the lease: heartbeats kept it, one attempt. */
    ck_assert(
        testenv_wait_for(e.db, "succeeded|1|1", 15000,
                         "SELECT state || '|' || attempt || '|' || (SELECT count(*) FROM sink) "
                         "FROM warren.runs WHERE job = 'sl' ORDER BY scheduled_at LIMIT 1"));
    ck_assert(testenv_wait_for(e.db, "succeeded", 0,
                               "SELECT string_agg(outcome, ',') FROM warren.attempts"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE state = 'succeeded'", NULL);
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* An sql handler whose run is taken over (its lease ran out, another worker
 * claimed it): the next heartbeat is refused, the statement is cancelled at
 * once, and nothing of it commits. */
START_TEST(test_worker_cancels_an_sql_handler_whose_run_was_taken_over)
{
    env e;
    worker_thread wt = {0};
    env_setup(
        &e,
        "{ name = \"sx\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qx\"; lease = \"2s\";"
        "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sx')) INSERT INTO "
        "sink (run_key, attempt) SELECT $1, 0 FROM pg_sleep(30)\"; }; }",
        NULL, 5);
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "sx", 1, 5);
    const char *active = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
                         "query LIKE 'WITH x AS (INSERT INTO execs%pg_sleep(30)' AND pid <> "
                         "pg_backend_pid()";
    ck_assert(testenv_wait_for(e.db, "1", 15000, active));
    ck_assert(
        testenv_wait_for(e.db, "2", 0,
                         "SET lock_timeout = '1s'; UPDATE warren.runs SET lease_until = now() - "
                         "interval '1 second'; SELECT attempt FROM warren.claim((SELECT run_key "
                         "FROM warren.runs), 'thief')"));
    /* the thief's lease outlasts the test (its 2 s would let the reconciler
     * reap it while the worker still notices the take-over) */
    testenv_exec(e.db, "UPDATE warren.runs SET lease_until = now() + interval '1 hour'");
    int64_t t0 = testenv_mono_ms();
    ck_assert(testenv_wait_for(e.db, "0", 5000, active));
    fprintf(stderr, "sql handler cancelled %lld ms after the take-over\n",
            (long long)(testenv_mono_ms() - t0));
    ck_assert(
        testenv_wait_for(e.db, "running|2|thief|0", 0,
                         "SELECT concat_ws('|', state, attempt, lease_owner, (SELECT count(*) FROM "
                         "sink)) FROM warren.runs"));
    worker_thread_join(&wt);
    ck_assert(testenv_wait_for(e.db, "0", 0, "SELECT count(*) FROM sink"));
    /* nothing of the cancelled statement committed, its execution log either */
    assert_executions_of(&e, "SELECT NULL::text WHERE false", NULL);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ sql handler batches */

/* Runs of job sb claimed by hand as worker "w" (attempt 1): keys[0..n). */
static void claim_by_hand(env *e, int n, char keys[][WARREN_RUN_KEY_MAX])
{
    add_runs(e, "sb", n, 5);
    for (int i = 0; i < n; i++) {
        char *k = testenv_sql1f(e->db,
                                "SELECT run_key FROM warren.runs WHERE job = 'sb' ORDER BY "
                                "scheduled_at OFFSET %d LIMIT 1",
                                i);
        ck_assert_ptr_nonnull(k);
        snprintf(keys[i], WARREN_RUN_KEY_MAX, "%s", k);
        free(k);
        ck_assert(testenv_wait_forf(e->db, "1", 0, "SELECT attempt FROM warren.claim('%s', 'w')",
                                    keys[i]));
    }
}

/* Five sql runs in one batch transaction: run 1's statement fails (division
 * by zero), run 2 was taken over by another worker (its attempt is stale),
 * run 3's lease was lost before it started; runs 0 and 4 commit, once, in
 * one transaction (one xmin), and nothing of the other three does. The
 * execution log (no unique key) shows every statement that committed: each
 * of runs 0 and 4 once, although the batch ran its statements again after
 * finding run 2 stale. */
START_TEST(test_worker_sql_batch_rolls_back_only_the_failing_and_stale_runs)
{
    env e;
    warren_error err = {0};
    warren_store *st = NULL;
    char keys[5][WARREN_RUN_KEY_MAX];
    /* who = the top-level transaction (txid_current() inside a savepoint;
     * xmin would be the savepoint's own subtransaction) */
    const char *sql = "WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sb')) INSERT INTO sink "
                      "(run_key, attempt, who) SELECT $1, 1 / (SELECT count(*) FROM ok WHERE k = "
                      "$1)::int, txid_current()::text";
    env_setup(&e,
              "{ name = \"sb\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qsb\"; overlap = "
              "\"allow\"; }",
              NULL, 5);
    testenv_exec(e.db, "CREATE TABLE ok (k text)");
    claim_by_hand(&e, 5, keys);
    for (int i = 0; i < 5; i++)
        if (i != 1)
            ck_assert(
                testenv_wait_forf(e.db, "1", 0, "INSERT INTO ok VALUES ('%s'); SELECT 1", keys[i]));
    /* run 2 taken over: its lease ran out and "thief" claimed it (attempt 2) */
    ck_assert(
        testenv_wait_forf(e.db, "2", 0,
                          "UPDATE warren.runs SET lease_until = now() - interval '1 second' WHERE "
                          "run_key = '%s'; SELECT attempt FROM warren.claim('%s', 'thief')",
                          keys[2], keys[2]));
    atomic_int lost[5];
    warren_sql_run runs[5];
    for (int i = 0; i < 5; i++) {
        atomic_init(&lost[i], i == 3);
        runs[i] = (warren_sql_run){.run_key = keys[i],
                                   .attempt = 1,
                                   .scheduled_at = 0,
                                   .payload_json = "{}",
                                   .sql = sql,
                                   .timeout_ms = 10000,
                                   .tag = NULL,
                                   .lost = &lost[i]};
    }
    ck_assert_int_eq(warren_store_open(e.db, NULL, &st, &err), 0);
    ck_assert_msg(warren_store_complete_sql_batch(st, runs, 5, &err) == 0, "batch: %s",
                  err.message);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(runs[i].done, 1);
    ck_assert_int_eq(runs[0].recorded, 1);
    ck_assert_int_eq(runs[1].recorded, 0);
    ck_assert_ptr_nonnull(runs[1].stmt_error);
    ck_assert_msg(strstr(runs[1].stmt_error, "division by zero") != NULL, "%s", runs[1].stmt_error);
    ck_assert_int_eq(runs[2].recorded, 0);
    ck_assert_ptr_null(runs[2].stmt_error);
    ck_assert_int_eq(runs[3].recorded, 0);
    ck_assert_int_eq(runs[4].recorded, 1);
    free(runs[1].stmt_error);
    /* the effects of runs 0 and 4 only, committed together */
    char want[3 * WARREN_RUN_KEY_MAX];
    snprintf(want, sizeof(want), "%s,%s|1", keys[0], keys[4]);
    ck_assert(testenv_wait_for(
        e.db, want, 0,
        "SELECT string_agg(run_key, ',' ORDER BY run_key) || '|' || count(DISTINCT "
        "who) FROM sink"));
    snprintf(want, sizeof(want), "%s,%s", keys[0], keys[4]);
    ck_assert(testenv_wait_for(e.db, want, 0,
                               "SELECT string_agg(run_key, ',' ORDER BY run_key) FROM execs"));
    /* recorded succeeded: 0 and 4; 1 and 3 still running as attempt 1 (the
     * caller completes 1 as a retry; 3 is left to its lease); 2 under the
     * thief's attempt 2 */
    ck_assert(
        testenv_wait_for(e.db, "succeeded:1,running:1,running:2,running:1,succeeded:1", 0,
                         "SELECT string_agg(state || ':' || attempt, ',' ORDER BY scheduled_at) "
                         "FROM warren.runs WHERE job = 'sb'"));
    warren_store_free(st);
    testenv_stack_free(&e);
}
END_TEST

/* A database with job sb and n of its runs claimed by hand (keys[0..n)). */
static void batch_env(env *e, int n, char keys[][WARREN_RUN_KEY_MAX])
{
    env_setup(e,
              "{ name = \"sb\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qsb\"; overlap = "
              "\"allow\"; }",
              NULL, n);
    claim_by_hand(e, n, keys);
}

/* runs[0..n) of keys[0..n), attempt 1, each with statement sql. */
static void batch_runs(warren_sql_run *runs, char keys[][WARREN_RUN_KEY_MAX], int n,
                       const char *sql, int64_t timeout_ms)
{
    for (int i = 0; i < n; i++)
        runs[i] = (warren_sql_run){.run_key = keys[i],
                                   .attempt = 1,
                                   .payload_json = "{}",
                                   .sql = sql,
                                   .timeout_ms = timeout_ms};
}

/* The common batch goes as one pipeline without savepoints: three runs
 * whose statements succeed commit in one transaction with no subtransaction
 * (their rows share one xmin; a savepoint each would give each row its own).
 * Then a batch whose run 1 fails: that statement ran once (its sequence,
 * which no rollback undoes, was advanced once), its error is its run's, and
 * the others' effects committed once each, together, although their
 * statements ran a second time after the failure rolled the first try back. */
START_TEST(test_worker_sql_batch_pipelined_runs_a_failing_statement_once)
{
    env e;
    warren_error err = {0};
    warren_store *st = NULL;
    char keys[6][WARREN_RUN_KEY_MAX];
    const char *sql = "WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sb')) "
                      "SELECT nextval((SELECT s FROM seqs WHERE k = $1)), "
                      "1 / (SELECT count(*) FROM ok WHERE k = $1)::int";
    batch_env(&e, 6, keys);
    testenv_exec(e.db, "CREATE TABLE ok (k text); CREATE TABLE seqs (k text, s regclass)");
    for (int i = 0; i < 6; i++)
        ck_assert(
            testenv_wait_forf(e.db, "1", 0,
                              "CREATE SEQUENCE seq%d; INSERT INTO seqs VALUES ('%s', 'seq%d');"
                              "INSERT INTO ok SELECT '%s' WHERE %d <> 4; SELECT 1",
                              i, keys[i], i, keys[i], i));
    warren_sql_run runs[6];
    batch_runs(runs, keys, 6, sql, 10000);
    ck_assert_int_eq(warren_store_open(e.db, NULL, &st, &err), 0);
    ck_assert_msg(warren_store_complete_sql_batch(st, runs, 3, &err) == 0, "batch: %s",
                  err.message);
    for (int i = 0; i < 3; i++)
        ck_assert(runs[i].done && runs[i].recorded && runs[i].stmt_error == NULL);
    ck_assert(testenv_wait_for(e.db, "3|1", 0,
                               "SELECT count(*) || '|' || count(DISTINCT xmin::text) FROM execs"));

    ck_assert_msg(warren_store_complete_sql_batch(st, runs + 3, 3, &err) == 0, "batch: %s",
                  err.message);
    ck_assert(runs[3].done && runs[3].recorded && runs[5].done && runs[5].recorded);
    ck_assert(runs[4].done && !runs[4].recorded);
    ck_assert_ptr_nonnull(runs[4].stmt_error);
    ck_assert_msg(strstr(runs[4].stmt_error, "division by zero") != NULL, "%s", runs[4].stmt_error);
    free(runs[4].stmt_error);
    ck_assert(testenv_wait_for(
        e.db, "1,1,1,2,1,1", 0,
        "SELECT string_agg(coalesce(last_value, 0)::text, ',' ORDER BY sequencename) "
        "FROM pg_sequences WHERE sequencename ~ '^seq[0-9]$'"));
    char want[4 * WARREN_RUN_KEY_MAX];
    snprintf(want, sizeof(want), "%s,%s|1", keys[3], keys[5]);
    ck_assert(testenv_wait_forf(
        e.db, want, 0,
        "SELECT string_agg(run_key, ',' ORDER BY run_key) || '|' || "
        "count(DISTINCT xmin::text) FROM execs WHERE run_key IN ('%s', '%s', '%s')",
        keys[3], keys[4], keys[5]));
    ck_assert(
        testenv_wait_for(e.db, "succeeded:5,running:1", 0,
                         "SELECT string_agg(state || ':' || n, ',' ORDER BY state DESC) FROM "
                         "(SELECT state, count(*) n FROM warren.runs WHERE job = 'sb' GROUP BY "
                         "state) s"));
    warren_store_free(st);
    testenv_stack_free(&e);
}
END_TEST

/* A batch of the two runs of keys with statement sql: run 0 commits, alone
 * (the execution log holds only it), run 1 fails with an error naming
 * want_err, and the connection stays usable. Returns the batch's ms. */
static int64_t batch_second_fails(env *e, char keys[][WARREN_RUN_KEY_MAX], const char *sql,
                                  int64_t timeout_ms, const char *want_err)
{
    warren_error err = {0};
    warren_store *st = NULL;
    warren_sql_run runs[2];
    batch_runs(runs, keys, 2, sql, timeout_ms);
    ck_assert_int_eq(warren_store_open(e->db, NULL, &st, &err), 0);
    int64_t t0 = testenv_mono_ms();
    ck_assert_msg(warren_store_complete_sql_batch(st, runs, 2, &err) == 0, "batch: %s",
                  err.message);
    int64_t took = testenv_mono_ms() - t0;
    ck_assert(runs[0].done && runs[0].recorded && runs[0].stmt_error == NULL);
    ck_assert(runs[1].done && !runs[1].recorded);
    ck_assert_ptr_nonnull(runs[1].stmt_error);
    ck_assert_msg(strstr(runs[1].stmt_error, want_err) != NULL, "%s", runs[1].stmt_error);
    free(runs[1].stmt_error);
    ck_assert(warren_store_connected(st));
    ck_assert(testenv_wait_for(e->db, keys[0], 0, "SELECT string_agg(run_key, ',') FROM execs"));
    warren_store_free(st);
    return took;
}

/* Each run's timeout holds inside the pipeline: the settings of a run take
 * effect for its own statement (statement_timeout is armed per statement of
 * the extended protocol), so a statement of 60 s under a timeout of 300 ms
 * is cancelled, and that is its run's error; the run batched with it
 * commits. (The bound of 30 s tells a cancelled statement from one that ran
 * its whole minute on any machine.) */
START_TEST(test_worker_sql_batch_pipelined_keeps_each_runs_timeout)
{
    env e;
    char keys[2][WARREN_RUN_KEY_MAX];
    batch_env(&e, 2, keys);
    char *sql = testenv_fmt("WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sb')) SELECT "
                            "pg_sleep(CASE WHEN $1 = '%s' THEN 60 ELSE 0 END)",
                            keys[1]);
    int64_t took = batch_second_fails(&e, keys, sql, 300, "statement timeout");
    ck_assert_msg(took < 30000, "the 60 s statement ran %lld ms", (long long)took);
    free(sql);
    testenv_stack_free(&e);
}
END_TEST

/* A statement that fails with a connection error of its own (SQLSTATE
 * 08001, as dblink or postgres_fdw report a remote server they cannot
 * reach) on a connection that is fine is its run's error, not a lost
 * connection: the batch returns 0, the other run commits. */
START_TEST(test_worker_sql_batch_remote_connection_error_is_the_runs)
{
    env e;
    char keys[2][WARREN_RUN_KEY_MAX];
    batch_env(&e, 2, keys);
    char *fn = testenv_fmt("CREATE FUNCTION remote(k text) RETURNS int LANGUAGE plpgsql AS $$ "
                           "BEGIN IF k = '%s' THEN RAISE EXCEPTION 'could not connect to the "
                           "remote server' USING ERRCODE = '08001'; END IF; RETURN 1; END $$",
                           keys[1]);
    testenv_exec(e.db, fn);
    free(fn);
    batch_second_fails(&e, keys,
                       "WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sb')) SELECT remote($1)",
                       10000, "08001");
    testenv_stack_free(&e);
}
END_TEST

/* A batch whose COMMIT fails (a deferred foreign key of one run) commits
 * nothing and reports no run done; the worker then runs them one by one:
 * the good runs succeed once, the bad one fails with its own error. */
START_TEST(test_worker_sql_batch_whose_commit_fails_is_run_one_by_one)
{
    env e;
    warren_error err = {0};
    warren_store *st = NULL;
    char keys[3][WARREN_RUN_KEY_MAX];
    env_setup(&e,
              "{ name = \"sb\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qsb\"; overlap = "
              "\"allow\"; }",
              NULL, 5);
    testenv_exec(e.db,
                 "CREATE TABLE parent (id int PRIMARY KEY);"
                 "CREATE TABLE child (ref int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)");
    claim_by_hand(&e, 3, keys);
    /* run 1 inserts a child without a parent: only its COMMIT fails */
    char *sql = testenv_fmt("WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sb')) INSERT INTO child "
                            "SELECT 42 WHERE $1 = '%s'",
                            keys[1]);
    warren_sql_run runs[3];
    for (int i = 0; i < 3; i++)
        runs[i] = (warren_sql_run){.run_key = keys[i],
                                   .attempt = 1,
                                   .payload_json = "{}",
                                   .sql = sql,
                                   .timeout_ms = 10000};
    ck_assert_int_eq(warren_store_open(e.db, NULL, &st, &err), 0);
    int rc = warren_store_complete_sql_batch(st, runs, 3, &err);
    ck_assert_msg(rc != 0 && rc != WARREN_EDBCONN, "rc %d: %s", rc, err.message);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(runs[i].done, 0);
    ck_assert(
        testenv_wait_for(e.db, "0|0|3", 0,
                         "SELECT (SELECT count(*) FROM execs) || '|' || (SELECT count(*) FROM "
                         "child) || '|' || (SELECT count(*) FROM warren.runs WHERE state = "
                         "'running')"));
    warren_store_free(st);
    testenv_stack_free(&e);
    free(sql);

    /* Through the worker: 8 runs of a good job and one of the bad, one queue,
     * sql_batch 16: they arrive together and share batches. */
    env_setup(
        &e,
        "{ name = \"good\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qsb\"; overlap = \"allow\";"
        "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'good')) INSERT "
        "INTO sink (run_key, attempt) VALUES ($1, 0)\"; }; },"
        "{ name = \"bad\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qsb\";"
        "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'bad')) INSERT "
        "INTO child VALUES (42)\"; }; retry = { max_attempts = 1; }; }",
        "concurrency = 16; sql_batch = 16; shutdown_grace = \"3s\"; heartbeat_margin = "
        "\"1500ms\";",
        5);
    testenv_exec(e.db,
                 "CREATE TABLE parent (id int PRIMARY KEY);"
                 "CREATE TABLE child (ref int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)");
    worker_thread wt = {0};
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    /* the runs first, then the planner: they are published together */
    add_runs(&e, "good", 8, 5);
    add_runs(&e, "bad", 1, 5);
    testenv_stack_planner_start(&e, &test_logger);
    ck_assert(testenv_wait_for(e.db, "8", 15000,
                               "SELECT count(*) FROM warren.runs WHERE job = 'good' AND state = "
                               "'succeeded'"));
    ck_assert(testenv_wait_for(e.db, "dead|true", 15000,
                               "SELECT state || '|' || (last_error LIKE '%foreign key%') FROM "
                               "warren.runs WHERE job = 'bad'"));
    ck_assert(testenv_wait_for(
        e.db, "8|0", 0,
        "SELECT (SELECT count(*) FROM sink) || '|' || (SELECT count(*) FROM child)"));
    /* each good run's statement committed once; the bad one's never */
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE job = 'good'", NULL);
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* Each statement's own time on the server (warren_sql_run.stmt_us, the
 * server's clock before and after it): the run that sleeps 1 s measures at
 * least 1 s, the two quick ones less (they are what the worker's batches
 * are formed by: a statement measured slow runs alone). */
START_TEST(test_worker_sql_batch_measures_each_statement)
{
    env e;
    warren_error err = {0};
    warren_store *st = NULL;
    char keys[3][WARREN_RUN_KEY_MAX];
    batch_env(&e, 3, keys);
    char *sql = testenv_fmt("WITH x AS (INSERT INTO execs VALUES ($1, 0, 'sb')) SELECT "
                            "pg_sleep(CASE WHEN $1 = '%s' THEN 1 ELSE 0 END)",
                            keys[1]);
    warren_sql_run runs[3];
    batch_runs(runs, keys, 3, sql, 10000);
    ck_assert_int_eq(warren_store_open(e.db, NULL, &st, &err), 0);
    ck_assert_msg(warren_store_complete_sql_batch(st, runs, 3, &err) == 0, "batch: %s",
                  err.message);
    for (int i = 0; i < 3; i++)
        ck_assert(runs[i].done && runs[i].recorded && runs[i].stmt_error == NULL);
    ck_assert_msg(runs[1].stmt_us >= 1000000, "slow: %lld us", (long long)runs[1].stmt_us);
    ck_assert_msg(runs[0].stmt_us >= 0 && runs[0].stmt_us < 1000000, "quick: %lld us",
                  (long long)runs[0].stmt_us);
    ck_assert_msg(runs[2].stmt_us >= 0 && runs[2].stmt_us < 1000000, "quick: %lld us",
                  (long long)runs[2].stmt_us);
    ck_assert(testenv_wait_for(e.db, "3|1", 0,
                               "SELECT count(*) || '|' || count(DISTINCT xmin::text) FROM execs"));
    warren_store_free(st);
    free(sql);
    testenv_stack_free(&e);
}
END_TEST

/* Inserts n planned runs of job due 2 s from now (released ahead, planner.
 * release_lead, and so claimed together at their due time) and wakes the
 * planner. */
static void add_runs_due_soon(env *e, const char *job, int n, int base_offset_s)
{
    char *sql = testenv_fmt(
        "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) "
        "SELECT '%s', date_trunc('second', now()) - make_interval(secs => %d + g), "
        "now() + interval '2 s', 'trigger' FROM generate_series(1, %d) g; NOTIFY warren_jobs",
        job, base_offset_s, n);
    testenv_exec(e->db, sql);
    free(sql);
}

/* The worker's sql batches by its statements' measured times (default
 * worker.sql_batch): 16 runs of a quick statement due together commit in
 * one transaction (the claim batch is queued whole before a handler thread
 * takes any of it), while six runs of a statement measured at 1 s, due
 * together, run in six transactions, side by side, instead of one after
 * another in one. Each run's statement committed exactly once (the
 * execution log has no unique key). A first wave of each measures them. */
START_TEST(test_worker_sql_batches_fill_with_quick_statements_and_keep_slow_ones_apart)
{
    env e;
    worker_thread wt = {0};
    env_setup(&e,
              "{ name = \"quick\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qf\"; overlap = "
              "\"allow\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, "
              "txid_current()::text)) SELECT 1\"; }; },"
              "{ name = \"slow\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qf\"; overlap = "
              "\"allow\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, "
              "txid_current()::text)) SELECT pg_sleep(1)\"; }; }",
              "concurrency = 16; shutdown_grace = \"3s\"; heartbeat_margin = \"1500ms\";", 5);
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    /* the first waves: each statement measured */
    add_runs_due_soon(&e, "quick", 16, 5);
    add_runs_due_soon(&e, "slow", 1, 5);
    ck_assert(testenv_wait_for(e.db, "17", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    testenv_exec(e.db, "CREATE TABLE first_wave AS SELECT run_key FROM warren.runs");
    add_runs_due_soon(&e, "quick", 16, 100);
    ck_assert(testenv_wait_for(e.db, "33", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    ck_assert(
        testenv_wait_for(e.db, "16|1", 0,
                         "SELECT count(*) || '|' || count(DISTINCT who) FROM execs WHERE run_key "
                         "NOT IN (SELECT run_key FROM first_wave)"));
    testenv_exec(
        e.db, "INSERT INTO first_wave SELECT run_key FROM warren.runs EXCEPT SELECT run_key FROM "
              "first_wave");
    add_runs_due_soon(&e, "slow", 6, 100);
    ck_assert(testenv_wait_for(e.db, "39", 30000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    ck_assert(
        testenv_wait_for(e.db, "6|6", 0,
                         "SELECT count(*) || '|' || count(DISTINCT who) FROM execs WHERE run_key "
                         "NOT IN (SELECT run_key FROM first_wave)"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* 200 sql runs through two workers of 8 slots in batches of 4: every run
 * succeeded, and its statement committed exactly once (the execution log
 * has no unique key). Also: a worker closes only the descriptors it
 * opened. Its slots once began zeroed, and resetting them closed descriptor
 * 0 (an unset output pipe): the next descriptor opened took 0, and the next
 * worker's reset closed that too. With two workers in one process, as here, a handler
 * thread's wake-up byte then went down a PostgreSQL connection ("invalid
 * frontend message type 1") and a later write raised SIGPIPE. Descriptor 0
 * is a pipe of the test's: after both workers ran and stopped it still is. */
START_TEST(test_worker_sql_batches_run_every_statement_once)
{
    env e;
    worker_thread a = {0}, b = {0};
    int p[2], saved = dup(0);
    struct stat before, after;
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(dup2(p[0], 0), 0);
    ck_assert_int_eq(fstat(0, &before), 0);
    env_setup(&e,
              "{ name = \"many\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qm\"; overlap = "
              "\"allow\";"
              "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'many')) INSERT "
              "INTO sink (run_key, attempt, who) VALUES ($1, 0, txid_current()::text)\"; }; }",
              "concurrency = 8; sql_batch = 4; shutdown_grace = \"3s\"; heartbeat_margin = "
              "\"1500ms\";",
              5);
    worker_thread_start(&e, &a, NULL, NULL, NULL);
    worker_thread_start(&e, &b, NULL, NULL, NULL);
    /* the runs first, then the planner: they are published together */
    add_runs(&e, "many", 200, 5);
    testenv_stack_planner_start(&e, &test_logger);
    ck_assert(testenv_wait_for(e.db, "200", 60000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    /* some statements shared a transaction (else this tests nothing new) */
    ck_assert(testenv_wait_for(e.db, "t", 0, "SELECT count(DISTINCT who) < 200 FROM sink"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    ck_assert(testenv_wait_for(e.db, "200", 0, "SELECT count(*) " SQL_ATTEMPTS_GIVEN));
    worker_thread_join(&a);
    worker_thread_join(&b);
    warren_worker_free(a.w);
    warren_worker_free(b.w);
    testenv_stack_free(&e);
    ck_assert_msg(fstat(0, &after) == 0, "descriptor 0 was closed: %s", strerror(errno));
    ck_assert_msg(after.st_dev == before.st_dev && after.st_ino == before.st_ino,
                  "descriptor 0 is no longer the test's pipe (closed and reused)");
    dup2(saved, 0);
    close(saved);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* worker.sql_take (default on): the sql runs of an uncapped allow job whose
 * statement was measured quick are claimed, run and completed by their pool
 * thread in one transaction (warren.take_many, the statement,
 * warren.finish_many, one COMMIT). A first wave of 4 measures the statement
 * (claimed: not measured yet); then 40 runs due together each succeeded as
 * attempt 1 with one attempt row, started no earlier than due, its statement
 * committed exactly once (the execution log has no unique key) and in the
 * transaction that wrote the run's final row (its xmin); the worker counted
 * at least those 40 taken. */
START_TEST(test_worker_sql_take_claims_runs_and_completes_in_the_effects_transaction)
{
    env e;
    worker_thread wt = {0};
    warren_worker_stats ws;
    env_setup(&e,
              "{ name = \"tk\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qtk\"; overlap = "
              "\"allow\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, "
              "txid_current()::text)) SELECT 1\"; }; }",
              "concurrency = 16; shutdown_grace = \"3s\"; heartbeat_margin = \"1500ms\";", 5);
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs_due_soon(&e, "tk", 4, 5);
    ck_assert(testenv_wait_for(e.db, "4", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    add_runs_due_soon(&e, "tk", 40, 100);
    ck_assert(testenv_wait_for(e.db, "44", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    ck_assert(testenv_wait_for(
        e.db, "44|44|44", 0,
        "SELECT count(*) || '|' || count(*) FILTER (WHERE r.attempt = 1 AND "
        "a.attempt = 1 AND a.outcome = 'succeeded' AND a.started_at = r.started_at "
        "AND a.finished_at = r.finished_at AND r.finished_at >= r.started_at AND "
        "r.started_at >= r.due_at AND r.lease_until IS NULL) || '|' || count(*) "
        "FILTER (WHERE x.who::bigint % 4294967296 = r.xmin::text::bigint) FROM "
        "warren.runs r JOIN warren.attempts a USING (run_key) JOIN execs x USING "
        "(run_key)"));
    worker_thread_join(&wt);
    warren_worker_stats_get(wt.w, &ws);
    ck_assert_uint_eq(ws.started, 44);
    ck_assert_uint_ge(ws.taken, 40);
    ck_assert_uint_eq(ws.succeeded, 44);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* A statement that fails in a take rolls the take back: its run is claimed
 * on its own and completed as a retry with the statement's error, without
 * running the statement again (a sequence counts its executions: nextval is
 * not rolled back), and the other runs of the batch are taken again without
 * it, each effect once. A first wave measures both statements (boom's first
 * execution succeeds, every later one fails); then boom's second run fails
 * in two attempts, taken each time: three executions in all, not five. */
START_TEST(test_worker_sql_take_completes_a_failing_statement_as_a_retry_run_once)
{
    env e;
    worker_thread wt = {0};
    warren_worker_stats ws;
    env_setup(&e,
              "{ name = \"ok\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qtf\"; overlap = "
              "\"allow\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'ok')) "
              "SELECT 1\"; }; },"
              "{ name = \"boom\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qtf\"; overlap = "
              "\"allow\"; handler = { sql = \"SELECT 1 / CASE WHEN nextval('boom_execs') > 1 THEN "
              "0 ELSE 1 END\"; }; retry = { max_attempts = 2; base = \"200ms\"; cap = "
              "\"200ms\"; }; }",
              "concurrency = 16; shutdown_grace = \"3s\"; heartbeat_margin = \"1500ms\";", 5);
    testenv_exec(e.db, "CREATE SEQUENCE boom_execs");
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    /* in one statement each: due at the same instant, in one claim batch */
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) "
                 "SELECT CASE WHEN g = 2 THEN 'boom' ELSE 'ok' END, date_trunc('second', now()) - "
                 "make_interval(secs => 100 + g), now() + interval '2 s', 'trigger' FROM "
                 "generate_series(1, 3) g; NOTIFY warren_jobs");
    ck_assert(testenv_wait_for(e.db, "3", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) "
                 "SELECT CASE WHEN g = 5 THEN 'boom' ELSE 'ok' END, date_trunc('second', now()) - "
                 "make_interval(secs => 5 + g), now() + interval '2 s', 'trigger' FROM "
                 "generate_series(1, 9) g; NOTIFY warren_jobs");
    ck_assert(testenv_wait_for(e.db, "10", 20000,
                               "SELECT count(*) FROM warren.runs WHERE job = 'ok' AND state = "
                               "'succeeded'"));
    ck_assert(
        testenv_wait_for(e.db, "dead", 20000,
                         "SELECT string_agg(state, ',') FROM warren.runs WHERE job = 'boom' AND "
                         "state <> 'succeeded'"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE job = 'ok'", NULL);
    ck_assert(
        testenv_wait_for(e.db, "3|3|2", 0,
                         "SELECT (SELECT last_value FROM boom_execs) || '|' || count(*) || '|' || "
                         "count(*) FILTER (WHERE error LIKE '%division by zero%') FROM "
                         "warren.attempts WHERE run_key LIKE 'boom@%'"));
    worker_thread_join(&wt);
    warren_worker_stats_get(wt.w, &ws);
    ck_assert_uint_ge(ws.taken, 8);
    ck_assert_uint_eq(ws.started, 13);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* A statement measured quick that turns slow in a take: a take gives it at
 * most 1 s (the run's row is locked, the run not seen running, meanwhile).
 * It is cancelled there, its effect rolled back, and it goes back with the
 * other runs of its statement to be claimed, then runs with its own timeout
 * and succeeds: every effect once, none taken, nothing retried (a sequence
 * counts the statements started). */
START_TEST(test_worker_sql_take_gives_a_statement_that_turns_slow_back_to_the_claim)
{
    env e;
    worker_thread wt = {0};
    warren_worker_stats ws;
    env_setup(&e,
              "{ name = \"sl\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qsl\"; overlap = "
              "\"allow\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 's')), n "
              "AS (SELECT nextval('sl_execs')) SELECT pg_sleep(CASE WHEN EXISTS (SELECT 1 FROM "
              "slow_now) THEN 1.5 ELSE 0 END) FROM n\"; }; }",
              "concurrency = 8; shutdown_grace = \"3s\"; heartbeat_margin = \"1500ms\";", 5);
    testenv_exec(e.db, "CREATE TABLE slow_now (x int); CREATE SEQUENCE sl_execs");
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs_due_soon(&e, "sl", 2, 5);
    ck_assert(testenv_wait_for(e.db, "2", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    testenv_exec(e.db, "INSERT INTO slow_now VALUES (1)");
    add_runs_due_soon(&e, "sl", 3, 100);
    ck_assert(testenv_wait_for(e.db, "5", 30000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    ck_assert(testenv_wait_for(e.db, "5|5", 0,
                               "SELECT count(*) || '|' || count(*) FILTER (WHERE attempt = 1 AND "
                               "outcome = 'succeeded') FROM warren.attempts"));
    /* six statements started: the first wave's two, the one the take
     * cancelled (the pipeline stopped there), the three claimed */
    ck_assert(testenv_wait_for(e.db, "6", 0, "SELECT last_value FROM sl_execs"));
    worker_thread_join(&wt);
    warren_worker_stats_get(wt.w, &ws);
    ck_assert_uint_eq(ws.started, 5);
    ck_assert_uint_eq(ws.taken, 0);
    ck_assert_uint_eq(ws.retried, 0);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* What take_many leaves out goes back to the loop's ordinary claim: a job
 * this worker's config says is uncapped but the database caps (take_many
 * has the database's word) runs claimed, each once; and with worker.sql_take
 * = false nothing is taken. A first wave measures the statement (else
 * nothing would be offered to take_many at all). */
START_TEST(test_worker_sql_take_gives_back_what_it_cannot_take_and_can_be_turned_off)
{
    for (int off = 0; off < 2; off++) {
        env e;
        worker_thread wt = {0};
        warren_worker_stats ws;
        char *settings = testenv_fmt("concurrency = 8; shutdown_grace = \"3s\"; heartbeat_margin "
                                     "= \"1500ms\";%s",
                                     off ? " sql_take = false;" : "");
        env_setup(&e,
                  "{ name = \"capd\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qtb\"; overlap = "
                  "\"allow\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, "
                  "'c')) SELECT 1\"; }; }",
                  settings, 5);
        free(settings);
        if (!off)
            testenv_exec(e.db, "UPDATE warren.jobs SET max_running = 100 WHERE name = 'capd'");
        worker_thread_start(&e, &wt, NULL, NULL, NULL);
        testenv_stack_planner_start(&e, &test_logger);
        add_runs_due_soon(&e, "capd", 2, 5);
        ck_assert(testenv_wait_for(e.db, "2", 20000,
                                   "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
        add_runs_due_soon(&e, "capd", 12, 100);
        ck_assert(testenv_wait_for(e.db, "14", 20000,
                                   "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
        assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
        ck_assert(testenv_wait_for(e.db, "14", 0, "SELECT count(*) " SQL_ATTEMPTS_GIVEN));
        worker_thread_join(&wt);
        warren_worker_stats_get(wt.w, &ws);
        ck_assert_uint_eq(ws.started, 14);
        ck_assert_uint_eq(ws.taken, 0);
        ck_assert_uint_eq(ws.succeeded, 14);
        warren_worker_free(wt.w);
        testenv_stack_free(&e);
    }
}
END_TEST

/* An uncapped skip job's sql run is taken too, under the job's overlap lock
 * (warren.take_many holds it to the commit), when it is its job's only run
 * due in the batch and none of the job's runs is running. Eight skip jobs
 * (one statement, measured by a first wave of one run each, claimed) get one
 * run each due together, and one of them three more due at the same time:
 * the seven lone runs are taken; the four of one job go to the claim, which
 * starts one at a time and skips what would overlap. Every run ends
 * succeeded or skipped, no two attempts of a job overlap, and each succeeded
 * run's statement committed exactly once (no unique key), a skipped one's
 * never. */
START_TEST(test_worker_sql_take_takes_skip_jobs_runs_under_their_overlap_lock)
{
    env e;
    worker_thread wt = {0};
    warren_worker_stats ws;
    char jobs[4096];
    size_t off = 0;
    for (int j = 0; j < 8; j++)
        off += (size_t)snprintf(jobs + off, sizeof(jobs) - off,
                                "%s{ name = \"sk%d\"; at = \"2099-01-01T00:00:00Z\"; queue = "
                                "\"qsk\"; handler = { sql = \"WITH x AS (INSERT INTO execs VALUES "
                                "($1, 0, 's')) SELECT 1\"; }; }",
                                j ? "," : "", j);
    env_setup(&e, jobs, "concurrency = 16; shutdown_grace = \"3s\"; heartbeat_margin = \"1500ms\";",
              5);
    ck_assert(testenv_wait_for(e.db, "skip|skip|8", 0,
                               "SELECT min(overlap) || '|' || max(overlap) || '|' || count(*) FROM "
                               "warren.jobs WHERE name LIKE 'sk%'"));
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) SELECT 'sk' || j, "
                 "date_trunc('second', now()) - interval '5 s', now() + interval '2 s', 'trigger' "
                 "FROM generate_series(0, 7) j; NOTIFY warren_jobs");
    ck_assert(testenv_wait_for(e.db, "8", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    testenv_exec(
        e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) SELECT 'sk' || j, "
              "date_trunc('second', now()) - make_interval(secs => 100 + g), now() + interval "
              "'2 s', 'trigger' FROM generate_series(0, 7) j, generate_series(1, CASE WHEN j = 0 "
              "THEN 4 ELSE 1 END) g; NOTIFY warren_jobs");
    ck_assert(testenv_wait_for(
        e.db, "19", 20000,
        "SELECT count(*) FROM warren.runs WHERE state IN ('succeeded', 'skipped')"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs WHERE state = 'succeeded'", NULL);
    ck_assert(testenv_wait_for(
        e.db, "0|14", 0,
        "SELECT (SELECT count(*) FROM warren.attempts a JOIN warren.runs ra USING "
        "(run_key) JOIN warren.attempts b ON b.run_key > a.run_key JOIN "
        "warren.runs rb ON rb.run_key = b.run_key AND rb.job = ra.job WHERE "
        "a.started_at < coalesce(b.finished_at, 'infinity') AND b.started_at < "
        "coalesce(a.finished_at, 'infinity')) || '|' || (SELECT count(*) FROM "
        "warren.runs WHERE job <> 'sk0' AND state = 'succeeded' AND attempt = 1)"));
    worker_thread_join(&wt);
    warren_worker_stats_get(wt.w, &ws);
    ck_assert_uint_ge(ws.taken, 7);
    ck_assert_uint_eq(ws.retried + ws.failed, 0);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* worker.prefetch beyond the slots: with 2 slots and prefetch 4, four of
 * six runs are delivered (two are left ready in the queue, an exact count)
 * while only two are claimed and running (the other two wait in the worker
 * unclaimed: no lease, no attempt); then every run runs exactly once. With
 * prefetch = slots (before) four would be left in the queue. */
START_TEST(test_worker_prefetch_holds_deliveries_beyond_the_slots_unclaimed)
{
    env e;
    worker_thread wt = {0};
    env_setup(
        &e,
        "{ name = \"pf\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qpf\"; overlap = "
        "\"allow\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec pf; sleep 6\"]; }; }",
        "concurrency = 2; prefetch = 4; shutdown_grace = \"8s\"; heartbeat_margin = "
        "\"1500ms\";",
        5);
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    add_runs(&e, "pf", 6, 5);
    ck_assert(testenv_wait_for(e.db, "2", 15000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'running'"));
    long ready = -1;
    for (int i = 0; i < 40 && ready != 2; i++) {
        ready = testenv_queue_depth(e.amqp, "warren.ready.qpf");
        if (ready != 2)
            testenv_sleep_ms(100);
    }
    ck_assert_int_eq(ready, 2);
    /* the first two still run (6 s): the other four are published, two of
     * them held in the worker, and nothing else was claimed */
    ck_assert(testenv_wait_for(
        e.db, "2|4|2", 0,
        "SELECT (SELECT count(*) FROM warren.runs WHERE state = 'running') || '|' "
        "|| (SELECT count(*) FROM warren.runs WHERE state = 'published') || '|' || "
        "(SELECT count(*) FROM warren.attempts)"));
    ck_assert(testenv_wait_for(e.db, "6", 60000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    assert_one_execution_per_attempt(&e);
    worker_thread_join(&wt);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* Enqueued runs are not held back by the overlap rule (issue 33 item 18):
 * a template written like the docs' first example, with no `overlap` line
 * (so `skip`), and 300 warren.enqueue calls with distinct keys, one worker
 * × 20 slots, a handler that takes 50 ms: every run runs once, none is
 * skipped. Before, most were skipped as overlapping fires of one schedule
 * (2,000 calls: 1,833 skipped). The rule itself, per claim path, is in
 * check_protocol. */
START_TEST(test_worker_runs_every_enqueued_run_of_a_template_without_overlap)
{
    env e;
    worker_thread wt = {0};
    warren_worker_stats ws;
    env_setup(&e,
              "{ name = \"mail\"; template = true; queue = \"qmail\";"
              "  handler = { sql = \"WITH x AS (INSERT INTO execs VALUES ($1, 0, 'mail')) "
              "SELECT pg_sleep(0.05)\"; }; }",
              "concurrency = 20;", 5);
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    testenv_stack_planner_start(&e, &test_logger);
    testenv_exec(e.db, "SELECT count(*) FROM generate_series(1, 300) g, "
                       "LATERAL warren.enqueue('mail', 'welcome-' || g) x WHERE x.created");
    ck_assert(testenv_wait_for(e.db, "300", 60000,
                               "SELECT count(*) FROM warren.runs WHERE job = 'mail' AND state = "
                               "'succeeded'"));
    ck_assert(
        testenv_wait_for(e.db, "300|300|0", 0,
                         "SELECT (SELECT count(*) FROM execs) || '|' || (SELECT count(DISTINCT "
                         "run_key) FROM execs) || '|' || (SELECT count(*) FROM warren.runs WHERE "
                         "state = 'skipped')"));
    worker_thread_join(&wt);
    warren_worker_stats_get(wt.w, &ws);
    ck_assert_uint_eq(ws.succeeded, 300);
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ bad messages */

static void publish_raw(env *e, const char *queue, const char *body, const char *message_id)
{
    warren_header h[2] = {{WARREN_QUEUE_HEADER, queue}, {"x-test", "1"}};
    warren_message m = {.exchange = WARREN_READY_EXCHANGE,
                        .routing_key = queue,
                        .message_id = message_id,
                        .type = "junk",
                        .expiration_ms = -1,
                        .headers = h,
                        .nheaders = 2,
                        .body = body,
                        .body_len = strlen(body),
                        .mandatory = 1};
    testenv_publish(e->amqp, &m, 5000);
}

START_TEST(test_worker_dead_letters_malformed_and_unknown_messages_with_a_reason)
{
    env e;
    env_setup(&e,
              "{ name = \"mj\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qm\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec mj\"]; }; }",
              NULL, 5);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    publish_raw(&e, "qm", "this is not json", "garbage-1");
    char *body = NULL, *why = NULL;
    ck_assert(get_dead(&e, &body, "x-warren-error", &why));
    ck_assert_str_eq(body, "this is not json");
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(strstr(why, "malformed") != NULL, "reason: %s", why);
    free(body);
    free(why);
    publish_raw(&e, "qm",
                "{\"run_key\":\"nojob@2026-01-01T00:00:00Z\",\"job\":\"nojob\",\"scheduled_at\":"
                "\"2026-01-01T00:00:00Z\",\"due_at\":\"2026-01-01T00:00:00.000Z\",\"attempt\":0,"
                "\"payload\":{}}",
                "nojob@2026-01-01T00:00:00Z");
    ck_assert(get_dead(&e, &body, "x-warren-error", &why));
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(strstr(why, "unknown job \"nojob\"") != NULL, "reason: %s", why);
    free(body);
    free(why);
    /* The worker is still alive and the ready queue is empty. */
    ck_assert_int_eq(waitpid(a, NULL, WNOHANG), 0);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.ready.qm"), 0);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    ck_assert(testenv_stack_log_wait(&e, "a.log", "dead-lettered 2", 0));
    assert_executions_of(&e, "SELECT NULL::text WHERE false", NULL); /* no handler ran */
    testenv_stack_free(&e);
}
END_TEST

/* Publishes a run message for run_key (job, scheduled_at second ss of
 * 2026-01-01) naming template tmpl, due long ago. */
static void publish_run(env *e, const char *queue, const char *job, int ss, const char *tmpl)
{
    char *key = testenv_fmt("%s@2026-01-01T00:00:%02dZ", job, ss);
    char *body = testenv_fmt("{\"run_key\":\"%s\",\"job\":\"%s\",\"template\":\"%s\","
                             "\"scheduled_at\":\"2026-01-01T00:00:%02dZ\",\"due_at\":"
                             "\"2026-01-01T00:00:00.000Z\",\"attempt\":0,\"payload\":{}}",
                             key, job, tmpl, ss);
    publish_raw(e, queue, body, key);
    free(body);
    free(key);
}

/* The handler that runs is the one the claim's answer names (the run's
 * template in the database), never the message's: anything that can
 * publish to a ready queue could otherwise run another template's handler
 * on a real run. Two sql templates of one queue; evil's statement is
 * measured first (its own runs, so that its runs are taken in their
 * effect's transaction), then four runs of an API job of template good
 * arrive at once in messages naming evil: each runs good's statement once
 * (take_many answers with the template: not taken as evil's; the claim
 * names good). A run of a template this worker's config lacks, in a
 * message naming evil: its attempt fails with the reason, nothing runs. */
START_TEST(test_worker_runs_the_handler_the_claim_names_not_the_messages)
{
    env e;
    worker_thread wt = {0};
    env_setup(&e,
              "{ name = \"good\"; template = true; queue = \"qf\"; overlap = \"allow\";"
              "  handler = { sql = \"INSERT INTO execs VALUES ($1, 0, 'good')\"; }; },"
              "{ name = \"evil\"; template = true; queue = \"qf\"; overlap = \"allow\";"
              "  handler = { sql = \"INSERT INTO execs VALUES ($1, 0, 'evil')\"; }; }",
              "concurrency = 16;", 5);
    testenv_exec(
        e.db, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, "
              "is_template, paused, next_fire_at) VALUES "
              "('ghost', 'none', '', 'qf', 'allow', true, true, 'infinity');"
              "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, origin, "
              "template, next_fire_at) VALUES "
              "('g1', 'every', '3600', 'qf', 'allow', 'api', 'good', 'infinity'),"
              "('e1', 'every', '3600', 'qf', 'allow', 'api', 'evil', 'infinity'),"
              "('o1', 'every', '3600', 'qf', 'allow', 'api', 'ghost', 'infinity');"
              "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, state) "
              "SELECT j, '2026-01-01'::timestamptz + make_interval(secs => g), now(), 'trigger', "
              "'published' FROM unnest(ARRAY['g1', 'e1']) j, generate_series(1, 4) g;"
              "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, state) VALUES "
              "('o1', '2026-01-01T00:00:01Z', now(), 'trigger', 'published')");
    worker_thread_start(&e, &wt, NULL, NULL, NULL);
    for (int i = 1; i <= 4; i++) /* evil's own runs, one at a time: measured */
        publish_run(&e, "qf", "e1", i, "evil");
    ck_assert(testenv_wait_for(e.db, "4", 30000, "SELECT count(*) FROM execs WHERE who = 'evil'"));
    for (int i = 1; i <= 4; i++)
        publish_run(&e, "qf", "g1", i, "evil");
    publish_run(&e, "qf", "o1", 1, "evil");
    ck_assert(testenv_wait_for(e.db, "4", 30000,
                               "SELECT count(*) FROM warren.runs WHERE job = 'g1' AND state = "
                               "'succeeded'"));
    ck_assert(testenv_wait_for(e.db, "1", 30000,
                               "SELECT count(*) FROM warren.attempts WHERE run_key = "
                               "'o1@2026-01-01T00:00:01Z' AND outcome IS NOT NULL"));
    worker_thread_join(&wt);
    /* each g1 run once, by good's statement; evil's ran only its own runs */
    ck_assert(testenv_wait_for(
        e.db, "e1:evil:4:4|g1:good:4:4", 0,
        "SELECT string_agg(split_part(run_key, '@', 1) || ':' || who || ':' || n "
        "|| ':' || k, '|' ORDER BY who) FROM (SELECT min(run_key) AS run_key, who, "
        "count(*) AS n, count(DISTINCT run_key) AS k FROM execs "
        "GROUP BY split_part(run_key, '@', 1), who) x"));
    ck_assert(
        testenv_wait_for(e.db, "t", 0,
                         "SELECT error LIKE '%is handled by \"ghost\" (the database''s answer), "
                         "which is not in this worker''s config%' FROM warren.attempts "
                         "WHERE run_key = 'o1@2026-01-01T00:00:01Z'"));
    warren_worker_free(wt.w);
    testenv_stack_free(&e);
}
END_TEST

/* A consumer that crashes before its ack: the quorum queue's x-delivery-limit
 * dead-letters the message after delivery_limit + 1 deliveries. */
START_TEST(test_poison_message_ends_in_warren_dead_via_delivery_limit)
{
    env e;
    env_setup(&e,
              "{ name = \"pj\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qp\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec pj\"]; }; }",
              NULL, 2);
    publish_raw(&e, "qp", "{\"poison\": true}", "poison-1");
    int crashes = 0;
    for (int i = 0; i < 6; i++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            warren_broker *b = NULL;
            warren_error err = {0};
            warren_delivery d;
            int got = 0;
            if (warren_broker_open(e.amqp, NULL, &b, &err) != 0 ||
                warren_broker_qos(b, 1, &err) != 0 ||
                warren_broker_consume(b, "warren.ready.qp", &err) != 0 ||
                warren_broker_next(b, 2000, &d, &got, &err) != 0)
                _exit(2);
            if (got)
                raise(SIGKILL); /* the crash, before any ack */
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status))
            crashes++;
        else
            break;
    }
    ck_assert_int_eq(crashes, 3); /* delivery_limit 2: delivered 3 times */
    char *body = NULL, *death = NULL;
    ck_assert(get_dead(&e, &body, "x-death", &death));
    ck_assert_str_eq(body, "{\"poison\": true}");
    ck_assert_ptr_nonnull(death);
    ck_assert_msg(strstr(death, "delivery_limit") != NULL, "x-death: %s", death);
    free(body);
    free(death);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ loop bounds */

/* A handler that writes without pause (yes) beside a long one on a 4-slot
 * worker: the loop reads at most WARREN__EXEC_READ_MAX of its output per
 * turn, so the long handler's heartbeats keep its lease alive (lease_until
 * advances while yes runs) and yes is killed at its timeout. */
START_TEST(test_worker_chatty_handler_does_not_stall_the_other_slots)
{
    env e;
    env_setup(&e,
              "{ name = \"ys\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qy\"; lease = \"6s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec ys; exec yes\"]; };"
              "  timeout = \"2s\"; retry = { max_attempts = 1; }; },"
              "{ name = \"lg\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qy\"; lease = \"6s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec lg; sleep 8\"]; };"
              "  timeout = \"60s\"; retry = { max_attempts = 1; }; }",
              "concurrency = 4; shutdown_grace = \"3s\"; heartbeat_margin = \"1s\";", 5);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "lg", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "running", 15000, "SELECT state FROM warren.runs WHERE job = 'lg'"));
    char *lease0 = testenv_sql1(e.db, "SELECT lease_until::text FROM warren.runs WHERE job = 'lg'");
    add_runs(&e, "ys", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "running", 15000, "SELECT state FROM warren.runs WHERE job = 'ys'"));
    /* lg heartbeats every 2 s while yes writes */
    char *q = testenv_fmt("SELECT lease_until > '%s'::timestamptz + interval '1 second' FROM "
                          "warren.runs WHERE job = 'lg'",
                          lease0);
    ck_assert(testenv_wait_for(e.db, "t", 5000, q));
    free(q);
    ck_assert(
        testenv_wait_for(e.db, "dead", 15000, "SELECT state FROM warren.runs WHERE job = 'ys'"));
    ck_assert(testenv_wait_for(e.db, "t", 1000,
                               "SELECT last_error LIKE 'timed out after 2000 ms%' FROM warren.runs "
                               "WHERE job = 'ys'"));
    ck_assert(testenv_wait_for(e.db, "succeeded", 20000,
                               "SELECT state FROM warren.runs WHERE job = 'lg'"));
    ck_assert(testenv_wait_for(
        e.db, "1", 1000,
        "SELECT count(*) FROM warren.attempts a JOIN warren.runs r USING (run_key) "
        "WHERE r.job = 'lg'"));
    assert_one_execution_per_attempt(&e);
    free(lease0);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    testenv_stack_free(&e);
}
END_TEST

/* An operator's open transaction holds the row of one running run (FOR
 * UPDATE): the worker's heartbeat of it waits for the lock at most its
 * lock_timeout (half the margin) and is retried; the worker's other slot is
 * still served (its heartbeats succeed, it completes), and the blocked run's
 * handler is killed at lease - margin and not completed. */
START_TEST(test_worker_row_locked_by_an_operator_blocks_only_its_own_run)
{
    env e;
    env_setup(&e,
              "{ name = \"lk\"; at = \"2099-01-01T00:00:00Z\"; queue = \"ql\"; lease = \"3s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec lk; echo $$ > "
              "$MARK_DIR/lk.pid; exec sleep 30\"]; }; timeout = \"60s\"; },"
              "{ name = \"ok\"; at = \"2099-01-01T00:00:00Z\"; queue = \"ql\"; lease = \"3s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec ok; sleep 5\"]; };"
              "  timeout = \"60s\"; retry = { max_attempts = 1; }; }",
              "concurrency = 4; shutdown_grace = \"3s\"; heartbeat_margin = \"1s\";", 5);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "lk", 1, 5);
    add_runs(&e, "ok", 1, 5);
    ck_assert(testenv_wait_for(e.db, "2", 15000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'running'"));
    char *lk = first_key(&e, "lk");
    /* the operator: BEGIN; SELECT ... FOR UPDATE; and the transaction stays open */
    char *url = testenv_fmt("%s%sapplication_name=locker", e.db, strchr(e.db, '?') ? "&" : "?");
    char *sql = testenv_fmt("BEGIN; SELECT 1 FROM warren.runs WHERE run_key = '%s' FOR UPDATE; "
                            "SELECT pg_sleep(60)",
                            lk);
    char *argv[] = {"/bin/sh", "-c", "exec psql \"$0\" -qAtc \"$1\"", url, sql, NULL};
    char *plog = testenv_fmt("%s/locker.log", e.dir);
    pid_t locker = testenv_spawn(argv, plog, plog, 0);
    ck_assert(
        testenv_wait_for(e.db, "1", 10000,
                         "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid) "
                         "WHERE s.application_name = 'locker' AND l.locktype = 'transactionid'"));
    int64_t locked_at = testenv_mono_ms();
    /* lk: killed at lease - margin after its last heartbeat (at most 3 s - 1 s
     * from the lock, plus the 500 ms lock timeout and a loaded machine) */
    char *want = testenv_fmt("%s attempt 1: no successful heartbeat", lk);
    ck_assert(testenv_stack_log_wait(&e, "a.log", want, 8000));
    free(want);
    ck_assert_msg(testenv_mono_ms() - locked_at < 6000, "stopped %lld ms after the lock",
                  (long long)(testenv_mono_ms() - locked_at));
    char *pidf = testenv_fmt("%s/lk.pid", e.dir);
    char *pidt = testenv_read_file_or_empty(pidf);
    ck_assert_int_gt(atoi(pidt), 0);
    for (int i = 0; i < 100 && testenv_pid_alive(atoi(pidt)); i++)
        testenv_sleep_ms(50);
    ck_assert_msg(!testenv_pid_alive(atoi(pidt)), "lk's handler %s survived", pidt);
    /* ok, beside it, heartbeated and completed while the lock is still held */
    ck_assert(testenv_wait_for(e.db, "succeeded", 10000,
                               "SELECT state FROM warren.runs WHERE job = 'ok'"));
    ck_assert(testenv_stack_log_wait(&e, "a.log", "canceling statement due to",
                                     0)); /* statement or lock timeout */
    testenv_exec(e.db,
                 "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                 "'locker'");
    ck_assert_int_ge(testenv_wait_exit(locker, 10000), 0);
    ck_assert(testenv_stack_log_wait(
        &e, "a.log", "handler stopped after the lease was lost; not completing", 5000));
    /* lk's attempt was not completed by this worker, now that it could have been */
    char *att = testenv_sql1f(e.db,
                              "SELECT coalesce(outcome, 'none') FROM warren.attempts WHERE "
                              "run_key = '%s' AND attempt = 1",
                              lk);
    ck_assert_msg(att != NULL && strcmp(att, "succeeded") != 0 && strcmp(att, "retry") != 0,
                  "lk attempt 1: %s", att ? att : "NULL");
    free(att);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    free(pidt);
    free(pidf);
    free(plog);
    free(url);
    free(sql);
    free(lk);
    testenv_stack_free(&e);
}
END_TEST

/* Holds the row of run key locked (SELECT ... FOR UPDATE in an open
 * transaction of a psql of its own, application_name "locker") until
 * unlock_run; returns the psql's pid once the lock is held. */
static pid_t lock_run(env *e, const char *key)
{
    char *url = testenv_fmt("%s%sapplication_name=locker", e->db, strchr(e->db, '?') ? "&" : "?");
    char *sql = testenv_fmt("BEGIN; SELECT 1 FROM warren.runs WHERE run_key = '%s' FOR UPDATE; "
                            "SELECT pg_sleep(60)",
                            key);
    char *argv[] = {"/bin/sh", "-c", "exec psql \"$0\" -qAtc \"$1\"", url, sql, NULL};
    char *plog = testenv_fmt("%s/locker.log", e->dir);
    pid_t locker = testenv_spawn(argv, plog, plog, 0);
    ck_assert(
        testenv_wait_for(e->db, "1", 10000,
                         "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid) "
                         "WHERE s.application_name = 'locker' AND l.locktype = 'transactionid'"));
    free(plog);
    free(sql);
    free(url);
    return locker;
}

static void unlock_run(env *e, pid_t locker)
{
    testenv_exec(e->db,
                 "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                 "'locker'");
    ck_assert_int_ge(testenv_wait_exit(locker, 10000), 0);
}

/* Two runs due at the same instant reach the worker together; an operator
 * holds one's row when they fall due: the claim batch times out on that row,
 * and the other run must start anyway (claimed on its own), the locked one
 * once the lock is gone. */
START_TEST(test_worker_claims_beside_a_run_whose_row_is_locked)
{
    env e;
    env_setup(&e,
              "{ name = \"cl\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qk\"; lease = \"6s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec cl\"]; }; },"
              "{ name = \"co\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qk\"; lease = \"6s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec co\"]; }; }",
              "concurrency = 4; shutdown_grace = \"3s\"; heartbeat_margin = \"1s\";", 5);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    /* Due 8 s ahead: released 3 s early, held by the worker until due. */
    testenv_exec(
        e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) "
              "SELECT j, date_trunc('second', now()), date_trunc('second', now()) + interval '8s', "
              "'trigger' FROM unnest(ARRAY['cl', 'co']) j; NOTIFY warren_jobs");
    ck_assert(testenv_wait_for(e.db, "2", 15000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'published'"));
    char *cl = first_key(&e, "cl");
    pid_t locker = lock_run(&e, cl);
    ck_assert(testenv_wait_for(
        e.db, "0", 1000, "SELECT count(*) FROM warren.runs WHERE due_at <= now() AND job = 'co'"));
    /* co starts and succeeds while cl's row is still locked */
    ck_assert(testenv_wait_for(e.db, "succeeded", 15000,
                               "SELECT state FROM warren.runs WHERE job = 'co'"));
    char *st = testenv_sql1f(e.db, "SELECT state FROM warren.runs WHERE run_key = '%s'", cl);
    ck_assert_str_eq(st, "published");
    free(st);
    ck_assert(testenv_stack_log_wait(&e, "a.log", "canceling statement due to",
                                     0)); /* the batch did time out */
    unlock_run(&e, locker);
    ck_assert(testenv_wait_for(e.db, "succeeded", 15000,
                               "SELECT state FROM warren.runs WHERE job = 'cl'"));
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    assert_executions_of(&e, "SELECT run_key FROM warren.runs", NULL);
    free(cl);
    testenv_stack_free(&e);
}
END_TEST

/* A run finishes while an operator holds its row: its completion times out
 * and is tried again (recorded once the lock is gone), and a run that
 * finishes beside it is completed meanwhile. */
START_TEST(test_worker_completes_beside_a_run_whose_row_is_locked)
{
    env e;
    env_setup(&e,
              "{ name = \"lc\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qc\"; lease = \"6s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec lc; sleep 1\"]; };"
              "  timeout = \"60s\"; retry = { max_attempts = 1; }; },"
              "{ name = \"oc\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qc\"; lease = \"6s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec oc; sleep 1\"]; };"
              "  timeout = \"60s\"; retry = { max_attempts = 1; }; }",
              "concurrency = 4; shutdown_grace = \"3s\"; heartbeat_margin = \"1s\";", 5);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "lc", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "running", 15000, "SELECT state FROM warren.runs WHERE job = 'lc'"));
    char *lc = first_key(&e, "lc");
    pid_t locker = lock_run(&e, lc);
    add_runs(&e, "oc", 1, 5);
    ck_assert(testenv_wait_for(e.db, "succeeded", 10000,
                               "SELECT state FROM warren.runs WHERE job = 'oc'"));
    /* lc's handler is done; its completion waits for the lock (its lease, 6 s
     * from its last heartbeat, has not run out) */
    ck_assert(
        testenv_wait_for(e.db, "running", 100, "SELECT state FROM warren.runs WHERE job = 'lc'"));
    ck_assert(testenv_stack_log_wait(&e, "a.log", "complete: ", 5000));
    unlock_run(&e, locker);
    ck_assert(testenv_wait_for(e.db, "succeeded", 5000,
                               "SELECT state FROM warren.runs WHERE job = 'lc'"));
    ck_assert(testenv_wait_for(e.db, "2", 1000, "SELECT count(*) FROM warren.attempts"));
    assert_one_execution_per_attempt(&e);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 10000), 0);
    free(lc);
    testenv_stack_free(&e);
}
END_TEST

/* Sends sig to the postmaster pm and every process it started. */
static void pg_signal_all(pid_t pm, int sig)
{
    char *kids = testenv_fmt("/proc/%d/task/%d/children", (int)pm, (int)pm);
    char list[8192];
    size_t n = 0;
    FILE *f = fopen(kids, "r"); /* a /proc file: its size reads as 0, so not read_text */
    ck_assert_ptr_nonnull(f);
    n = fread(list, 1, sizeof(list) - 1, f);
    list[n] = '\0';
    fclose(f);
    if (sig == SIGSTOP)
        ck_assert_int_eq(kill(pm, sig), 0); /* first: no new backends */
    for (char *p = list; *p != '\0';) {
        char *end;
        long k = strtol(p, &end, 10);
        if (end == p)
            break;
        kill((pid_t)k, sig);
        p = end;
    }
    if (sig != SIGSTOP)
        ck_assert_int_eq(kill(pm, sig), 0);
    free(kids);
}

/* Freezes the test's PostgreSQL server (SIGSTOP); returns its postmaster's
 * pid for pg_signal_all(pm, SIGCONT). */
static pid_t pg_freeze(const char *db)
{
    char *dir = testenv_sql1(db, "SHOW data_directory");
    ck_assert_ptr_nonnull(dir);
    char *pidfile = testenv_fmt("%s/postmaster.pid", dir);
    char *text = testenv_read_file_or_empty(pidfile);
    pid_t pm = (pid_t)atoi(text);
    ck_assert_int_gt(pm, 0);
    pg_signal_all(pm, SIGSTOP);
    free(text);
    free(pidfile);
    free(dir);
    return pm;
}

/* PostgreSQL stops answering (the whole server frozen, SIGSTOP) while a
 * handler runs: no call of the worker's loop waits past its answer bound
 * (twice its statement timeout), so the handler is still stopped at lease -
 * margin, and not completed. */
START_TEST(test_worker_stops_a_handler_at_lease_minus_margin_when_the_database_is_frozen)
{
    env e;
    env_setup(&e,
              "{ name = \"fz\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qf\"; lease = \"3s\";"
              "  handler = { exec = [\"/bin/sh\", \"-c\", \"$MARK_DIR/log-exec fz; echo $$ > "
              "$MARK_DIR/fz.pid; exec sleep 30\"]; }; timeout = \"60s\"; "
              "  retry = { max_attempts = 1; }; }",
              "concurrency = 4; shutdown_grace = \"3s\"; heartbeat_margin = \"1s\";", 5);
    testenv_stack_planner_start(&e, &test_logger);
    pid_t a = testenv_stack_worker(&e, NULL, "wa", "a.log", 0);
    add_runs(&e, "fz", 1, 5);
    ck_assert(
        testenv_wait_for(e.db, "running", 15000, "SELECT state FROM warren.runs WHERE job = 'fz'"));
    char *key = first_key(&e, "fz");
    char *pidf = testenv_fmt("%s/fz.pid", e.dir);
    char *pidt = testenv_read_file_or_empty(pidf);
    for (int i = 0; i < 100 && atoi(pidt) <= 0; i++) {
        testenv_sleep_ms(50);
        free(pidt);
        pidt = testenv_read_file_or_empty(pidf);
    }
    ck_assert_int_gt(atoi(pidt), 0);
    char *want = testenv_fmt("%s attempt 1: no successful heartbeat", key);
    pid_t pm = pg_freeze(e.db);
    int64_t frozen_at = testenv_mono_ms();
    /* asserted after the server runs again (a failed check must not leave it frozen) */
    int stopped = testenv_stack_log_wait(&e, "a.log", want, 8000);
    int64_t took = testenv_mono_ms() - frozen_at;
    for (int i = 0; i < 100 && testenv_pid_alive(atoi(pidt)); i++)
        testenv_sleep_ms(50);
    int alive = testenv_pid_alive(atoi(pidt));
    pg_signal_all(pm, SIGCONT);
    ck_assert_msg(stopped, "the handler was not stopped while PostgreSQL was frozen");
    ck_assert_msg(took < 6000, "stopped %lld ms after the freeze", (long long)took);
    ck_assert_msg(!alive, "fz's handler %s survived", pidt);
    ck_assert(testenv_stack_log_wait(&e, "a.log", "no answer from PostgreSQL", 0));
    ck_assert(testenv_stack_log_wait(
        &e, "a.log", "handler stopped after the lease was lost; not completing", 5000));
    /* not completed by this worker: the attempt is not succeeded or retry */
    char *att = testenv_sql1f(e.db,
                              "SELECT coalesce(outcome, 'none') FROM warren.attempts WHERE "
                              "run_key = '%s' AND attempt = 1",
                              key);
    ck_assert_msg(att != NULL && strcmp(att, "succeeded") != 0 && strcmp(att, "retry") != 0,
                  "fz attempt 1: %s", att ? att : "NULL");
    free(att);
    kill(a, SIGTERM);
    ck_assert_int_eq(testenv_wait_exit(a, 15000), 0);
    free(want);
    free(pidt);
    free(pidf);
    free(key);
    testenv_stack_free(&e);
}
END_TEST

static Suite *worker_suite(void)
{
    Suite *s = suite_create("worker");
    TCase *tc = tcase_create("end_to_end");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_end_to_end_sink_gets_one_row_per_run);
    tcase_add_test(tc, test_worker_c_handler_retries_then_succeeds_with_context);
    tcase_add_test(tc, test_worker_holds_an_early_delivery_and_starts_it_when_due);
    tcase_add_test(tc, test_worker_leaves_a_handler_that_ignores_should_stop);
    tcase_add_test(tc, test_worker_leaves_a_timed_out_handler_that_ignores_should_stop);
    tcase_add_test(tc, test_worker_leaves_a_running_sql_handler_at_shutdown);
    tcase_add_test(tc, test_worker_records_unstorable_errors_and_commit_failures);
    tcase_add_test(tc, test_worker_sql_handler_failure_rolls_back_and_retries);
    tcase_add_test(tc, test_worker_sql_handler_holds_no_lock_while_its_statement_runs);
    tcase_add_test(tc, test_worker_cancels_an_sql_handler_whose_run_was_taken_over);
    tcase_add_test(tc, test_warren_run_prints_one_line_per_finished_run);
    tcase_add_test(tc, test_worker_queue_policy_runs_the_newer_run_after_the_older);
    tcase_add_test(tc, test_worker_exec_exit_64_and_65_fail_permanently);
    suite_add_tcase(s, tc);

    tc = tcase_create("throughput");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_sql_batch_rolls_back_only_the_failing_and_stale_runs);
    tcase_add_test(tc, test_worker_sql_batch_whose_commit_fails_is_run_one_by_one);
    tcase_add_test(tc, test_worker_sql_batch_pipelined_runs_a_failing_statement_once);
    tcase_add_test(tc, test_worker_sql_batch_pipelined_keeps_each_runs_timeout);
    tcase_add_test(tc, test_worker_sql_batch_remote_connection_error_is_the_runs);
    tcase_add_test(tc, test_worker_sql_batches_run_every_statement_once);
    tcase_add_test(tc, test_worker_sql_batch_measures_each_statement);
    tcase_add_test(tc, test_worker_sql_batches_fill_with_quick_statements_and_keep_slow_ones_apart);
    tcase_add_test(tc, test_worker_sql_take_claims_runs_and_completes_in_the_effects_transaction);
    tcase_add_test(tc, test_worker_sql_take_completes_a_failing_statement_as_a_retry_run_once);
    tcase_add_test(tc, test_worker_sql_take_gives_back_what_it_cannot_take_and_can_be_turned_off);
    tcase_add_test(tc, test_worker_sql_take_gives_a_statement_that_turns_slow_back_to_the_claim);
    tcase_add_test(tc, test_worker_sql_take_takes_skip_jobs_runs_under_their_overlap_lock);
    tcase_add_test(tc, test_worker_prefetch_holds_deliveries_beyond_the_slots_unclaimed);
    suite_add_tcase(s, tc);

    tc = tcase_create("leases");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_killed_mid_run_another_completes_after_lease_expiry);
    tcase_add_test(tc, test_worker_stopped_past_its_lease_is_fenced_off);
    tcase_add_test(tc, test_worker_stopped_while_its_handler_finishes_does_not_complete);
    tcase_add_test(tc, test_worker_stops_a_handler_whose_run_was_cancelled_by_a_newer_run);
    suite_add_tcase(s, tc);

    tc = tcase_create("retries");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_retries_until_success_then_until_dead_and_replay);
    tcase_add_test(tc, test_worker_timeout_kills_the_process_group_and_retries);
    tcase_add_test(tc, test_worker_retry_wakes_the_relay_before_its_tick);
    suite_add_tcase(s, tc);

    tc = tcase_create("shutdown");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_sigterm_lets_handlers_finish_then_stops_the_rest);
    tcase_add_test(tc, test_worker_stopping_hands_new_deliveries_to_other_workers);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad_messages");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_dead_letters_malformed_and_unknown_messages_with_a_reason);
    tcase_add_test(tc, test_worker_runs_the_handler_the_claim_names_not_the_messages);
    tcase_add_test(tc, test_worker_runs_every_enqueued_run_of_a_template_without_overlap);
    tcase_add_test(tc, test_poison_message_ends_in_warren_dead_via_delivery_limit);
    suite_add_tcase(s, tc);

    tc = tcase_create("loop_bounds");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_chatty_handler_does_not_stall_the_other_slots);
    tcase_add_test(tc, test_worker_row_locked_by_an_operator_blocks_only_its_own_run);
    tcase_add_test(tc, test_worker_completes_beside_a_run_whose_row_is_locked);
    tcase_add_test(tc, test_worker_claims_beside_a_run_whose_row_is_locked);
    suite_add_tcase(s, tc);

    tc = tcase_create("database_frozen");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_worker_stops_a_handler_at_lease_minus_margin_when_the_database_is_frozen);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    testenv_amqp_url();
    test_logger.ud = stderr;
    SRunner *sr = srunner_create(worker_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
