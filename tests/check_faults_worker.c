/* check_faults_worker.c: the worker while PostgreSQL restarts under it
 * (tests/servers.sh restart-pg): no run lost, no effect twice, no message
 * acknowledged before its completion committed; and RabbitMQ restarted
 * (restart-rabbit) while runs flow. Separate from check_worker because the
 * restarts disturb every test running at that moment. Also: PostgreSQL
 * stopped while handlers run, whose messages must then stay unacknowledged.
 * Every handler logs each execution (TESTENV_EXECLOG, no key: sql handlers
 * inside their statement, exec handlers by appending to DIR/execs.log), and
 * every extra execution must be one the fault caused; every restart is proved
 * (a new server identity, the workers' reconnect in their logs). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "testenv.h"

static warren_logger test_logger = {warren_log_stderr, NULL, WARREN_LOG_ERROR};

/* A fresh database and vhost, a config of its servers plus `rest` (planner,
 * worker and jobs settings, the jobs on one queue), synced, the topology of
 * its queue declared, and `tables` created (SQL); SINK_URL names the
 * database for the handlers. */
typedef testenv_stack fenv;

static void fenv_setup(fenv *fe, const char *rest, const char *queue, const char *tables)
{
    testenv_stack_init(fe, "warren-check-faults");
    char *text = testenv_fmt("database = { url = \"%s\"; };\nbroker = { url = \"%s\"; };\n%s",
                             fe->db, fe->amqp, rest);
    testenv_stack_config(fe, text);
    free(text);
    size_t nq = 0;
    const char **queues = warren_config_queues(fe->cfg, &nq);
    ck_assert_msg(nq == 1 && strcmp(queues[0], queue) == 0, "the jobs' queue is not only %s",
                  queue);
    free(queues);
    testenv_exec(fe->db, tables);
    testenv_execlog_create(fe->db);
    setenv("SINK_URL", fe->db, 1);
    setenv("MARK_DIR", fe->dir, 1);
}

/* Moves DIR/execs.log (the exec handlers' executions) into TESTENV_EXECLOG. */
static void load_execs(const fenv *fe)
{
    char *log = testenv_fmt("%s/execs.log", fe->dir);
    char *taken = testenv_fmt("%s/execs.log.loaded", fe->dir);
    if (rename(log, taken) == 0) {
        testenv_execlog_load(fe->db, taken);
        unlink(taken);
    }
    free(taken);
    free(log);
}

static void assert_executions(const fenv *fe, const char *runs_sql, const char *log_sql,
                              const char *explained_sql)
{
    char *why = testenv_executions_mismatch(fe->db, runs_sql, log_sql, explained_sql);
    ck_assert_msg(why == NULL, "executions: %s", why);
}

/* The server's identity (testenv_server_identity), which must exist. */
static char *identity(const char *which)
{
    char *id = testenv_server_identity(which);
    ck_assert_msg(id != NULL, "no identity of the %s server", which);
    return id;
}

/* The restart happened: the server's identity changed. */
static void assert_restarted(const char *which, char *before)
{
    char *after = identity(which);
    fprintf(stderr, "%s: before the restart %s, after %s\n", which, before, after);
    ck_assert_msg(strcmp(before, after) != 0, "%s did not restart: still %s", which, after);
    free(before);
    free(after);
}

/* Lines in the file at path (0 if none). */
static long file_lines(const char *path)
{
    long n = 0;
    int c;
    FILE *f = fopen(path, "r");
    while (f != NULL && (c = getc(f)) != EOF)
        n += c == '\n';
    if (f != NULL)
        fclose(f);
    return n;
}

/* 400 sql-handler runs and 60 exec-handler runs through the real planner and
 * two `warren worker` processes; `which` server restarts while they flow. */
/* n runs of job due at due (an SQL expression), with distinct past
 * scheduled times; the planner is told at once. */
static void insert_runs(const char *db, const char *job, int n, const char *due)
{
    char *sql = testenv_fmt("INSERT INTO warren.runs (job, scheduled_at, due_at, origin) "
                            "SELECT '%s', date_trunc('second', now()) - make_interval(secs => g), "
                            "%s, 'trigger' FROM generate_series(1, %d) g; NOTIFY warren_jobs",
                            job, due, n);
    ck_assert_int_ge(testenv_psql(db, sql, NULL), 0);
    free(sql);
}

static void run_restart_scenario(const char *which)
{
    fenv fe;

    /* sink.n counts how often the sql handler's effect committed: must stay 1. */
    fenv_setup(
        &fe,
        "planner = { tick = \"100ms\"; reconcile_grace = \"5s\"; horizon = \"10s\"; };\n"
        "worker = { concurrency = 8; shutdown_grace = \"5s\"; heartbeat_margin = \"2s\";\n"
        "           exec_env = [\"MARK_DIR\", \"SINK_URL\"]; };\n"
        "jobs = (\n"
        " { name = \"fs\"; at = \"2099-01-01T00:00:00Z\"; queue = \"f\"; overlap = \"allow\";\n"
        "   handler = { sql = \"WITH x AS (INSERT INTO public.execlog (run_key, who) VALUES ($1, "
        "'fs')) INSERT INTO sink (run_key, n) VALUES ($1, 1) ON CONFLICT (run_key) "
        "DO UPDATE SET n = sink.n + 1\"; };\n"
        "   lease = \"10s\"; retry = { base = \"100ms\"; cap = \"500ms\"; max_attempts = 20; }; "
        "},\n"
        " { name = \"fe\"; at = \"2099-01-01T00:00:00Z\"; queue = \"f\"; overlap = \"allow\";\n"
        "   handler = { exec = [\"/bin/sh\", \"-c\", \"echo $WARREN_RUN_KEY $WARREN_ATTEMPT >> "
        "$MARK_DIR/execs.log; sleep 6; psql \\\"$SINK_URL\\\" -qAtc \\\"INSERT "
        "INTO esink VALUES ('$WARREN_RUN_KEY') ON CONFLICT DO NOTHING\\\"\"]; };\n"
        "   lease = \"10s\"; retry = { base = \"100ms\"; cap = \"500ms\"; max_attempts = 20; }; }\n"
        ");\n",
        "f",
        "CREATE TABLE sink (run_key text PRIMARY KEY, n int NOT NULL);"
        "CREATE TABLE esink (run_key text PRIMARY KEY)");
    char *db = fe.db;

    testenv_stack_planner_start(&fe, &test_logger);

    pid_t w[2] = {testenv_stack_worker(&fe, NULL, "fw0", "w0.log", 1),
                  testenv_stack_worker(&fe, NULL, "fw1", "w1.log", 1)};
    /* 400 sql runs and 60 exec runs, due now. */
    insert_runs(db, "fs", 400, "now()");
    insert_runs(db, "fe", 60, "now()");
    /* Restart PostgreSQL while completions are flowing. */
    ck_assert(testenv_wait_for(db, "t", 20000,
                               "SELECT count(*) > 20 FROM warren.runs WHERE state = 'succeeded'"));
    char *before = NULL;
    testenv_psql(db, "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'", &before);
    char *server = identity(which);
    ck_assert_int_eq(testenv_restart(which), 0);
    /* The exec runs take 6 s each, at most 16 at a time (at least 22 s for
     * the 60; a restarted RabbitMQ node under load took over 10 s): some
     * were still running or queued when the server went down, or the
     * restart proved nothing. Read
     * at once, before the identity check, which may wait up to 30 s for a
     * restarted RabbitMQ node to report its pid while the workers go on. */
    char *after = NULL;
    testenv_psql(db, "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'", &after);
    assert_restarted(which, server);
    /* the end of the restart on the database clock: an attempt that failed
     * and had started by then may have been ended by the restart */
    ck_assert_int_ge(
        testenv_psql(db, "CREATE TABLE restarted AS SELECT clock_timestamp() AS t", NULL), 0);
    fprintf(stderr, "restart-%s done with %s runs succeeded before, %s right after\n", which,
            before ? before : "?", after ? after : "?");
    ck_assert_msg(before != NULL && atoi(before) < 460, "everything finished before the restart");
    free(before);
    ck_assert_msg(after != NULL && atoi(after) < 460, "everything finished during the restart");
    free(after);
    /* Everything completes: nothing lost. */
    ck_assert(testenv_wait_for(db, "460", 90000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    /* Exactly-once effects: the sql handler's effect committed once per run, and the
     * exec handler's idempotent effect exists once per run. */
    ck_assert(testenv_wait_for(db, "400|400|1", 1000,
                               "SELECT count(*) || '|' || sum(n) || '|' || max(n) "
                               "FROM sink"));
    ck_assert(testenv_wait_for(db, "60", 1000, "SELECT count(*) FROM esink"));
    /* Every attempt that ran is accounted for: none left open. */
    ck_assert(testenv_wait_for(db, "0", 1000,
                               "SELECT count(*) FROM warren.attempts WHERE outcome IS NULL"));
    for (int i = 0; i < 2; i++) {
        int status;
        kill(w[i], SIGTERM);
        waitpid(w[i], &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d exit %d", i,
                      status);
    }
    testenv_planner_stop(&fe.planner);
    /* Both workers saw the restart and reconnected. */
    for (int i = 0; i < 2; i++) {
        char log[16], *needle = strcmp(which, "pg") == 0
                                    ? testenv_fmt("reconnected to PostgreSQL")
                                    : testenv_fmt("worker fw%d: reconnected to RabbitMQ", i);
        snprintf(log, sizeof(log), "w%d.log", i);
        ck_assert_msg(testenv_stack_log_wait(&fe, log, needle, 0), "worker fw%d did not reconnect",
                      i);
        free(needle);
    }
    /* Executions. The sql handler's execution log commits with its effect:
     * exactly one per run, whatever the restart interrupted. */
    load_execs(&fe);
    assert_executions(&fe, "SELECT run_key FROM warren.runs WHERE job = 'fs'",
                      "SELECT run_key FROM public.execlog WHERE who = 'fs'", NULL);
    /* The exec handler: each execution is an attempt warren recorded, no
     * attempt executed twice, every succeeded attempt executed... */
    assert_executions(&fe,
                      "SELECT run_key || '#' || attempt FROM warren.attempts WHERE run_key LIKE "
                      "'fe@%' AND (outcome = 'succeeded' OR run_key || '#' || attempt IN (SELECT "
                      "run_key || '#' || attempt FROM public.execlog))",
                      "SELECT run_key || '#' || attempt FROM public.execlog WHERE run_key LIKE "
                      "'fe@%'",
                      NULL);
    /* ...and a run executed more than once only when an attempt of it failed
     * (the restart is the only fault here) having started before the restart
     * was over. */
    assert_executions(&fe, "SELECT run_key FROM warren.runs WHERE job = 'fe'",
                      "SELECT run_key FROM public.execlog WHERE run_key LIKE 'fe@%'",
                      "SELECT run_key FROM warren.attempts WHERE outcome IN ('retry', "
                      "'lease_lost') AND started_at <= (SELECT t FROM restarted)");
    char *extra = testenv_sql1(db, "SELECT count(*) - count(DISTINCT run_key) FROM "
                                   "public.execlog WHERE run_key LIKE 'fe@%'");
    fprintf(stderr, "restart-%s: %s extra exec-handler executions, each after a failed attempt\n",
            which, extra ? extra : "?");
    free(extra);
    testenv_stack_free(&fe);
}

START_TEST(test_worker_survives_postgresql_restart_during_completions)
{
    run_restart_scenario("pg");
}
END_TEST

/* RabbitMQ restarts: deliveries in flight are requeued and redelivered; the
 * workers reconnect, finish what they were running (recorded in PostgreSQL;
 * the acks of the dead connection are skipped) and the claim dedupes the
 * redeliveries. */
START_TEST(test_worker_survives_rabbitmq_restart_during_runs)
{
    run_restart_scenario("rabbit");
}
END_TEST

/* With PostgreSQL down, finished handlers cannot record their outcome, so
 * their messages must stay unacknowledged: killed then, the worker leaves
 * every one of them to come back to the ready queue. A worker that acked
 * before its completion committed would leave fewer. Then, with PostgreSQL
 * back, another worker runs them all, each effect once. */
START_TEST(test_worker_keeps_messages_unacked_while_postgresql_is_down)
{
    warren_error err = {0};
    warren_broker *b = NULL;
    uint32_t ready = 0, consumers = 0;
    fenv fe;

    fenv_setup(
        &fe,
        "worker = { concurrency = 8; shutdown_grace = \"5s\"; heartbeat_margin = \"2s\";\n"
        "           exec_env = [\"MARK_DIR\", \"SINK_URL\"]; };\n"
        "jobs = (\n"
        " { name = \"fd\"; at = \"2099-01-01T00:00:00Z\"; queue = \"d\"; overlap = \"allow\";\n"
        "   handler = { exec = [\"/bin/sh\", \"-c\", \"echo $WARREN_RUN_KEY $WARREN_ATTEMPT >> "
        "$MARK_DIR/execs.log; sleep 2; psql \\\"$SINK_URL\\\" -qAtc \\\"INSERT INTO esink "
        "VALUES ('$WARREN_RUN_KEY') ON CONFLICT DO NOTHING\\\"; echo $WARREN_RUN_KEY >> "
        "$MARK_DIR/ends.log\"]; };\n"
        "   lease = \"60s\"; }\n"
        ");\n",
        "d", "CREATE TABLE esink (run_key text PRIMARY KEY)");
    char *db = fe.db;
    ck_assert_int_eq(warren_broker_open(fe.amqp, NULL, &b, &err), 0);

    testenv_stack_planner_start(&fe, &test_logger);
    pid_t w = testenv_stack_worker(&fe, NULL, "fd1", "w.log", 1);
    insert_runs(db, "fd", 6, "now()");
    ck_assert(testenv_wait_for(db, "6", 20000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'running'"));
    /* what the worker held when it was stopped and killed: these runs, and
     * only these, may execute twice */
    ck_assert_int_ge(testenv_psql(db,
                                  "CREATE TABLE held AS SELECT run_key FROM warren.runs WHERE "
                                  "state = 'running' AND lease_owner = 'fd1'",
                                  NULL),
                     0);
    /* The handlers sleep 2 s: stop the planner (nothing may republish), then
     * PostgreSQL, while they run; they finish with nowhere to record it. */
    testenv_planner_stop(&fe.planner);
    char *server = identity("pg");
    ck_assert_int_eq(testenv_servers("stop-pg"), 0);
    char *ends = testenv_fmt("%s/ends.log", fe.dir);
    for (int i = 0; i < 300 && file_lines(ends) < 6; i++)
        testenv_sleep_ms(100);
    ck_assert_msg(file_lines(ends) == 6, "%ld of 6 handlers finished", file_lines(ends));
    free(ends);
    /* deliberately 2 s more: the worker tries to record the six outcomes (and
     * would ack now if it acked before its completion committed); nothing
     * outside it shows when it has tried */
    testenv_sleep_ms(2000);
    ck_assert_int_eq(warren_broker_queue_count(b, "warren.ready.d", &ready, &consumers, &err), 0);
    ck_assert_uint_eq(ready, 0); /* all six are still with the worker */
    kill(w, SIGKILL);
    int status;
    waitpid(w, &status, 0);
    /* Its connection closed: every unacknowledged message is back. */
    for (int i = 0; i < 50 && ready < 6; i++) {
        testenv_sleep_ms(100);
        ck_assert_int_eq(warren_broker_queue_count(b, "warren.ready.d", &ready, &consumers, &err),
                         0);
    }
    ck_assert_uint_eq(ready, 6);
    /* The handlers' own effects happened (they are idempotent): PostgreSQL
     * back, a new worker claims them after the lease and records each once. */
    ck_assert_int_eq(testenv_servers("restart-pg"), 0);
    assert_restarted("pg", server);
    ck_assert_int_ge(testenv_psql(db, "UPDATE warren.runs SET lease_until = now()", NULL), 0);
    testenv_stack_planner_start(&fe, &test_logger);
    w = testenv_stack_worker(&fe, NULL, "fd2", "w.log", 1);
    ck_assert(testenv_wait_for(db, "6", 60000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    ck_assert(testenv_wait_for(db, "6", 1000, "SELECT count(*) FROM esink"));
    kill(w, SIGTERM);
    waitpid(w, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exit %d", status);
    testenv_planner_stop(&fe.planner);
    /* Six runs, each executed by the killed worker and once more by the new
     * one: a second execution only of a run the killed worker held, never a
     * third. */
    load_execs(&fe);
    ck_assert(testenv_wait_for(db, "6", 0, "SELECT count(*) FROM held"));
    assert_executions(&fe, "SELECT run_key FROM warren.runs", "SELECT run_key FROM public.execlog",
                      "SELECT run_key FROM held");
    ck_assert(testenv_wait_for(db, "12|2", 0,
                               "SELECT sum(n) || '|' || max(n) FROM (SELECT count(*) AS n FROM "
                               "public.execlog GROUP BY run_key) x"));
    warren_broker_free(b);
    testenv_stack_free(&fe);
}
END_TEST

/* The number in the file at path (0 if none). */
static long file_long(const char *path)
{
    char buf[32] = "";
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) == NULL)
            buf[0] = '\0';
        fclose(f);
    }
    return atol(buf);
}

/* Deliveries a worker holds unclaimed (PostgreSQL down) when it is told to
 * stop go back to their queue at once, not when its grace ends. */
START_TEST(test_stopping_worker_gives_back_deliveries_it_could_not_claim)
{
    warren_error err = {0};
    warren_broker *b = NULL;
    uint32_t ready = 0, consumers = 0;
    fenv fe;
    int status;

    fenv_setup(&fe,
               "worker = { concurrency = 4; shutdown_grace = \"40s\";\n"
               "           exec_env = [\"MARK_DIR\", \"SINK_URL\"]; };\n"
               "jobs = (\n"
               " { name = \"gl\"; at = \"2099-01-01T00:00:00Z\"; queue = \"g\"; lease = \"60s\";\n"
               "   handler = { exec = [\"/bin/sh\", \"-c\", \"echo $WARREN_RUN_KEY "
               "$WARREN_ATTEMPT >> $MARK_DIR/execs.log; "
               "echo $$ > \\\"$MARK_DIR/long.pid\\\"; exec sleep 60\"]; }; },\n"
               " { name = \"gq\"; at = \"2099-01-01T00:00:00Z\"; queue = \"g\"; overlap = "
               "\"allow\";\n"
               "   handler = { exec = [\"/bin/sh\", \"-c\", \"echo $WARREN_RUN_KEY "
               "$WARREN_ATTEMPT >> $MARK_DIR/execs.log\"]; }; }\n"
               ");\n",
               "g", "SELECT 1");
    char *db = fe.db;
    setenv("MARK_DIR", fe.dir, 1);
    ck_assert_int_eq(warren_broker_open(fe.amqp, NULL, &b, &err), 0);
    testenv_stack_planner_start(&fe, &test_logger);
    pid_t w = testenv_stack_worker(&fe, NULL, "g1", "w.log", 1);
    /* A long run keeps the worker in its grace. */
    ck_assert_int_ge(
        testenv_psql(db,
                     "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES "
                     "('gl', date_trunc('second', now()) - interval '1 minute', now(), 'trigger');"
                     "NOTIFY warren_jobs",
                     NULL),
        0);
    ck_assert(
        testenv_wait_for(db, "running", 20000, "SELECT state FROM warren.runs WHERE job = 'gl'"));
    /* Two quick runs due in 5 s, published to a delay queue before
     * PostgreSQL stops. */
    insert_runs(db, "gq", 2, "now() + interval '5 seconds'");
    ck_assert(testenv_wait_for(
        db, "2", 4000,
        "SELECT count(*) FROM warren.runs WHERE job = 'gq' AND state = 'published'"));
    testenv_planner_stop(&fe.planner);
    char *log_path = testenv_fmt("%s/w.log", fe.dir);
    char *server = identity("pg");
    ck_assert_int_eq(testenv_servers("stop-pg"), 0);
    /* Released and delivered to the worker, which cannot claim them: both
     * held unacknowledged (with the long run's: 3), none ready. (Its failed
     * claim is not always in the log: only the first failing call is, and
     * that may be the long run's heartbeat.) */
    long unacked = -1;
    for (int i = 0; i < 200 && unacked != 3; i++) {
        testenv_sleep_ms(100);
        unacked = testenv_queue_unacked(fe.amqp, "warren.ready.g");
    }
    if (unacked != 3 ||
        warren_broker_queue_count(b, "warren.ready.g", &ready, &consumers, &err) != 0 ||
        ready != 0) {
        testenv_servers("restart-pg");
        ck_abort_msg("the two runs were not delivered to the worker (%ld unacknowledged with the "
                     "long run's, %u ready): %s",
                     unacked, ready, err.message);
    }
    kill(w, SIGTERM);
    int counted = 1;
    for (int i = 0; i < 30 && counted && ready < 2; i++) {
        testenv_sleep_ms(100);
        counted = warren_broker_queue_count(b, "warren.ready.g", &ready, &consumers, &err) == 0;
    }
    int alive = testenv_pid_alive(w);
    /* PostgreSQL back before any assertion can end the test. */
    ck_assert_int_eq(testenv_servers("restart-pg"), 0);
    assert_restarted("pg", server);
    ck_assert_msg(counted, "queue count: %s", err.message);
    ck_assert_msg(alive, "the worker exited: the test proves nothing");
    ck_assert_uint_eq(ready, 2); /* back while the worker is still in its grace */
    /* End the long handler rather than wait out the grace: the worker
     * records it as a retry and exits 0. */
    char *pid_path = testenv_fmt("%s/long.pid", fe.dir);
    long long_pid = file_long(pid_path);
    free(pid_path);
    ck_assert_int_gt(long_pid, 1);
    kill((pid_t)long_pid, SIGKILL);
    for (int i = 0; i < 300 && testenv_pid_alive(w); i++)
        testenv_sleep_ms(100);
    ck_assert_int_eq(waitpid(w, &status, 0), w);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exit %d", status);
    ck_assert_msg(testenv_file_wait(log_path, "given back 2)", 0),
                  "the worker's last line does not count 2 deliveries given back");
    free(log_path);
    ck_assert(testenv_wait_for(db, "retry", 5000,
                               "SELECT outcome FROM warren.attempts WHERE run_key LIKE 'gl@%'"));
    /* the worker recorded that retry over a new connection */
    ck_assert_msg(testenv_stack_log_wait(&fe, "w.log", "reconnected to PostgreSQL", 0),
                  "the worker did not reconnect after the restart");
    /* The long run executed once; the two given back never ran here. */
    load_execs(&fe);
    assert_executions(&fe, "SELECT run_key FROM warren.runs WHERE job = 'gl'",
                      "SELECT run_key FROM public.execlog", NULL);
    warren_broker_free(b);
    testenv_stack_free(&fe);
}
END_TEST

/* The connection drops after a claim committed, before its answer arrived:
 * the worker takes those runs back at once (warren.reclaim_many) instead of
 * dropping its deliveries as duplicates and leaving the runs to the reaper
 * after their 60 s lease, which with max_attempts = 1 would make them dead
 * without ever running. The fault: claim_many is wrapped, once, to commit the
 * real claim through dblink (another session) and then end its own backend. */
START_TEST(test_worker_takes_back_runs_whose_claim_answer_was_lost)
{
    fenv fe;
    int status;

    fenv_setup(&fe,
               "worker = { concurrency = 4; exec_env = [\"MARK_DIR\", \"SINK_URL\"]; };\n"
               "jobs = (\n"
               " { name = \"la\"; at = \"2099-01-01T00:00:00Z\"; queue = \"l\"; overlap = "
               "\"allow\"; lease = \"60s\";\n"
               "   retry = { max_attempts = 1; };\n"
               "   handler = { sql = \"WITH x AS (INSERT INTO public.execlog (run_key, who) "
               "VALUES ($1, 'la')) INSERT INTO lsink VALUES ($1)\"; }; }\n"
               ");\n",
               "l",
               "CREATE TABLE lsink (run_key text PRIMARY KEY);"
               "CREATE TABLE lose_answer (n int); INSERT INTO lose_answer VALUES (1);"
               "CREATE EXTENSION IF NOT EXISTS dblink;"
               /* the real claim_many under another name (its body names itself) */
               "DO $$ BEGIN EXECUTE replace(replace(pg_get_functiondef("
               "'warren.claim_many(text[], text)'::regprocedure), 'warren.claim_many(', "
               "'warren.claim_many_real('), 'claim_many.', 'claim_many_real.'); END $$");
    char *db = fe.db;
    /* a claim of the job's runs, not the worker's warm-up of its connection
     * (warren_store_warm_up: the key '@warm-up') */
    char *wrap = testenv_fmt(
        "CREATE OR REPLACE FUNCTION warren.claim_many(run_keys text[], worker text) "
        "RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, "
        "payload jsonb, lease_seconds int, template text) LANGUAGE plpgsql AS $f$ BEGIN "
        "IF run_keys[1] LIKE 'la@%%' AND EXISTS (SELECT 1 FROM public.lose_answer) THEN "
        "  PERFORM n FROM public.dblink('%s', format('DELETE FROM public.lose_answer; "
        "SELECT count(*) FROM warren.claim_many_real(%%L::text[], %%L)', run_keys, worker)) "
        "AS t(n bigint); "
        "  PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(10); "
        "END IF; "
        "RETURN QUERY SELECT * FROM warren.claim_many_real(run_keys, worker); END $f$",
        db);
    ck_assert_int_ge(testenv_psql(db, wrap, NULL), 0);
    free(wrap);
    testenv_stack_planner_start(&fe, &test_logger);
    pid_t w = testenv_stack_worker(&fe, NULL, "la1", "w.log", 1);
    insert_runs(db, "la", 3, "now()");
    /* Well within the 60 s lease: taken back, not reaped. */
    int done = testenv_wait_for(db, "3", 15000,
                                "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'");
    kill(w, SIGTERM);
    waitpid(w, &status, 0);
    testenv_planner_stop(&fe.planner);
    ck_assert_msg(done, "the runs were not taken back within 15 s (state: %s)",
                  testenv_sql1f(db, "SELECT string_agg(state || ':' || attempt, ',') FROM "
                                    "warren.runs"));
    /* The fault happened: the first claim committed and its answer was lost.
     * That batch held the deliveries that had arrived by then (all three, or
     * fewer when the third came in a later read); each of its runs lost
     * attempt 1 and succeeded as attempt 2, the others succeeded at once. */
    ck_assert(testenv_wait_for(db, "0", 0, "SELECT count(*) FROM lose_answer"));
    char *lost = testenv_sql1f(db, "SELECT count(*) FROM warren.attempts WHERE attempt = 1 AND "
                                   "outcome = 'lease_lost' AND error LIKE '%%did not reach "
                                   "worker la1%%'");
    ck_assert_msg(lost != NULL && atoi(lost) >= 1, "no run went through the lost claim (%s)",
                  lost ? lost : "?");
    ck_assert(
        testenv_wait_for(db, lost, 0,
                         "SELECT count(*) FROM warren.attempts WHERE attempt = 2 AND outcome = "
                         "'succeeded' AND worker = 'la1'"));
    ck_assert(testenv_wait_for(db, "3", 0,
                               "SELECT count(*) FROM warren.attempts WHERE outcome = 'succeeded'"));
    ck_assert(testenv_wait_for(db, "3", 0, "SELECT count(*) FROM lsink"));
    /* the lost claim ran nothing: one committed execution per run */
    assert_executions(&fe, "SELECT run_key FROM warren.runs", "SELECT run_key FROM public.execlog",
                      NULL);
    free(lost);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exit %d", status);
    char *log_path = testenv_fmt("%s/w.log", fe.dir);
    ck_assert_msg(testenv_file_wait(log_path, "claim answer was lost", 0),
                  "no log line names the take-back");
    free(log_path);
    testenv_stack_free(&fe);
}
END_TEST

/* The connection of a take (worker.sql_take: claim, statement and completion
 * in one transaction) drops before its COMMIT: warren.finish_many, wrapped
 * to end its own backend once (a sequence counts the calls: nextval is not
 * rolled back). Nothing of that batch committed, so its runs go back to the
 * worker's loop, are claimed as usual and succeed, each as attempt 1 (no
 * attempt was ever recorded for the take), each effect once. A first wave
 * measures the statement (a statement not measured yet is claimed, not
 * taken). */
START_TEST(test_worker_claims_the_runs_of_a_take_whose_connection_dropped)
{
    fenv fe;
    int status;

    fenv_setup(&fe,
               "worker = { concurrency = 8; };\n"
               "jobs = (\n"
               " { name = \"tl\"; at = \"2099-01-01T00:00:00Z\"; queue = \"l\"; overlap = "
               "\"allow\"; retry = { max_attempts = 1; };\n"
               "   handler = { sql = \"WITH x AS (INSERT INTO public.execlog (run_key, who) "
               "VALUES ($1, 'tl')) INSERT INTO lsink VALUES ($1)\"; }; }\n"
               ");\n",
               "l",
               "CREATE TABLE lsink (run_key text PRIMARY KEY);"
               "CREATE SEQUENCE lose_take;"
               "DO $$ BEGIN EXECUTE replace(replace(pg_get_functiondef("
               "'warren.finish_many(text[], text, timestamptz)'::regprocedure), "
               "'warren.finish_many(', 'warren.finish_many_real('), 'finish_many.', "
               "'finish_many_real.'); END $$;"
               "CREATE OR REPLACE FUNCTION warren.finish_many(run_keys text[], worker text, "
               "taken_at timestamptz) RETURNS int LANGUAGE plpgsql AS $f$ BEGIN "
               /* a take's finish, not the worker's warm-up (no keys) */
               "IF cardinality(run_keys) > 0 AND nextval('public.lose_take') = 1 THEN "
               "  PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(10); "
               "END IF; "
               "RETURN warren.finish_many_real(run_keys, worker, taken_at); END $f$");
    char *db = fe.db;
    testenv_stack_planner_start(&fe, &test_logger);
    pid_t w = testenv_stack_worker(&fe, NULL, "tl1", "w.log", 1);
    insert_runs(db, "tl", 2, "now()");
    ck_assert(testenv_wait_for(db, "2", 15000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    ck_assert_int_ge(testenv_psql(db,
                                  "INSERT INTO warren.runs (job, scheduled_at, due_at, "
                                  "origin) SELECT 'tl', date_trunc('second', now()) - "
                                  "make_interval(secs => 100 + g), now() + interval '1 s', "
                                  "'trigger' FROM generate_series(1, 6) g; NOTIFY warren_jobs",
                                  NULL),
                     0);
    int done = testenv_wait_for(db, "8", 15000,
                                "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'");
    kill(w, SIGTERM);
    waitpid(w, &status, 0);
    testenv_planner_stop(&fe.planner);
    ck_assert_msg(done, "the runs did not succeed within 15 s (state: %s)",
                  testenv_sql1f(db, "SELECT string_agg(state || ':' || attempt, ',') FROM "
                                    "warren.runs"));
    /* the fault happened (a take reached finish_many and lost its backend) */
    ck_assert(testenv_wait_for(db, "t", 0, "SELECT is_called FROM lose_take"));
    ck_assert(
        testenv_wait_for(db, "8|8", 0,
                         "SELECT count(*) || '|' || count(*) FILTER (WHERE attempt = 1 AND outcome "
                         "= 'succeeded') FROM warren.attempts"));
    ck_assert(testenv_wait_for(db, "8", 0, "SELECT count(*) FROM lsink"));
    assert_executions(&fe, "SELECT run_key FROM warren.runs", "SELECT run_key FROM public.execlog",
                      NULL);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exit %d", status);
    testenv_stack_free(&fe);
}
END_TEST

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults_worker");
    TCase *tc = tcase_create("restart");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_worker_survives_postgresql_restart_during_completions);
    tcase_add_test(tc, test_worker_survives_rabbitmq_restart_during_runs);
    tcase_add_test(tc, test_worker_keeps_messages_unacked_while_postgresql_is_down);
    suite_add_tcase(s, tc);
    tc = tcase_create("shutdown");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stopping_worker_gives_back_deliveries_it_could_not_claim);
    suite_add_tcase(s, tc);
    tc = tcase_create("lost_answer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_worker_takes_back_runs_whose_claim_answer_was_lost);
    tcase_add_test(tc, test_worker_claims_the_runs_of_a_take_whose_connection_dropped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    testenv_amqp_url();
    SRunner *sr = srunner_create(faults_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
