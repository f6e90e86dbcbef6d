/* check_caps.c: caps on running runs (max_running, max_running_per_tenant;
 * docs/delivery.md, "Caps") against real PostgreSQL and RabbitMQ, with the
 * real planner (relay, reconciler) on a thread and three `warren worker`
 * processes of 10 slots each running an sql handler that sleeps 200 ms and
 * appends every execution to `execs` (no unique key: a run executed twice is
 * two rows). A thread samples warren.runs every 50 ms meanwhile.
 *
 * Until the config file parses the caps (`max_running = N;`,
 * `max_running_per_tenant = N;`) and warren.enqueue exists, the caps are set
 * with an UPDATE of warren.jobs after the sync and the runs are inserted
 * with their tenant directly (the columns of migration 012): set_caps() and
 * add_tenant_runs() are the two places to switch. */
#include <check.h>
#include <errno.h>
#include <libpq-fe.h>
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
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "testenv.h"

/* ------------------------------------------------------------ harness */

typedef testenv_stack env;

static warren_logger test_logger = {warren_log_stderr, NULL, WARREN_LOG_WARN};

/* The job every test uses: queue qcap, an sql handler that logs the
 * execution and sleeps 200 ms, overlap allow (the caps, not the overlap
 * policy, decide), a one-shot far in the future (the planner plans nothing
 * of it: the tests insert its runs). */
#define CAP_JOB                                                                                    \
    "{ name = \"capt\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qcap\"; overlap = \"allow\";"     \
    "  lease = \"60s\"; retry = { max_attempts = 3; base = \"100ms\"; cap = \"200ms\"; };"         \
    "  handler = { sql = \"WITH x AS (INSERT INTO execs (run_key, who) VALUES ($1, "               \
    "current_setting('application_name'))) SELECT pg_sleep(0.2)\"; }; }"

static void env_setup(env *e)
{
    testenv_stack_init(e, "warren-check-caps");
    char *text = testenv_fmt("database = { url = \"%s\"; };\n"
                             "broker = { url = \"%s\"; };\n"
                             "planner = { tick = \"100ms\"; reconcile_grace = \"2s\"; "
                             "horizon = \"10s\"; };\n"
                             "worker = { concurrency = 10; shutdown_grace = \"3s\"; "
                             "heartbeat_margin = \"1s\"; };\n"
                             "jobs = ( " CAP_JOB " );\n",
                             e->db, e->amqp);
    testenv_stack_config(e, text);
    free(text);
    /* The execution log: no key, so a second execution is a second row. */
    testenv_exec(e->db, "CREATE TABLE execs (run_key text NOT NULL, who text, "
                        "at timestamptz NOT NULL DEFAULT clock_timestamp())");
}

/* The caps of job capt (switch to `max_running = N;` in CAP_JOB once the
 * config parses it). 0: no cap. */
static void set_caps(env *e, int max_running, int per_tenant)
{
    char a[16] = "NULL", b[16] = "NULL";
    if (max_running > 0)
        snprintf(a, sizeof(a), "%d", max_running);
    if (per_tenant > 0)
        snprintf(b, sizeof(b), "%d", per_tenant);
    char *sql = testenv_fmt("UPDATE warren.jobs SET max_running = %s, max_running_per_tenant = %s "
                            "WHERE name = 'capt'",
                            a, b);
    testenv_exec(e->db, sql);
    free(sql);
}

/* n runs of capt for tenant, all due at the instant `due` (SQL), keys at
 * distinct past seconds from base_s on (switch to warren.enqueue_many once
 * it exists). */
static void add_tenant_runs(env *e, const char *tenant, int n, int base_s, const char *due)
{
    char *sql =
        testenv_fmt("INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) "
                    "SELECT 'capt', date_trunc('second', now()) - make_interval(secs => %d + g), "
                    "%s, 'trigger', '%s' FROM generate_series(1, %d) g",
                    base_s, due, tenant, n);
    testenv_exec(e->db, sql);
    free(sql);
}

/* ------------------------------------------------------------ sampler */

/* Every 50 ms: the most runs of capt in state running for one tenant, and
 * in total, as seen in warren.runs. */
typedef struct sampler {
    const char *db;
    pthread_t th;
    atomic_int stop;
    long samples, max_tenant, max_total;
    char max_tenant_name[64];
    char err[256];
} sampler;

static void *sampler_main(void *arg)
{
    sampler *s = arg;
    PGconn *c = PQconnectdb(s->db);
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(s->err, sizeof(s->err), "sampler: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    while (!atomic_load(&s->stop)) {
        PGresult *r = PQexec(c, "SELECT coalesce(tenant, ''), count(*), sum(count(*)) OVER () "
                                "FROM warren.runs WHERE job = 'capt' AND state = 'running' "
                                "GROUP BY 1 ORDER BY 2 DESC LIMIT 1");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            snprintf(s->err, sizeof(s->err), "sampler: %s", PQerrorMessage(c));
            PQclear(r);
            break;
        }
        s->samples++;
        if (PQntuples(r) == 1) {
            long n = strtol(PQgetvalue(r, 0, 1), NULL, 10);
            long tot = strtol(PQgetvalue(r, 0, 2), NULL, 10);
            if (n > s->max_tenant) {
                s->max_tenant = n;
                snprintf(s->max_tenant_name, sizeof(s->max_tenant_name), "%s", PQgetvalue(r, 0, 0));
            }
            if (tot > s->max_total)
                s->max_total = tot;
        }
        PQclear(r);
        testenv_sleep_ms(50);
    }
    PQfinish(c);
    return NULL;
}

static void sampler_start(sampler *s, const char *db)
{
    memset(s, 0, sizeof(*s));
    s->db = db;
    ck_assert_int_eq(pthread_create(&s->th, NULL, sampler_main, s), 0);
}

static void sampler_stop(sampler *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    ck_assert_msg(s->err[0] == '\0', "%s", s->err);
}

/* Every run of capt succeeded, each executed exactly once, nothing else
 * executed, and no message is left in the ready queue (a waiting run's
 * delivery was acknowledged: the run waited in the database only). */
static void assert_all_succeeded_once(env *e, long n)
{
    ck_assert_msg(testenv_wait_for(e->db, "0", 120000,
                                   "SELECT count(*) FROM warren.runs WHERE job = 'capt' "
                                   "AND state <> 'succeeded'"),
                  "not every run succeeded");
    ck_assert_int_eq(testenv_sql_long(e->db, "SELECT count(*) FROM warren.runs WHERE job = 'capt'"),
                     n);
    char *why =
        testenv_executions_mismatch(e->db, "SELECT run_key FROM warren.runs WHERE job = 'capt'",
                                    "SELECT run_key FROM execs", NULL);
    ck_assert_msg(why == NULL, "executions: %s", why);
    ck_assert_msg(
        testenv_wait_for(e->db, "0", 5000,
                         "SELECT count(*) FROM warren.runs WHERE cap_released_at IS NOT NULL "
                         "AND state IN ('planned', 'published')"),
        "a released run still holds its slot");
    long depth = -1;
    for (int i = 0; i < 50 && depth != 0; i++) {
        depth = testenv_queue_depth(e->amqp, "warren.ready.qcap");
        if (depth != 0)
            testenv_sleep_ms(100);
    }
    ck_assert_int_eq(depth, 0);
}

/* ------------------------------------------------------------ tests */

/* The issue's test: 5 tenants, at most 2 running per tenant, 100 runs due
 * together, 3 workers x 10 slots; one tenant has 90 of them. */
START_TEST(test_caps_per_tenant_cap_is_never_exceeded_and_small_tenants_are_not_delayed)
{
    env e;
    sampler s;

    env_setup(&e);
    set_caps(&e, 0, 2);
    /* The big tenant's runs first in every order the relay or a worker may
     * use (earlier keys); all due at the same instant. */
    char *due = testenv_sql1(e.db, "SELECT (clock_timestamp() + interval '1 second')::text");
    char *due_sql = testenv_fmt("'%s'::timestamptz", due);
    add_tenant_runs(&e, "big", 90, 100, due_sql);
    add_tenant_runs(&e, "t1", 3, 10, due_sql);
    add_tenant_runs(&e, "t2", 3, 20, due_sql);
    add_tenant_runs(&e, "t3", 2, 30, due_sql);
    add_tenant_runs(&e, "t4", 2, 40, due_sql);
    free(due_sql);
    free(due);
    sampler_start(&s, e.db);
    testenv_stack_workers_start(&e, 3);
    testenv_stack_planner_start(&e, &test_logger);

    assert_all_succeeded_once(&e, 100);
    sampler_stop(&s);
    fprintf(stderr,
            "per tenant: %ld samples, at most %ld running for one tenant (%s), %ld in total\n",
            s.samples, s.max_tenant, s.max_tenant_name, s.max_total);
    ck_assert_msg(s.samples >= 20, "only %ld samples", s.samples);
    ck_assert_msg(s.max_tenant <= 2, "%ld running for tenant %s (cap 2)", s.max_tenant,
                  s.max_tenant_name);
    /* The cap was reached (the test could have failed): the big tenant ran 2
     * at once, and several tenants ran at once. */
    ck_assert_int_eq(s.max_tenant, 2);
    ck_assert_msg(s.max_total > 2, "never more than %ld running in total", s.max_total);

    /* The big tenant's runs waited, with the reason, and were released in
     * due order (due_at, run_key): a run released before another of the
     * tenant that was already waiting when it was released comes first in
     * due order (the notes' times are taken under the cap lock, so they
     * order the claims and releases of one tenant as they happened). */
    ck_assert_int_ge(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE tenant = 'big' AND "
                                      "note LIKE 'waiting: tenant big has 2 of "
                                      "max_running_per_tenant 2 running (job capt) at %'"),
                     80);
    ck_assert_int_eq(
        testenv_sql_long(
            e.db, "WITH b AS (SELECT run_key, due_at, "
                  "substring(note FROM 'waiting: [^\\n]* at ([0-9T:.Z-]+)')::timestamptz AS "
                  "waited, substring(note FROM 'released at ([0-9T:.Z-]+)')::timestamptz AS rel "
                  "FROM warren.runs WHERE tenant = 'big' AND note LIKE '%released at%') "
                  "SELECT count(*) FROM b x JOIN b y ON (x.due_at, x.run_key) < (y.due_at, "
                  "y.run_key) WHERE x.waited < y.rel AND x.rel > y.rel"),
        0);
    ck_assert_int_ge(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE tenant = 'big' AND "
                                      "note LIKE '%released at%'"),
                     80);
    /* How soon a released run was published and started (no assertion on
     * times: a JSON line, as benchmarks print). published_at is the relay's
     * transaction start, just before its select. */
    char *lat = testenv_sql1(
        e.db,
        "SELECT format('{\"bench\":\"caps_release\",\"released\":%s,\"publish_ms_p50\":%s,"
        "\"publish_ms_p99\":%s,\"start_ms_p50\":%s,\"start_ms_p99\":%s}', count(*), "
        "round(percentile_cont(0.5) WITHIN GROUP (ORDER BY pub)::numeric, 1), "
        "round(percentile_cont(0.99) WITHIN GROUP (ORDER BY pub)::numeric, 1), "
        "round(percentile_cont(0.5) WITHIN GROUP (ORDER BY st)::numeric, 1), "
        "round(percentile_cont(0.99) WITHIN GROUP (ORDER BY st)::numeric, 1)) "
        "FROM (SELECT extract(epoch FROM published_at - rel) * 1000 AS pub, "
        "extract(epoch FROM started_at - rel) * 1000 AS st FROM (SELECT published_at, started_at, "
        "substring(note FROM 'released at ([0-9T:.Z-]+)')::timestamptz AS rel FROM warren.runs "
        "WHERE note LIKE '%released at%') r) x");
    fprintf(stderr, "%s\n", lat ? lat : "(no released runs)");
    free(lat);
    /* Every run ran once: a single attempt each. */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE attempt <> 1"),
                     0);

    /* The small tenants are not delayed beyond their own share: every one of
     * their runs finished before the big tenant's 20th run started. */
    char *v = testenv_sql1(
        e.db, "SELECT (SELECT max(finished_at) FROM warren.runs WHERE tenant <> 'big') < "
              "(SELECT started_at FROM warren.runs WHERE tenant = 'big' ORDER BY started_at "
              "OFFSET 19 LIMIT 1)");
    ck_assert_str_eq(v, "t");
    free(v);
    testenv_stack_free(&e);
}
END_TEST

/* max_running (the total) together with max_running_per_tenant: 3 tenants x
 * 10 runs, at most 3 running in all and 2 per tenant. */
START_TEST(test_caps_max_running_total_cap_with_a_tenant_cap)
{
    env e;
    sampler s;

    env_setup(&e);
    set_caps(&e, 3, 2);
    add_tenant_runs(&e, "a", 10, 100, "now()");
    add_tenant_runs(&e, "b", 10, 200, "now()");
    add_tenant_runs(&e, "c", 10, 300, "now()");
    sampler_start(&s, e.db);
    testenv_stack_workers_start(&e, 3);
    testenv_stack_planner_start(&e, &test_logger);

    assert_all_succeeded_once(&e, 30);
    sampler_stop(&s);
    fprintf(stderr, "total: %ld samples, at most %ld running for one tenant, %ld in total\n",
            s.samples, s.max_tenant, s.max_total);
    ck_assert_msg(s.samples >= 10, "only %ld samples", s.samples);
    ck_assert_msg(s.max_total <= 3, "%ld running in total (max_running 3)", s.max_total);
    ck_assert_msg(s.max_tenant <= 2, "%ld running for tenant %s (cap 2)", s.max_tenant,
                  s.max_tenant_name);
    ck_assert_int_eq(s.max_total, 3);
    ck_assert_int_ge(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE note LIKE "
                                      "'waiting: 3 of max_running 3 running (job capt) at %'"),
                     1);
    testenv_stack_free(&e);
}
END_TEST

/* A template's cap counts the runs of all its API jobs, by tenant; a waiting
 * run of a group whose cap is raised is released by the reconciler (no run
 * of the group completes), and the relay publishes it. The claims are made
 * in SQL here (no worker runs API jobs before the handler lookup by
 * template lands). */
/* The state of run capt@2026-01-01T00:00:0N Z. */
static char *state_of(env *e, int n)
{
    return testenv_sql1f(
        e->db,
        "SELECT state || CASE WHEN cap_released_at IS NOT NULL THEN '+slot' "
        "ELSE '' END FROM warren.runs WHERE run_key = 'capt@2026-01-01T00:00:0%dZ'",
        n);
}

static void assert_state(env *e, int n, const char *want)
{
    char *got = state_of(e, n);
    ck_assert_msg(got != NULL && strcmp(got, want) == 0, "run %d is %s, want %s", n,
                  got ? got : "(none)", want);
    free(got);
}

static long claim_n(env *e, int n)
{
    char *sql =
        testenv_fmt("SELECT count(*) FROM warren.claim('capt@2026-01-01T00:00:0%dZ', 'sqlw')", n);
    long got = testenv_sql_long(e->db, sql);
    free(sql);
    return got;
}

/* Every way out of 'running' hands the slot on at once, in due order, and
 * the run given the slot holds it until its claim: complete retry, complete
 * failed (dead), the reaper, a takeover that finds the budget used up, and
 * complete_many. Claims in SQL, one cap of 1 for tenant x. */
START_TEST(test_caps_every_way_out_of_running_releases_the_next_waiting_run)
{
    env e;

    env_setup(&e);
    set_caps(&e, 0, 1);
    testenv_exec(e.db, "UPDATE warren.jobs SET retry_max_attempts = 2 WHERE name = 'capt'");
    testenv_exec(
        e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) "
              "SELECT 'capt', '2026-01-01T00:00:00Z'::timestamptz + make_interval(secs => g), "
              "now() - make_interval(secs => 10 - g), 'trigger', 'x' FROM generate_series(1, 6) g");
    ck_assert_int_eq(claim_n(&e, 1), 1);
    for (int n = 2; n <= 6; n++) {
        ck_assert_int_eq(claim_n(&e, n), 0);
        assert_state(&e, n, "waiting");
    }
    /* complete retry: run 1 retries later; the oldest waiting run (2) gets
     * the slot, and a newer run's claim cannot take it first. */
    testenv_exec(e.db, "SELECT warren.complete('capt@2026-01-01T00:00:01Z', 1, 'retry', 'again')");
    assert_state(&e, 1, "retrying");
    assert_state(&e, 2, "planned+slot");
    assert_state(&e, 3, "waiting");
    /* its retry due now, first in due order (the relay would publish it) */
    testenv_exec(e.db,
                 "UPDATE warren.runs SET state = 'planned', due_at = now() - interval '1 minute' "
                 "WHERE run_key = 'capt@2026-01-01T00:00:01Z'");
    ck_assert_int_eq(claim_n(&e, 1), 0); /* the slot is run 2's */
    assert_state(&e, 1, "waiting");
    ck_assert_int_eq(claim_n(&e, 2), 1);
    assert_state(&e, 2, "running");
    /* complete failed: dead, next: run 1 (due first) */
    testenv_exec(e.db, "SELECT warren.complete('capt@2026-01-01T00:00:02Z', 1, 'failed', 'no')");
    assert_state(&e, 2, "dead");
    assert_state(&e, 1, "planned+slot");
    ck_assert_int_eq(claim_n(&e, 1), 1);
    /* the reaper: run 1's lease ran out (its worker died); the reconciler's
     * reap hands the slot to run 3 */
    testenv_exec(e.db,
                 "UPDATE warren.runs SET lease_until = now() - interval '1 second' WHERE run_key = "
                 "'capt@2026-01-01T00:00:01Z'");
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.reap_expired_leases(10)"), 1);
    assert_state(&e, 1, "dead"); /* its second attempt: max_attempts 2 */
    assert_state(&e, 3, "planned+slot");
    ck_assert_int_eq(claim_n(&e, 3), 1);
    /* a takeover by a claim that finds the budget used up: dead, and the slot
     * goes to run 4 */
    testenv_exec(e.db,
                 "UPDATE warren.jobs SET retry_max_attempts = 1 WHERE name = 'capt';"
                 "UPDATE warren.runs SET lease_until = now() - interval '1 second' WHERE run_key = "
                 "'capt@2026-01-01T00:00:03Z'");
    ck_assert_int_eq(claim_n(&e, 3), 0);
    assert_state(&e, 3, "dead");
    assert_state(&e, 4, "planned+slot");
    ck_assert_int_eq(claim_n(&e, 4), 1);
    /* complete_many: succeeded, run 5 next */
    testenv_exec(
        e.db, "SELECT * FROM warren.complete_many(ARRAY['capt@2026-01-01T00:00:04Z'], ARRAY[1])");
    assert_state(&e, 4, "succeeded");
    assert_state(&e, 5, "planned+slot");
    assert_state(&e, 6, "waiting");
    /* Each wait noted the reason: runs 2-6, and run 1 once behind run 2. */
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE note LIKE 'waiting: "
                                      "tenant x has 1 of max_running_per_tenant 1 running (job "
                                      "capt) at %'"),
                     6);
    testenv_stack_free(&e);
}
END_TEST

/* The rows of the one query sent on c (-1 and the message on an error). */
static int result_rows(PGconn *c, char *msg, size_t len)
{
    int n = -1;
    PGresult *r;
    msg[0] = '\0';
    while ((r = PQgetResult(c)) != NULL) {
        if (PQresultStatus(r) == PGRES_TUPLES_OK)
            n = PQntuples(r);
        else
            snprintf(msg, len, "%s", PQresultErrorMessage(r));
        PQclear(r);
    }
    return msg[0] ? -1 : n;
}

/* Waits until the backend of c waits for a lock (pg_stat_activity,
 * wait_event_type Lock), up to 60 s: the next step then runs while it
 * waits, whatever the machine's load. */
static void wait_lock_wait(const char *url, PGconn *c)
{
    char *sql = testenv_fmt("SELECT count(*) FROM pg_stat_activity WHERE pid = %d "
                            "AND wait_event_type = 'Lock'",
                            PQbackendPID(c));
    ck_assert_msg(testenv_wait_for(url, "1", 60000, sql), "backend %d never waited for a lock",
                  PQbackendPID(c));
    free(sql);
}

/* Two calls queued behind a held lock, the shape of every deadlock test
 * below: a third session runs hold once (making the lock's row) and then
 * again in an open transaction; q1 is sent and waits for a lock, then q2
 * (deadlock_timeout 100 ms for both); the holder commits and both answers
 * are collected (rows, or -1 and the error in msg). */
typedef struct queued {
    int n1, n2;
    char msg1[512], msg2[512];
} queued;

static void run_queued(const env *e, const char *hold, const char *q1, const char *q2, queued *r)
{
    PGconn *h = testenv_connect(e->db), *a = testenv_connect(e->db), *b = testenv_connect(e->db);
    testenv_exec_on(a, "SET deadlock_timeout = '100ms'");
    testenv_exec_on(b, "SET deadlock_timeout = '100ms'");
    testenv_exec_on(h, hold);
    testenv_exec_on(h, "BEGIN");
    testenv_exec_on(h, hold);
    ck_assert_int_eq(PQsendQuery(a, q1), 1);
    wait_lock_wait(e->db, a);
    ck_assert_int_eq(PQsendQuery(b, q2), 1);
    wait_lock_wait(e->db, b);
    testenv_exec_on(h, "COMMIT");
    r->n1 = result_rows(a, r->msg1, sizeof(r->msg1));
    r->n2 = result_rows(b, r->msg2, sizeof(r->msg2));
    PQfinish(a);
    PQfinish(b);
    PQfinish(h);
}

/* Two claim_many batches whose keys have the tenants in opposite orders (A:
 * y then x; B: x then y) take the cap locks in (group, tenant) order, not in
 * key order: no deadlock. A third session holds tenant y's lock while both
 * start, so that in key order A would hold y and B x, each waiting for the
 * other, when it lets go. */
START_TEST(test_caps_batches_with_tenants_in_opposite_key_orders_do_not_deadlock)
{
    env e;

    env_setup(&e);
    set_caps(&e, 0, 5);
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                       "('capt', '2026-01-01T00:00:01Z', now(), 'trigger', 'y'),"
                       "('capt', '2026-01-01T00:00:02Z', now(), 'trigger', 'x'),"
                       "('capt', '2026-01-01T00:00:03Z', now(), 'trigger', 'x'),"
                       "('capt', '2026-01-01T00:00:04Z', now(), 'trigger', 'y')");
    queued r;
    run_queued(&e, "SELECT warren.wp_cap_lock('capt', 'y', NULL, 5)",
               "SELECT * FROM warren.claim_many(ARRAY['capt@2026-01-01T00:00:01Z', "
               "'capt@2026-01-01T00:00:02Z'], 'wa')",
               "SELECT * FROM warren.claim_many(ARRAY['capt@2026-01-01T00:00:03Z', "
               "'capt@2026-01-01T00:00:04Z'], 'wb')",
               &r);
    ck_assert_msg(r.n1 == 2, "batch A: %d rows %s", r.n1, r.msg1);
    ck_assert_msg(r.n2 == 2, "batch B: %d rows %s", r.n2, r.msg2);
    testenv_stack_free(&e);
}
END_TEST

/* A capped job with an overlap policy: a claim_many whose overlap check
 * locks a running run of the job (b) while b's completion is under way.
 * Session h holds the group's lock; the batch (claiming k) queues for it
 * first, then the completion of b. In the old order (row, overlap, cap) the
 * completion held b's row and waited for the cap lock, which the batch got
 * first and then waited for b's row: a deadlock. Now both take the cap lock
 * before any row. For skip and queue. */
START_TEST(test_caps_overlap_claim_many_and_a_completion_do_not_deadlock)
{
    static const char *const pols[] = {"skip", "queue"};
    for (int p = 0; p < 2; p++) {
        env e;
        env_setup(&e);
        set_caps(&e, 5, 0);
        char *sql =
            testenv_fmt("UPDATE warren.jobs SET overlap = '%s' WHERE name = 'capt'", pols[p]);
        testenv_exec(e.db, sql);
        free(sql);
        testenv_exec(
            e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                  "('capt', '2026-01-01T00:00:01Z', now() - interval '1 minute', 'trigger', 'x'),"
                  "('capt', '2026-01-01T00:00:02Z', now(), 'trigger', 'x')");
        ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM "
                                                "warren.claim('capt@2026-01-01T00:00:01Z', 'wb')"),
                         1);
        queued r;
        run_queued(&e, "SELECT warren.wp_cap_lock('capt', NULL, 5, NULL)",
                   "SELECT * FROM warren.claim_many(ARRAY['capt@2026-01-01T00:00:02Z'], 'wm')",
                   "SELECT warren.complete('capt@2026-01-01T00:00:01Z', 1, 'succeeded')", &r);
        ck_assert_msg(r.n1 == 0, "%s: batch: %d rows %s", pols[p], r.n1, r.msg1);
        ck_assert_msg(r.n2 == 1, "%s: completion: %d rows %s", pols[p], r.n2, r.msg2);
        assert_state(&e, 1, "succeeded");
        assert_state(&e, 2, p == 0 ? "skipped" : "retrying");
        testenv_stack_free(&e);
    }
}
END_TEST

/* Mixed fleets: a claim_many and a single warren.claim of two runs of one
 * capped job with overlap queue. Session h holds the group's lock; the
 * batch queues for it first, then the single claim. In the old order the
 * single claim took its row and the job's overlap lock, then waited for
 * the cap lock, which the batch got first and then waited for the overlap
 * lock: a deadlock. Now both take the cap lock, then the overlap lock. */
START_TEST(test_caps_claim_and_claim_many_of_one_overlap_job_do_not_deadlock)
{
    env e;
    env_setup(&e);
    set_caps(&e, 5, 0);
    testenv_exec(e.db, "UPDATE warren.jobs SET overlap = 'queue' WHERE name = 'capt'");
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                       "('capt', '2026-01-01T00:00:01Z', now(), 'trigger', 'x'),"
                       "('capt', '2026-01-01T00:00:02Z', now(), 'trigger', 'y')");
    queued r;
    run_queued(&e, "SELECT warren.wp_cap_lock('capt', NULL, 5, NULL)",
               "SELECT * FROM warren.claim_many(ARRAY['capt@2026-01-01T00:00:02Z'], 'wm')",
               "SELECT * FROM warren.claim('capt@2026-01-01T00:00:01Z', 'ws')", &r);
    ck_assert_msg(r.n1 == 1, "batch: %d rows %s", r.n1, r.msg1);
    ck_assert_msg(r.n2 == 0, "single claim: %d rows %s", r.n2, r.msg2);
    assert_state(&e, 2, "running");
    assert_state(&e, 1, "retrying"); /* queue: run 2 was running */
    testenv_stack_free(&e);
}
END_TEST

/* sql fails on c with SQLSTATE state and a message containing needle. */
static void exec_fails(PGconn *c, const char *sql, const char *state, const char *needle)
{
    PGresult *r = PQexec(c, sql);
    const char *got = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorMessage(r);
    ck_assert_msg(PQresultStatus(r) == PGRES_FATAL_ERROR && got != NULL && strcmp(got, state) == 0,
                  "%s: want SQLSTATE %s, got %s: %s", sql, state, got ? got : "none", msg);
    ck_assert_msg(strstr(msg, needle) != NULL, "%s: message lacks \"%s\": %s", sql, needle, msg);
    PQclear(r);
}

/* max_running with max_running_per_tenant: a release looks at every tenant
 * with waiting runs, not at the oldest rows only. 10,001 waiting runs of
 * tenant a (at its cap of 1) are older than tenant b's waiting run 2; the
 * completion of a's running run releases one of a's and b's run 2. */
START_TEST(test_caps_release_with_both_caps_reaches_every_tenant)
{
    env e;
    env_setup(&e);
    set_caps(&e, 3, 1);
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                 "('capt', '2026-01-01T00:00:01Z', now() - interval '2 hours', 'trigger', 'a')");
    ck_assert_int_eq(claim_n(&e, 1), 1);
    testenv_exec(
        e.db,
        "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant, state, cap_group, "
        "cap_tenant) SELECT 'capt', '2025-01-01T00:00:00Z'::timestamptz + "
        "make_interval(secs => g), now() - interval '1 hour' + make_interval(secs => g / "
        "1000.0), 'trigger', 'a', 'waiting', 'capt', 'a' FROM generate_series(1, 10001) g;"
        "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant, state, cap_group, "
        "cap_tenant) VALUES ('capt', '2026-01-01T00:00:02Z', now(), 'trigger', 'b', "
        "'waiting', 'capt', 'b')");
    testenv_exec(e.db, "SELECT warren.complete('capt@2026-01-01T00:00:01Z', 1, 'succeeded')");
    assert_state(&e, 2, "planned+slot");
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE tenant = 'a' AND "
                                      "cap_released_at IS NOT NULL"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE tenant = 'a' AND "
                                      "cap_released_at IS NOT NULL AND scheduled_at = "
                                      "'2025-01-01T00:00:01Z'"),
                     1); /* a's oldest */
    testenv_stack_free(&e);
}
END_TEST

/* The sweep visits only tenants below their cap: with room for one release
 * per call, tenant a at its cap (first in order) does not strand tenant b. */
START_TEST(test_caps_sweep_skips_tenants_at_their_cap)
{
    env e;
    env_setup(&e);
    set_caps(&e, 0, 1);
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                 "('capt', '2026-01-01T00:00:01Z', now() - interval '1 minute', 'trigger', 'a')");
    ck_assert_int_eq(claim_n(&e, 1), 1);
    testenv_exec(
        e.db,
        "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant, state, cap_group, "
        "cap_tenant) VALUES "
        "('capt', '2026-01-01T00:00:02Z', now(), 'trigger', 'a', 'waiting', 'capt', 'a'),"
        "('capt', '2026-01-01T00:00:03Z', now(), 'trigger', 'b', 'waiting', 'capt', 'b')");
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.wp_cap_release_all(1)"), 1);
    assert_state(&e, 2, "waiting");
    assert_state(&e, 3, "planned+slot");
    testenv_stack_free(&e);
}
END_TEST

/* A slot freed without a release (here as cancel_previous frees it: the
 * running run cancelled by another job's claim) goes to the older waiting
 * run, not to a newer run whose claim comes first. */
START_TEST(test_caps_a_slot_freed_without_a_release_keeps_due_order)
{
    env e;
    env_setup(&e);
    set_caps(&e, 0, 1);
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                 "('capt', '2026-01-01T00:00:01Z', now() - interval '3 minutes', 'trigger', 'x'),"
                 "('capt', '2026-01-01T00:00:02Z', now() - interval '2 minutes', 'trigger', 'x'),"
                 "('capt', '2026-01-01T00:00:03Z', now() - interval '1 minute', 'trigger', 'x')");
    ck_assert_int_eq(claim_n(&e, 1), 1);
    ck_assert_int_eq(claim_n(&e, 2), 0);
    assert_state(&e, 2, "waiting");
    testenv_exec(
        e.db,
        "UPDATE warren.runs SET state = 'cancelled', finished_at = now(), lease_owner = NULL, "
        "lease_until = NULL WHERE run_key = 'capt@2026-01-01T00:00:01Z'");
    ck_assert_int_eq(claim_n(&e, 3), 0);
    assert_state(&e, 3, "waiting");
    assert_state(&e, 2, "planned+slot");
    ck_assert_int_eq(claim_n(&e, 2), 1);
    testenv_stack_free(&e);
}
END_TEST

/* A capped claim needs READ COMMITTED (its count must see every committed
 * claim). */
START_TEST(test_caps_a_capped_claim_needs_read_committed)
{
    env e;
    env_setup(&e);
    set_caps(&e, 0, 1);
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                 "('capt', '2026-01-01T00:00:01Z', now() - interval '1 minute', 'trigger', 'x')");
    PGconn *c = testenv_connect(e.db);
    testenv_exec_on(c, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    exec_fails(c, "SELECT * FROM warren.claim('capt@2026-01-01T00:00:01Z', 'rr')", "0A000",
               "needs isolation level READ COMMITTED, not REPEATABLE READ");
    testenv_exec_on(c, "ROLLBACK");
    testenv_exec_on(c, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    exec_fails(c, "SELECT * FROM warren.claim_many(ARRAY['capt@2026-01-01T00:00:01Z'], 'rr')",
               "0A000", "not SERIALIZABLE");
    testenv_exec_on(c, "ROLLBACK");
    assert_state(&e, 1, "planned");
    ck_assert_int_eq(claim_n(&e, 1), 1);
    PQfinish(c);
    testenv_stack_free(&e);
}
END_TEST

/* A run's tenant has the grammar of a job's: '' (the claim's "none") is
 * refused. */
START_TEST(test_caps_run_tenant_grammar)
{
    env e;
    env_setup(&e);
    PGconn *c = testenv_connect(e.db);
    exec_fails(c,
               "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
               "('capt', '2026-01-01T00:00:02Z', now(), 'trigger', '')",
               "23514", "runs_tenant_grammar");
    PQfinish(c);
    testenv_stack_free(&e);
}
END_TEST

START_TEST(test_caps_template_group_and_a_raised_cap_released_by_the_reconciler)
{
    env e;

    env_setup(&e);
    /* A template and two API jobs of tenant acme, one of tenant zed
     * (written directly: warren.upsert_job is another helper's). */
    testenv_exec(
        e.db, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, "
              "is_template, max_running_per_tenant, paused, next_fire_at) VALUES "
              "('tpl', 'none', '', 'qcap', 'allow', true, 1, true, 'infinity');"
              "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, origin, "
              "template, tenant, next_fire_at) VALUES "
              "('tpl.acme-1', 'every', '3600', 'qcap', 'allow', 'api', 'tpl', 'acme', 'infinity'),"
              "('tpl.acme-2', 'every', '3600', 'qcap', 'allow', 'api', 'tpl', 'acme', 'infinity'),"
              "('tpl.zed', 'every', '3600', 'qcap', 'allow', 'api', 'tpl', 'zed', 'infinity');"
              "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES "
              "('tpl.acme-1', '2026-01-01T00:00:01Z', now(), 'trigger'),"
              "('tpl.acme-2', '2026-01-01T00:00:02Z', now(), 'trigger'),"
              "('tpl.acme-2', '2026-01-01T00:00:03Z', now(), 'trigger'),"
              "('tpl.zed', '2026-01-01T00:00:04Z', now(), 'trigger')");
    /* The first run of each tenant starts; acme's others wait, whichever of
     * acme's API jobs they belong to. */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r, "
                                            "warren.claim(r.run_key, 'sqlw') c"),
                     2);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'running'"), 2);
    ck_assert_int_eq(
        testenv_sql_long(e.db,
                         "SELECT count(*) FROM warren.runs WHERE state = 'waiting' AND job LIKE "
                         "'tpl.acme-%' AND note LIKE 'waiting: tenant acme has 1 of "
                         "max_running_per_tenant 1 running (template tpl) at %'"),
        2);
    /* A waiting run's claim gives no row (its message is acknowledged). */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r, "
                               "warren.claim(r.run_key, 'sqlw') c WHERE r.state = 'waiting'"),
        0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r, "
                                            "warren.claim_many(ARRAY[r.run_key], 'sqlw') c "
                                            "WHERE r.state = 'waiting'"),
                     0);
    /* The cap raised (as a sync would): the reconciler (the planner's first
     * tick) releases both, and the relay publishes them. */
    testenv_exec(e.db, "UPDATE warren.jobs SET max_running_per_tenant = 3 WHERE name = 'tpl'");
    testenv_stack_planner_start(&e, &test_logger);
    ck_assert(testenv_wait_for(
        e.db, "2", 20000,
        "SELECT count(*) FROM warren.runs WHERE state = 'published' AND "
        "cap_released_at IS NOT NULL AND note LIKE '%released at % tenant acme has "
        "1 of max_running_per_tenant 3 running (template tpl)'"));
    /* Released runs hold their slots: a cap of 3 now has 1 running + 2
     * released for acme, so a new run of acme waits... */
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES "
                       "('tpl.acme-1', '2026-01-01T00:00:05Z', now(), 'trigger')");
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.claim('tpl.acme-1@"
                                            "2026-01-01T00:00:05Z', 'sqlw')"),
                     0);
    ck_assert_int_eq(
        testenv_sql_long(e.db,
                         "SELECT count(*) FROM warren.runs WHERE run_key = "
                         "'tpl.acme-1@2026-01-01T00:00:05Z' AND state = 'waiting' AND note LIKE "
                         "'waiting: tenant acme has 3 of max_running_per_tenant 3 running%'"),
        1);
    /* ... while the released ones are claimed, and each completion releases
     * the next waiting run of its tenant at once. */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r, "
                                            "warren.claim(r.run_key, 'sqlw') c "
                                            "WHERE r.cap_released_at IS NOT NULL"),
                     2);
    char *v = testenv_sql1(e.db, "SELECT bool_and(warren.complete(run_key, attempt, 'succeeded')) "
                                 "FROM warren.runs WHERE job = 'tpl.acme-1' AND state = 'running'");
    ck_assert_str_eq(v, "t");
    free(v);
    ck_assert(testenv_wait_for(e.db, "published", 20000,
                               "SELECT state FROM warren.runs WHERE run_key = "
                               "'tpl.acme-1@2026-01-01T00:00:05Z'"));
    testenv_stack_free(&e);
}
END_TEST

/* The operator's tenant cap (warren.set_tenant_cap, `warren tenant-cap`):
 * on a job without caps it caps that tenant alone (another tenant's runs
 * all start), in due order, released by a completion; on a group with
 * max_running_per_tenant it takes that value's place for the tenant,
 * lower or higher; removed, the reconciler's sweep releases what waits;
 * bad values are refused (22023). Claims in SQL, as claim_many and
 * warren.claim do it. */
START_TEST(test_caps_operator_tenant_cap_replaces_the_groups_per_tenant_cap)
{
    env e;
    env_setup(&e);
    set_caps(&e, 0, 0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.set_tenant_cap('x', 1)::int"), 1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.set_tenant_cap('x', 1)::int"), 0);
    testenv_exec(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) "
                 "SELECT 'capt', '2026-01-01T00:00:00Z'::timestamptz + make_interval(secs => g), "
                 "now() - make_interval(secs => 10 - g), 'trigger', CASE WHEN g <= 3 THEN 'x' "
                 "ELSE 'y' END FROM generate_series(1, 6) g");
    /* a batch: x's first claimed, its others wait; y uncapped: all three */
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.claim_many(ARRAY("
                                      "SELECT run_key FROM warren.runs ORDER BY run_key), 'w')"),
                     4);
    assert_state(&e, 1, "running");
    assert_state(&e, 2, "waiting");
    assert_state(&e, 3, "waiting");
    for (int n = 4; n <= 6; n++)
        assert_state(&e, n, "running");
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE note LIKE "
                                            "'%waiting: tenant x has 1 of its tenant cap (warren "
                                            "tenant-cap) 1 running (job capt)%'"),
                     2);
    testenv_exec(e.db, "SELECT warren.complete('capt@2026-01-01T00:00:01Z', 1, 'succeeded')");
    assert_state(&e, 2, "planned+slot");
    assert_state(&e, 3, "waiting");
    ck_assert_int_eq(claim_n(&e, 2), 1);
    /* a group cap of 5 per tenant: x's tenant cap of 1 still holds x */
    set_caps(&e, 0, 5);
    ck_assert_int_eq(claim_n(&e, 3), 0);
    assert_state(&e, 3, "waiting");
    /* the tenant cap raised above nothing running: the sweep releases it */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.set_tenant_cap('x', 2)::int"), 1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.wp_cap_release_all(10)"), 1);
    assert_state(&e, 3, "planned+slot");
    ck_assert_int_eq(claim_n(&e, 3), 1);
    /* lower than the group's: y's own tenant cap of 1 below the group's 5 */
    testenv_exec(e.db, "UPDATE warren.runs SET state = 'succeeded', finished_at = now() "
                       "WHERE tenant = 'y'");
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.set_tenant_cap('y', 1)::int"), 1);
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                       "('capt', '2026-01-01T00:00:07Z', now(), 'trigger', 'y'),"
                       "('capt', '2026-01-01T00:00:08Z', now(), 'trigger', 'y')");
    ck_assert_int_eq(claim_n(&e, 7), 1);
    ck_assert_int_eq(claim_n(&e, 8), 0);
    assert_state(&e, 8, "waiting");
    /* removed: the group's 5 again, released by the sweep */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.set_tenant_cap('y', NULL)::int"), 1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT warren.wp_cap_release_all(10)"), 1);
    assert_state(&e, 8, "planned+slot");
    char *caps = testenv_sql1(e.db, "SELECT string_agg(tenant || '=' || max_running, ',') "
                                    "FROM warren.tenant_caps");
    ck_assert_str_eq(caps ? caps : "", "x=2");
    free(caps);
    PGconn *c = testenv_connect(e.db);
    exec_fails(c, "SELECT warren.set_tenant_cap('x', 0)", "22023", "is not a cap");
    exec_fails(c, "SELECT warren.set_tenant_cap('bad tenant', 1)", "22023",
               "\"bad tenant\" is not a tenant name");
    PQfinish(c);
    testenv_stack_free(&e);
}
END_TEST

/* One lock mode per group whatever its tenants' caps: two complete_many
 * calls, each with a run of tenant a (an operator's tenant cap) and one of
 * tenant b (its cap removed since its claim, so counted under the group),
 * in a group without max_running. Session h holds a's locks; both calls
 * queue for them. When b's lock mode followed b's own (none: the group's
 * lock exclusive), each call held the group's lock shared for a and then
 * waited to take it exclusively for b: deadlock detected. */
START_TEST(test_caps_tenant_caps_keep_one_lock_mode_per_group)
{
    env e;
    env_setup(&e);
    set_caps(&e, 0, 0);
    testenv_exec(e.db, "SELECT warren.set_tenant_cap('a', 5), warren.set_tenant_cap('b', 5)");
    testenv_exec(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                       "('capt', '2026-01-01T00:00:01Z', now(), 'trigger', 'a'),"
                       "('capt', '2026-01-01T00:00:02Z', now(), 'trigger', 'a'),"
                       "('capt', '2026-01-01T00:00:03Z', now(), 'trigger', 'b'),"
                       "('capt', '2026-01-01T00:00:04Z', now(), 'trigger', 'b')");
    for (int n = 1; n <= 4; n++)
        ck_assert_int_eq(claim_n(&e, n), 1);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE cap_group = 'capt'"), 4);
    testenv_exec(e.db, "SELECT warren.set_tenant_cap('b', NULL)");
    queued r;
    run_queued(&e, "SELECT warren.wp_cap_lock('capt', 'a', NULL, NULL)",
               "SELECT * FROM warren.complete_many(ARRAY['capt@2026-01-01T00:00:01Z', "
               "'capt@2026-01-01T00:00:03Z'], ARRAY[1, 1]) WHERE recorded",
               "SELECT * FROM warren.complete_many(ARRAY['capt@2026-01-01T00:00:02Z', "
               "'capt@2026-01-01T00:00:04Z'], ARRAY[1, 1]) WHERE recorded",
               &r);
    ck_assert_msg(r.n1 == 2, "first call: %d rows %s", r.n1, r.msg1);
    ck_assert_msg(r.n2 == 2, "second call: %d rows %s", r.n2, r.msg2);
    testenv_stack_free(&e);
}
END_TEST

static Suite *caps_suite(void)
{
    Suite *s = suite_create("caps");
    TCase *tc = tcase_create("caps");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc,
                   test_caps_per_tenant_cap_is_never_exceeded_and_small_tenants_are_not_delayed);
    tcase_add_test(tc, test_caps_max_running_total_cap_with_a_tenant_cap);
    tcase_add_test(tc, test_caps_operator_tenant_cap_replaces_the_groups_per_tenant_cap);
    tcase_add_test(tc, test_caps_tenant_caps_keep_one_lock_mode_per_group);
    tcase_add_test(tc, test_caps_template_group_and_a_raised_cap_released_by_the_reconciler);
    tcase_add_test(tc, test_caps_batches_with_tenants_in_opposite_key_orders_do_not_deadlock);
    tcase_add_test(tc, test_caps_overlap_claim_many_and_a_completion_do_not_deadlock);
    tcase_add_test(tc, test_caps_claim_and_claim_many_of_one_overlap_job_do_not_deadlock);
    tcase_add_test(tc, test_caps_release_with_both_caps_reaches_every_tenant);
    tcase_add_test(tc, test_caps_sweep_skips_tenants_at_their_cap);
    tcase_add_test(tc, test_caps_a_slot_freed_without_a_release_keeps_due_order);
    tcase_add_test(tc, test_caps_a_capped_claim_needs_read_committed);
    tcase_add_test(tc, test_caps_run_tenant_grammar);
    tcase_add_test(tc, test_caps_every_way_out_of_running_releases_the_next_waiting_run);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    testenv_amqp_url();
    test_logger.ud = stderr;
    SRunner *sr = srunner_create(caps_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
