/* check_hostile.c: a real worker (`warren worker`, real PostgreSQL and
 * RabbitMQ, no planner: the tests write published runs and publish their
 * messages themselves) fed malformed and hostile deliveries between real
 * runs: it must not crash or stall, must dead-letter every hostile message
 * with its reason and run every real run exactly once (an execution log with
 * no unique key). Also: runs whose database state disagrees with their
 * message (due later than the body says, due in year 9999), runs of jobs a
 * worker does not know (two workers whose configs differ), and the worst-case
 * memory formula of docs/worker-protocol.md against the code's constants. */
#include <check.h>
#include <errno.h>
#include <signal.h>
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
#include <warren/store.h>

#include "testenv.h"
#include "worker_exec.h"
#include "worker_int.h"

/* ------------------------------------------------------------ harness */

/* A stack without a planner: the configs are DIR/NAME.cfg (write_cfg), the
 * workers are started and stopped by each test. */
typedef testenv_stack env;

/* A job (overlap allow: the tests release several runs at once) whose exec
 * handler appends "RUN_KEY ATTEMPT WHO" to DIR/execs.log. */
static char *job(env *e, const char *name, const char *queue, const char *who)
{
    return testenv_fmt(
        "{ name = \"%s\"; at = \"2099-01-01T00:00:00Z\"; queue = \"%s\"; overlap = \"allow\";"
        "  handler = { exec = [\"/bin/sh\", \"-c\", \"echo \\\"$WARREN_RUN_KEY "
        "$WARREN_ATTEMPT %s\\\" >> %s/execs.log\"]; }; }",
        name, queue, who, e->dir);
}

/* Writes DIR/NAME.cfg with jobs (a libconfig list body); returns its path. */
static char *write_cfg(env *e, const char *name, const char *jobs, int concurrency)
{
    char *path = testenv_fmt("%s/%s.cfg", e->dir, name);
    char *text = testenv_fmt("database = { url = \"%s\"; };\n"
                             "broker = { url = \"%s\"; delivery_limit = 20; };\n"
                             "worker = { concurrency = %d; shutdown_grace = \"3s\"; "
                             "heartbeat_margin = \"1500ms\"; };\n" /* as check_worker.c */
                             "jobs = ( %s );\n",
                             e->db, e->amqp, concurrency, jobs);
    testenv_write_file(path, text, 0644);
    free(text);
    return path;
}

/* A fresh database and vhost; the config at cfg_path synced, its topology declared. */
static void env_setup(env *e)
{
    testenv_stack_init(e, "warren-check-hostile");
    testenv_execlog_create(e->db);
    setenv("WARREN_LOG", "debug", 1); /* the workers' logs (DIR/ID.log) say what they decided */
}

static void sync_cfg(env *e, const char *cfg_path)
{
    warren_config *cfg = testenv_config_load(cfg_path);
    testenv_config_apply(cfg, e->db, e->amqp);
    warren_config_free(cfg);
}

/* SIGTERM, then up to 15 s to exit: its status (testenv_wait_exit). */
static int stop_worker(pid_t pid)
{
    kill(pid, SIGTERM);
    return testenv_wait_exit(pid, 15000);
}

/* testenv_wait_for, and the runs on stderr when it timed out. */
static int wait_for(const char *url, const char *want, long timeout_ms, const char *sql)
{
    if (testenv_wait_for(url, want, timeout_ms, sql))
        return 1;
    char *runs = testenv_sql1(url, "SELECT string_agg(run_key || ' ' || state || ' ' || "
                                   "attempt, ', ' ORDER BY run_key) FROM warren.runs");
    fprintf(stderr, "wait_for: runs: %s\n", runs ? runs : "none");
    free(runs);
    return 0;
}

/* Publishes body (len bytes) to warren.ready for queue, with message_id id
 * and nextra more headers. */
static void publish_raw(env *e, const char *queue, const char *body, size_t len, const char *id,
                        size_t nextra)
{
    warren_header h[64];
    char keys[64][16];
    size_t nh = 0;
    h[nh++] = (warren_header){WARREN_QUEUE_HEADER, queue};
    for (size_t i = 0; i < nextra && nh < 64; i++) {
        snprintf(keys[nh], sizeof(keys[nh]), "x-junk-%zu", i);
        h[nh] = (warren_header){keys[nh], "some value"};
        nh++;
    }
    warren_message m = {.exchange = WARREN_READY_EXCHANGE,
                        .routing_key = queue,
                        .message_id = id,
                        .type = "hostile",
                        .expiration_ms = -1,
                        .headers = h,
                        .nheaders = nh,
                        .body = body,
                        .body_len = len,
                        .mandatory = 1};
    testenv_publish(e->amqp, &m, 10000);
}

/* The body of a run message for job at scheduled second s (epoch), due at due. */
static char *run_body(const char *jobname, int64_t s, warren_us due, char *key, size_t keylen)
{
    warren_run_msg m = {0};
    warren_error err = {0};
    char *body = NULL;
    m.job = (char *)jobname;
    m.scheduled_at = (warren_us)s * WARREN_US_PER_S;
    m.due_at = due;
    ck_assert_msg(warren_run_msg_encode(&m, &body, NULL, &err) == 0, "encode: %s", err.message);
    ck_assert_int_eq(warren_run_key_build(jobname, m.scheduled_at, key, keylen, &err), 0);
    return body;
}

/* A run of job at second s as published by the relay: the row (due in
 * due_in_ms on the database's clock) and its message (due_at in the body:
 * msg_due). Writes its key into key. */
static void real_run(env *e, const char *jobname, const char *queue, int64_t s, int due_in_ms,
                     warren_us msg_due, char *key, size_t keylen)
{
    char *body = run_body(jobname, s, msg_due, key, keylen);
    char *sql = testenv_fmt("INSERT INTO warren.runs (job, scheduled_at, due_at, state, origin, "
                            "published_at, publish_count) VALUES ('%s', to_timestamp(%lld), "
                            "now() + make_interval(secs => %d / 1000.0), 'published', 'trigger', "
                            "now(), 1)",
                            jobname, (long long)s, due_in_ms);
    ck_assert_msg(testenv_psql(e->db, sql, NULL) >= 0, "failed: %s", sql);
    free(sql);
    publish_raw(e, queue, body, strlen(body), key, 0);
    free(body);
}

/* Everything in warren.dead: message ids, x-warren-error values, body lengths. */
typedef struct dead {
    size_t n;
    char *id[64], *why[64];
    size_t body_len[64];
    int headers_dropped[64];
} dead;

static void read_dead(env *e, dead *out, size_t want, long timeout_ms)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    memset(out, 0, sizeof(*out));
    ck_assert_int_eq(warren_broker_open(e->amqp, NULL, &b, &err), 0);
    ck_assert_int_eq(warren_broker_qos(b, 100, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, WARREN_DEAD_QUEUE, &err), 0);
    for (long waited = 0; out->n < want && out->n < 64 && waited < timeout_ms;) {
        warren_delivery d;
        int got = 0;
        ck_assert_int_eq(warren_broker_next(b, 500, &d, &got, &err), 0);
        if (!got) {
            waited += 500;
            continue;
        }
        const char *why = warren_delivery_header(&d, "x-warren-error");
        out->id[out->n] = strdup(d.message_id ? d.message_id : "");
        out->why[out->n] = why ? strdup(why) : NULL;
        out->body_len[out->n] = d.body_len;
        out->headers_dropped[out->n] = warren_delivery_header(&d, "x-warren-headers-dropped") != 0;
        out->n++;
        warren_broker_ack(b, d.tag, &err);
        warren_delivery_clear(&d);
    }
    warren_broker_free(b);
}

static void dead_free(dead *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->id[i]);
        free(d->why[i]);
    }
}

/* The dead letter with message id id: its reason must contain want. */
static void assert_dead(const dead *d, const char *id, const char *want)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->id[i], id) == 0) {
            ck_assert_msg(d->why[i] != NULL, "dead letter %s has no x-warren-error", id);
            ck_assert_msg(strstr(d->why[i], want) != NULL, "dead letter %s: reason \"%s\", want %s",
                          id, d->why[i], want);
            return;
        }
    ck_abort_msg("no dead letter %s (of %zu)", id, d->n);
}

/* The execution log (DIR/execs.log loaded) against runs_sql. */
static void assert_executions(env *e, const char *runs_sql)
{
    char *log = testenv_fmt("%s/execs.log", e->dir);
    testenv_execlog_load(e->db, log);
    unlink(log);
    free(log);
    char *why = testenv_executions_mismatch(e->db, runs_sql, NULL, NULL);
    ck_assert_msg(why == NULL, "executions: %s", why);
}

static int64_t epoch_s(void)
{
    return (int64_t)(testenv_wall_us() / WARREN_US_PER_S);
}

/* ------------------------------------------------------------ the hostile run */

START_TEST(test_hostile_messages_between_real_runs_are_dead_lettered_and_runs_run_once)
{
    env e;
    env_setup(&e);
    char *j1 = job(&e, "hj", "hq", "hj"), *j2 = job(&e, "ho", "oq", "ho");
    char *jobs = testenv_fmt("%s, %s", j1, j2);
    char *cfg = write_cfg(&e, "w", jobs, 4);
    sync_cfg(&e, cfg);
    pid_t w = testenv_stack_worker(&e, cfg, "wh", "wh.log", 0);

    int64_t base = epoch_s() - 3600;
    char key[WARREN_RUN_KEY_MAX], bad[WARREN_RUN_KEY_MAX], ids[16][WARREN_RUN_KEY_MAX];
    size_t nids = 0;
    char *big = malloc(2u * 1024 * 1024);
    ck_assert_ptr_nonnull(big);
    memset(big, ' ', 2u * 1024 * 1024);
    big[0] = '{';
    big[2u * 1024 * 1024 - 1] = '}';
    char *body;
    int real = 0;
    for (int step = 0; step < 8; step++) {
        real_run(&e, "hj", "hq", base + step, 0, testenv_wall_us(), key, sizeof(key));
        real++;
        switch (step) {
        case 0:
            publish_raw(&e, "hq", "", 0, "h-nobody", 0);
            publish_raw(&e, "hq", big, 2u * 1024 * 1024, "h-big", 0);
            break;
        case 1:
            publish_raw(&e, "hq", "{\"run_key\": oops", 16, "h-json", 0);
            break;
        case 2: /* a valid body under another message_id */
            body = run_body("hj", base + 100, testenv_wall_us(), bad, sizeof(bad));
            publish_raw(&e, "hq", body, strlen(body), "h-mismatch", 0);
            free(body);
            break;
        case 3: /* 64 headers: the dead letter's own must still fit */
            publish_raw(&e, "hq", "not json", 8, "h-headers", 63);
            break;
        case 4: /* 8 runs due in year 9999, keys of a known job, no rows */
            for (int i = 0; i < 8; i++) {
                body = run_body("hj", base + 200 + i, (warren_us)253402300000 * WARREN_US_PER_S,
                                ids[nids], sizeof(ids[nids]));
                publish_raw(&e, "hq", body, strlen(body), ids[nids], 0);
                nids++;
                free(body);
            }
            break;
        case 5: /* a job no config has */
            body = run_body("nj", base + 300, testenv_wall_us(), ids[nids], sizeof(ids[nids]));
            publish_raw(&e, "hq", body, strlen(body), ids[nids], 0);
            nids++;
            free(body);
            break;
        case 6: /* a known job of another queue */
            body = run_body("ho", base + 400, testenv_wall_us(), ids[nids], sizeof(ids[nids]));
            publish_raw(&e, "hq", body, strlen(body), ids[nids], 0);
            nids++;
            free(body);
            break;
        default:
            break;
        }
    }
    free(big);
    /* Every real run succeeded, none late by more than a generous 5 s. */
    char *want = testenv_fmt("%d|0", real);
    ck_assert(wait_for(e.db, want, 30000,
                       "SELECT count(*) FILTER (WHERE state = 'succeeded') || '|' || "
                       "count(*) FILTER (WHERE started_at > due_at + interval '5 seconds') "
                       "FROM warren.runs WHERE job = 'hj'"));
    free(want);
    dead d;
    read_dead(&e, &d, 5 + nids, 20000);
    ck_assert_msg(d.n == 5 + nids, "%zu dead letters, want %zu", d.n, 5 + nids);
    assert_dead(&d, "h-nobody", "the body is empty");
    assert_dead(&d, "h-big", "exceeds the 1048576-byte limit");
    assert_dead(&d, "h-json", "malformed run message: not JSON");
    assert_dead(&d, "h-mismatch", "differs from run_key");
    assert_dead(&d, "h-headers", "malformed run message");
    for (size_t i = 0; i < 8; i++)
        assert_dead(&d, ids[i], "in the database");
    assert_dead(&d, ids[8], "unknown job \"nj\"");
    assert_dead(&d, ids[9], "belongs to queue \"oq\"");
    for (size_t i = 0; i < d.n; i++) {
        if (strcmp(d.id[i], "h-big") == 0)
            ck_assert_uint_eq(d.body_len[i], 0); /* not kept, not forwarded */
        if (strcmp(d.id[i], "h-headers") == 0)
            ck_assert_msg(d.headers_dropped[i], "h-headers: no x-warren-headers-dropped");
    }
    dead_free(&d);
    ck_assert_int_eq(waitpid(w, NULL, WNOHANG), 0); /* alive */
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.ready.hq"), 0);
    ck_assert_int_eq(stop_worker(w), 0);
    assert_executions(&e, "SELECT run_key FROM warren.runs WHERE job = 'hj'");
    free(j1);
    free(j2);
    free(jobs);
    free(cfg);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ due times */

/* Deliveries whose body says they are due in year 9999 are not held (they
 * would take every prefetch slot for ever): the database decides, and a run
 * it does not have is dead-lettered. Real runs behind them start at once. */
START_TEST(test_deliveries_due_in_year_9999_do_not_stop_a_worker)
{
    env e;
    env_setup(&e);
    char *j1 = job(&e, "fj", "fq", "fj");
    char *cfg = write_cfg(&e, "w", j1, 4);
    sync_cfg(&e, cfg);
    pid_t w = testenv_stack_worker(&e, cfg, "wf", "wf.log", 0);
    int64_t base = epoch_s() - 3600;
    char key[WARREN_RUN_KEY_MAX];
    for (int i = 0; i < 8; i++) {
        char *body = run_body("fj", base + 100 + i, (warren_us)253402300000 * WARREN_US_PER_S, key,
                              sizeof(key));
        publish_raw(&e, "fq", body, strlen(body), key, 0);
        free(body);
    }
    for (int i = 0; i < 4; i++)
        real_run(&e, "fj", "fq", base + i, 0, testenv_wall_us(), key, sizeof(key));
    ck_assert(
        wait_for(e.db, "4", 14000,
                 "SELECT count(*) FROM warren.runs WHERE job = 'fj' AND state = 'succeeded'"));
    dead d;
    read_dead(&e, &d, 8, 10000);
    ck_assert_uint_eq(d.n, 8);
    dead_free(&d);
    ck_assert_int_eq(stop_worker(w), 0);
    assert_executions(&e, "SELECT run_key FROM warren.runs WHERE job = 'fj'");
    free(j1);
    free(cfg);
    testenv_stack_free(&e);
}
END_TEST

/* A delivery the worker thinks due (its body, or a clock estimate, says so)
 * whose run the database has due 4 s later: claim_many gives no row. It is
 * not acknowledged as a duplicate (the run would wait for the reconciler):
 * the database's due time decides, the run is held and starts then. */
START_TEST(test_a_run_due_later_in_the_database_is_held_not_dropped)
{
    env e;
    env_setup(&e);
    char *j1 = job(&e, "dj", "dq", "dj");
    char *cfg = write_cfg(&e, "w", j1, 2);
    sync_cfg(&e, cfg);
    pid_t w = testenv_stack_worker(&e, cfg, "wd", "wd.log", 0);
    char key[WARREN_RUN_KEY_MAX];
    real_run(&e, "dj", "dq", epoch_s() - 60, 4000, testenv_wall_us() - WARREN_US_PER_S, key,
             sizeof(key));
    ck_assert(wait_for(e.db, "succeeded|true", 15000,
                       "SELECT state || '|' || (started_at >= due_at) FROM warren.runs"));
    ck_assert_int_eq(stop_worker(w), 0);
    assert_executions(&e, "SELECT run_key FROM warren.runs");
    free(j1);
    free(cfg);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ jobs a worker does not know */

/* Two workers on one queue whose configs differ (a rolling deploy): A knows
 * job x, B knows x and y. A y run that reaches A is given back to the queue
 * and run once, by B; it does not loop through warren.dead. */
START_TEST(test_a_run_of_a_job_one_worker_does_not_know_is_run_by_one_that_does)
{
    env e;
    env_setup(&e);
    char *x = job(&e, "x", "q", "x"), *y = job(&e, "y", "q", "y");
    char *both = testenv_fmt("%s, %s", x, y);
    char *cfg_a = write_cfg(&e, "a", x, 2), *cfg_b = write_cfg(&e, "b", both, 2);
    sync_cfg(&e, cfg_b);
    pid_t a = testenv_stack_worker(&e, cfg_a, "wa", "wa.log", 0);
    char key[WARREN_RUN_KEY_MAX];
    real_run(&e, "y", "q", epoch_s() - 60, 0, testenv_wall_us(), key, sizeof(key));
    char *line = testenv_fmt("giving %s back to its queue (1 of", key);
    ck_assert(testenv_stack_log_wait(&e, "wa.log", line, 10000));
    pid_t b = testenv_stack_worker(&e, cfg_b, "wb", "wb.log", 0);
    ck_assert(wait_for(e.db, "succeeded|wb", 20000,
                       "SELECT r.state || '|' || a.worker FROM warren.runs r JOIN "
                       "warren.attempts a USING (run_key)"));
    ck_assert_int_eq(stop_worker(a), 0);
    ck_assert_int_eq(stop_worker(b), 0);
    assert_executions(&e, "SELECT run_key FROM warren.runs");
    char *n = testenv_sql1(e.db, "SELECT count(*) FROM warren.outbox WHERE exchange = "
                                 "'warren.dead'");
    ck_assert_str_eq(n, "0");
    free(n);
    free(line);
    free(x);
    free(y);
    free(both);
    free(cfg_a);
    free(cfg_b);
    testenv_stack_free(&e);
}
END_TEST

/* No worker knows job z: after a bounded number of give-backs its run ends
 * dead with the reason (last_error, a note, a dead letter through the
 * outbox) instead of cycling through warren.dead and the reconciler. */
START_TEST(test_a_run_no_worker_knows_ends_dead_with_the_reason)
{
    env e;
    env_setup(&e);
    char *x = job(&e, "x", "q", "x"), *z = job(&e, "z", "q", "z");
    char *both = testenv_fmt("%s, %s", x, z);
    char *cfg_a = write_cfg(&e, "a", x, 2), *cfg_all = write_cfg(&e, "all", both, 2);
    sync_cfg(&e, cfg_all);
    pid_t a = testenv_stack_worker(&e, cfg_a, "wa", "wa.log", 0);
    char key[WARREN_RUN_KEY_MAX];
    real_run(&e, "z", "q", epoch_s() - 60, 0, testenv_wall_us(), key, sizeof(key));
    ck_assert(wait_for(e.db, "dead|true|true|1", 25000,
                       "SELECT state || '|' || (last_error LIKE 'unknown job \"z\"%') || '|' || "
                       "(note LIKE '%no worker of queue q could run it%') || '|' || "
                       "(SELECT count(*) FROM warren.outbox o WHERE o.exchange = 'warren.dead' "
                       "AND o.message_id = r.run_key) FROM warren.runs r"));
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "warren.ready.q"), 0);
    ck_assert_int_eq(stop_worker(a), 0);
    assert_executions(&e, "SELECT NULL::text WHERE false");
    free(x);
    free(z);
    free(both);
    free(cfg_a);
    free(cfg_all);
    testenv_stack_free(&e);
}
END_TEST

/* ------------------------------------------------------------ the clock estimate */

/* A reading of the database's clock from a slow round trip could put the
 * estimate up to half of it ahead (a held run claimed early): it is not
 * used. The first reading, if slow, is taken at its low end: never ahead. */
START_TEST(test_a_clock_reading_from_a_slow_round_trip_is_not_used)
{
    int64_t off = 0;
    /* the database's clock = monotonic + 1,000,000 us; read 100 us into a 200 us trip */
    ck_assert_int_eq(warren__clock_reading(5000, 5200, 1005100, 0, &off), 1);
    ck_assert_int_eq(off, 1000000);
    /* a 400 ms trip, the reading taken at its very start: kept out */
    int64_t before = off;
    ck_assert_int_eq(warren__clock_reading(10000, 410000, 1010000, 1, &off), 0);
    ck_assert_int_eq(off, before);
    /* the same as the first reading: the low end, behind the truth, never ahead */
    ck_assert_int_eq(warren__clock_reading(10000, 410000, 1010000, 0, &off), 0);
    ck_assert_int_le(off, 1000000);
    /* just within the bound: the midpoint */
    ck_assert_int_eq(warren__clock_reading(0, WARREN__CLOCK_RTT_MAX_US, 1000000, 1, &off), 1);
    ck_assert_int_eq(off, 1000000 - WARREN__CLOCK_RTT_MAX_US / 2);
}
END_TEST

/* ------------------------------------------------------------ memory */

/* docs/worker-protocol.md states a worker's worst-case memory as a formula
 * whose terms are the code's constants: each "NAME = VALUE" it lists must be
 * what the code compiles with. */
START_TEST(test_memory_formula_in_the_docs_uses_the_code_constants)
{
    char *doc = testenv_read_file(WARREN_SOURCE_DIR "/docs/worker-protocol.md", NULL);
    struct {
        const char *name;
        long long value;
    } terms[] = {
        {"WARREN_MSG_MAX_BODY", WARREN_MSG_MAX_BODY},
        {"WARREN_BROKER_MAX_HEADERS", WARREN_BROKER_MAX_HEADERS},
        {"TAIL_MAX", TAIL_MAX},
    };
    ck_assert_msg(strstr(doc, "memory <= ") != NULL, "no \"memory <= \" formula in the docs");
    for (size_t i = 0; i < sizeof(terms) / sizeof(terms[0]); i++) {
        char *want = testenv_fmt("`%s = %lld`", terms[i].name, terms[i].value);
        ck_assert_msg(strstr(doc, want) != NULL, "docs/worker-protocol.md lacks %s", want);
        free(want);
    }
    free(doc);
}
END_TEST

static Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hostile_messages_between_real_runs_are_dead_lettered_and_runs_run_once);
    tcase_add_test(tc, test_deliveries_due_in_year_9999_do_not_stop_a_worker);
    tcase_add_test(tc, test_a_run_due_later_in_the_database_is_held_not_dropped);
    suite_add_tcase(s, tc);
    tc = tcase_create("foreign");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_a_run_of_a_job_one_worker_does_not_know_is_run_by_one_that_does);
    tcase_add_test(tc, test_a_run_no_worker_knows_ends_dead_with_the_reason);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_test(tc, test_memory_formula_in_the_docs_uses_the_code_constants);
    tcase_add_test(tc, test_a_clock_reading_from_a_slow_round_trip_is_not_used);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(hostile_suite());
    int failed;

    testenv_amqp_url();
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
