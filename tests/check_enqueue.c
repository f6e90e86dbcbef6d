/* check_enqueue.c: one-shot runs from application code (warren.enqueue,
 * warren.enqueue_many; sql/functions/enqueue.sql) against real PostgreSQL and
 * RabbitMQ, with the real planner (its relay, woken by NOTIFY) and C workers
 * (`warren worker`) whose sql handler appends every execution to an
 * execution log with no unique key: a rollback leaves no run and sends
 * nothing; a commit delivers once; the same key twice gives one run; 10,000
 * enqueues of one job in one second run once each; an API job's run finds
 * its handler through its template; bad input at every call is refused with
 * a message naming the field, and nothing is written. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "testenv.h"

/* ------------------------------------------------------------ harness */

typedef testenv_stack env;

static warren_logger test_logger = {warren_log_stderr, NULL, WARREN_LOG_WARN};

/* The sql handler: one execution log row per execution (no key). */
#define SQL_HANDLER                                                                                \
    "handler = { sql = \"INSERT INTO " TESTENV_EXECLOG " (run_key, attempt, who) VALUES ($1, 0, "  \
    "$3::text)\"; };"

/* A fresh database and vhost; a config with job "mail" (queue q, far-future
 * one shot: only enqueues run it) and job "tmpl" (the handler an API job's
 * runs find through their template), synced; the topology; the log and an
 * application table "signups". planner_tick: the planner's tick (and its
 * horizon, at least 10 s). */
static void env_setup(env *e, const char *planner_tick, int concurrency)
{
    testenv_stack_init(e, "warren-check-enqueue");
    char *text = testenv_fmt(
        "database = { url = \"%s\"; };\n"
        "broker = { url = \"%s\"; };\n"
        "planner = { tick = \"%s\"; reconcile_grace = \"5s\"; horizon = \"%s\"; };\n"
        "worker = { concurrency = %d; shutdown_grace = \"3s\"; };\n"
        "jobs = (\n"
        "  { name = \"mail\"; at = \"2099-01-01T00:00:00Z\"; queue = \"q\"; overlap = \"allow\";\n"
        "    " SQL_HANDLER " },\n"
        "  { name = \"tmpl\"; at = \"2099-01-01T00:00:00Z\"; queue = \"q\"; overlap = \"allow\";\n"
        "    " SQL_HANDLER " }\n"
        ");\n",
        e->db, e->amqp, planner_tick, strcmp(planner_tick, "1s") == 0 ? "10s" : planner_tick,
        concurrency);
    testenv_stack_config(e, text);
    free(text);
    testenv_execlog_create(e->db);
    testenv_exec(e->db, "CREATE TABLE signups (email text PRIMARY KEY)");
}

/* The real planner on a thread, and n `warren worker` processes. */
static void start(env *e, int nworkers)
{
    testenv_stack_planner_start(e, &test_logger);
    testenv_stack_workers_start(e, nworkers);
    /* The planner's first tick took its partitions. */
    ck_assert(
        testenv_wait_for(e->db, "t", 30000, "SELECT count(*) > 0 FROM warren.planner_leases"));
}

/* Executions of the log against the runs of runs_sql: each exactly once. */
static void assert_each_once(env *e, const char *runs_sql)
{
    char *why = testenv_executions_mismatch(e->db, runs_sql, NULL, NULL);
    ck_assert_msg(why == NULL, "executions: %s", why);
}

/* ------------------------------------------------------------ transactions */

START_TEST(test_enqueue_rollback_leaves_no_run_and_sends_nothing)
{
    env e;
    env_setup(&e, "1s", 4);
    start(&e, 1);
    /* The application's row and the run in one transaction, rolled back. */
    testenv_exec(e.db,
                 "BEGIN; INSERT INTO signups VALUES ('ann@example.com');"
                 "SELECT * FROM warren.enqueue('mail', 'welcome:ann', NULL, '{\"to\": \"ann\"}');"
                 "ROLLBACK");
    /* A committed run after it: once it has executed, the planner has
     * relayed everything committed before it (it is due later). */
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('mail', 'barrier')");
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT state FROM warren.runs WHERE run_key = 'mail@barrier'"));
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM signups");
    ck_assert_sqlf(e.db, "mail@barrier", "SELECT string_agg(run_key, ',') FROM warren.runs");
    assert_each_once(&e, "SELECT 'mail@barrier'");
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.ready.q"), 0);
    testenv_stack_free(&e);
}
END_TEST

START_TEST(test_enqueue_commit_delivers_once_and_the_same_key_again_creates_nothing)
{
    env e;
    env_setup(&e, "1s", 4);
    start(&e, 2);
    ck_assert_sqlf(e.db, "mail@welcome:bob|true|planned",
                   "WITH a AS (INSERT INTO signups VALUES ('bob@example.com')) "
                   "SELECT run_key || '|' || created || '|' || state "
                   "FROM warren.enqueue('mail', 'welcome:bob', NULL, '{\"to\": \"bob\"}', 'acme')");
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT state FROM warren.runs WHERE run_key = 'mail@welcome:bob'"));
    /* The second enqueue, in its own transaction, names the run that holds
     * the key, and its state; it changes nothing. */
    ck_assert_sqlf(e.db, "mail@welcome:bob|false|succeeded",
                   "SELECT run_key || '|' || created || '|' || state FROM warren.enqueue('mail', "
                   "'welcome:bob', NULL, '{\"to\": \"someone else\"}')");
    ck_assert_sqlf(e.db, "mail@welcome:bob|false|succeeded",
                   "SELECT run_key || '|' || created || '|' || state FROM warren.enqueue_many("
                   "'[{\"job\": \"mail\", \"key\": \"welcome:bob\"}]')");
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('mail', 'barrier')");
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT state FROM warren.runs WHERE run_key = 'mail@barrier'"));
    ck_assert_sqlf(e.db, "2", "SELECT count(*) FROM warren.runs");
    /* What the handler got: the payload of the first enqueue, the tenant kept. */
    ck_assert_sqlf(
        e.db, "{\"to\": \"bob\"}|acme|enqueue",
        "SELECT (SELECT who FROM " TESTENV_EXECLOG " WHERE run_key = 'mail@welcome:bob') || '|' "
        "|| tenant || '|' || origin FROM warren.runs WHERE run_key = 'mail@welcome:bob'");
    assert_each_once(&e, "SELECT run_key FROM warren.runs");
    testenv_stack_free(&e);
}
END_TEST

/* Two sessions enqueue the same key at once: the second waits for the first
 * and then says the first's run holds the key; one run, one execution. */
START_TEST(test_enqueue_concurrent_same_key_gives_one_run)
{
    env e;
    env_setup(&e, "1s", 4);
    PGconn *a = PQconnectdb(e.db), *b = PQconnectdb(e.db);
    ck_assert_int_eq(PQstatus(a), CONNECTION_OK);
    ck_assert_int_eq(PQstatus(b), CONNECTION_OK);
    PQclear(PQexec(a, "BEGIN"));
    PGresult *r = PQexec(a, "SELECT created FROM warren.enqueue('mail', 'race')");
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    ck_assert_int_eq(PQsendQuery(b, "SELECT created, run_key FROM warren.enqueue('mail', 'race')"),
                     1);
    testenv_sleep_ms(
        300); /* b now waits on a's row; had it not got there yet, it finds it committed */
    PQclear(PQexec(a, "COMMIT"));
    r = PQgetResult(b);
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "f");
    ck_assert_str_eq(PQgetvalue(r, 0, 1), "mail@race");
    PQclear(r);
    while ((r = PQgetResult(b)) != NULL)
        PQclear(r);
    PQfinish(a);
    PQfinish(b);
    start(&e, 1);
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT string_agg(state, ',') FROM warren.runs"));
    assert_each_once(&e, "SELECT 'mail@race'");
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ volume */

START_TEST(test_enqueue_10000_distinct_keys_in_one_second_run_once_each)
{
    env e;
    env_setup(&e, "1s", 50);
    start(&e, 2);
    /* 10 transactions of 1,000 (enqueue_many), then the elapsed database
     * time of all ten (printed: the test asserts what ran, not how fast). */
    testenv_exec(e.db, "CREATE TABLE t0 AS SELECT clock_timestamp() AS t");
    for (int b = 0; b < 10; b++) {
        char *sql = testenv_fmt(
            "SELECT count(*) FILTER (WHERE created) FROM warren.enqueue_many((SELECT "
            "jsonb_agg(jsonb_build_object('job', 'mail', 'key', 'bulk:' || g, 'payload', "
            "jsonb_build_object('n', g)) ORDER BY g) FROM generate_series(%d, %d) g))",
            b * 1000 + 1, b * 1000 + 1000);
        char *n = testenv_sql1(e.db, sql);
        ck_assert_str_eq(n, "1000");
        free(n);
        free(sql);
    }
    char *took = testenv_sql1(
        e.db, "SELECT round(extract(epoch FROM clock_timestamp() - t) * 1000) FROM t0");
    fprintf(stderr, "check_enqueue: 10,000 enqueues (10 x enqueue_many of 1,000) took %s ms\n",
            took);
    free(took);
    ck_assert_sqlf(e.db, "10000", "SELECT count(*) FROM warren.runs WHERE origin = 'enqueue'");
    ck_assert(testenv_wait_for(e.db, "10000", 600000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    /* Exactly once each: 10,000 log rows, 10,000 distinct keys, and the
     * log matches the runs one to one. */
    ck_assert_sqlf(e.db, "10000|10000",
                   "SELECT count(*) || '|' || count(DISTINCT run_key) FROM " TESTENV_EXECLOG);
    assert_each_once(&e, "SELECT run_key FROM warren.runs");
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.attempts WHERE attempt <> 1");
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ wake-up, templates */

/* With a 5 min tick, the planner ticks at start and then only when woken.
 * The first run may go out in that first tick; the second is enqueued after
 * the first has run, so after the tick that published the first one had
 * relayed: only the relay's pass woken by an enqueue's NOTIFY (nothing
 * else here notifies: successful completions do not; and an enqueue wakes
 * the relay alone, not a whole tick: warren_planner_run) can publish it. */
START_TEST(test_enqueue_wakes_the_planner_by_notify)
{
    env e;
    env_setup(&e, "5m", 4);
    start(&e, 1);
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('mail', 'first')");
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT state FROM warren.runs WHERE run_key = 'mail@first'"));
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('mail', 'woken')");
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT state FROM warren.runs WHERE run_key = 'mail@woken'"));
    {
        /* published by the relay's pass alone: no whole tick after the first */
        warren_planner_stats st;
        warren_planner_stats_get(e.planner.planner, &st);
        ck_assert_msg(st.ticks == 1 && st.relay_passes >= 1, "ticks %llu, relay passes %llu",
                      (unsigned long long)st.ticks, (unsigned long long)st.relay_passes);
    }
    /* A run enqueued at a millisecond instant keeps it. */
    testenv_exec(e.db,
                 "CREATE TABLE later AS SELECT date_trunc('milliseconds', clock_timestamp() + "
                 "interval '1.5 s') + interval '0.7 ms' AS t");
    ck_assert_sqlf(
        e.db, "t",
        "SELECT scheduled_at = (SELECT date_trunc('milliseconds', t) + interval '1 ms' FROM "
        "later) FROM warren.enqueue('mail', 'later', (SELECT t FROM later))");
    ck_assert_sqlf(e.db, "t",
                   "SELECT due_at = scheduled_at FROM warren.runs WHERE run_key = 'mail@later'");
    ck_assert(testenv_wait_for(e.db, "succeeded", 60000,
                               "SELECT state FROM warren.runs WHERE run_key = 'mail@later'"));
    /* It did not start before its instant (the database's clock). */
    ck_assert_sqlf(e.db, "t",
                   "SELECT started_at >= scheduled_at FROM warren.runs WHERE run_key = "
                   "'mail@later'");
    assert_each_once(&e, "SELECT run_key FROM warren.runs");
    testenv_stack_free(&e);
}
END_TEST

/* An API job (origin api, template tmpl) is not in the worker's config: its
 * run's message carries "template": "tmpl" and the worker runs tmpl's
 * handler. A template itself takes enqueues too; a paused job still runs
 * what is enqueued (pause stops schedules). */
START_TEST(test_enqueue_into_an_api_job_runs_its_templates_handler)
{
    env e;
    env_setup(&e, "1s", 4);
    testenv_exec(
        e.db, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, origin, template, "
              "tenant, paused) VALUES ('tmpl.tenant-4711', 'at', '2099-01-01T00:00:00Z', 'q', "
              "'api', 'tmpl', 'tenant-4711', true)");
    start(&e, 1);
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('tmpl.tenant-4711', 'report:1')");
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('tmpl', 'direct')");
    ck_assert(testenv_wait_for(e.db, "2", 60000,
                               "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"));
    assert_each_once(&e, "SELECT run_key FROM warren.runs");
    /* The run's tenant is its job's when the enqueue names none. */
    ck_assert_sqlf(e.db, "<null>",
                   "SELECT tenant FROM warren.runs WHERE run_key = 'tmpl.tenant-4711@report:1'");
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ bad input */

static const struct {
    const char *call, *sqlstate, *message;
} bad_calls[] = {
    {"warren.enqueue('nope', 'k')", "22023", "warren.enqueue: job \"nope\" does not exist"},
    {"warren.enqueue('gone', 'k')", "22023", "job \"gone\" was removed"},
    {"warren.enqueue(NULL, 'k')", "22023", "job is required"},
    {"warren.enqueue('mail', NULL)", "22023", "key is required"},
    {"warren.enqueue('mail', '')", "22023", "key is required"},
    {"warren.enqueue('mail', repeat('k', 201))", "22023",
     "key is 201 characters long; at most 200"},
    {"warren.enqueue('mail', 'has space')", "22023",
     "key \"has space\" has a character outside [A-Za-z0-9._:/=+@-] (at position 4)"},
    {"warren.enqueue('mail', 'caf\u00e9')", "22023", "has a character outside"},
    {"warren.enqueue('mail', '-lead')", "22023", "must start with a letter or a digit"},
    {"warren.enqueue('mail', '2026-01-01T00:00:00Z')", "22023",
     "begins with a time of the form YYYY-MM-DDTHH:MM:SS"},
    {"warren.enqueue(repeat('j', 100), repeat('k', 160))", "22023", "together are at most 255"},
    {"warren.enqueue('mail', 'k', 'not a time')", "22007", "not a time"},
    {"warren.enqueue('mail', 'k', 'infinity')", "22023", "run_at must be a finite instant"},
    {"warren.enqueue('mail', 'k', NULL, '[1, 2]')", "22023",
     "payload must be a JSON object ({...}) or NULL (the job's payload), not a JSON array"},
    {"warren.enqueue('mail', 'k', NULL, '\"x\"')", "22023", "not a JSON string"},
    {"warren.enqueue('mail', 'k', NULL, NULL, 'bad tenant')", "22023",
     "tenant \"bad tenant\" is not a tenant name"},
    {"warren.enqueue_many(NULL)", "22023", "runs must be a JSON array of objects"},
    {"warren.enqueue_many('{\"job\": \"mail\"}')", "22023", "not a JSON object"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"a\"}, 7]')", "22023",
     "runs[1] is a JSON number"},
    {"warren.enqueue_many('[{\"job\": \"mail\"}]')", "22023", "runs[0]: \"key\" is missing"},
    {"warren.enqueue_many('[{\"key\": \"k\"}]')", "22023", "runs[0]: \"job\" is missing"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"runAt\": \"x\"}]')", "22023",
     "runs[0] has the unknown field \"runAt\""},
    {"warren.enqueue_many('[{\"job\": [\"mail\"], \"key\": \"k\"}]')", "22023",
     "runs[0].job must be a string, not a JSON array"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": 42}]')", "22023",
     "runs[0].key must be a string, not a JSON number"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"a\"}, {\"job\": \"mail\", \"key\": "
     "\"b\", \"run_at\": 17}]')",
     "22023", "runs[1].run_at must be an RFC 3339 string"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"run_at\": \"tomorrow\"}]')",
     "22023", "runs[0].run_at \"tomorrow\" is not an RFC 3339 instant with a UTC offset"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"run_at\": "
     "\"2026-12-01T09:00:00\"}]')",
     "22023", "with a UTC offset"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"a\"}, {\"job\": \"mail\", \"key\": "
     "\"k\", \"run_at\": \"2026-02-30T00:00:00Z\"}]')",
     "22023", "runs[1].run_at \"2026-02-30T00:00:00Z\" is not a valid instant"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"payload\": [1]}]')", "22023",
     "runs[0].payload must be a JSON object or null"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"tenant\": 5}]')", "22023",
     "runs[0].tenant must be a string or null"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"ok\"}, {\"job\": \"nope\", \"key\": "
     "\"k\"}]')",
     "22023", "runs[1]: job \"nope\" does not exist"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"ok\"}, {\"job\": \"mail\", \"key\": "
     "\"bad key\"}]')",
     "22023", "runs[1]: key \"bad key\" has a character outside"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"tenant\": \"a/b\"}]')", "22023",
     "runs[0]: tenant \"a/b\" is not a tenant name"},
    {"warren.enqueue_many((SELECT jsonb_agg(jsonb_build_object('job', 'mail', 'key', 'k' || g)) "
     "FROM generate_series(1, 100001) g))",
     "22023", "runs has 100001 elements; at most 100000 per call"},
    /* issue 33 item 14: what a run message cannot carry */
    {"warren.enqueue('mail', 'k', NULL, '{\"n\": 18446744073709551616}')", "22023",
     "warren.enqueue: payload has the integer 18446744073709551616, outside the 64-bit range"},
    {"warren.enqueue('mail', 'k', '0100-01-01 00:00:00+00 BC')", "22023",
     "warren.enqueue: run_at 0100-01-01 00:00:00+00 BC is outside years 1-9999 UTC"},
    {"warren.enqueue('mail', 'k', '9999-12-31 23:59:59.9999+00')", "22023",
     "run_at 10000-01-01 00:00:00+00 is outside years 1-9999 UTC"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"a\"}, {\"job\": \"mail\", "
     "\"key\": \"b\", \"payload\": {\"x\": [-18446744073709551616]}}]')",
     "22023", "runs[1]: payload has the integer -18446744073709551616"},
    {"warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"k\", \"run_at\": "
     "\"0001-01-01T00:00:00+01:00\"}]')",
     "22023", "runs[0]: run_at 0001-12-31 23:00:00+00 BC is outside years 1-9999 UTC"},
    /* item 15: at most 80 characters of a bad value, no control character */
    {"warren.enqueue(E'a\\nINJECTED', 'k')", "22023", "job \"a?INJECTED\" does not exist"},
    {"warren.enqueue(repeat('j', 10000), 'k')", "22023", "\"... (10000 characters) does not exist"},
    {"warren.enqueue('mail', '2026-01-01T00:00:00' || repeat('x', 180))", "22023",
     "\"... (199 characters) begins with a time"},
    {"warren.enqueue_many(jsonb_build_array(jsonb_build_object('job', E'x\\nINJ' || repeat('y', "
     "5000), 'key', 'k')))",
     "22023", "runs[0]: job \"x?INJyyy"},
    {"warren.enqueue_many(jsonb_build_array(jsonb_build_object('job', 'mail', 'key', 'k', "
     "E'bo\\ngus' || repeat('y', 5000), 1)))",
     "22023", "runs[0] has the unknown field \"bo?gusyyy"},
};

START_TEST(test_enqueue_refuses_bad_input_naming_the_field_and_writes_nothing)
{
    env e;
    env_setup(&e, "1s", 4);
    testenv_exec(
        e.db, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, removed, paused) "
              "VALUES ('gone', 'at', '2099-01-01T00:00:00Z', 'q', true, true), (repeat('j', 100), "
              "'at', '2099-01-01T00:00:00Z', 'q', false, false)");
    PGconn *c = PQconnectdb(e.db);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    PQclear(PQexec(c, "LISTEN warren_jobs"));
    for (size_t i = 0; i < sizeof(bad_calls) / sizeof(bad_calls[0]); i++) {
        char *sql = testenv_fmt("SELECT * FROM %s", bad_calls[i].call);
        PGresult *r = PQexec(c, sql);
        const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        ck_assert_msg(PQresultStatus(r) == PGRES_FATAL_ERROR, "accepted: %s", sql);
        ck_assert_msg(st != NULL && strcmp(st, bad_calls[i].sqlstate) == 0,
                      "%s: SQLSTATE %s, want %s (%s)", sql, st ? st : "?", bad_calls[i].sqlstate,
                      msg ? msg : "");
        ck_assert_msg(msg != NULL && strstr(msg, bad_calls[i].message) != NULL,
                      "%s: message \"%s\" lacks \"%s\"", sql, msg ? msg : "", bad_calls[i].message);
        /* no control character; a bad value echoed at most 80 characters
         * (the longest fixed text is under 300) */
        for (const char *m = msg; *m != '\0'; m++)
            ck_assert_msg((unsigned char)*m >= 0x20 && *m != 0x7f,
                          "%s: control character in \"%s\"", sql, msg);
        ck_assert_msg(strlen(msg) <= 420, "%s: message of %zu characters", sql, strlen(msg));
        PQclear(r);
        free(sql);
    }
    /* Nothing written, nothing notified. */
    PQconsumeInput(c);
    PGnotify *n = PQnotifies(c);
    ck_assert_msg(n == NULL, "a refused call notified %s", n ? n->relname : "");
    PQfinish(c);
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.runs");
    /* The same array with the bad element fixed goes in whole. */
    ck_assert_sqlf(
        e.db, "2",
        "SELECT count(*) FILTER (WHERE created) FROM warren.enqueue_many('[{\"job\": \"mail\", "
        "\"key\": \"ok\"}, {\"job\": \"mail\", \"key\": \"good-key\"}]')");
    testenv_stack_free(&e);
}
END_TEST

/* An enqueued run's millisecond instant is kept in its events and its dead
 * letter (headers and body), as in its message. The protocol by SQL, no
 * planner or worker. */
START_TEST(test_enqueue_events_and_dead_letter_keep_the_milliseconds)
{
    env e;
    env_setup(&e, "1s", 4);
    testenv_exec(e.db,
                 "CREATE TABLE at0 AS SELECT date_trunc('second', clock_timestamp()) - interval "
                 "'2 s' + interval '250 ms' AS t");
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('mail', 'ms', (SELECT t FROM at0))");
    ck_assert_sqlf(e.db, "1", "SELECT attempt FROM warren.claim('mail@ms', 'tester')");
    ck_assert_sqlf(e.db, "t", "SELECT warren.complete('mail@ms', 1, 'failed', 'boom')");
    ck_assert_sqlf(e.db, "dead", "SELECT state FROM warren.runs WHERE run_key = 'mail@ms'");
    /* every outbox row of the run: its events and its dead letter */
    ck_assert_sqlf(
        e.db, "t",
        "SELECT count(*) >= 2 AND bool_and(headers->>'x-warren-scheduled-at' = "
        "to_char((SELECT t FROM at0) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') "
        "AND body->>'scheduled_at' = headers->>'x-warren-scheduled-at' AND "
        "headers->>'x-warren-scheduled-at' LIKE '%%.250Z') AND count(*) FILTER (WHERE "
        "exchange = 'warren.dead') = 1 FROM warren.outbox WHERE message_id = 'mail@ms'");
    /* a success through complete_many (the C worker's path) writes its own
     * event: the same format; and warren.complete of a success goes there */
    testenv_exec(e.db,
                 "SELECT * FROM warren.enqueue('mail', 'ok1', (SELECT t FROM at0)); SELECT * FROM "
                 "warren.enqueue('mail', 'ok2', (SELECT t FROM at0))");
    ck_assert_sqlf(e.db, "2",
                   "SELECT count(*) FROM warren.claim_many(ARRAY['mail@ok1', 'mail@ok2'], 't')");
    ck_assert_sqlf(e.db, "1",
                   "SELECT count(*) FROM warren.complete_many(ARRAY['mail@ok1'], ARRAY[1]) "
                   "WHERE recorded");
    ck_assert_sqlf(e.db, "t", "SELECT warren.complete('mail@ok2', 1, 'succeeded')");
    ck_assert_sqlf(
        e.db, "2",
        "SELECT count(*) FROM warren.outbox WHERE message_id IN ('mail@ok1', 'mail@ok2') AND "
        "routing_key = 'run.succeeded.mail' AND headers->>'x-warren-scheduled-at' LIKE "
        "'%%.250Z' AND body->>'scheduled_at' = headers->>'x-warren-scheduled-at'");
    testenv_stack_free(&e);
}
END_TEST

/* One row per element in array order; a key twice in one array: the first
 * creates, the second is told the run holds it; run_at rounded up to the
 * millisecond; null fields are the defaults. */
START_TEST(test_enqueue_many_answers_per_element_in_order)
{
    env e;
    env_setup(&e, "1s", 4);
    testenv_exec(e.db, "SELECT * FROM warren.enqueue('mail', 'old')");
    ck_assert_sqlf(
        e.db,
        "0 mail@b true planned 2030-01-01 00:00:00.001+00,"
        "1 mail@a true planned 2030-01-01 00:00:00+00,"
        "2 mail@b false planned 2030-01-01 00:00:00.001+00,"
        "3 mail@old false planned x",
        "SELECT string_agg(idx || ' ' || run_key || ' ' || created || ' ' || state || ' ' || "
        "CASE WHEN run_key = 'mail@old' THEN 'x' ELSE scheduled_at::text END, ',' ORDER BY idx) "
        "FROM warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"b\", \"run_at\": "
        "\"2030-01-01T00:00:00.0004Z\"}, {\"job\": \"mail\", \"key\": \"a\", \"run_at\": "
        "\"2030-01-01T01:00:00+01:00\", \"payload\": null, \"tenant\": null}, {\"job\": "
        "\"mail\", \"key\": \"b\", \"run_at\": \"2031-01-01T00:00:00Z\"}, {\"job\": \"mail\", "
        "\"key\": \"old\"}]')");
    ck_assert_sqlf(e.db, "3", "SELECT count(*) FROM warren.runs");
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.enqueue_many('[]')");
    testenv_stack_free(&e);
}
END_TEST

static Suite *enqueue_suite(void)
{
    Suite *s = suite_create("enqueue");
    TCase *tc = tcase_create("transactions");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_enqueue_rollback_leaves_no_run_and_sends_nothing);
    tcase_add_test(tc, test_enqueue_commit_delivers_once_and_the_same_key_again_creates_nothing);
    tcase_add_test(tc, test_enqueue_concurrent_same_key_gives_one_run);
    suite_add_tcase(s, tc);
    tc = tcase_create("volume");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_enqueue_10000_distinct_keys_in_one_second_run_once_each);
    suite_add_tcase(s, tc);
    tc = tcase_create("delivery");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_enqueue_wakes_the_planner_by_notify);
    tcase_add_test(tc, test_enqueue_events_and_dead_letter_keep_the_milliseconds);
    tcase_add_test(tc, test_enqueue_into_an_api_job_runs_its_templates_handler);
    suite_add_tcase(s, tc);
    tc = tcase_create("input");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_enqueue_refuses_bad_input_naming_the_field_and_writes_nothing);
    tcase_add_test(tc, test_enqueue_many_answers_per_element_in_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    testenv_amqp_url();
    SRunner *sr = srunner_create(enqueue_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
