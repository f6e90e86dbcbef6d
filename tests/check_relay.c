/* check_relay: the relay and reconciler inside the planner (src/relay.c,
 * src/store_plan.c) against real PostgreSQL and RabbitMQ: the message
 * contract, unroutable publishes recorded as errors, the outbox, republishing
 * lost runs and reaping expired worker leases. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "planner_fixture.h"
#include "relay.h"
#include "testenv.h"

static warren_config test_config(void)
{
    warren_config c;
    memset(&c, 0, sizeof(c));
    c.planner.horizon_ms = 60000;
    c.planner.tick_ms = 200;
    c.planner.misfire_threshold_ms = 60000;
    c.planner.reconcile_grace_ms = 600000;
    c.planner.partitions = 4;
    c.planner.publish_batch = 50;
    c.planner.delay_queue_expires_ms = 600000;
    return c;
}

static env env_new(void)
{
    env e = fixture_env_new();
    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.jobs (name, schedule_kind, expression, "
                                  "queue, payload, paused) VALUES "
                                  "('j', 'at', '2099-01-01T00:00:00Z', 'q', '{\"k\": \"v\"}', "
                                  "true), ('lost', 'at', '2099-01-01T00:00:00Z', 'nosuch', '{}', "
                                  "true)",
                                  NULL),
                     2);
    return e;
}

static warren_broker *consumer(const env *e, const char *queue)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    ck_assert_msg(warren_broker_open(e->amqp, NULL, &b, &err) == 0, "%s", err.message);
    ck_assert_msg(warren_broker_consume(b, queue, &err) == 0, "%s", err.message);
    return b;
}

static int next_msg(warren_broker *b, warren_delivery *d, int timeout_ms)
{
    warren_error err = {0};
    int got = 0;
    for (int waited = 0; !got && waited < timeout_ms; waited += 200)
        ck_assert_msg(warren_broker_next(b, 200, d, &got, &err) == 0, "%s", err.message);
    return got;
}

START_TEST(test_json_compact_keeps_strings)
{
    char s[] = "{\"a\": 1, \"s\": \"x y\\\" z\",\n \"n\": [1, 2]}";
    size_t n = warren_json_compact_inplace(s);
    ck_assert_str_eq(s, "{\"a\":1,\"s\":\"x y\\\" z\",\"n\":[1,2]}");
    ck_assert_uint_eq(n, strlen(s));
}
END_TEST

START_TEST(test_run_message_follows_the_contract)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};
    warren_run_msg m = {0};
    warren_error err = {0};

    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, payload) VALUES ('j', "
                 "'2026-01-02T03:04:05Z', '2026-01-02T03:04:07.250Z', '{\"over\": true}'), "
                 "('j', '2026-01-02T03:04:06Z', '2026-01-02T03:04:06Z', NULL)",
                 NULL);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE state = 'published' "
                                      "AND publish_count = 1 AND published_at IS NOT NULL"),
                     2);
    ck_assert(next_msg(b, &d, 5000));
    /* due order: ...:06 first */
    ck_assert_str_eq(d.message_id, "j@2026-01-02T03:04:06Z");
    ck_assert(warren_run_msg_decode(d.body, d.body_len, &m, &err) == 0);
    ck_assert_str_eq(m.payload_json, "{\"k\":\"v\"}");
    warren_run_msg_clear(&m);
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);

    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@2026-01-02T03:04:05Z");
    ck_assert_str_eq(d.type, "j");
    ck_assert_int_eq(d.timestamp, 1767323045LL * WARREN_US_PER_S);
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), "j");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-scheduled-at"), "2026-01-02T03:04:05Z");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-due-at"), "2026-01-02T03:04:07.250Z");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-attempt"), "0");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-queue"), "q");
    ck_assert_msg(warren_run_msg_decode(d.body, d.body_len, &m, &err) == 0, "%s", err.message);
    ck_assert_str_eq(m.run_key, "j@2026-01-02T03:04:05Z");
    ck_assert_int_eq(m.due_at, 1767323047250000LL);
    ck_assert_int_eq(m.attempt, 0);
    ck_assert_str_eq(m.payload_json, "{\"over\":true}"); /* the run's override */
    warren_run_msg_clear(&m);
    warren_delivery_clear(&d);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* An enqueued run (warren.enqueue) goes out like any other: message_id
 * JOB@KEY, scheduled_at with its milliseconds, and in the body the API job's
 * template and the run's tenant (the enqueue's, else its job's); a config
 * job's run has neither field. */
START_TEST(test_enqueued_run_message_carries_key_template_and_tenant)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};
    warren_run_msg m = {0};
    warren_error err = {0};

    ck_assert_int_ge(
        testenv_psql(e.db,
                     "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, origin, "
                     "template, tenant) VALUES ('j.t1', 'at', '2099-01-01T00:00:00Z', 'q', 'api', "
                     "'j', 'acme');"
                     "SELECT * FROM warren.enqueue('j.t1', 'user:1/a=b+c@d', "
                     "'2026-01-02T03:04:05.25Z', '{\"u\": 1}');"
                     "SELECT * FROM warren.enqueue('j.t1', 'user:2', '2026-01-02T03:04:06Z', NULL, "
                     "'beta');"
                     "SELECT * FROM warren.enqueue('j', 'plain', '2026-01-02T03:04:07Z')",
                     NULL),
        0);
    tick(p);
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j.t1@user:1/a=b+c@d");
    ck_assert_str_eq(d.type, "j.t1");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), "j.t1");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-scheduled-at"),
                     "2026-01-02T03:04:05.250Z");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-due-at"), "2026-01-02T03:04:05.250Z");
    ck_assert_msg(warren_run_msg_decode(d.body, d.body_len, &m, &err) == 0, "%s", err.message);
    ck_assert_str_eq(m.run_key, "j.t1@user:1/a=b+c@d");
    ck_assert_int_eq(m.scheduled_at, 1767323045250000LL);
    ck_assert_str_eq(m.template_name, "j");
    ck_assert_str_eq(m.tenant, "acme"); /* the job's */
    ck_assert_str_eq(m.payload_json, "{\"u\":1}");
    warren_run_msg_clear(&m);
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);

    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j.t1@user:2");
    ck_assert_msg(warren_run_msg_decode(d.body, d.body_len, &m, &err) == 0, "%s", err.message);
    ck_assert_str_eq(m.tenant, "beta");     /* the enqueue's */
    ck_assert_str_eq(m.payload_json, "{}"); /* no override: the API job's own payload */
    warren_run_msg_clear(&m);
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);

    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@plain");
    ck_assert_ptr_null(strstr(d.body, "\"template\""));
    ck_assert_ptr_null(strstr(d.body, "\"tenant\""));
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-scheduled-at"), "2026-01-02T03:04:07Z");
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'"), 3);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

START_TEST(test_unroutable_publish_is_recorded_not_success)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_planner_stats s;

    /* due now: straight to warren.ready, which has no queue for "nosuch" */
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('lost', "
                 "date_trunc('second', now()), now())",
                 NULL);
    tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(s.runs_unroutable, 1);
    ck_assert_int_eq(s.runs_published, 0);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'planned' AND "
                               "publish_count = 0 AND published_at IS NULL AND last_error "
                               "LIKE 'unroutable:%nosuch%'"),
        1);
    tick(p); /* not hammered: retried after a pause */
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(s.runs_unroutable, 1);

    /* due later: its delay queue would drop it at expiry, so it is not published */
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('lost', "
                 "date_trunc('second', now()) + interval '30 s', now() + interval '30 s')",
                 NULL);
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'planned' AND "
                               "last_error LIKE 'ready queue warren.ready.nosuch does not "
                               "exist%'"),
        1);

    /* once the queue exists both go out */
    {
        static const char *const queues[] = {"nosuch"};
        warren_broker *b = NULL;
        ck_assert(warren_broker_open(e.amqp, NULL, &b, NULL) == 0);
        ck_assert(warren_broker_topology(b, queues, 1, 5, NULL) == 0);
        warren_broker_free(b);
    }
    testenv_psql(e.db, "UPDATE warren.runs SET relay_retry_at = NULL", NULL);
    warren_planner_free(p);
    p = planner_new(&e, &c);
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'"), 2);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* The queue events-test, bound to warren.events for run.#, through the
 * management API (the relay only publishes; nothing declares a consumer's
 * queue for it). */
static void bind_events_queue(const env *e)
{
    char *vpath = testenv_vhost_path(e->amqp), *resp = NULL, path[512];
    snprintf(path, sizeof(path), "/api/queues/%s/events-test", vpath);
    ck_assert_int_lt(testenv_http("PUT", path, "{\"durable\":true}", &resp), 300);
    free(resp);
    snprintf(path, sizeof(path), "/api/bindings/%s/e/warren.events/q/events-test", vpath);
    ck_assert_int_lt(testenv_http("POST", path, "{\"routing_key\":\"run.#\"}", &resp), 300);
    free(resp);
    free(vpath);
}

START_TEST(test_outbox_published_with_headers_then_deleted)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b;
    warren_delivery d = {0};

    bind_events_queue(&e);
    for (int i = 0; i < 120; i++) {
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, "
                 "body) VALUES ('warren.events', 'run.succeeded.j', 'j@k%03d', 'j', "
                 "'{\"x-warren-job\": \"j\", \"x-n\": \"%d\"}', '{\"n\": %d, \"s\": \"a b\"}')",
                 i, i, i);
        ck_assert_int_eq(testenv_psql(e.db, sql, NULL), 1);
    }
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.outbox"), 0);
    b = consumer(&e, "events-test");
    for (int i = 0; i < 120; i++) {
        char want[64], n[16];
        ck_assert(next_msg(b, &d, 5000));
        snprintf(want, sizeof(want), "j@k%03d", i);
        ck_assert_str_eq(d.message_id, want); /* id order */
        ck_assert_str_eq(d.routing_key, "run.succeeded.j");
        ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), "j");
        snprintf(n, sizeof(n), "%d", i);
        ck_assert_str_eq(warren_delivery_header(&d, "x-n"), n);
        snprintf(want, sizeof(want), "{\"n\":%d,\"s\":\"a b\"}", i);
        ck_assert_str_eq(d.body, want);
        warren_broker_ack(b, d.tag, NULL);
        warren_delivery_clear(&d);
    }
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* One run of a batch cannot be published (its payload is a JSON array,
 * written straight into the table): the runs around it are published, it is
 * recorded dead with the reason and dead-lettered, and the relay does not
 * take it again. */
START_TEST(test_unpublishable_run_is_dead_lettered_and_the_batch_goes_on)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b = consumer(&e, "warren.ready.q"), *dead;
    warren_delivery d = {0};
    warren_error err = {0};

    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, payload) VALUES "
                 "('j', '2026-01-02T03:04:01Z', '2026-01-02T03:04:01Z', NULL), "
                 "('j', '2026-01-02T03:04:02Z', '2026-01-02T03:04:02Z', '[1, 2]'), "
                 "('j', '2026-01-02T03:04:03Z', '2026-01-02T03:04:03Z', '{\"ok\": 3}')",
                 NULL);
    ck_assert_msg(warren_planner_tick(p, &err) == 0, "tick: %s", err.message);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'"), 2);
    char *why = testenv_sql1(e.db, "SELECT state || ': ' || last_error FROM warren.runs WHERE "
                                   "scheduled_at = '2026-01-02T03:04:02Z' AND finished_at IS NOT "
                                   "NULL AND note LIKE '%not published%'");
    ck_assert_msg(why != NULL && strstr(why, "dead: ") && strstr(why, "not a JSON object"),
                  "bad run: %s", why ? why : "(null)");
    free(why);
    /* the good runs arrive and run (claimed and completed through the worker
     * protocol, as any worker would) */
    for (int i = 0; i < 2; i++) {
        ck_assert(next_msg(b, &d, 5000));
        ck_assert_str_eq(d.message_id,
                         i == 0 ? "j@2026-01-02T03:04:01Z" : "j@2026-01-02T03:04:03Z");
        char *ok = testenv_sql1f(e.db,
                                 "SELECT warren.complete('%s', (SELECT attempt FROM "
                                 "warren.claim('%s', 'w1')), 'succeeded')",
                                 d.message_id, d.message_id);
        ck_assert_msg(ok != NULL && strcmp(ok, "t") == 0, "complete %s: %s", d.message_id,
                      ok ? ok : "(null)");
        free(ok);
        warren_broker_ack(b, d.tag, NULL);
        warren_delivery_clear(&d);
    }
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'"), 2);
    /* the dead letter, with its reason */
    dead = consumer(&e, WARREN_DEAD_QUEUE);
    ck_assert(next_msg(dead, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@2026-01-02T03:04:02Z");
    ck_assert_msg(strstr(warren_delivery_header(&d, "x-warren-error"), "not a JSON object"), "%s",
                  warren_delivery_header(&d, "x-warren-error"));
    warren_broker_ack(dead, d.tag, NULL);
    warren_delivery_clear(&d);
    /* not taken again: the next tick publishes nothing more */
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'dead'"), 1);
    ck_assert(!next_msg(b, &d, 500));
    warren_broker_free(dead);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* A run whose due time is not an instant ('-infinity', written straight into
 * the table) sorts first and used to fail every relay select: now it is
 * recorded dead with the reason and the runs behind it go out. */
START_TEST(test_run_due_at_minus_infinity_does_not_block_the_relay)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};
    warren_error err = {0};

    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES "
                 "('j', '2026-01-02T03:04:01Z', '-infinity'), "
                 "('j', '2026-01-02T03:04:02Z', '2026-01-02T03:04:02Z')",
                 NULL);
    ck_assert_msg(warren_planner_tick(p, &err) == 0, "tick: %s", err.message);
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@2026-01-02T03:04:02Z");
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);
    char *why = testenv_sql1(e.db, "SELECT state || ': ' || last_error FROM warren.runs WHERE "
                                   "scheduled_at = '2026-01-02T03:04:01Z'");
    ck_assert_msg(why != NULL && strstr(why, "dead: ") && strstr(why, "not a finite instant"),
                  "run: %s", why ? why : "(null)");
    free(why);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* Runs the API might once accept but a message cannot carry (written
 * straight into the table): an integer beyond int64 in the payload, an
 * enqueued run due in year 100 BC. Each is recorded dead with the real reason
 * (jansson's words and position; the year), not "payload is not a JSON
 * object"; the run between them goes out. */
START_TEST(test_unpublishable_run_is_dead_with_the_real_reason)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};
    warren_error err = {0};

    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, payload) VALUES "
                 "('j', '2026-01-02T03:04:01Z', '2026-01-02T03:04:01Z', "
                 "'{\"n\": 18446744073709551616}'), "
                 "('j', '2026-01-02T03:04:02Z', '2026-01-02T03:04:02Z', '{\"ok\": 1}'), "
                 "('j', '2026-01-02T03:04:03Z', '2026-01-02T03:04:03Z', '{\"r\": 1e400}'), "
                 "('j', '2026-01-02T03:04:04Z', '0100-01-01T00:00:00Z BC', NULL);"
                 "INSERT INTO warren.runs (run_key, job, scheduled_at, due_at, origin) VALUES "
                 "('j@old-1', 'j', '0100-01-01T00:00:00Z BC', '0100-01-01T00:00:00Z BC', "
                 "'enqueue')",
                 NULL);
    ck_assert_msg(warren_planner_tick(p, &err) == 0, "tick: %s", err.message);
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@2026-01-02T03:04:02Z");
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);
    static const struct {
        const char *key, *want[2];
    } cases[] = {
        {"j@2026-01-02T03:04:01Z", {"too big integer", "18446744073709551616"}},
        {"j@2026-01-02T03:04:03Z", {"too big integer", "column 407"}},
        {"j@old-1", {"years 1-9999", "scheduled_at"}},
        {"j@2026-01-02T03:04:04Z", {"years 1-9999", "due_at"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *sql =
            testenv_fmt("SELECT state || ': ' || coalesce(last_error, '-') FROM warren.runs "
                        "WHERE run_key = '%s'",
                        cases[i].key);
        char *why = testenv_sql1(e.db, sql);
        fprintf(stderr, "%s: %s\n", cases[i].key, why ? why : "(null)");
        ck_assert_msg(why != NULL && strncmp(why, "dead: ", 6) == 0 &&
                          strstr(why, cases[i].want[0]) && strstr(why, cases[i].want[1]) &&
                          !strstr(why, "not a JSON object"),
                      "%s: %s", cases[i].key, why ? why : "(null)");
        free(why);
        free(sql);
    }
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* Outbox rows that cannot be published as written (70 headers, more than
 * an AMQP message may carry here; a header whose value is JSON null) do not
 * stop the rows behind them: the first goes to warren.dead in a form that
 * can be published, naming the reason, the second without its null header. */
START_TEST(test_unpublishable_outbox_row_does_not_block_the_outbox)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b, *dead;
    warren_delivery d = {0};
    warren_error err = {0};

    bind_events_queue(&e);
    testenv_psql(e.db,
                 "INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, "
                 "body) VALUES ('warren.events', 'run.succeeded.j', 'j@a', 'j', '{}', '{\"n\": "
                 "1}'); "
                 "INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, "
                 "body) SELECT 'warren.events', 'run.succeeded.j', 'j@b', 'j', "
                 "jsonb_object_agg('x-h' || g, g::text), '{\"n\": 2}' FROM "
                 "generate_series(1, 70) g; "
                 "INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, "
                 "body) VALUES ('warren.events', 'run.succeeded.j', 'j@c', 'j', "
                 "'{\"x-warren-job\": \"j\", \"x-null\": null}', '{\"n\": 3}')",
                 NULL);
    ck_assert_msg(warren_planner_tick(p, &err) == 0, "tick: %s", err.message);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.outbox"), 0);
    b = consumer(&e, "events-test");
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@a");
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@c");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), "j");
    ck_assert_ptr_null(warren_delivery_header(&d, "x-null"));
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);
    ck_assert(!next_msg(b, &d, 300));
    dead = consumer(&e, WARREN_DEAD_QUEUE);
    ck_assert(next_msg(dead, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@b");
    ck_assert_msg(strstr(warren_delivery_header(&d, "x-warren-error"), "headers"), "%s",
                  warren_delivery_header(&d, "x-warren-error"));
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-original-exchange"), "warren.events");
    ck_assert_msg(strstr(d.body, "\"n\":2") || strstr(d.body, "\"n\": 2"), "%s", d.body);
    warren_broker_ack(dead, d.tag, NULL);
    warren_delivery_clear(&d);
    warren_broker_free(dead);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

static long outbox_events(const env *e)
{
    return testenv_sql_long(e->db,
                            "SELECT count(*) FROM warren.outbox WHERE exchange = 'warren.events'");
}

/* A backlog of events (1,000 or more in one pass) with planner.event_defer:
 * the young events wait, a dead letter behind them goes out at once, events
 * go out as they become event_defer old (oldest first, stopping at the first
 * young one), and once fewer than 1,000 wait the rest go out at once; every
 * event arrives once, in id order. */
START_TEST(test_outbox_holds_back_young_events_in_a_backlog)
{
    env e = env_new();
    warren_config c = test_config();
    c.planner.publish_batch = 500;
    c.planner.event_defer_ms = 60000;
    c.planner.tick_ms = 30000; /* the tick's budget (2 ticks): no pass cut short */
    warren_planner *p = planner_new(&e, &c);
    warren_broker *b;
    warren_delivery d = {0};

    bind_events_queue(&e);
    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.outbox (exchange, routing_key, message_id, "
                                  "type, body) SELECT 'warren.events', 'run.succeeded.j', "
                                  "format('j@%s', lpad(g::text, 4, '0')), 'j', "
                                  "jsonb_build_object('n', g) FROM generate_series(1, 2500) g",
                                  NULL),
                     2500);
    /* Two batches of 500 reach the backlog: the other 1,500 (young) wait. */
    tick(p);
    ck_assert_int_eq(outbox_events(&e), 1500);
    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.outbox (exchange, routing_key, message_id, "
                                  "type, body) VALUES ('warren.dead', 'q', 'j@dead', 'j', "
                                  "'{\"run_key\": \"j@dead\"}')",
                                  NULL),
                     1);
    tick(p);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.outbox"), 1500);
    b = consumer(&e, "warren.dead");
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@dead");
    warren_broker_ack(b, d.tag, NULL);
    warren_delivery_clear(&d);
    warren_broker_free(b);
    /* The oldest 700 become a minute old (by the database's clock: the rows
     * are made older): a batch of 500, then 200 of the next, which stops at
     * the first young one. */
    ck_assert_int_eq(testenv_psql(e.db,
                                  "UPDATE warren.outbox SET created_at = created_at - interval "
                                  "'61 seconds' WHERE message_id <= 'j@1700'",
                                  NULL),
                     700);
    tick(p);
    ck_assert_int_eq(outbox_events(&e), 800);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT (min(message_id) = 'j@1701')::int FROM warren.outbox"), 1);
    /* Fewer than 1,000 wait: holding ends and the young ones go out at once. */
    tick(p);
    ck_assert_int_eq(outbox_events(&e), 0);
    b = consumer(&e, "events-test");
    for (int i = 1; i <= 2500; i++) {
        char want[32];
        ck_assert(next_msg(b, &d, 5000));
        snprintf(want, sizeof(want), "j@%04d", i);
        ck_assert_str_eq(d.message_id, want); /* id order, each once */
        warren_broker_ack(b, d.tag, NULL);
        warren_delivery_clear(&d);
    }
    ck_assert(!next_msg(b, &d, 400));
    warren_broker_free(b);
    /* A new event goes out at the next tick. */
    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.outbox (exchange, routing_key, message_id, "
                                  "type, body) VALUES ('warren.events', 'run.succeeded.j', "
                                  "'j@next', 'j', '{}')",
                                  NULL),
                     1);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.outbox"), 0);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

START_TEST(test_reconciler_republishes_lost_runs_and_reaps_leases)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p;
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};

    c.planner.reconcile_grace_ms = 2000;
    /* published 10 s ago, due 10 s ago, never started: its message was lost */
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, state, published_at, "
                 "publish_count) VALUES ('j', '2026-01-01T00:00:00Z', now() - interval '10 s', "
                 "'published', now() - interval '10 s', 1), "
                 "('j', '2026-01-01T00:00:01Z', now() - interval '10 s', 'published', now() - "
                 "interval '1 s', 1)",
                 NULL);
    /* a worker died holding a lease */
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, state, attempt, lease_owner, "
                 "lease_until, started_at) VALUES ('j', '2026-01-01T00:00:02Z', now() - interval "
                 "'1 min', 'running', 1, 'dead-worker', now() - interval '5 s', now() - interval "
                 "'1 min'); INSERT INTO warren.attempts (run_key, attempt, worker) VALUES "
                 "('j@2026-01-01T00:00:02Z', 1, 'dead-worker')",
                 NULL);
    p = planner_new(&e, &c);
    tick(p); /* reconcile: back to planned */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE scheduled_at = "
                               "'2026-01-01T00:00:00Z' AND state = 'planned' AND note LIKE "
                               "'republished by reconciler at %: not started % s after due'"),
        1);
    /* published only a second ago: left alone */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE scheduled_at = "
                                            "'2026-01-01T00:00:01Z' AND state = 'published'"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE scheduled_at = "
                                            "'2026-01-01T00:00:02Z' AND state <> 'running'"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.attempts WHERE outcome = "
                                            "'lease_lost'"),
                     1);
    tick(p); /* relay: published again under the same key */
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT publish_count FROM warren.runs WHERE scheduled_at = "
                                      "'2026-01-01T00:00:00Z' AND state = 'published'"),
                     2);
    ck_assert(next_msg(b, &d, 5000));
    ck_assert_str_eq(d.message_id, "j@2026-01-01T00:00:00Z");
    warren_delivery_clear(&d);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

START_TEST(test_delay_ring_releases_at_due)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p;
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};
    warren_store *st = NULL;
    warren_us now = 0, due = 0, at;
    long slot;
    char q[64];

    c.planner.delay_ring = 10; /* too small for a 60 s horizon: refused */
    ck_assert_int_eq(warren_planner_new(&c, e.db, e.amqp, NULL, &p, NULL), WARREN_EINVAL);
    c.planner.delay_ring = 64;
    p = planner_new(&e, &c);
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('j', "
                 "'2026-01-01T00:00:00Z', clock_timestamp() + interval '2500 ms')",
                 NULL);
    tick(p);
    slot = testenv_sql_long(
        e.db, "SELECT floor(extract(epoch FROM due_at))::bigint % 64 FROM warren.runs");
    snprintf(q, sizeof(q), "warren.delay.ring.%ld", slot);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, q), 1);
    ck_assert(next_msg(b, &d, 10000));
    ck_assert(warren_store_open(e.db, NULL, &st, NULL) == 0);
    ck_assert(warren_store_now(st, &now, NULL) == 0);
    ck_assert(warren_time_parse(warren_delivery_header(&d, "x-warren-due-at"), &due, NULL) == 0);
    at = now;
    ck_assert_msg(at >= due, "released %lld us early", (long long)(due - at));
    warren_store_free(st);
    warren_delivery_clear(&d);
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* The local wall clock's offset to PostgreSQL's (fastest of 10 round trips);
 * *err_us gets the uncertainty (half that round trip). */
static warren_us db_clock_offset(const env *e, warren_us *err_us)
{
    warren_store *st = NULL;
    warren_us best = 0, best_rtt = INT64_MAX;
    ck_assert(warren_store_open(e->db, NULL, &st, NULL) == 0);
    for (int i = 0; i < 10; i++) {
        struct timeval a, b;
        warren_us now = 0, ta, tb;
        gettimeofday(&a, NULL);
        ck_assert(warren_store_now(st, &now, NULL) == 0);
        gettimeofday(&b, NULL);
        ta = (warren_us)a.tv_sec * 1000000 + a.tv_usec;
        tb = (warren_us)b.tv_sec * 1000000 + b.tv_usec;
        if (tb - ta < best_rtt) {
            best_rtt = tb - ta;
            best = now - (ta + tb) / 2;
        }
    }
    warren_store_free(st);
    *err_us = best_rtt / 2 + 1000;
    return best;
}

/* planner.release_lead: a run reaches its ready queue that long before its
 * due time (through the delay queue of its release second), never earlier;
 * a run whose release time has passed goes straight to its ready queue. */
START_TEST(test_release_lead_releases_runs_that_long_before_due)
{
    env e = env_new();
    warren_config c = test_config();
    warren_broker *b = consumer(&e, "warren.ready.q");
    warren_delivery d = {0};
    warren_us off, off_err;
    char q[64];

    c.planner.release_lead_ms = 1500;
    warren_planner *p = planner_new(&e, &c);
    off = db_clock_offset(&e, &off_err);
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('j', "
                 "'2026-01-01T00:00:00Z', date_trunc('second', clock_timestamp()) + interval "
                 "'3.5 s'), ('j', '2026-01-01T00:00:01Z', clock_timestamp() + interval '1 s')",
                 NULL);
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'"), 2);
    /* the later one waits in the queue of its release second, due - 1.5 s */
    snprintf(q, sizeof(q), "warren.delay.%ld",
             testenv_sql_long(e.db,
                              "SELECT floor(extract(epoch FROM due_at - interval '1.5 s'))::bigint "
                              "FROM warren.runs WHERE scheduled_at = '2026-01-01T00:00:00Z'"));
    ck_assert_int_eq(testenv_queue_depth(e.amqp, q), 1);
    for (int i = 0; i < 2; i++) {
        warren_us due = 0, at;
        struct timeval tv;
        ck_assert(next_msg(b, &d, 10000));
        gettimeofday(&tv, NULL);
        at = (warren_us)tv.tv_sec * 1000000 + tv.tv_usec + off;
        ck_assert(warren_time_parse(warren_delivery_header(&d, "x-warren-due-at"), &due, NULL) ==
                  0);
        if (i == 0) {
            /* released at once: its release time had passed (0.5 s early) */
            ck_assert_str_eq(d.message_id, "j@2026-01-01T00:00:01Z");
            ck_assert_msg(at < due, "arrived %lld us after due", (long long)(at - due));
        } else {
            ck_assert_str_eq(d.message_id, "j@2026-01-01T00:00:00Z");
            ck_assert_msg(at + off_err >= due - 1500000, "released %lld us before due - lead",
                          (long long)(due - 1500000 - at));
            ck_assert_msg(at < due - 1000000, "released only %lld us before due",
                          (long long)(due - at));
        }
        warren_broker_ack(b, d.tag, NULL);
        warren_delivery_clear(&d);
    }
    warren_broker_free(b);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* A planner on a database without migration 009 (whose claims do not wait
 * for the due time) releases runs at their due time whatever release_lead
 * says: early runs would start early. */
START_TEST(test_release_lead_needs_migration_009)
{
    env e = env_new();
    warren_config c = test_config();
    char q[64];

    testenv_psql(e.db, "DELETE FROM warren.schema_migrations WHERE version = 9", NULL);
    c.planner.release_lead_ms = 1500;
    warren_planner *p = planner_new(&e, &c);
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('j', "
                 "'2026-01-01T00:00:00Z', date_trunc('second', clock_timestamp()) + interval "
                 "'5 s')",
                 NULL);
    tick(p);
    snprintf(q, sizeof(q), "warren.delay.%ld",
             testenv_sql_long(e.db,
                              "SELECT floor(extract(epoch FROM due_at))::bigint FROM warren.runs"));
    ck_assert_int_eq(testenv_queue_depth(e.amqp, q), 1);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* `warren topology` with a config naming job queues q and r and the planner
 * group `planner`; returns the exit status, output in out. */
static int topology_cli(const env *e, const char *planner, char *out, size_t len)
{
    char *text = testenv_fmt("jobs = ( { name = \"j\"; every = \"10s\"; queue = \"q\"; },\n"
                             "         { name = \"k\"; every = \"10s\"; queue = \"r\"; } );\n"
                             "planner = { %s };\n",
                             planner);
    char *cfg = testenv_temp_file("warren_check_relay", "", text);
    char *cmd =
        testenv_fmt("WARREN_AMQP_URL='%s' '%s' topology -c '%s' 2>&1", e->amqp, WARREN_BINARY, cfg);
    int status = testenv_run(cmd, out, len);
    unlink(cfg);
    free(cmd);
    free(cfg);
    free(text);
    return status;
}

START_TEST(test_classic_delay_ring_releases_no_run_early_and_routes)
{
    env e = env_new();
    warren_config c = test_config();
    warren_planner *p;
    warren_broker *bq, *br, *chk = NULL;
    warren_delivery d = {0};
    warren_error err = {0};
    warren_us off, off_err;
    char out[8192], name[64], *resp = NULL, *vpath, path[256];
    int nq = 0, nr = 0;

    /* topology declares the classic ring (and nothing per second) */
    ck_assert_msg(topology_cli(&e,
                               "horizon = \"60s\"; delay_ring = 64; delay_ring_type = \"classic\";",
                               out, sizeof(out)) == 0,
                  "%s", out);
    ck_assert_msg(strstr(out, "warren.delay.ring.63: classic delay ring") != NULL, "%s", out);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.delay.ring.0"), 0);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.delay.ring.63"), 0);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.delay.ring.64"), -1);
    vpath = testenv_vhost_path(e.amqp);
    snprintf(path, sizeof(path), "/api/queues/%s/warren.delay.ring.5", vpath);
    ck_assert_int_eq(testenv_http("GET", path, NULL, &resp), 200);
    ck_assert_msg(strstr(resp, "\"type\":\"classic\"") != NULL, "%s", resp);
    ck_assert_msg(strstr(resp, "\"durable\":true") != NULL, "%s", resp);
    ck_assert_msg(strstr(resp, "x-expires") == NULL, "a ring queue must be permanent: %s", resp);
    ck_assert_msg(strstr(resp, "\"x-dead-letter-exchange\":\"warren.ready\"") != NULL, "%s", resp);
    free(resp);
    free(vpath);
    /* the same names as a quorum ring: declaring the other type conflicts */
    ck_assert_int_eq(warren_broker_open(e.amqp, NULL, &chk, &err), 0);
    ck_assert_int_eq(warren_broker_delay_ring_queue_typed(chk, 5, 64, WARREN_DELAY_RING_QUORUM,
                                                          name, sizeof(name), &err),
                     WARREN_ECONFLICT);
    ck_assert_msg(strstr(err.message, "\"warren.delay.ring.5\"") != NULL, "%s", err.message);
    warren_broker_free(chk);
    /* topology again with the same ring: idempotent */
    ck_assert_msg(topology_cli(&e,
                               "horizon = \"60s\"; delay_ring = 64; delay_ring_type = \"classic\";",
                               out, sizeof(out)) == 0,
                  "%s", out);

    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.jobs (name, schedule_kind, expression, "
                                  "queue, paused) VALUES ('k', 'at', '2099-01-01T00:00:00Z', "
                                  "'r', true)",
                                  NULL),
                     1);
    c.planner.delay_ring_type = WARREN_DELAY_RING_CLASSIC;
    c.planner.delay_ring = 10; /* too small for a 60 s horizon: refused for classic too */
    ck_assert_int_eq(warren_planner_new(&c, e.db, e.amqp, NULL, &p, NULL), WARREN_EINVAL);
    c.planner.delay_ring = 64;
    p = planner_new(&e, &c);
    bq = consumer(&e, "warren.ready.q");
    br = consumer(&e, "warren.ready.r");
    off = db_clock_offset(&e, &off_err);
    /* ms-distinct due times in two seconds, published out of due order, for
     * two job queues */
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT job, "
                 "'2026-01-01T00:00:00Z'::timestamptz + g * interval '1 s', "
                 "date_trunc('second', clock_timestamp()) + interval '3 s' + ms * interval '1 "
                 "ms' FROM (VALUES (0, 'j', 700), (1, 'k', 150), (2, 'j', 1300), (3, 'k', 1999), "
                 "(4, 'j', 20)) v(g, job, ms)",
                 NULL);
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'"), 5);
    /* waiting in the ring slots of their due seconds, no per-second queue */
    {
        long s0 =
            testenv_sql_long(e.db, "SELECT floor(extract(epoch FROM min(due_at)))::bigint FROM "
                                   "warren.runs");
        char q[64];
        snprintf(q, sizeof(q), "warren.delay.ring.%ld", s0 % 64);
        ck_assert_int_eq(testenv_queue_depth(e.amqp, q), 3);
        snprintf(q, sizeof(q), "warren.delay.ring.%ld", (s0 + 1) % 64);
        ck_assert_int_eq(testenv_queue_depth(e.amqp, q), 2);
        snprintf(q, sizeof(q), "warren.delay.%ld", s0);
        ck_assert_int_eq(testenv_queue_depth(e.amqp, q), -1);
    }
    for (int waited = 0; nq + nr < 5 && waited < 15000; waited += 50) {
        for (int k = 0; k < 2; k++) {
            warren_broker *b = k == 0 ? bq : br;
            int got = 0;
            ck_assert_msg(warren_broker_next(b, 25, &d, &got, &err) == 0, "%s", err.message);
            if (!got)
                continue;
            struct timeval tv;
            gettimeofday(&tv, NULL);
            warren_us at = (warren_us)tv.tv_sec * 1000000 + tv.tv_usec + off, due = 0;
            ck_assert(
                warren_time_parse(warren_delivery_header(&d, "x-warren-due-at"), &due, NULL) == 0);
            ck_assert_msg(at + off_err >= due, "run %s released %lld us early", d.message_id,
                          (long long)(due - at));
            /* routed by x-warren-queue: j's runs to q, k's to r */
            ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), k == 0 ? "j" : "k");
            if (k == 0)
                nq++;
            else
                nr++;
            warren_broker_ack(b, d.tag, NULL);
            warren_delivery_clear(&d);
        }
    }
    ck_assert_int_eq(nq, 3);
    ck_assert_int_eq(nr, 2);
    warren_broker_free(bq);
    warren_broker_free(br);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

static Suite *relay_suite(void)
{
    Suite *s = suite_create("relay");
    TCase *tc;

    tc = tcase_create("messages");
    tcase_add_test(tc, test_json_compact_keeps_strings);
    tcase_add_test(tc, test_run_message_follows_the_contract);
    tcase_add_test(tc, test_enqueued_run_message_carries_key_template_and_tenant);
    tcase_add_test(tc, test_unroutable_publish_is_recorded_not_success);
    tcase_add_test(tc, test_delay_ring_releases_at_due);
    tcase_add_test(tc, test_classic_delay_ring_releases_no_run_early_and_routes);
    tcase_add_test(tc, test_release_lead_releases_runs_that_long_before_due);
    tcase_add_test(tc, test_release_lead_needs_migration_009);
    tcase_add_test(tc, test_unpublishable_run_is_dead_lettered_and_the_batch_goes_on);
    tcase_add_test(tc, test_unpublishable_run_is_dead_with_the_real_reason);
    tcase_add_test(tc, test_run_due_at_minus_infinity_does_not_block_the_relay);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("outbox");
    tcase_add_test(tc, test_outbox_published_with_headers_then_deleted);
    tcase_add_test(tc, test_outbox_holds_back_young_events_in_a_backlog);
    tcase_add_test(tc, test_unpublishable_outbox_row_does_not_block_the_outbox);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("reconciler");
    tcase_add_test(tc, test_reconciler_republishes_lost_runs_and_reaps_leases);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(relay_suite());
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
