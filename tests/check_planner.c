/* check_planner: the planner (src/planner.c, src/store_plan.c) against real
 * PostgreSQL and RabbitMQ: schedules and jitter, materialising, release no
 * earlier than due, several planners at once, misfire policies, pause and
 * resume, and the trigger/backfill/pause commands of the warren program. */
#include <check.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/ops.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "planner_fixture.h"
#include "testenv.h"

/* ----------------------------------------------------------------- helpers */

static warren_config test_config(int partitions)
{
    warren_config c;
    memset(&c, 0, sizeof(c));
    c.planner.horizon_ms = 10000;
    c.planner.tick_ms = 200;
    c.planner.misfire_threshold_ms = 60000;
    c.planner.reconcile_grace_ms = 600000; /* no republishes unless a test wants them */
    c.planner.partitions = partitions;
    c.planner.publish_batch = 200;
    c.planner.delay_queue_expires_ms = 600000;
    return c;
}

static void add_job(const env *e, const char *name, const char *kind, const char *expr,
                    const char *extra_cols, const char *extra_vals, int partitions)
{
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, partition%s) "
             "VALUES ('%s', '%s', '%s', 'q', %d%s)",
             extra_cols ? extra_cols : "", name, kind, expr, warren_job_partition(name, partitions),
             extra_vals ? extra_vals : "");
    ck_assert_int_ge(testenv_psql(e->db, sql, NULL), 0);
}

/* A consumer on warren.ready.q. */
static warren_broker *consumer(const env *e)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    ck_assert_msg(warren_broker_open(e->amqp, NULL, &b, &err) == 0, "%s", err.message);
    ck_assert(warren_broker_qos(b, 500, &err) == 0);
    ck_assert_msg(warren_broker_consume(b, "warren.ready.q", &err) == 0, "%s", err.message);
    return b;
}

/* ------------------------------------------------------------------- pure */

START_TEST(test_jitter_is_stable_whole_seconds_below_jitter)
{
    int seen[30] = {0}, distinct = 0;
    ck_assert_int_eq(warren_jitter_offset_s("report", 0), 0);
    ck_assert_int_eq(warren_jitter_offset_s("report", 999), 0); /* [0, 1 s) */
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof(name), "job-%d", i);
        int64_t a = warren_jitter_offset_s(name, 30000);
        ck_assert_int_ge(a, 0);
        ck_assert_int_lt(a, 30);
        ck_assert_int_eq(a, warren_jitter_offset_s(name, 30000));
        if (!seen[a]++)
            distinct++;
    }
    ck_assert_int_gt(distinct, 20); /* spread, not a constant */
    /* FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; mod 7 = 3 (documented hash). */
    ck_assert_int_eq(warren_jitter_offset_s("a", 7000),
                     (int64_t)(UINT64_C(0xaf63dc4c8601ec8c) % 7));
}
END_TEST

START_TEST(test_every_fires_at_multiples_since_epoch)
{
    warren_tzdb *db = warren_tzdb_new(NULL);
    warren_schedule *s = NULL;
    warren_error err = {0};
    int64_t t = 0;
    ck_assert_msg(warren_schedule_new(db, "j", "every", "90s", "Europe/Berlin", &s, &err) == 0,
                  "%s", err.message);
    ck_assert(warren_schedule_next(s, 0, &t, NULL, &err) == 0);
    ck_assert_int_eq(t, 90);
    ck_assert(warren_schedule_next(s, 90 * WARREN_US_PER_S, &t, NULL, &err) == 0);
    ck_assert_int_eq(t, 180); /* strictly after */
    ck_assert(warren_schedule_next(s, 1764410000LL * WARREN_US_PER_S + 1, &t, NULL, &err) == 0);
    ck_assert_int_eq(t % 90, 0);
    ck_assert_int_gt(t, 1764410000LL);
    ck_assert_int_le(t, 1764410000LL + 90);
    warren_schedule_free(s);

    ck_assert(warren_schedule_new(db, "j", "at", "2030-01-01T00:00:00Z", "UTC", &s, &err) == 0);
    ck_assert(warren_schedule_next(s, 0, &t, NULL, &err) == 0);
    ck_assert_int_eq(t, 1893456000LL);
    ck_assert_int_eq(warren_schedule_next(s, 1893456000LL * WARREN_US_PER_S, &t, NULL, &err),
                     WARREN_ENEVER);
    warren_schedule_free(s);

    ck_assert_int_eq(warren_schedule_new(db, "j", "cron", "0 25 * * *", "UTC", &s, NULL),
                     WARREN_ECRON);
    ck_assert_int_eq(warren_schedule_new(db, "j", "cron", "0 2 * * *", "Nowhere/Zone", &s, NULL),
                     WARREN_ETZ);
    warren_tzdb_free(db);
}
END_TEST

START_TEST(test_cron_dst_gap_run_gets_a_note)
{
    /* Europe/Berlin springs forward at 2027-03-28 02:00 local: 02:30 is moved. */
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;
    add_job(&e, "dst", "cron", "30 2 * * *", ", timezone, next_fire_at",
            ", 'Europe/Berlin', '2027-03-28T00:00:00Z'", 4);
    c.planner.misfire_threshold_ms = 1000LL * 86400 * 3650; /* never a misfire here */
    c.planner.horizon_ms = 1000LL * 86400 * 3650;
    p = planner_new(&e, &c);
    /* The horizon reaches years ahead; one tick writes at most 10000 runs per job. */
    tick(p);
    char *note = testenv_sql1(e.db, "SELECT note FROM warren.runs WHERE job = 'dst' AND "
                                    "scheduled_at = '2027-03-28T01:00:00Z'");
    ck_assert_msg(note != NULL && strstr(note, "spring-forward gap") != NULL, "note: %s",
                  note ? note : "(null)");
    free(note);
    /* The day after: 02:30 CEST = 00:30Z, no note. */
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'dst' AND "
                                      "scheduled_at = '2027-03-29T00:30:00Z' AND note IS NULL"),
                     1);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* ------------------------------------------------------------ materialise */

START_TEST(test_materialise_creates_each_fire_time_once_and_advances_cursor)
{
    env e = fixture_env_new();
    warren_config c = test_config(8);
    warren_planner *p;
    warren_planner_stats s;

    add_job(&e, "every2", "every", "2s", NULL, NULL, 8);
    add_job(&e, "jit", "every", "5s", ", jitter_ms", ", 4000", 8);
    add_job(&e, "paused", "every", "1s", ", paused", ", true", 8);
    p = planner_new(&e, &c);
    tick(p);
    tick(p); /* a second tick adds nothing new for the same horizon */
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(s.partitions_owned, 8);
    /* horizon 10 s: 5 or 6 fire times of every2, all at even seconds */
    long n = testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'every2'");
    ck_assert_msg(n >= 5 && n <= 7, "every2 has %ld runs", n);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'every2' AND "
                                      "extract(epoch FROM scheduled_at)::bigint % 2 <> 0"),
                     0);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'paused'"), 0);
    /* cursor: the first fire time not materialised, beyond now + horizon */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs j WHERE name = 'every2' AND "
                               "next_fire_at = (SELECT max(scheduled_at) + interval '2 s' "
                               "FROM warren.runs WHERE job = 'every2')"),
        1);
    /* jitter: due_at - scheduled_at is the documented stable offset */
    {
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM warren.runs WHERE job = 'jit' AND due_at - scheduled_at "
                 "<> interval '%lld s'",
                 (long long)warren_jitter_offset_s("jit", 4000));
        ck_assert_int_eq(testenv_sql_long(e.db, sql), 0);
    }
    /* at: fires once, cursor goes to infinity */
    add_job(&e, "once", "at", "2020-01-01T00:00:00Z", ", misfire", ", 'catch_up'", 8);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'once'"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE name = 'once' AND "
                                      "next_fire_at = 'infinity'"),
                     1);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* The planner inserts its runs without ON CONFLICT and, when a key is taken
 * (here by a trigger of the same second), inserts the batch again with ON
 * CONFLICT DO NOTHING: the taken run stays as it was, every other fire time
 * of that job and of the other job in the same batch is planned once, and the
 * cursors advance. */
START_TEST(test_taken_run_key_is_kept_and_the_rest_planned)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;

    add_job(&e, "every2", "every", "2s", NULL, NULL, 4);
    add_job(&e, "other2", "every", "2s", NULL, NULL, 4);
    /* the fire time of every2 6 s after the next one, taken by a trigger */
    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, "
                                  "note) SELECT 'every2', t, t, 'trigger', 'taken first' FROM "
                                  "(SELECT to_timestamp((floor(extract(epoch FROM now()) / 2) + "
                                  "4) * 2) AS t) x",
                                  NULL),
                     1);
    p = planner_new(&e, &c);
    tick(p);
    long n = testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'every2'");
    ck_assert_msg(n >= 5 && n <= 7, "every2 has %ld runs", n);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'other2'"), n);
    /* one row per fire time, the taken one untouched */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) - count(DISTINCT scheduled_at) FROM "
                                            "warren.runs WHERE job = 'every2'"),
                     0);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'every2' AND "
                                      "origin = 'trigger' AND note = 'taken first'"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'every2' AND "
                                      "origin = 'schedule'"),
                     n - 1);
    /* both cursors past their last run */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs j WHERE next_fire_at = "
                               "(SELECT max(scheduled_at) + interval '2 s' FROM warren.runs r "
                               "WHERE r.job = j.name)"),
        2);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* A backlog (more jobs due than one batch) is materialised on two
 * connections: the second one plans a share of the jobs, and every job still
 * gets each fire time once, without a gap, and its cursor just past them. */
START_TEST(test_backlog_is_planned_on_two_connections_each_fire_time_once)
{
    env e = fixture_env_new();
    warren_config c = test_config(8);
    warren_planner *p;
    warren_planner_stats s;

    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.jobs (name, schedule_kind, expression, "
                                  "queue, partition) SELECT 'bulk-' || g, 'every', '4s', 'q', "
                                  "g % 8 FROM generate_series(1, 2000) g",
                                  NULL),
                     2000);
    p = planner_new(&e, &c);
    tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert_msg(s.helper_jobs > 0 && s.helper_jobs < 2000,
                  "the second connection planned %llu of 2000 jobs",
                  (unsigned long long)s.helper_jobs);
    for (int i = 0;
         i < 10 && testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE next_fire_at "
                                          "IS NULL") > 0;
         i++)
        tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE next_fire_at IS NULL"), 0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"),
                     (long)s.runs_inserted);
    /* per job: 10 s of 4 s fire times, one row each from the first up to the
     * cursor */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM (SELECT r.job, count(*) AS n, "
                               "min(r.scheduled_at) AS first, j.next_fire_at AS cursor FROM "
                               "warren.runs r JOIN warren.jobs j ON j.name = r.job GROUP BY "
                               "r.job, j.next_fire_at) x WHERE n < 2 OR n <> extract(epoch FROM "
                               "cursor - first) / 4 OR n <> (SELECT count(DISTINCT "
                               "scheduled_at) FROM warren.runs WHERE job = x.job)"),
        0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(DISTINCT job) FROM warren.runs"), 2000);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* sql's number once it is want, polled every 20 ms for up to ms; the last
 * value read otherwise. For counts of backends: a connection just closed
 * (testenv_sql1 opens one per query) stays in pg_stat_activity until its
 * backend has exited, a few ms later. */
static long sql_long_settled(const env *e, const char *sql, long want, int ms)
{
    long n = testenv_sql_long(e->db, sql);
    for (int waited = 0; n != want && waited < ms; waited += 20) {
        testenv_sleep_ms(20);
        n = testenv_sql_long(e->db, sql);
    }
    return n;
}

/* The second connection lost (its backend terminated between ticks): the
 * next backlog's tick does not fail, the planner's own connection plans
 * everything once, and the backlog after it opens a new second connection. */
START_TEST(test_lost_second_connection_does_not_fail_the_tick)
{
    env e = fixture_env_new();
    warren_config c = test_config(8);
    warren_planner *p;
    warren_planner_stats s;
    uint64_t helper_before;
    static const char reset[] = "DELETE FROM warren.runs; UPDATE warren.jobs SET next_fire_at = "
                                "NULL";
    static const char done[] = "SELECT count(*) FROM warren.jobs WHERE next_fire_at IS NULL";

    ck_assert_int_eq(testenv_psql(e.db,
                                  "INSERT INTO warren.jobs (name, schedule_kind, expression, "
                                  "queue, partition) SELECT 'bulk-' || g, 'every', '4s', 'q', "
                                  "g % 8 FROM generate_series(1, 2000) g",
                                  NULL),
                     2000);
    p = planner_new(&e, &c);
    tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert(s.helper_jobs > 0);
    /* the planner's two connections; the newer one is the second (once the
     * backends of the test's own closed connections have gone) */
    ck_assert_int_eq(sql_long_settled(&e,
                                      "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                      "current_database() AND pid <> pg_backend_pid()",
                                      2, 5000),
                     2);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM "
                                      "pg_stat_activity WHERE datname = current_database() AND pid "
                                      "<> pg_backend_pid() ORDER BY backend_start DESC LIMIT 1) k"),
                     1);
    ck_assert_int_ge(testenv_psql(e.db, reset, NULL), 0);
    tick(p); /* the second connection fails at once: logged, dropped */
    for (int i = 0; i < 10 && testenv_sql_long(e.db, done) > 0; i++)
        tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, done), 0);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM (SELECT r.job, count(*) AS n, "
                               "min(r.scheduled_at) AS first, j.next_fire_at AS cursor FROM "
                               "warren.runs r JOIN warren.jobs j ON j.name = r.job GROUP BY "
                               "r.job, j.next_fire_at) x WHERE n < 2 OR n <> extract(epoch FROM "
                               "cursor - first) / 4"),
        0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(DISTINCT job) FROM warren.runs"), 2000);
    /* the next backlog opens a new second connection */
    ck_assert_int_ge(testenv_psql(e.db, reset, NULL), 0);
    warren_planner_stats_get(p, &s);
    helper_before = s.helper_jobs;
    tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert_msg(s.helper_jobs > helper_before, "no second connection after the lost one");
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* --------------------------------------------------------------- release */

typedef struct arrival {
    char key[WARREN_RUN_KEY_MAX];
    warren_us due;
    warren_us at; /* database clock */
} arrival;

/* Consumes until n distinct run keys arrived or timeout; returns count. */
static int collect(warren_broker *b, warren_us offset, arrival *out, int n, int64_t timeout_ms)
{
    int got_n = 0;
    int64_t end = testenv_mono_ms() + timeout_ms;
    while (got_n < n && testenv_mono_ms() < end) {
        warren_delivery d = {0};
        warren_error err = {0};
        int got = 0;
        ck_assert_msg(warren_broker_next(b, 200, &d, &got, &err) == 0, "%s", err.message);
        if (!got)
            continue;
        warren_us at = testenv_wall_us() + offset, due = 0;
        const char *dh = warren_delivery_header(&d, "x-warren-due-at");
        ck_assert(dh != NULL);
        ck_assert(warren_time_parse(dh, &due, NULL) == 0);
        int dup = 0;
        for (int i = 0; i < got_n; i++)
            dup |= strcmp(out[i].key, d.message_id) == 0;
        if (!dup) {
            snprintf(out[got_n].key, sizeof(out[got_n].key), "%s", d.message_id);
            out[got_n].due = due;
            out[got_n].at = at;
            got_n++;
        }
        ck_assert(warren_broker_ack(b, d.tag, &err) == 0);
        warren_delivery_clear(&d);
    }
    return got_n;
}

static void insert_due(const env *e, const char *key_job, int sched_offset_s, int due_offset_ms)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES ('%s', "
             "date_trunc('second', now()) + interval '%d s', clock_timestamp() + interval '%d "
             "ms', 'trigger')",
             key_job, sched_offset_s, due_offset_ms);
    ck_assert_int_eq(testenv_psql(e->db, sql, NULL), 1);
}

START_TEST(test_release_never_before_due_out_of_order)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;
    warren_broker *b;
    warren_us off;
    arrival a[8];
    int n;

    c.planner.horizon_ms = 120000;
    add_job(&e, "r", "at", "2099-01-01T00:00:00Z", ", paused", ", true", 4);
    off = testenv_db_clock_offset(e.db, 5);
    b = consumer(&e);
    p = planner_new(&e, &c);
    /* Published one tick at a time, latest due first: each lands in its own
     * second's delay queue, so an early one is never stuck behind a later one. */
    insert_due(&e, "r", 1, 62000); /* a minute away */
    tick(p);
    insert_due(&e, "r", 2, 4700);
    tick(p);
    insert_due(&e, "r", 3, 2300);
    insert_due(&e, "r", 4, 2900);
    tick(p);
    insert_due(&e, "r", 5, 1100);
    tick(p);
    insert_due(&e, "r", 6, 0); /* due now: straight to the ready exchange */
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'"), 6);
    n = collect(b, off, a, 6, 130000); /* the last is due in 62 s; the bound below is 60 s */
    ck_assert_int_eq(n, 6);
    /* Never early, and each from its own delay queue rather than by a later
     * republish (which would come after reconcile_grace, 600 s here). How
     * late is a number for bench_delivery (release lateness percentiles):
     * the bound is 60 s, not a lateness goal (once, on a RabbitMQ node
     * restarted by the test before, the run due in 62 s came out of its
     * delay queue 33.7 s late; every other time within 0.5 s). */
    for (int i = 0; i < n; i++) {
        int64_t late_ms = (a[i].at - a[i].due) / 1000;
        ck_assert_msg(a[i].at >= a[i].due, "%s released %lld us before due", a[i].key,
                      (long long)(a[i].due - a[i].at));
        fprintf(stderr, "%s released %lld ms after due\n", a[i].key, (long long)late_ms);
        ck_assert_msg(late_ms < 60000, "%s released %lld ms late", a[i].key, (long long)late_ms);
    }
    /* arrival in due order */
    for (int i = 1; i < n; i++)
        ck_assert_msg(a[i].due >= a[i - 1].due, "out of due order at %d", i);
    warren_planner_free(p);
    warren_broker_free(b);
    env_free(&e);
}
END_TEST

/* --------------------------------------------------- several planners */

/* Runs a planner in a child until SIGTERM. */
static pid_t spawn_planner(const env *e, const warren_config *c, const char *id)
{
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int stop = 0;
        warren_planner *p = NULL;
        warren_error err = {0};
        if (warren_planner_new(c, e->db, e->amqp, NULL, &p, &err) != 0) {
            fprintf(stderr, "child planner: %s\n", err.message);
            _exit(3);
        }
        warren_planner_set_id(p, id, NULL);
        {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGTERM);
            sigprocmask(SIG_BLOCK, &set, NULL);
            /* poll for SIGTERM between ticks via sigpending */
            while (!stop) {
                sigset_t pend;
                warren_error te = {0};
                if (warren_planner_tick(p, &te) != 0)
                    fprintf(stderr, "child planner %s: %s\n", id, te.message);
                sigpending(&pend);
                if (sigismember(&pend, SIGTERM))
                    stop = 1;
                else
                    usleep((useconds_t)c->planner.tick_ms * 1000);
            }
        }
        warren_planner_release(p, NULL);
        warren_planner_free(p);
        _exit(0);
    }
    return pid;
}

static void stop_child(pid_t pid)
{
    int status = 0;
    kill(pid, SIGTERM);
    ck_assert(waitpid(pid, &status, 0) == pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "planner child status %d", status);
}

static void many_planners(int nplanners, int seconds, int stop_one)
{
    env e = fixture_env_new();
    warren_config c = test_config(16);
    pid_t kids[3];
    warren_broker *b;
    char key_sql[256];
    int64_t end;
    long rows, expected_ok, messages = 0;

    c.planner.horizon_ms = 5000;
    c.planner.tick_ms = 300;
    for (int i = 0; i < 12; i++) {
        char name[32];
        snprintf(name, sizeof(name), "multi-%02d", i);
        add_job(&e, name, "every", i % 2 ? "1s" : "2s", NULL, NULL, 16);
    }
    b = consumer(&e);
    testenv_psql(e.db, "CREATE TABLE public.t0 AS SELECT now() AS t", NULL);
    for (int i = 0; i < nplanners; i++) {
        char id[32];
        snprintf(id, sizeof(id), "planner-%d", i);
        kids[i] = spawn_planner(&e, &c, id);
    }
    /* Keys seen, with counts, in a table so SQL can compare. */
    testenv_psql(e.db, "CREATE TABLE public.seen (run_key text PRIMARY KEY, n int NOT NULL)", NULL);
    end = testenv_mono_ms() + (int64_t)seconds * 1000;
    int stopped = 0;
    while (testenv_mono_ms() < end + 8000) {
        warren_delivery d = {0};
        warren_error err = {0};
        int got = 0;
        if (stop_one && !stopped && testenv_mono_ms() > end - (int64_t)seconds * 1000 / 2) {
            /* A planner frozen past its lease wakes up later: no duplicates. */
            kill(kids[nplanners - 1], SIGSTOP);
            stopped = 1;
        }
        if (stop_one && stopped == 1 && testenv_mono_ms() > end - 3000) {
            kill(kids[nplanners - 1], SIGCONT);
            stopped = 2;
        }
        if (testenv_mono_ms() > end && kids[0] != 0) {
            testenv_psql(e.db, "CREATE TABLE public.t1 AS SELECT now() AS t", NULL);
            for (int i = 0; i < nplanners; i++)
                stop_child(kids[i]);
            kids[0] = 0;
        }
        ck_assert_msg(warren_broker_next(b, 200, &d, &got, &err) == 0, "%s", err.message);
        if (!got)
            continue;
        snprintf(key_sql, sizeof(key_sql),
                 "INSERT INTO public.seen VALUES ('%s', 1) ON CONFLICT (run_key) DO UPDATE SET "
                 "n = seen.n + 1",
                 d.message_id);
        ck_assert_int_ge(testenv_psql(e.db, key_sql, NULL), 0);
        messages++;
        warren_broker_ack(b, d.tag, &err);
        warren_delivery_clear(&d);
    }
    if (kids[0] != 0)
        for (int i = 0; i < nplanners; i++)
            stop_child(kids[i]);
    /* Every fire time from the first planned one to the last due one has
     * exactly one row (no gap, no duplicate), for every job. */
    rows = testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs");
    ck_assert_int_gt(rows, seconds * 6);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM (SELECT job, "
                                      "extract(epoch FROM max(scheduled_at) - min(scheduled_at)) / "
                                      "(CASE WHEN j.expression = '1s' THEN 1 ELSE 2 END) + 1 - "
                                      "count(*) AS gap "
                                      "FROM warren.runs r JOIN warren.jobs j ON j.name = r.job "
                                      "GROUP BY job, j.expression) g WHERE gap <> 0"),
                     0);
    /* every run due by the end got at least one message, and no more
     * messages than confirmed publishes (no double publishing by planners) */
    expected_ok =
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r WHERE r.due_at < (SELECT t "
                               "FROM t1) AND r.scheduled_at >= (SELECT t FROM t0)");
    ck_assert_int_gt(expected_ok, seconds * 4);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs r WHERE r.due_at < (SELECT "
                                      "t FROM t1) AND r.scheduled_at >= (SELECT t FROM t0) AND "
                                      "NOT EXISTS (SELECT 1 FROM public.seen s WHERE s.run_key = "
                                      "r.run_key)"),
                     0);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM public.seen s JOIN warren.runs r USING "
                                      "(run_key) WHERE s.n > r.publish_count"),
                     0);
    /* leases were shared: each planner's id shows up in planner_leases history
     * only while alive; after the stops every lease is released */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.planner_leases WHERE owner <> ''"), 0);
    warren_broker_free(b);
    env_free(&e);
    (void)messages;
}

START_TEST(test_two_planners_one_row_per_fire_time)
{
    many_planners(2, 30, 0);
}
END_TEST

START_TEST(test_three_planners_one_frozen_past_its_lease)
{
    many_planners(3, 40, 1);
}
END_TEST

START_TEST(test_fair_share_of_partitions)
{
    env e = fixture_env_new();
    warren_config c = test_config(10);
    warren_planner *p1 = planner_new(&e, &c), *p2 = planner_new(&e, &c), *p3;
    warren_planner_stats s1, s2, s3;
    warren_planner_set_id(p1, "p1", NULL);
    warren_planner_set_id(p2, "p2", NULL);
    tick(p1); /* p1 alone: all 10 */
    warren_planner_stats_get(p1, &s1);
    ck_assert_int_eq(s1.partitions_owned, 10);
    tick(p2); /* p2 announces itself; nothing free yet */
    tick(p1); /* p1 gives up down to 5 */
    tick(p2); /* p2 takes 5 */
    warren_planner_stats_get(p1, &s1);
    warren_planner_stats_get(p2, &s2);
    ck_assert_int_eq(s1.partitions_owned, 5);
    ck_assert_int_eq(s2.partitions_owned, 5);
    p3 = planner_new(&e, &c);
    warren_planner_set_id(p3, "p3", NULL);
    tick(p3);
    tick(p1);
    tick(p2);
    tick(p3);
    warren_planner_stats_get(p1, &s1);
    warren_planner_stats_get(p2, &s2);
    warren_planner_stats_get(p3, &s3);
    ck_assert_int_le(s1.partitions_owned, 4);
    ck_assert_int_le(s2.partitions_owned, 4);
    ck_assert_int_eq(s1.partitions_owned + s2.partitions_owned + s3.partitions_owned, 10);
    /* release: p3's partitions become free for the others */
    ck_assert(warren_planner_release(p3, NULL) == 0);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.planner_leases WHERE owner = 'p3'"), 0);
    warren_planner_free(p1);
    warren_planner_free(p2);
    warren_planner_free(p3);
    env_free(&e);
}
END_TEST

START_TEST(test_planner_without_lease_does_not_materialise)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p = planner_new(&e, &c);
    warren_planner_stats s;
    warren_planner_set_id(p, "loser", NULL);
    tick(p);
    /* another planner took every partition (our lease was taken over) */
    testenv_psql(e.db,
                 "INSERT INTO warren.planners (owner, alive_until) VALUES ('thief', now() + "
                 "interval '1 min'); UPDATE warren.planner_leases SET owner = 'thief', "
                 "lease_until = now() + interval '1 min'",
                 NULL);
    add_job(&e, "orphan", "every", "1s", NULL, NULL, 4);
    tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), 0);
    ck_assert_int_eq(s.partitions_owned, 0); /* fair share 2, but none is free */
    /* the thief's leases expire: the planner takes its fair share back */
    testenv_psql(e.db, "UPDATE warren.planner_leases SET lease_until = now() - interval '1 s'",
                 NULL);
    tick(p);
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(s.partitions_owned, 2);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* ---------------------------------------------------------------- misfire */

/* A 10 s job whose planner was away for 5 minutes (cursor in the past). */
static env outage(const char *policy, int max_catch_up)
{
    env e = fixture_env_new();
    char vals[128];
    snprintf(vals, sizeof(vals),
             ", '%s', %d, to_timestamp(floor(extract(epoch FROM now()) / 10) * 10) - interval "
             "'5 min'",
             policy, max_catch_up);
    add_job(&e, "m", "every", "10s", ", misfire, max_catch_up, next_fire_at", vals, 4);
    warren_config c = test_config(4);
    warren_planner *p = planner_new(&e, &c);
    tick(p);
    warren_planner_free(p);
    return e;
}

/* Rows after the outage cover every fire time from the cursor on, once. */
static void assert_contiguous(const env *e)
{
    ck_assert_int_eq(
        testenv_sql_long(e->db, "SELECT extract(epoch FROM max(scheduled_at) - "
                                "min(scheduled_at))::bigint / 10 + 1 - count(*) FROM warren.runs "
                                "WHERE job = 'm'"),
        0);
}

START_TEST(test_misfire_run_once_coalesces_with_a_note)
{
    env e = outage("run_once", 0);
    /* exactly one run older than the threshold: the latest missed fire time */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'm' AND "
                               "origin = 'misfire' AND scheduled_at < now() - interval '60 s'"),
        1);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'm' AND "
                                      "scheduled_at < (SELECT scheduled_at FROM warren.runs WHERE "
                                      "origin = 'misfire')"),
                     0);
    char *note = testenv_sql1(e.db, "SELECT note FROM warren.runs WHERE origin = 'misfire'");
    ck_assert_msg(note != NULL && strstr(note, "run_once") && strstr(note, "missed fire time") &&
                      strstr(note, "coalesced"),
                  "note: %s", note ? note : "(null)");
    /* how many: from 5 min ago up to the threshold: 24 to 25 fire times */
    ck_assert_msg(strstr(note, ": 24 missed") || strstr(note, ": 25 missed") ||
                      strstr(note, ": 23 missed") || strstr(note, ": 26 missed"),
                  "note: %s", note);
    free(note);
    ck_assert_int_eq(
        testenv_sql_long(
            e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'misfire' AND "
                  "state IN ('planned', 'published') AND scheduled_at > now() - interval '71 s'"),
        1);
    /* fire times within the threshold run late as usual */
    ck_assert_int_ge(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'schedule' AND "
                               "scheduled_at BETWEEN now() - interval '60 s' AND now()"),
        5);
    env_free(&e);
}
END_TEST

START_TEST(test_misfire_skip_records_each_skipped_time)
{
    env e = outage("skip", 0);
    long skipped =
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'skipped' AND "
                               "note LIKE 'misfire skip:%' AND finished_at IS NOT NULL");
    /* 5 min back to the threshold: 24 or 25 fire times, one more when the
     * tick's now() crossed a 10 s boundary after the outage was set up. */
    ck_assert_msg(skipped >= 23 && skipped <= 26, "skipped %ld", skipped);
    /* a margin: a fire time just inside the threshold at the tick may be just
     * outside it by the time this query runs */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state <> 'skipped' AND "
                               "scheduled_at < now() - interval '65 s'"),
        0);
    assert_contiguous(&e);
    env_free(&e);
}
END_TEST

START_TEST(test_misfire_catch_up_runs_oldest_first_up_to_cap)
{
    env e = outage("catch_up", 3);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'misfire' AND "
                               "state IN ('planned', 'published')"),
        3);
    /* the three are the oldest missed ones */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM (SELECT origin, state FROM warren.runs "
                               "WHERE job = 'm' ORDER BY scheduled_at LIMIT 3) x WHERE origin = "
                               "'misfire' AND state IN ('planned', 'published')"),
        3);
    long skipped =
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'skipped' AND "
                               "note LIKE 'misfire catch_up: over max_catch_up%'");
    ck_assert_msg(skipped >= 20 && skipped <= 23, "skipped %ld", skipped); /* 23-26 missed, 3 run */
    assert_contiguous(&e);
    env_free(&e);

    e = outage("catch_up", 0); /* no cap: every missed time runs */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'skipped'"), 0);
    ck_assert_int_ge(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'misfire'"), 23);
    assert_contiguous(&e);
    env_free(&e);
}
END_TEST

/* ----------------------------------------------------------- pause/resume */

START_TEST(test_pause_stops_planning_resume_applies_misfire)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_store *st = NULL;
    warren_error err = {0};
    warren_planner *p;
    warren_ops_pause_result pr = {.was_paused = -1};
    warren_ops_resume_result rr = {.was_paused = -1};

    c.planner.misfire_threshold_ms = 2000;
    c.planner.horizon_ms = 5000;
    add_job(&e, "pr", "every", "1s", NULL, NULL, 4);
    p = planner_new(&e, &c);
    tick(p);
    ck_assert(warren_store_open(e.db, NULL, &st, &err) == 0);
    ck_assert_msg(warren_ops_pause(st, "pr", &pr, &err) == 0, "%s", err.message);
    ck_assert_int_eq(pr.was_paused, 0);
    ck_assert_int_ge(pr.cancelled, 3);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE state IN ('planned', "
                                      "'published') AND due_at > now()"),
                     0);
    long before = testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs");
    testenv_sleep_ms(1500); /* deliberately: fire times pass while paused, and nothing is planned */
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), before);
    ck_assert(warren_ops_pause(st, "pr", &pr, &err) == 0);
    ck_assert_int_eq(pr.was_paused, 1);
    testenv_sleep_ms(5000); /* paused across several fire times, beyond the 2 s threshold */
    ck_assert_msg(warren_ops_resume(st, "pr", &rr, &err) == 0, "%s", err.message);
    ck_assert_int_eq(rr.was_paused, 1);
    ck_assert_int_ge(rr.replanned, 3); /* the runs the first pause cancelled */
    tick(p);
    /* the cancelled runs are gone; the missed ones coalesced into one run */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'cancelled'"), 0);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'misfire' AND "
                               "note LIKE 'misfire run_once:%'"),
        1);
    ck_assert_int_ge(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'schedule' AND "
                               "state IN ('planned', 'published') AND scheduled_at > now()"),
        3);
    ck_assert_int_eq(warren_ops_pause(st, "nosuch", &pr, &err), WARREN_ENOENT);
    warren_store_free(st);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* ------------------------------------------------------ commands (program) */

/* Writes a config for the test database and runs `warren ARGS`; returns the
 * exit status and the output (new). */
static int run_warren(const env *e, const char *args, char **out)
{
    char *text = testenv_fmt("database = { url = \"%s\"; };\nbroker = { url = \"%s\"; };\n"
                             "jobs = ( { name = \"cmd\"; every = \"10s\"; queue = \"q\"; } );\n",
                             e->db, e->amqp);
    char *cfgpath = testenv_temp_file("warren-planner-test", "", text);
    char *cmd = testenv_fmt("env -u WARREN_DATABASE_URL -u WARREN_AMQP_URL %s %s -c %s 2>&1",
                            WARREN_BINARY, args, cfgpath);
    char *buf = calloc(1, 65536);
    ck_assert_ptr_nonnull(buf);
    int status = testenv_run(cmd, buf, 65536);
    unlink(cfgpath);
    free(cmd);
    free(cfgpath);
    free(text);
    *out = buf;
    return status;
}

START_TEST(test_trigger_twice_creates_one_run_and_says_so)
{
    env e = fixture_env_new();
    char *out = NULL;
    int rc;
    add_job(&e, "cmd", "every", "10s", NULL, NULL, 64);
    rc = run_warren(&e, "trigger cmd --at 2030-01-02T03:04:05Z --payload '{\"x\": 1}'", &out);
    ck_assert_msg(rc == 0 && strstr(out, "created run cmd@2030-01-02T03:04:05Z"), "rc %d: %s", rc,
                  out);
    free(out);
    rc = run_warren(&e, "trigger cmd --at 2030-01-02T03:04:05Z", &out);
    ck_assert_msg(rc == 0 && strstr(out, "already exists") && strstr(out, "not created again"),
                  "rc %d: %s", rc, out);
    free(out);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'trigger' AND "
                               "payload = '{\"x\": 1}' AND due_at = scheduled_at"),
        1);
    rc = run_warren(&e, "trigger nosuch", &out);
    ck_assert_msg(rc != 0 && strstr(out, "nosuch"), "rc %d: %s", rc, out);
    free(out);
    rc = run_warren(&e, "trigger cmd --payload '[1]'", &out);
    ck_assert_msg(rc == 2, "rc %d: %s", rc, out);
    free(out);
    /* now: a run keyed by the database's current second */
    rc = run_warren(&e, "trigger cmd", &out);
    ck_assert_msg(rc == 0 && strstr(out, "created run cmd@"), "rc %d: %s", rc, out);
    free(out);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'trigger' AND "
                               "scheduled_at BETWEEN now() - interval '1 min' AND now()"),
        1);
    env_free(&e);
}
END_TEST

START_TEST(test_backfill_dry_run_lists_then_writes)
{
    env e = fixture_env_new();
    char *out = NULL;
    int rc;
    add_job(&e, "cmd", "every", "10s", NULL, NULL, 64);
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('cmd', "
                 "'2026-01-01T00:00:20Z', '2026-01-01T00:00:20Z')",
                 NULL);
    rc = run_warren(&e,
                    "backfill cmd --from 2026-01-01T00:00:00Z --to 2026-01-01T00:01:00Z "
                    "--dry-run",
                    &out);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
    ck_assert_msg(strstr(out, "cmd@2026-01-01T00:00:00Z\tnew") &&
                      strstr(out, "cmd@2026-01-01T00:00:20Z\texists") &&
                      strstr(out, "cmd@2026-01-01T00:01:00Z\tnew") &&
                      strstr(out, "7 fire time(s)") && strstr(out, "nothing written"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), 1);
    rc = run_warren(&e, "backfill cmd --from 2026-01-01T00:00:00Z --to 2026-01-01T00:01:00Z", &out);
    ck_assert_msg(rc == 0 && strstr(out, "backfilled 6 run(s)"), "rc %d: %s", rc, out);
    free(out);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'backfill'"), 6);
    rc = run_warren(&e, "backfill cmd --from 2026-01-01T00:01:00Z --to 2026-01-01T00:00:00Z", &out);
    ck_assert_msg(rc == 2, "rc %d: %s", rc, out);
    free(out);
    env_free(&e);
}
END_TEST

START_TEST(test_pause_resume_commands)
{
    env e = fixture_env_new();
    char *out = NULL;
    int rc;
    add_job(&e, "cmd", "every", "10s", NULL, NULL, 64);
    rc = run_warren(&e, "pause cmd", &out);
    ck_assert_msg(rc == 0 && strstr(out, "paused job cmd"), "rc %d: %s", rc, out);
    free(out);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE paused"), 1);
    rc = run_warren(&e, "resume cmd", &out);
    ck_assert_msg(rc == 0 && strstr(out, "resumed job cmd"), "rc %d: %s", rc, out);
    free(out);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE paused"), 0);
    rc = run_warren(&e, "pause", &out);
    ck_assert_msg(rc == 2, "rc %d: %s", rc, out);
    free(out);
    env_free(&e);
}
END_TEST

/* ------------------------------------------------------------ broken jobs */

static void copy_file(const char *from, const char *to)
{
    char buf[65536];
    size_t n;
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    ck_assert_msg(in != NULL && out != NULL, "copy %s to %s", from, to);
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* A tz directory of its own: the pinned release's tzdata.zi (the zone names)
 * and Europe/Berlin replaced by a corrupt file. dir gets its path. */
static void corrupt_tzdir(char *dir, size_t len)
{
    char path[512];
    const char *pinned = getenv("TZDIR");
    FILE *f;
    ck_assert_msg(pinned != NULL, "TZDIR is not set (run through ctest)");
    snprintf(dir, len, "/tmp/warren-tz-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/tzdata.zi", pinned);
    char to[512];
    snprintf(to, sizeof(to), "%s/tzdata.zi", dir);
    copy_file(path, to);
    snprintf(path, sizeof(path), "%s/Europe", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/Europe/Berlin", dir);
    f = fopen(path, "wb");
    ck_assert(f != NULL);
    for (int i = 0; i < 200; i++)
        fputc('x', f); /* a torn write: no TZif magic */
    fclose(f);
}

/* Copies Europe/Berlin from the pinned release in pinned into dir. */
static void repair_tzdir(const char *dir, const char *pinned)
{
    char from[512], to[512];
    snprintf(from, sizeof(from), "%s/Europe/Berlin", pinned);
    snprintf(to, sizeof(to), "%s/Europe/Berlin", dir);
    copy_file(from, to);
}

static void remove_tzdir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A queue job-events bound to warren.events for job.# (the job events). */
static void bind_job_events(const env *e)
{
    char *vpath = testenv_vhost_path(e->amqp), *resp = NULL, path[512];
    snprintf(path, sizeof(path), "/api/queues/%s/job-events", vpath);
    ck_assert_int_lt(testenv_http("PUT", path, "{\"durable\":true}", &resp), 300);
    free(resp);
    snprintf(path, sizeof(path), "/api/bindings/%s/e/warren.events/q/job-events", vpath);
    ck_assert_int_lt(testenv_http("POST", path, "{\"routing_key\":\"job.#\"}", &resp), 300);
    free(resp);
    free(vpath);
}

START_TEST(test_broken_zone_keeps_cursor_marks_job_and_misfire_plans_after_repair)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    char dir[64], *old_tzdir = strdup(getenv("TZDIR") ? getenv("TZDIR") : "");
    warren_planner *p;
    long cursor, after;

    corrupt_tzdir(dir, sizeof(dir));
    bind_job_events(&e);
    /* every 10 s in Berlin, last planned 5 minutes ago (the planner was away) */
    add_job(&e, "z", "cron", "*/10 * * * * *", ", timezone, next_fire_at",
            ", 'Europe/Berlin', to_timestamp(floor(extract(epoch FROM now()) / 10) * 10) - "
            "interval '5 min'",
            4);
    cursor =
        testenv_sql_long(e.db, "SELECT extract(epoch FROM next_fire_at)::bigint FROM warren.jobs");
    setenv("TZDIR", dir, 1);
    p = planner_new(&e, &c);
    tick(p);
    /* the cursor stays where it was: no fire time is skipped over */
    after =
        testenv_sql_long(e.db, "SELECT extract(epoch FROM next_fire_at)::bigint FROM warren.jobs");
    ck_assert_msg(after == cursor, "cursor moved from %ld to %ld", cursor, after);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), 0);
    /* marked broken, with the reason, and an error event */
    char *why = testenv_sql1(e.db, "SELECT broken_reason FROM warren.jobs WHERE name = 'z'");
    ck_assert_msg(why != NULL && strstr(why, "Europe/Berlin") && strstr(why, "zone file"),
                  "broken_reason: %s", why ? why : "(null)");
    free(why);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE broken_since <= now() "
                               "AND broken_retry_at > now()"),
        1);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "job-events"), 1);
    /* looked at again only after the backoff: a second tick changes nothing */
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), 0);
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "job-events"), 1);
    /* repaired, but the backoff has not passed: not looked at yet */
    repair_tzdir(dir, old_tzdir);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), 0);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE broken_reason IS NOT "
                                      "NULL"),
                     1);
    /* the backoff passed: planned again, the missed fire times through run_once */
    testenv_psql(e.db, "UPDATE warren.jobs SET broken_retry_at = now()", NULL);
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE broken_reason IS NULL "
                               "AND broken_since IS NULL AND broken_retry_at IS NULL"),
        1);
    char *note = testenv_sql1(e.db, "SELECT note FROM warren.runs WHERE origin = 'misfire'");
    ck_assert_msg(note != NULL && strstr(note, "misfire run_once") && strstr(note, "coalesced") &&
                      strstr(note, "broken since") && strstr(note, "Europe/Berlin"),
                  "note: %s", note ? note : "(null)");
    ck_assert_msg(strstr(note, ": 23 missed") || strstr(note, ": 24 missed") ||
                      strstr(note, ": 25 missed") || strstr(note, ": 26 missed"),
                  "note: %s", note);
    free(note);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'misfire'"), 1);
    ck_assert_int_ge(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE origin = 'schedule' AND "
                               "scheduled_at BETWEEN now() - interval '60 s' AND now()"),
        5);
    /* the events: broken (with the reason), then recovered */
    ck_assert_int_eq(testenv_queue_depth(e.amqp, "job-events"), 2);
    {
        warren_broker *b = NULL;
        warren_delivery d = {0};
        warren_error err = {0};
        int got = 0;
        ck_assert(warren_broker_open(e.amqp, NULL, &b, &err) == 0);
        ck_assert(warren_broker_consume(b, "job-events", &err) == 0);
        for (int i = 0; i < 25 && !got; i++)
            ck_assert(warren_broker_next(b, 200, &d, &got, &err) == 0);
        ck_assert(got);
        ck_assert_str_eq(d.routing_key, "job.broken.z");
        ck_assert_msg(strstr(d.body, "\"error\"") && strstr(d.body, "Europe/Berlin"), "%s", d.body);
        warren_delivery_clear(&d);
        got = 0;
        for (int i = 0; i < 25 && !got; i++)
            ck_assert(warren_broker_next(b, 200, &d, &got, &err) == 0);
        ck_assert(got);
        ck_assert_str_eq(d.routing_key, "job.recovered.z");
        warren_delivery_clear(&d);
        warren_broker_free(b);
    }
    warren_planner_free(p);
    setenv("TZDIR", old_tzdir, 1);
    free(old_tzdir);
    remove_tzdir(dir);
    env_free(&e);
}
END_TEST

START_TEST(test_broken_expression_from_a_newer_version_is_kept_and_replanned)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;
    char *out = NULL;
    int rc;

    /* 7 fields: as if a newer warren wrote the row */
    add_job(&e, "x", "cron", "*/10 * * * * * *", ", misfire, next_fire_at",
            ", 'skip', to_timestamp(floor(extract(epoch FROM now()) / 10) * 10) - "
            "interval '3 min'",
            4);
    add_job(&e, "y", "cron", "*/10 * * * * * *", NULL, NULL, 4); /* never planned */
    add_job(&e, "ok", "every", "10s", ", paused", ", true", 4);
    long cursor =
        testenv_sql_long(e.db, "SELECT extract(epoch FROM next_fire_at)::bigint FROM warren.jobs "
                               "WHERE name = 'x'");
    p = planner_new(&e, &c);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT extract(epoch FROM next_fire_at)::bigint FROM "
                                            "warren.jobs WHERE name = 'x'"),
                     cursor);
    /* a job never planned gets the instant it broke as its cursor */
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE name = 'y' AND "
                                      "next_fire_at BETWEEN now() - interval '1 min' AND now()"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs"), 0);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE broken_reason LIKE "
                                      "'%expected 5 fields%got 7%'"),
                     2);
    /* operators see it: warren jobs, and warren show on a run of the job */
    testenv_psql(e.db,
                 "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES ('x', "
                 "'2030-01-01T00:00:00Z', '2030-01-01T00:00:00Z', 'trigger')",
                 NULL);
    rc = run_warren(&e, "jobs", &out);
    ck_assert_msg(rc == 0 && strstr(out, "NAME") && strstr(out, "x ") && strstr(out, "ok ") &&
                      strstr(out, "broken since") && strstr(out, "got 7"),
                  "rc %d: %s", rc, out);
    free(out);
    rc = run_warren(&e, "jobs --broken", &out);
    ck_assert_msg(rc == 0 && strstr(out, "got 7") && !strstr(out, "ok "), "rc %d: %s", rc, out);
    free(out);
    rc = run_warren(&e, "show x@2030-01-01T00:00:00Z", &out);
    ck_assert_msg(rc == 0 && strstr(out, "job          x (broken since") && strstr(out, "got 7"),
                  "rc %d: %s", rc, out);
    free(out);
    /* the expression becomes readable (as a newer planner would read it; the
     * row changed, so the backoff does not wait): the missed fire times go
     * through skip, none lost */
    testenv_psql(e.db,
                 "DELETE FROM warren.runs; UPDATE warren.jobs SET expression = '*/10 * * * * *', "
                 "updated_at = now() WHERE name = 'x'",
                 NULL);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE broken_retry_at > "
                                      "now()"),
                     2);
    /* the fire times older than the 60 s grace at the tick are skipped: about
     * 12 (3 min - 60 s, every 10 s), more if the machine is slow */
    long t0 = testenv_sql_long(e.db, "SELECT floor(extract(epoch FROM now()))::bigint");
    tick(p);
    long t1 = testenv_sql_long(e.db, "SELECT ceil(extract(epoch FROM now()))::bigint");
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE name = 'x' AND "
                                            "broken_reason IS NULL"),
                     1);
    long skipped =
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'x' AND state = "
                               "'skipped' AND note LIKE 'misfire skip:%broken since%'");
    long lo = (t0 - 60 - cursor) / 10 - 1, hi = (t1 - 60 - cursor) / 10 + 1;
    ck_assert_msg(lo >= 10 && skipped >= lo && skipped <= hi, "skipped %ld, expected %ld-%ld",
                  skipped, lo, hi);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT min(extract(epoch FROM scheduled_at))::bigint FROM "
                                      "warren.runs WHERE job = 'x'"),
                     cursor);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT extract(epoch FROM max(scheduled_at) - "
                                            "min(scheduled_at))::bigint / 10 + 1 - count(*) FROM "
                                            "warren.runs WHERE job = 'x'"),
                     0);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* A job row this planner cannot act on (its cursor is '-infinity', its
 * misfire policy one a newer warren added) is marked broken with the reason;
 * the other jobs of the batch are planned as usual. */
START_TEST(test_unusable_job_row_is_marked_broken_and_the_batch_goes_on)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;

    testenv_psql(e.db, "ALTER TABLE warren.jobs DROP CONSTRAINT jobs_misfire_check", NULL);
    add_job(&e, "inf", "every", "10s", ", next_fire_at", ", '-infinity'", 4);
    add_job(&e, "newer", "every", "10s", ", misfire", ", 'latest_only'", 4);
    add_job(&e, "fine", "every", "10s", NULL, NULL, 4);
    p = planner_new(&e, &c);
    tick(p);
    ck_assert_int_ge(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'fine'"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job <> 'fine'"),
                     0);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE name = 'inf' AND "
                                      "next_fire_at = '-infinity' AND broken_reason LIKE "
                                      "'%-infinity%'"),
                     1);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE name = 'newer' AND "
                                      "broken_reason LIKE '%misfire policy \"latest_only\"%'"),
                     1);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* The jobs were placed in 8 partitions (the last sync's count, in
 * warren.sync_state); a planner whose config says 2 plans all 8, not only
 * the jobs of partitions 0 and 1 (which it does while no sync recorded a
 * count: the first tick, the control). */
START_TEST(test_planner_follows_the_partition_count_of_the_last_sync)
{
    env e = fixture_env_new();
    warren_config c = test_config(2);
    warren_planner *p;
    warren_planner_stats st;
    char name[32];

    for (int i = 0; i < 24; i++) {
        snprintf(name, sizeof(name), "part-%d", i);
        add_job(&e, name, "every", "10s", NULL, NULL, 8);
    }
    ck_assert_int_gt(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE partition >= 2"), 0);
    p = planner_new(&e, &c);
    tick(p);
    ck_assert_int_lt(testenv_sql_long(e.db, "SELECT count(DISTINCT job) FROM warren.runs"), 24);
    ck_assert_int_ge(
        testenv_psql(e.db, "INSERT INTO warren.sync_state (partitions) VALUES (8)", NULL), 0);
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(DISTINCT job) FROM warren.runs"), 24);
    warren_planner_stats_get(p, &st);
    ck_assert_int_eq(st.partitions_owned, 8);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* ------------------------------------------------------------ scan floor */

/* The planner's scans from '-infinity' so far, and the jobs they found below
 * the floor unmarked. */
static void assert_scans(warren_planner *p, uint64_t full_scans, uint64_t below_floor)
{
    warren_planner_stats s;
    warren_planner_stats_get(p, &s);
    ck_assert_int_eq(s.full_scans, full_scans);
    ck_assert_int_eq(s.below_floor, below_floor);
}

static long runs_of(const env *e, const char *job)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM warren.runs WHERE job = '%s'", job);
    return testenv_sql_long(e->db, sql);
}

/* A SET list for an `at` job: it fires 3 s from now, and its cursor is there
 * (as a schedule change leaves it): earlier than the floor, which the every-1s
 * job keeps about a horizon (10 s) ahead. */
#define AT_IN_3S                                                                                   \
    "expression = to_char(date_trunc('second', now()) AT TIME ZONE 'UTC' + interval '3 s', "       \
    "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), next_fire_at = date_trunc('second', now()) + "             \
    "interval '3 s'"

/* Once a planner has a floor (its second tick), a tick finds every job that
 * a writer made due below it: a cursor an operator's own UPDATE moved
 * earlier, a job resumed, a job moved to another partition, a new job. All
 * on ticks that scan from the floor (full_scans stays at 1), none found late
 * by a full scan (below_floor 0). */
START_TEST(test_scan_floor_finds_what_writers_moved_below_it)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;

    add_job(&e, "tick1", "every", "1s", NULL, NULL, 4);
    add_job(&e, "moved", "at", "2099-01-01T00:00:00Z", NULL, NULL, 4);
    add_job(&e, "held", "at", "2099-01-01T00:00:00Z", NULL, NULL, 4);
    add_job(&e, "hop", "at", "2099-01-01T00:00:00Z", NULL, NULL, 4);
    p = planner_new(&e, &c);
    tick(p);
    tick(p);
    assert_scans(p, 1, 0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE replan"), 0);

    /* an operator's UPDATE: the cursor moves earlier, inside the horizon */
    ck_assert_int_ge(
        testenv_psql(e.db, "UPDATE warren.jobs SET " AT_IN_3S " WHERE name = 'moved'", NULL), 0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE replan"), 1);
    tick(p);
    ck_assert_int_eq(runs_of(&e, "moved"), 1);

    /* Cursors moved earlier with the trigger off (so only the next change
     * marks them): one job paused meanwhile and then resumed, one moved to
     * another partition. And a new job. */
    ck_assert_int_ge(testenv_psql(e.db,
                                  "SET session_replication_role = replica; UPDATE warren.jobs "
                                  "SET " AT_IN_3S ", paused = (name = 'held') "
                                  "WHERE name IN ('held', 'hop')",
                                  NULL),
                     0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE replan"), 0);
    ck_assert_int_ge(testenv_psql(e.db,
                                  "UPDATE warren.jobs SET paused = false WHERE name = 'held'; "
                                  "UPDATE warren.jobs SET partition = (partition + 1) % 4 "
                                  "WHERE name = 'hop'",
                                  NULL),
                     0);
    add_job(&e, "new", "at", "2000-01-01T00:00:00Z", ", misfire", ", 'run_once'", 4);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE replan AND name IN "
                                      "('new', 'held', 'hop')"),
                     3);
    tick(p);
    ck_assert_int_eq(runs_of(&e, "held"), 1);
    ck_assert_int_eq(runs_of(&e, "hop"), 1);
    ck_assert_int_eq(runs_of(&e, "new"), 1);
    assert_scans(p, 1, 0);
    /* the marks are cleared once the cursors are past the horizon */
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE replan"), 0);
    warren_planner_rescan(p);
    tick(p);
    assert_scans(p, 2, 0);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* The floor is real, and the full scan is its safety net: a cursor moved
 * earlier with the trigger switched off (session_replication_role =
 * replica, as a restore might) is not found from the floor; the next full
 * scan plans it and counts it as below the floor. */
START_TEST(test_scan_floor_miss_is_found_by_the_full_scan_and_counted)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;

    add_job(&e, "tick1", "every", "1s", NULL, NULL, 4);
    add_job(&e, "sneaky", "at", "2099-01-01T00:00:00Z", NULL, NULL, 4);
    p = planner_new(&e, &c);
    tick(p);
    tick(p);
    ck_assert_int_ge(testenv_psql(e.db,
                                  "SET session_replication_role = replica; UPDATE warren.jobs "
                                  "SET " AT_IN_3S " WHERE name = 'sneaky'",
                                  NULL),
                     0);
    ck_assert_int_eq(testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE replan"), 0);
    tick(p);
    ck_assert_int_eq(runs_of(&e, "sneaky"), 0);
    assert_scans(p, 1, 0);
    warren_planner_rescan(p);
    tick(p);
    ck_assert_int_eq(runs_of(&e, "sneaky"), 1);
    assert_scans(p, 2, 1);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

/* A planner refuses a database without migration 017 (its scans read the
 * replan mark) and says what to run. */
START_TEST(test_planner_needs_migration_017_and_says_so)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p = NULL;
    warren_error err = {0};

    ck_assert_int_ge(
        testenv_psql(e.db, "DELETE FROM warren.schema_migrations WHERE version = 17", NULL), 0);
    ck_assert_int_eq(warren_planner_new(&c, e.db, e.amqp, NULL, &p, &err), WARREN_ECONFIG);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.message, "migration 017") != NULL &&
                      strstr(err.message, "warren migrate") != NULL,
                  "%s", err.message);
    env_free(&e);
}
END_TEST

/* A due job a writer holds locked is skipped by the tick (SKIP LOCKED); the
 * floor the tick sets stays at or below its cursor, so the next tick from
 * the floor plans it once the writer commits (here without touching the
 * cursor, so the trigger does not mark it). */
START_TEST(test_scan_floor_keeps_a_job_a_writer_held_locked)
{
    env e = fixture_env_new();
    warren_config c = test_config(4);
    warren_planner *p;
    PGconn *w;
    PGresult *r;

    c.planner.horizon_ms = 2000;
    add_job(&e, "far", "at", "2099-01-01T00:00:00Z", NULL, NULL, 4);
    add_job(&e, "locked", "every", "3s", NULL, NULL, 4);
    p = planner_new(&e, &c);
    tick(p);
    tick(p);
    /* wait until the cursor is inside the horizon (at most 3 s) */
    for (int i = 0;
         i < 60 && testenv_sql_long(e.db, "SELECT count(*) FROM warren.jobs WHERE name = "
                                          "'locked' AND next_fire_at <= now() + "
                                          "interval '1500 ms'") == 0;
         i++)
        testenv_sleep_ms(100);
    long before = runs_of(&e, "locked");
    w = PQconnectdb(e.db);
    ck_assert(PQstatus(w) == CONNECTION_OK);
    r = PQexec(w, "BEGIN; SELECT 1 FROM warren.jobs WHERE name = 'locked' FOR UPDATE");
    ck_assert(PQresultStatus(r) == PGRES_TUPLES_OK);
    PQclear(r);
    tick(p);
    ck_assert_int_eq(runs_of(&e, "locked"), before);
    r = PQexec(w, "UPDATE warren.jobs SET payload = '{\"k\": 1}' WHERE name = 'locked'; COMMIT");
    ck_assert(PQresultStatus(r) == PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(w);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.jobs WHERE name = 'locked' AND "
                                      "NOT replan"),
                     1);
    tick(p);
    ck_assert_int_gt(runs_of(&e, "locked"), before);
    assert_scans(p, 1, 0);
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

static Suite *planner_suite(void)
{
    Suite *s = suite_create("planner");
    TCase *tc;

    tc = tcase_create("schedules");
    tcase_add_test(tc, test_jitter_is_stable_whole_seconds_below_jitter);
    tcase_add_test(tc, test_every_fires_at_multiples_since_epoch);
    tcase_add_test(tc, test_cron_dst_gap_run_gets_a_note);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("materialise");
    tcase_add_test(tc, test_materialise_creates_each_fire_time_once_and_advances_cursor);
    tcase_add_test(tc, test_taken_run_key_is_kept_and_the_rest_planned);
    tcase_add_test(tc, test_backlog_is_planned_on_two_connections_each_fire_time_once);
    tcase_add_test(tc, test_lost_second_connection_does_not_fail_the_tick);
    tcase_add_test(tc, test_fair_share_of_partitions);
    tcase_add_test(tc, test_planner_without_lease_does_not_materialise);
    tcase_add_test(tc, test_planner_follows_the_partition_count_of_the_last_sync);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("release");
    tcase_add_test(tc, test_release_never_before_due_out_of_order);
    tcase_set_timeout(tc, 240);
    suite_add_tcase(s, tc);

    tc = tcase_create("planners");
    tcase_add_test(tc, test_two_planners_one_row_per_fire_time);
    tcase_add_test(tc, test_three_planners_one_frozen_past_its_lease);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("misfire");
    tcase_add_test(tc, test_misfire_run_once_coalesces_with_a_note);
    tcase_add_test(tc, test_misfire_skip_records_each_skipped_time);
    tcase_add_test(tc, test_misfire_catch_up_runs_oldest_first_up_to_cap);
    tcase_add_test(tc, test_pause_stops_planning_resume_applies_misfire);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("commands");
    tcase_add_test(tc, test_trigger_twice_creates_one_run_and_says_so);
    tcase_add_test(tc, test_backfill_dry_run_lists_then_writes);
    tcase_add_test(tc, test_pause_resume_commands);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("floor");
    tcase_add_test(tc, test_scan_floor_finds_what_writers_moved_below_it);
    tcase_add_test(tc, test_scan_floor_miss_is_found_by_the_full_scan_and_counted);
    tcase_add_test(tc, test_scan_floor_keeps_a_job_a_writer_held_locked);
    tcase_add_test(tc, test_planner_needs_migration_017_and_says_so);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("broken");
    tcase_add_test(tc, test_broken_zone_keeps_cursor_marks_job_and_misfire_plans_after_repair);
    tcase_add_test(tc, test_broken_expression_from_a_newer_version_is_kept_and_replanned);
    tcase_add_test(tc, test_unusable_job_row_is_marked_broken_and_the_batch_goes_on);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(planner_suite());
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
