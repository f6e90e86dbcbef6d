/* check_faults_delivery: the delivery path under faults, with the real
 * `warren planner` program: kill -9 between publish and confirm, SIGTERM,
 * and restarts of RabbitMQ and PostgreSQL under load (nothing is lost).
 * The restarts disturb every test using the shared servers at that moment:
 * tests/run-all.sh runs tests one at a time. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/planner.h>

#include "testenv.h"

typedef struct env {
    char *db;
    char *amqp;
    char *cfg;
} env;

/* Fresh database and vhost, ready queue "q", a config file for the program. */
static env env_new(const char *planner_settings)
{
    static const char *const queues[] = {"q"};
    env e = {testenv_db_migrated(), testenv_vhost(), NULL};
    testenv_topology(e.amqp, queues, 1, 5);
    char *text = testenv_fmt(
        "database = { url = \"%s\"; };\nbroker = { url = \"%s\"; };\nplanner = { %s };\n"
        "jobs = ( { name = \"unused\"; every = \"1h\"; queue = \"q\"; } );\n",
        e.db, e.amqp, planner_settings);
    e.cfg = testenv_temp_file("warren-faults", "", text);
    free(text);
    return e;
}

static void env_free(env *e)
{
    unlink(e->cfg);
    free(e->cfg);
    free(e->db);
    free(e->amqp);
}

/* Starts `warren planner -c CFG` with extra environment (may be NULL). */
static pid_t spawn(const env *e, const char *extra_env)
{
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        char log[128];
        snprintf(log, sizeof(log), "/tmp/warren-faults-planner-%d.log", (int)getpid());
        if (freopen(log, "w", stderr) == NULL)
            _exit(126);
        unsetenv("WARREN_DATABASE_URL");
        unsetenv("WARREN_AMQP_URL");
        if (extra_env != NULL)
            putenv((char *)extra_env);
        execl(WARREN_BINARY, "warren", "planner", "-c", e->cfg, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* SIGTERM; the planner must exit 0 within 10 s. */
static void term(pid_t pid)
{
    int status = 0;
    int64_t end = testenv_mono_ms() + 10000;
    kill(pid, SIGTERM);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        ck_assert_msg(testenv_mono_ms() < end, "planner did not exit within 10 s of SIGTERM");
        testenv_sleep_ms(50);
    }
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "planner exit status %d", status);
}

static void add_jobs(const env *e, int n, const char *every)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, partition) "
             "SELECT 'f-' || g, 'every', '%s', 'q', g %% 64 FROM generate_series(1, %d) g",
             every, n);
    ck_assert_int_eq(testenv_psql(e->db, sql, NULL), n);
}

/* Drains warren.ready.q into public.seen (run_key, n) until quiet for quiet_ms. */
static void drain(const env *e, int64_t quiet_ms, int64_t max_ms)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    int64_t last = testenv_mono_ms(), end = testenv_mono_ms() + max_ms;
    testenv_psql(e->db,
                 "CREATE TABLE IF NOT EXISTS public.seen (run_key text PRIMARY KEY, n int NOT "
                 "NULL)",
                 NULL);
    ck_assert_msg(warren_broker_open(e->amqp, NULL, &b, &err) == 0, "%s", err.message);
    ck_assert(warren_broker_qos(b, 500, &err) == 0);
    ck_assert(warren_broker_consume(b, "warren.ready.q", &err) == 0);
    while (testenv_mono_ms() - last < quiet_ms && testenv_mono_ms() < end) {
        warren_delivery d = {0};
        char sql[256];
        int got = 0;
        ck_assert_msg(warren_broker_next(b, 200, &d, &got, &err) == 0, "%s", err.message);
        if (!got)
            continue;
        last = testenv_mono_ms();
        snprintf(sql, sizeof(sql),
                 "INSERT INTO public.seen VALUES ('%s', 1) ON CONFLICT (run_key) DO UPDATE SET "
                 "n = seen.n + 1",
                 d.message_id);
        ck_assert_int_ge(testenv_psql(e->db, sql, NULL), 0);
        warren_broker_ack(b, d.tag, NULL);
        warren_delivery_clear(&d);
    }
    warren_broker_free(b);
}

START_TEST(test_kill9_between_publish_and_confirm_still_delivers)
{
    env e = env_new("tick = \"200ms\"; release_lead = \"2s\";");
    char q[128];
    pid_t pid;
    long sec;
    int64_t end;

    testenv_psql(e.db,
                 "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, paused) VALUES "
                 "('k', 'at', '2099-01-01T00:00:00Z', 'q', true); INSERT INTO warren.runs (job, "
                 "scheduled_at, due_at) VALUES ('k', '2030-01-01T00:00:00Z', now() + interval "
                 "'6 s')",
                 NULL);
    /* the delay queue of its release second: due - release_lead */
    sec = testenv_sql_long(e.db,
                           "SELECT floor(extract(epoch FROM due_at - interval '2 s'))::bigint FROM "
                           "warren.runs");
    snprintf(q, sizeof(q), "warren.delay.%ld", sec);
    pid = spawn(&e, "WARREN_PLANNER_TEST_STALL_MS=30000");
    /* published: the message sits in its delay queue; the planner now
     * waits before reading the confirm */
    end = testenv_mono_ms() + 15000;
    while (testenv_queue_depth(e.amqp, q) != 1) {
        ck_assert_msg(testenv_mono_ms() < end, "the planner never published");
        testenv_sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    /* not marked: the mark comes only after the confirm */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'planned' AND "
                               "publish_count = 0"),
        1);
    /* a new planner publishes it again; it is delivered (at least once) */
    pid = spawn(&e, NULL);
    end = testenv_mono_ms() + 20000;
    while (testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'") !=
           1) {
        ck_assert_msg(testenv_mono_ms() < end, "not republished after the kill");
        testenv_sleep_ms(100);
    }
    /* past due (database clock), then released into the ready queue */
    end = testenv_mono_ms() + 30000;
    while (testenv_sql_long(
               e.db, "SELECT count(*) FROM warren.runs WHERE due_at < clock_timestamp()") != 1 ||
           testenv_queue_depth(e.amqp, "warren.ready.q") < 1) {
        ck_assert_msg(testenv_mono_ms() < end,
                      "not released to the ready queue 30 s after the restart");
        testenv_sleep_ms(100);
    }
    term(pid);
    drain(&e, 2000, 20000);
    ck_assert_int_ge(testenv_sql_long(e.db, "SELECT n FROM public.seen WHERE run_key = "
                                            "'k@2030-01-01T00:00:00Z'"),
                     1);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.planner_leases WHERE owner <> ''"), 0);
    env_free(&e);
}
END_TEST

/* 1 if the file at path has needle, polled up to timeout_ms. */
static int file_wait(const char *path, const char *needle, int64_t timeout_ms)
{
    int64_t end = testenv_mono_ms() + timeout_ms;
    for (;;) {
        char line[1024];
        int has = 0;
        FILE *f = fopen(path, "r");
        while (f != NULL && !has && fgets(line, sizeof(line), f) != NULL)
            has = strstr(line, needle) != NULL;
        if (f != NULL)
            fclose(f);
        if (has)
            return 1;
        if (testenv_mono_ms() >= end) {
            fprintf(stderr, "%s has no line with \"%s\"\n", path, needle);
            return 0;
        }
        testenv_sleep_ms(200);
    }
}

/* Runs the planner on 20 one-second jobs, restarts a server in the middle,
 * and checks every run due before the end reached the ready queue. The
 * restart is proved: the server's identity changed and the planner logged
 * its reconnect. */
static void restart_under_load(const char *what)
{
    env e = env_new("horizon = \"10s\"; tick = \"500ms\"; reconcile_grace = \"5s\"; "
                    "misfire_threshold = \"5m\";");
    char cmd[512];
    pid_t pid;
    int64_t end;
    long due, missing = -1;

    add_jobs(&e, 20, "1s");
    testenv_psql(e.db, "CREATE TABLE public.t0 AS SELECT now() AS t", NULL);
    pid = spawn(&e, NULL);
    /* pacing, not waiting for a condition: 6 s of runs fall due before the restart */
    testenv_sleep_ms(6000);
    const char *which = strcmp(what, "restart-pg") == 0 ? "pg" : "rabbit";
    char *server = testenv_server_identity(which);
    ck_assert_msg(server != NULL, "no identity of the %s server", which);
    snprintf(cmd, sizeof(cmd), "bash %s %s >/dev/null 2>&1", testenv_servers_script(), what);
    if (system(cmd) != 0) {
        /* servers.sh gives each server 90 s; a broker holding many test vhosts
         * may take longer to boot. Wait for both to answer before judging. */
        int64_t up_by = testenv_mono_ms() + 300000;
        snprintf(cmd, sizeof(cmd), "bash %s status >/dev/null 2>&1", testenv_servers_script());
        while (system(cmd) != 0) {
            ck_assert_msg(testenv_mono_ms() < up_by, "%s did not come back within 5 min", what);
            testenv_sleep_ms(2000);
        }
    }
    {
        int64_t up_by = testenv_mono_ms() + 300000;
        warren_broker *b = NULL;
        while (warren_broker_open(e.amqp, NULL, &b, NULL) != 0) {
            ck_assert_msg(testenv_mono_ms() < up_by, "RabbitMQ not reachable 5 min after %s", what);
            testenv_sleep_ms(1000);
        }
        warren_broker_free(b);
    }
    {
        char *now = testenv_server_identity(which);
        char log[128];
        fprintf(stderr, "%s: before %s, after %s\n", what, server, now ? now : "?");
        ck_assert_msg(now != NULL && strcmp(now, server) != 0, "%s did not restart the server",
                      what);
        free(now);
        free(server);
        snprintf(log, sizeof(log), "/tmp/warren-faults-planner-%d.log", (int)pid);
        ck_assert_msg(file_wait(log,
                                strcmp(which, "pg") == 0 ? "reconnected to PostgreSQL"
                                                         : "reconnected to RabbitMQ",
                                120000),
                      "the planner did not reconnect after %s", what);
    }
    /* pacing: 8 s of runs fall due after the restart */
    testenv_sleep_ms(8000);
    testenv_psql(e.db, "CREATE TABLE public.t1 AS SELECT now() AS t", NULL);
    /* every run due before t1 gets published (the reconciler republishes
     * what a restart lost), then reaches the ready queue */
    end = testenv_mono_ms() + 90000;
    while (testenv_mono_ms() < end) {
        drain(&e, 1500, 10000);
        missing =
            testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r WHERE r.due_at < (SELECT t "
                                   "FROM public.t1) AND NOT EXISTS (SELECT 1 FROM public.seen s "
                                   "WHERE s.run_key = r.run_key)");
        if (missing == 0)
            break;
    }
    due = testenv_sql_long(e.db,
                           "SELECT count(*) FROM warren.runs WHERE due_at < (SELECT t FROM t1)");
    term(pid);
    ck_assert_msg(due >= 20 * 12, "only %ld runs due", due);
    ck_assert_msg(missing == 0, "%ld of %ld runs due before the end never reached the ready queue",
                  missing, due);
    /* one row per fire time, no gaps */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM (SELECT job FROM warren.runs GROUP BY job "
                               "HAVING extract(epoch FROM max(scheduled_at) - "
                               "min(scheduled_at))::bigint + 1 <> count(*)) g"),
        0);
    env_free(&e);
}

START_TEST(test_rabbitmq_restart_under_load_loses_nothing)
{
    restart_under_load("restart-rabbit");
}
END_TEST

START_TEST(test_postgresql_restart_under_load_loses_nothing)
{
    restart_under_load("restart-pg");
}
END_TEST

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults_delivery");
    TCase *tc;

    tc = tcase_create("planner_process");
    tcase_add_test(tc, test_kill9_between_publish_and_confirm_still_delivers);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    /* one case each, so CK_RUN_CASE can pick one restart */
    tc = tcase_create("restart_rabbit");
    tcase_add_test(tc, test_rabbitmq_restart_under_load_loses_nothing);
    tcase_set_timeout(tc, 900);
    suite_add_tcase(s, tc);

    tc = tcase_create("restart_pg");
    tcase_add_test(tc, test_postgresql_restart_under_load_loses_nothing);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(faults_suite());
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
