/* check_sync_locks.c: `warren sync` and `warren migrate` against what other
 * logins of the database hold: a producer and a worker login holding the
 * advisory lock keys these commands once took cannot delay them; an
 * application's open transaction that called the Job API makes sync give up
 * after its lock timeout, naming that session, with nothing changed; a
 * config job named like an application's API job stops sync with the way
 * out, and `--take-over NAME` takes it. The same logins holding the keys
 * claims took before migration 019 cannot delay a claim. Run as a user runs them: the
 * `warren` program against a real PostgreSQL. */
#include <check.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testenv.h"

/* The advisory keys sync and migrate took before (include/warren/store.h). */
#define OLD_MIGRATE_KEY "8243214190722195001"
#define OLD_SYNC_KEY "8243214190722195002"

typedef struct env {
    char *db, *dir, *cfg_path;
    char *producer, *worker; /* login names */
    PGconn *admin;
} env;

typedef struct cli_result {
    int rc;
    double secs;
    char out[8192];
    char err[4096];
} cli_result;

static void execf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void execf(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = testenv_vfmt(fmt, ap);
    va_end(ap);
    testenv_exec_on(c, sql);
    free(sql);
}

/* The first value of a query on the admin connection (new; "<null>" for NULL). */
static char *q1(const env *e, const char *sql)
{
    PGresult *res = PQexec(e->admin, sql);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(e->admin));
    char *v =
        strdup(PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : "<null>");
    PQclear(res);
    return v;
}

#define ck_q(e, want, sql)                                                                         \
    do {                                                                                           \
        char *got_ = q1(e, sql);                                                                   \
        ck_assert_str_eq(got_, want);                                                              \
        free(got_);                                                                                \
    } while (0)

static PGconn *connect_as(const env *e, const char *login, const char *app)
{
    char *url = testenv_url_as(e->db, login);
    char *conninfo = testenv_fmt("%s%sapplication_name=%s", url, strchr(url, '?') ? "&" : "?", app);
    PGconn *c = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s: %s", conninfo, PQerrorMessage(c));
    free(url);
    free(conninfo);
    return c;
}

/* jobs: the config's jobs after the template "tmpl" (libconfig text). */
static void write_config(const env *e, const char *jobs)
{
    FILE *f = fopen(e->cfg_path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", e->cfg_path);
    fprintf(f,
            "database = { url = \"%s\"; };\n"
            "jobs = (\n"
            "  { name = \"tmpl\"; template = true; queue = \"q\";\n"
            "    handler = { exec = [\"/bin/true\"]; }; }%s\n"
            ");\n",
            e->db, jobs ? jobs : "");
    fclose(f);
}

/* A migrated database synced with the template "tmpl"; a producer login
 * granted it, and a worker login granted queue q. */
static void env_setup(env *e)
{
    memset(e, 0, sizeof(*e));
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_CONFIG");
    unsetenv("WARREN_LOG");
    e->db = testenv_db_migrated();
    e->dir = testenv_tmpdir("warren-check-sync-locks");
    e->cfg_path = testenv_fmt("%s/warren.cfg", e->dir);
    e->admin = PQconnectdb(e->db);
    ck_assert_int_eq(PQstatus(e->admin), CONNECTION_OK);
    e->producer = testenv_unique_name("warren_sp");
    e->worker = testenv_unique_name("warren_sw");
    execf(e->admin, "CREATE ROLE %s LOGIN IN ROLE warren_producer", e->producer);
    execf(e->admin, "CREATE ROLE %s LOGIN IN ROLE warren_worker", e->worker);
    write_config(e, NULL);
    char *cmd = testenv_fmt("%s sync -c %s >/dev/null", WARREN_BINARY, e->cfg_path);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    free(cmd);
    execf(e->admin, "SELECT warren.grant_producer('%s', '{tmpl}', NULL, NULL)", e->producer);
    execf(e->admin, "INSERT INTO warren.worker_grants (login, queue) VALUES ('%s', 'q')",
          e->worker);
}

static void env_teardown(env *e)
{
    /* Both logins' sessions have ended (their connections are closed). */
    execf(e->admin, "DROP OWNED BY %s, %s", e->producer, e->worker);
    execf(e->admin, "DROP ROLE %s", e->producer);
    execf(e->admin, "DROP ROLE %s", e->worker);
    PQfinish(e->admin);
    free(e->producer);
    free(e->worker);
    free(e->db);
    free(e->dir);
    free(e->cfg_path);
}

/* Runs `timeout 20 warren ARGS` (ARGS split by the shell): a command that
 * hangs is killed (exit 124) instead of hanging the test. */
static void cli(cli_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cli(cli_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *args = testenv_vfmt(fmt, ap);
    va_end(ap);
    char *cmd = testenv_fmt("timeout 20 %s %s", WARREN_BINARY, args);
    double t0 = testenv_mono_s();
    r->rc = testenv_run_split(cmd, r->out, sizeof(r->out), r->err, sizeof(r->err));
    r->secs = testenv_mono_s() - t0;
    fprintf(stderr, "$ warren %s\n-> exit %d after %.1f s\n%s%s", args, r->rc, r->secs, r->out,
            r->err);
    free(cmd);
    free(args);
}

/* ------------------------------------------------------- advisory keys */

/* A producer and a worker login each hold both old keys (shared, so both
 * can, for as long as their sessions last): sync and migrate go on at once. */
START_TEST(test_logins_holding_the_old_advisory_keys_delay_neither_sync_nor_migrate)
{
    env e;
    env_setup(&e);
    PGconn *p = connect_as(&e, e.producer, "squatter-producer");
    PGconn *w = connect_as(&e, e.worker, "squatter-worker");
    const char *hold = "SELECT pg_advisory_lock_shared(" OLD_MIGRATE_KEY
                       "), pg_advisory_lock_shared(" OLD_SYNC_KEY ")";
    testenv_exec_on(p, hold);
    testenv_exec_on(w, hold);
    ck_q(&e, "4",
         "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
         "mode = 'ShareLock'");
    cli_result r;

    write_config(&e, ",\n  { name = \"added1\"; every = \"1h\"; queue = \"q\"; }");
    cli(&r, "sync -c %s", e.cfg_path);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(r.secs < 10, "sync took %.1f s", r.secs);
    ck_q(&e, "1", "SELECT count(*) FROM warren.jobs WHERE name = 'added1'");

    cli(&r, "migrate --database %s --sql-dir %s/sql", e.db, WARREN_SOURCE_DIR);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(r.secs < 10, "migrate took %.1f s", r.secs);

    /* a first install too: a fresh database, the keys held there */
    char *fresh = testenv_db();
    char *purl = testenv_url_as(fresh, e.producer);
    PGconn *pf = PQconnectdb(purl);
    ck_assert_msg(PQstatus(pf) == CONNECTION_OK, "%s", PQerrorMessage(pf));
    testenv_exec_on(pf, hold);
    cli(&r, "migrate --database %s --sql-dir %s/sql", fresh, WARREN_SOURCE_DIR);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(r.secs < 10, "first migrate took %.1f s", r.secs);
    PQfinish(pf);
    free(purl);
    free(fresh);

    PQfinish(p);
    PQfinish(w);
    env_teardown(&e);
}
END_TEST

/* ------------------------------------------------------- claim locks */

/* The keys of the advisory locks claims took before migration 019 (a cap
 * group's, its tenant's, a job's overlap lock, a login's wait slots), held
 * by a producer and by a worker of another queue, while both also try to
 * lock the rows that replaced them (refused: only the owner may). A
 * worker login granted the job's queue then claims runs of a capped `skip`
 * job with a tenant at once, one claim sleeping until its run is due (a
 * wait slot), and completes them. Before 019 the first claim waited on the
 * held keys until its statement timeout, and the sleeping claim found its
 * login's 64 wait slots taken (53400). */
START_TEST(test_logins_holding_the_old_claim_keys_delay_no_claim)
{
    env e;
    env_setup(&e);
    write_config(&e, ",\n  { name = \"capped\"; every = \"1h\"; queue = \"q2\"; overlap = \"skip\";"
                     " max_running = 1; max_running_per_tenant = 1; }");
    cli_result r;
    cli(&r, "sync -c %s", e.cfg_path);
    ck_assert_int_eq(r.rc, 0);
    char *victim = testenv_unique_name("warren_sv");
    execf(e.admin, "CREATE ROLE %s LOGIN IN ROLE warren_worker", victim);
    execf(e.admin, "INSERT INTO warren.worker_grants (login, queue) VALUES ('%s', 'q2')", victim);
    testenv_exec_on(e.admin,
                    "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, tenant) VALUES "
                    "('capped', '2026-01-01T00:00:01Z', now(), 'trigger', 'acme'),"
                    "('capped', '2026-01-01T00:00:02Z', now() + interval '3 seconds', "
                    "'trigger', 'acme')");

    PGconn *p = connect_as(&e, e.producer, "squatter-producer");
    PGconn *w = connect_as(&e, e.worker, "squatter-worker");
    char *hold = testenv_fmt("SELECT pg_advisory_lock(hashtextextended('warren.cap:capped', 0)), "
                             "pg_advisory_lock(hashtextextended('warren.cap:capped|acme', 0)), "
                             "(SELECT count(*) FROM generate_series(0, 63) i WHERE "
                             "pg_try_advisory_lock(hashtext('warren.claim_wait:%s'), i))",
                             victim);
    testenv_exec_on(p, hold);
    ck_q(&e, "66", "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted");
    static const char *const tries[] = {
        "SELECT * FROM warren.claim_locks FOR UPDATE",
        "SELECT * FROM warren.claim_locks FOR KEY SHARE",
        "LOCK TABLE warren.claim_locks IN ACCESS SHARE MODE",
        "SELECT warren.wp_lock_row('c|capped', true, false)",
        "SELECT warren.wp_cap_lock('capped', 'acme', 1, 1)",
    };
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        PGconn *who[2] = {p, w};
        for (int k = 0; k < 2; k++) {
            testenv_exec_on(who[k], "BEGIN");
            PGresult *res = PQexec(who[k], tries[i]);
            const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            ck_assert_msg(st != NULL && strcmp(st, "42501") == 0,
                          "%s as %s: want 42501 (insufficient privilege), got %s: %s", tries[i],
                          k ? "a worker" : "a producer", st ? st : "success",
                          PQresultErrorMessage(res));
            PQclear(res);
            testenv_exec_on(who[k], "ROLLBACK");
        }
    }
    /* The worker squatter keeps a transaction open that holds the job's old
     * overlap key. */
    testenv_exec_on(w, "BEGIN");
    testenv_exec_on(w,
                    "SELECT pg_advisory_xact_lock(hashtextextended('warren.overlap:capped', 0))");
    ck_q(&e, "67", "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted");

    PGconn *v = connect_as(&e, victim, "victim-worker");
    testenv_exec_on(v, "SET statement_timeout = '8s'");
    double t0 = testenv_mono_s();
    PGresult *res = PQexec(v, "SELECT attempt FROM warren.claim('capped@2026-01-01T00:00:01Z', "
                              "'v1')");
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1,
                  "claim: %s (%d rows)", PQresultErrorMessage(res), PQntuples(res));
    PQclear(res);
    ck_assert_msg(testenv_mono_s() - t0 < 2, "the claim took %.1f s", testenv_mono_s() - t0);
    res = PQexec(v, "SELECT warren.complete('capped@2026-01-01T00:00:01Z', 1, 'succeeded')");
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0,
                  "complete: %s", PQresultErrorMessage(res));
    PQclear(res);
    /* due 3 s after its insert: this claim sleeps in a wait slot, made on
     * demand when the login's slot rows are missing (a grant restored with
     * triggers disabled) */
    execf(e.admin, "DELETE FROM warren.claim_locks WHERE lock_key LIKE 'w|%s|%%'", victim);
    t0 = testenv_mono_s();
    res = PQexec(v, "SELECT attempt FROM warren.claim('capped@2026-01-01T00:00:02Z', 'v1')");
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1,
                  "sleeping claim: %s (%d rows)", PQresultErrorMessage(res), PQntuples(res));
    PQclear(res);
    ck_assert_msg(testenv_mono_s() - t0 < 6, "the sleeping claim took %.1f s",
                  testenv_mono_s() - t0);
    ck_q(&e, "succeeded,running",
         "SELECT string_agg(state, ',' ORDER BY run_key) FROM warren.runs WHERE job = 'capped'");

    testenv_exec_on(w, "ROLLBACK");
    PQfinish(v);
    PQfinish(p);
    PQfinish(w);
    execf(e.admin, "DROP OWNED BY %s", victim);
    execf(e.admin, "DROP ROLE %s", victim);
    free(victim);
    free(hold);
    env_teardown(&e);
}
END_TEST

/* --------------------------------------------------------- lock timeout */

/* An application's transaction called warren.upsert_job and stays open (it
 * holds warren.sync_state FOR SHARE): sync gives up after --lock-timeout,
 * exit 1, naming that session and the fix, with nothing changed; once the
 * application commits, sync goes through. */
START_TEST(test_sync_gives_up_after_its_lock_timeout_naming_the_open_transaction)
{
    env e;
    env_setup(&e);
    PGconn *p = connect_as(&e, e.producer, "billing-app");
    testenv_exec_on(p, "BEGIN");
    testenv_exec_on(p, "SELECT warren.upsert_job('app-job', 'tmpl', '{\"every\": \"1m\"}')");
    char *pid = testenv_fmt("%d", PQbackendPID(p));
    cli_result r;

    write_config(&e, ",\n  { name = \"added1\"; every = \"1h\"; queue = \"q\"; }");
    cli(&r, "sync -c %s --lock-timeout 1s", e.cfg_path);
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(r.secs < 8, "sync took %.1f s", r.secs);
    ck_assert_str_eq(r.out, "");
    char *want_who = testenv_fmt("pid %s (login %s, application billing-app, idle in transaction, "
                                 "transaction open ",
                                 pid, e.producer);
    char *want_fix = testenv_fmt("SELECT pg_terminate_backend(%s)", pid);
    ck_assert_msg(strstr(r.err, "sync waited 1000 ms for a lock and gave up; nothing was changed"),
                  "%s", r.err);
    ck_assert_msg(strstr(r.err, want_who), "lacks \"%s\": %s", want_who, r.err);
    ck_assert_msg(strstr(r.err, "query \"SELECT warren.upsert_job('app-job', 'tmpl',"), "%s",
                  r.err);
    ck_assert_msg(strstr(r.err, want_fix), "lacks \"%s\": %s", want_fix, r.err);
    ck_q(&e, "0", "SELECT count(*) FROM warren.jobs WHERE name = 'added1'");
    free(want_who);
    free(want_fix);

    /* the default bound is 10 s */
    cli(&r, "sync -c %s", e.cfg_path);
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(r.secs >= 9.5 && r.secs < 16, "sync took %.1f s", r.secs);
    ck_assert_msg(strstr(r.err, "sync waited 10000 ms"), "%s", r.err);

    testenv_exec_on(p, "COMMIT");
    cli(&r, "sync -c %s --lock-timeout 1s", e.cfg_path);
    ck_assert_int_eq(r.rc, 0);
    ck_q(&e, "1", "SELECT count(*) FROM warren.jobs WHERE name = 'added1'");
    ck_q(&e, "api", "SELECT origin FROM warren.jobs WHERE name = 'app-job'");

    cli(&r, "sync -c %s --lock-timeout soon", e.cfg_path);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--lock-timeout \"soon\" is not a duration"));
    PQfinish(p);
    free(pid);
    env_teardown(&e);
}
END_TEST

/* ------------------------------------------------------------ take-over */

/* The producer made API job "nightly-billing" (with an enqueued run, one
 * running); the operator's config gets a job of that name: sync exits 2
 * naming the API job, its maker and `--take-over`, changing nothing; with
 * `--take-over nightly-billing` the row becomes the config job: its
 * unclaimed run cancelled with a note, the running one kept, the job's note
 * saying who took it over. A second sync with the flag changes nothing. */
START_TEST(test_sync_names_a_squatted_name_and_take_over_makes_it_the_config_job)
{
    env e;
    env_setup(&e);
    PGconn *p = connect_as(&e, e.producer, "billing-app");
    testenv_exec_on(p, "SELECT warren.upsert_job('nightly-billing', 'tmpl', "
                       "'{\"every\": \"1h\", \"tenant\": \"acme\"}')");
    testenv_exec_on(p, "SELECT created FROM warren.enqueue('nightly-billing', 'k1', NULL, "
                       "'{\"keep\": \"0 seconds\"}')");
    testenv_exec_on(p, "SELECT created FROM warren.enqueue('nightly-billing', 'k2')");
    testenv_exec_on(e.admin, "SELECT attempt FROM warren.claim('nightly-billing@k2', 'w1')");
    PQfinish(p);
    cli_result r;

    write_config(&e, ",\n  { name = \"nightly-billing\"; cron = \"0 3 * * *\"; queue = \"ops\";\n"
                     "    handler = { exec = [\"/bin/echo\"]; }; }");
    cli(&r, "sync -c %s", e.cfg_path);
    ck_assert_int_eq(r.rc, 2);
    char *who = testenv_fmt("has the name of an API job (made by login %s at ", e.producer);
    ck_assert_msg(strstr(r.err, "job \"nightly-billing\" of the config"), "%s", r.err);
    ck_assert_msg(strstr(r.err, who), "lacks \"%s\": %s", who, r.err);
    ck_assert_msg(strstr(r.err, "from template \"tmpl\", tenant \"acme\")"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "Run `warren sync --take-over nightly-billing`"), "%s", r.err);
    ck_q(&e, "api tmpl acme",
         "SELECT concat_ws(' ', origin, template, tenant) FROM warren.jobs "
         "WHERE name = 'nightly-billing'");
    free(who);

    cli(&r, "sync -c %s --take-over nope", e.cfg_path);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--take-over nope: the config has no job of that name"));

    cli(&r, "sync -c %s --take-over nightly-billing", e.cfg_path);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strstr(r.out, "taken    nightly-billing (an API job of template tmpl made by "),
                  "%s", r.out);
    ck_q(&e, "config - - cron 0 3 * * * ops /bin/echo",
         "SELECT concat_ws(' ', origin, coalesce(template, '-'), coalesce(tenant, '-'), "
         "schedule_kind, expression, queue, handler->'argv'->>0) FROM warren.jobs "
         "WHERE name = 'nightly-billing'");
    ck_q(&e, "t",
         "SELECT note LIKE '%taken over at % by warren sync --take-over (login postgres): it was "
         "an API job of template tmpl (tenant acme) made by warren_sp%; 1 unclaimed runs "
         "cancelled, 0 planned runs dropped' FROM warren.jobs WHERE name = 'nightly-billing'");
    ck_q(&e, "nightly-billing@k1 cancelled t,nightly-billing@k2 running f",
         "SELECT string_agg(concat_ws(' ', run_key, state, coalesce(note LIKE "
         "'%cancelled: job taken over by the config at %', false)), ',' ORDER BY run_key) "
         "FROM warren.runs WHERE job = 'nightly-billing'");

    cli(&r, "sync -c %s --take-over nightly-billing", e.cfg_path);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "0 added, 0 changed, 0 removed"));
    ck_assert_ptr_nonnull(strstr(r.out, "no API job to take over"));
    env_teardown(&e);
}
END_TEST

static Suite *sync_locks_suite(void)
{
    Suite *s = suite_create("sync_locks");
    TCase *tc = tcase_create("advisory");
    tcase_add_test(tc, test_logins_holding_the_old_advisory_keys_delay_neither_sync_nor_migrate);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("claim_locks");
    tcase_add_test(tc, test_logins_holding_the_old_claim_keys_delay_no_claim);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("lock_timeout");
    tcase_add_test(tc, test_sync_gives_up_after_its_lock_timeout_naming_the_open_transaction);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("take_over");
    tcase_add_test(tc, test_sync_names_a_squatted_name_and_take_over_makes_it_the_config_job);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    SRunner *sr = srunner_create(sync_locks_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
