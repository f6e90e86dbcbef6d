/* check_grants.c: least privilege for the worker protocol against a real
 * PostgreSQL (sql/functions/access.sql, `warren grant` / `warren revoke`): a
 * worker login works only on the queues granted to it and only on its own
 * claims, revoking takes effect at its next call, and what it may send is
 * bounded (batch sizes, worker names, claims asleep waiting for a due time). */
#include <check.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testenv.h"

#define KA "ja@2026-01-01T00:00:00Z"
#define KA2 "ja@2026-01-01T00:01:00Z"
#define KB "jb@2026-01-01T00:00:00Z"

/* One test's world: a database with job ja in queue qa and jb in queue qb
 * (one published run each due now, KA and KB, and KA2), and two worker
 * logins l[0], l[1] (members of warren_worker, no grants yet). */
typedef struct world {
    char *url, *login[2], *login_url[2];
    PGconn *admin;
} world;

static void world_init(world *w)
{
    memset(w, 0, sizeof(*w));
    w->url = testenv_db_migrated();
    w->admin = PQconnectdb(w->url);
    ck_assert_int_eq(PQstatus(w->admin), CONNECTION_OK);
    for (int i = 0; i < 2; i++) {
        char *sql;
        w->login[i] = testenv_unique_name(i == 0 ? "warren_l1" : "warren_l2");
        sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_worker", w->login[i]);
        testenv_exec_on(w->admin, sql);
        free(sql);
        w->login_url[i] = testenv_url_as(w->url, w->login[i]);
    }
    testenv_exec_on(
        w->admin, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap) VALUES"
                  " ('ja', 'every', '60s', 'qa', 'allow'), ('jb', 'every', '60s', 'qb', 'allow');"
                  "INSERT INTO warren.runs (job, scheduled_at, due_at, state) VALUES"
                  " ('ja', '2026-01-01T00:00:00Z', now(), 'published'),"
                  " ('ja', '2026-01-01T00:01:00Z', now(), 'published'),"
                  " ('jb', '2026-01-01T00:00:00Z', now(), 'published')");
}

static void world_close(world *w)
{
    for (int i = 0; i < 2; i++) {
        char *sql = testenv_fmt("DROP ROLE %s", w->login[i]);
        testenv_exec_on(w->admin, sql);
        free(sql);
        free(w->login[i]);
        free(w->login_url[i]);
    }
    PQfinish(w->admin);
    free(w->url);
}

/* The last WARNING a connection of connect_as received (one test at a time
 * per process: Check forks each test). */
static char last_warning[1024];

static void on_notice(void *arg, const PGresult *res)
{
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    (void)arg;
    if (sev != NULL && strcmp(sev, "WARNING") == 0)
        snprintf(last_warning, sizeof(last_warning), "%s", m ? m : "");
}

static PGconn *connect_as(const world *w, int i)
{
    PGconn *c = PQconnectdb(w->login_url[i]);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s: %s", w->login_url[i], PQerrorMessage(c));
    PQsetNoticeReceiver(c, on_notice, NULL);
    return c;
}

/* Asserts the last WARNING holds each of the NULL-terminated fragments, then
 * forgets it. */
static void ck_warned(const char *what, ...)
{
    va_list ap;
    const char *frag;

    ck_assert_msg(last_warning[0] != '\0', "%s: no WARNING", what);
    va_start(ap, what);
    while ((frag = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(last_warning, frag) != NULL, "%s: WARNING \"%s\" does not say \"%s\"",
                      what, last_warning, frag);
    va_end(ap);
    last_warning[0] = '\0';
}

/* The result of sql: "ERR:<SQLSTATE>:<message>" on failure, else the first
 * value ("<none>" without a row, "<null>" for NULL). Into buf. */
static const char *ask(PGconn *c, const char *sql, char *buf, size_t len)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(res);

    if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(buf, len, "ERR:%s:%s", st ? st : "?", m ? m : "?");
    } else if (PQntuples(res) == 0) {
        snprintf(buf, len, "<none>");
    } else {
        snprintf(buf, len, "%s", PQgetisnull(res, 0, 0) ? "<null>" : PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return buf;
}

#define ck_ask(c, want, sql)                                                                       \
    do {                                                                                           \
        char b_[1024];                                                                             \
        ck_assert_str_eq(ask(c, sql, b_, sizeof(b_)), want);                                       \
    } while (0)

/* Asserts sql fails with SQLSTATE state and a message holding each of the
 * NULL-terminated fragments. */
static void ck_fails(PGconn *c, const char *sql, const char *state, ...)
{
    char buf[1024], *want = testenv_fmt("ERR:%s:", state);
    va_list ap;
    const char *frag;

    ask(c, sql, buf, sizeof(buf));
    ck_assert_msg(strncmp(buf, want, strlen(want)) == 0, "%s: got \"%s\", want SQLSTATE %s", sql,
                  buf, state);
    va_start(ap, state);
    while ((frag = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(buf, frag) != NULL, "%s: \"%s\" does not say \"%s\"", sql, buf, frag);
    va_end(ap);
    free(want);
}

/* `warren ARGS --database URL`: its exit status; its output into out. */
static int warren_cli(const world *w, const char *args, char *out, size_t len)
{
    char *cmd = testenv_fmt("'%s' %s --database '%s' 2>&1", WARREN_BINARY, args, w->url);
    int rc = testenv_run(cmd, out, len);
    free(cmd);
    return rc;
}

static void grant(const world *w, int i, const char *queues)
{
    char out[2048], *args = testenv_fmt("grant %s %s", w->login[i], queues);
    ck_assert_msg(warren_cli(w, args, out, sizeof(out)) == 0, "warren %s: %s", args, out);
    free(args);
}

#define ck_db(w, want, sql)                                                                        \
    do {                                                                                           \
        char *v_ = testenv_sql1((w)->url, sql);                                                    \
        ck_assert_str_eq(v_ ? v_ : "<null>", want);                                                \
        free(v_);                                                                                  \
    } while (0)

/* ------------------------------------------------------------ queues */

START_TEST(test_grants_a_login_without_grants_can_neither_claim_nor_touch_a_claim)
{
    world w;
    world_init(&w);
    PGconn *c = connect_as(&w, 0);

    /* The reproduction of issue 18: claim under another worker's name, then
     * complete; the run must not be recorded succeeded. claim fails naming
     * the login, the queue and the fix. */
    ck_fails(c, "SELECT attempt FROM warren.claim('" KA "', 'victim-worker')", "42501", w.login[0],
             "\"qa\"", "warren grant", NULL);
    ck_ask(c, "f", "SELECT warren.complete('" KA "', 1, 'succeeded')");
    /* The batch form leaves the key out (no row) with a WARNING saying so. */
    ck_ask(c, "0", "SELECT count(*) FROM warren.claim_many(ARRAY['" KA "'], 'victim-worker')");
    ck_warned("claim_many", w.login[0], "\"qa\"", KA, "warren grant", NULL);
    /* Nor a claim someone else holds. */
    ck_ask(w.admin, "1", "SELECT attempt FROM warren.claim('" KB "', 'adm')");
    ck_ask(c, "f", "SELECT warren.heartbeat('" KB "', 1)");
    ck_warned("heartbeat", "\"qb\"", NULL);
    ck_ask(c, "f", "SELECT warren.complete('" KB "', 1, 'succeeded')");
    ck_ask(c, "f", "SELECT warren.complete('" KB "', 1, 'failed', 'x')");
    ck_ask(c, "f", "SELECT recorded FROM warren.complete_many(ARRAY['" KB "'], ARRAY[1])");
    ck_ask(c, "0", "SELECT count(*) FROM warren.reclaim_many(ARRAY['" KB "'], 'adm', 60000)");
    ck_warned("reclaim_many", "\"qb\"", NULL);
    ck_db(&w, "published|0",
          "SELECT state || '|' || attempt FROM warren.runs WHERE run_key = '" KA "'");
    ck_db(&w, "running|1|adm|0",
          "SELECT state || '|' || attempt || '|' || lease_owner || '|' || "
          "(SELECT count(*) FROM warren.attempts WHERE finished_at IS NOT NULL) "
          "FROM warren.runs WHERE run_key = '" KB "'");
    PQfinish(c);
    world_close(&w);
}
END_TEST

START_TEST(test_grants_a_login_granted_queue_a_cannot_touch_queue_b)
{
    world w;
    world_init(&w);
    grant(&w, 0, "qa");
    grant(&w, 1, "qb");
    PGconn *c1 = connect_as(&w, 0), *c2 = connect_as(&w, 1);

    ck_ask(c2, "1", "SELECT attempt FROM warren.claim('" KB "', 'w2')");
    ck_fails(c1, "SELECT attempt FROM warren.claim('" KB "', 'w1')", "42501", w.login[0], "\"qb\"",
             NULL);
    ck_ask(c1, "f", "SELECT warren.heartbeat('" KB "', 1)");
    ck_ask(c1, "f", "SELECT warren.complete('" KB "', 1, 'succeeded')");
    ck_ask(c1, "f", "SELECT recorded FROM warren.complete_many(ARRAY['" KB "'], ARRAY[1])");
    ck_ask(c1, "0", "SELECT count(*) FROM warren.reclaim_many(ARRAY['" KB "'], 'w2', 60000)");
    /* A batch with a key of an ungranted queue claims the rest. */
    ck_ask(c1, "ja@2026-01-01T00:00:00Z|1",
           "SELECT string_agg(run_key || '|' || attempt, ',') FROM "
           "warren.claim_many(ARRAY['" KA "', '" KB "'], 'w1')");
    ck_warned("claim_many", "\"qb\"", KB, NULL);
    ck_ask(c1, "1", "SELECT count(*) FROM warren.claim_many(ARRAY['" KA2 "'], 'w1')");
    ck_ask(c1, "t", "SELECT warren.heartbeat('" KA "', 1)");
    /* complete_many records the granted keys and leaves the other out. */
    ck_ask(c1, "2",
           "SELECT count(*) FILTER (WHERE recorded) || '' FROM warren.complete_many("
           "ARRAY['" KA "', '" KA2 "', '" KB "'], ARRAY[1, 1, 1])");
    ck_db(&w, "running|1|w2",
          "SELECT state || '|' || attempt || '|' || lease_owner FROM warren.runs "
          "WHERE run_key = '" KB "'");
    ck_ask(c2, "t", "SELECT warren.complete('" KB "', 1, 'succeeded')");
    /* The claims record the login. */
    char *want = testenv_fmt("%s,%s,%s", w.login[0], w.login[0], w.login[1]);
    ck_db(&w, want, "SELECT string_agg(login, ',' ORDER BY run_key) FROM warren.attempts");
    free(want);
    ck_db(&w, "3", "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'");
    PQfinish(c1);
    PQfinish(c2);
    world_close(&w);
}
END_TEST

START_TEST(test_grants_a_login_cannot_touch_another_logins_claim_of_its_own_queue)
{
    world w;
    world_init(&w);
    grant(&w, 0, "qa");
    grant(&w, 1, "qa");
    PGconn *c1 = connect_as(&w, 0), *c2 = connect_as(&w, 1);

    /* Both give the same worker name: the login decides, not the name. */
    ck_ask(c1, "1", "SELECT attempt FROM warren.claim('" KA "', 'shared')");
    ck_ask(c2, "f", "SELECT warren.heartbeat('" KA "', 1)");
    ck_ask(c2, "f", "SELECT warren.complete('" KA "', 1, 'succeeded')");
    ck_ask(c2, "f", "SELECT warren.complete('" KA "', 1, 'failed', 'sabotage')");
    ck_ask(c2, "f", "SELECT recorded FROM warren.complete_many(ARRAY['" KA "'], ARRAY[1])");
    ck_ask(c2, "0", "SELECT count(*) FROM warren.reclaim_many(ARRAY['" KA "'], 'shared', 60000)");
    ck_ask(c2, "<none>", "SELECT attempt FROM warren.claim('" KA "', 'shared')");
    char *want = testenv_fmt("running|1|shared|%s|1", w.login[0]);
    ck_db(&w, want,
          "SELECT state || '|' || attempt || '|' || lease_owner || '|' || lease_login || '|' || "
          "(SELECT count(*) FROM warren.attempts) FROM warren.runs WHERE run_key = '" KA "'");
    free(want);
    /* The holder still holds it. */
    ck_ask(c1, "t", "SELECT warren.heartbeat('" KA "', 1)");
    ck_ask(c1, "t", "SELECT warren.complete('" KA "', 1, 'succeeded')");
    PQfinish(c1);
    PQfinish(c2);
    world_close(&w);
}
END_TEST

START_TEST(test_grants_revoke_takes_effect_at_the_next_call)
{
    world w;
    char out[4096], *args;
    world_init(&w);
    grant(&w, 0, "qa qb");
    PGconn *c = connect_as(&w, 0);

    args = testenv_fmt("grant %s", w.login[0]);
    ck_assert_int_eq(warren_cli(&w, args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, " qa ") != NULL && strstr(out, " qb ") != NULL, "%s", out);
    free(args);
    ck_ask(c, "1", "SELECT attempt FROM warren.claim('" KA "', 'w1')");
    args = testenv_fmt("revoke %s qa", w.login[0]);
    ck_assert_msg(warren_cli(&w, args, out, sizeof(out)) == 0, "%s", out);
    ck_assert_msg(strstr(out, "1 queue revoked") != NULL, "%s", out);
    free(args);
    /* Its claim of qa is no longer its to keep (its heartbeat says stop);
     * qb still works. */
    ck_ask(c, "f", "SELECT warren.heartbeat('" KA "', 1)");
    ck_warned("heartbeat after revoke", w.login[0], "\"qa\"", "warren grant", NULL);
    ck_ask(c, "f", "SELECT warren.complete('" KA "', 1, 'succeeded')");
    ck_fails(c, "SELECT attempt FROM warren.claim('" KA2 "', 'w1')", "42501", "\"qa\"", NULL);
    ck_ask(c, "1", "SELECT attempt FROM warren.claim('" KB "', 'w1')");
    args = testenv_fmt("grant %s", w.login[0]);
    ck_assert_int_eq(warren_cli(&w, args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, " qa ") == NULL && strstr(out, " qb ") != NULL, "%s", out);
    free(args);

    /* The CLI's errors name the fix. */
    ck_assert_int_eq(warren_cli(&w, "grant warren_no_such_login qa", out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "no role \"warren_no_such_login\"") != NULL &&
                      strstr(out, "CREATE ROLE") != NULL,
                  "%s", out);
    args = testenv_fmt("grant %s 'not a queue'", w.login[0]);
    ck_assert_int_eq(warren_cli(&w, args, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "not a valid queue name") != NULL, "%s", out);
    free(args);
    ck_assert_int_eq(warren_cli(&w, "revoke", out, sizeof(out)), 2);
    /* A superuser is noted as unlimited. */
    ck_assert_int_eq(warren_cli(&w, "grant postgres qa", out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "grants do not limit it") != NULL, "%s", out);
    PQfinish(c);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ bounds */

START_TEST(test_grants_batch_sizes_and_worker_names_are_bounded_with_clear_errors)
{
    world w;
    world_init(&w);
    grant(&w, 0, "qa");
    PGconn *c = connect_as(&w, 0);
    /* Bounds hold for every caller, the owner too. */
    PGconn *cs[2] = {c, w.admin};

    for (int i = 0; i < 2; i++) {
        PGconn *x = cs[i];
        ck_fails(x,
                 "SELECT count(*) FROM warren.claim_many(ARRAY(SELECT 'ja@' || g FROM "
                 "generate_series(1, 10001) g), 'w1')",
                 "22023", "10001 run keys", "at most 10000", NULL);
        ck_fails(x,
                 "SELECT count(*) FROM warren.complete_many(ARRAY(SELECT 'ja@' || g FROM "
                 "generate_series(1, 10001) g), ARRAY(SELECT 1 FROM generate_series(1, 10001)))",
                 "22023", "at most 10000", NULL);
        ck_fails(x,
                 "SELECT count(*) FROM warren.reclaim_many(ARRAY(SELECT 'ja@' || g FROM "
                 "generate_series(1, 10001) g), 'w1', 1000)",
                 "22023", "at most 10000", NULL);
        ck_fails(x, "SELECT attempt FROM warren.claim('" KA "', repeat('w', 257))", "22023",
                 "257 characters", "at most 256", NULL);
        ck_fails(x, "SELECT count(*) FROM warren.claim_many(ARRAY['" KA "'], repeat('w', 257))",
                 "22023", "at most 256", NULL);
        ck_fails(x,
                 "SELECT count(*) FROM warren.reclaim_many(ARRAY['" KA "'], repeat('w', 257), 1)",
                 "22023", "at most 256", NULL);
        ck_fails(x, "SELECT attempt FROM warren.claim('" KA "', '')", "22023", "worker", NULL);
    }
    /* At the bounds it works. */
    ck_ask(c, "0",
           "SELECT count(*) FROM warren.claim_many(ARRAY(SELECT 'ja@' || g FROM "
           "generate_series(1, 10000) g), 'w1')");
    ck_ask(c, "1", "SELECT attempt FROM warren.claim('" KA "', repeat('w', 256))");
    ck_db(&w, "published|0",
          "SELECT state || '|' || attempt FROM warren.runs "
          "WHERE run_key = '" KA2 "'");
    PQfinish(c);
    world_close(&w);
}
END_TEST

START_TEST(test_grants_claims_asleep_until_due_are_bounded_per_login)
{
    /* 65 claims of one login, each of its own run due 4 s ahead, sent at
     * once from 65 connections: 64 sleep until due and claim their run, one
     * is refused at once (53400, naming the login). Another login's claim at
     * the same time is not held back by the first login's limit. */
    enum { N = 65 };
    world w;
    PGconn *c[N + 1];
    int claimed = 0, refused = 0, other = 0;
    char refusal[1024] = "";
    world_init(&w);
    grant(&w, 0, "qa");
    grant(&w, 1, "qa");
    /* Connections first, so that the 4 s before due are the claims' alone
     * (however slow 66 connections are to open). */
    for (int i = 0; i <= N; i++)
        c[i] = connect_as(&w, i == N ? 1 : 0);
    testenv_exec_on(w.admin,
                    "INSERT INTO warren.runs (job, scheduled_at, due_at, state)"
                    " SELECT 'ja', '2026-02-01T00:00:00Z'::timestamptz + g * interval '1 minute',"
                    "        now() + interval '4 seconds', 'published'"
                    "   FROM generate_series(0, 65) g");
    for (int i = 0; i <= N; i++) {
        /* Keys written out: warren.run_key is not the login's to call. */
        char *sql = testenv_fmt("SELECT attempt FROM warren.claim("
                                "'ja@2026-02-01T%02d:%02d:00Z', 'w%d')",
                                i / 60, i % 60, i);
        ck_assert_int_eq(PQsendQuery(c[i], sql), 1);
        free(sql);
    }
    for (int i = 0; i <= N; i++) {
        PGresult *res;
        while ((res = PQgetResult(c[i])) != NULL) {
            if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
                if (i < N)
                    claimed++;
                else
                    other++;
            } else if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
                const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
                ck_assert_msg(i < N, "the other login's claim failed: %s",
                              PQresultErrorMessage(res));
                ck_assert_str_eq(st ? st : "?", "53400");
                snprintf(refusal, sizeof(refusal), "%s", PQresultErrorMessage(res));
                refused++;
            }
            PQclear(res);
        }
        PQfinish(c[i]);
    }
    ck_assert_int_eq(refused, 1);
    ck_assert_int_eq(claimed, N - 1);
    ck_assert_int_eq(other, 1);
    ck_assert_msg(strstr(refusal, w.login[0]) != NULL && strstr(refusal, "64 claims") != NULL, "%s",
                  refusal);
    ck_db(&w, "65", "SELECT count(*) FROM warren.runs WHERE state = 'running'");
    world_close(&w);
}
END_TEST

START_TEST(test_grants_run_states_and_refuse_see_and_end_only_granted_queues)
{
    world w;
    world_init(&w);
    grant(&w, 0, "qa");
    grant(&w, 1, "qb");
    PGconn *c1 = connect_as(&w, 0), *c2 = connect_as(&w, 1);

    /* Another team's run is as invisible as one that does not exist. */
    ck_ask(c1, KA "|published",
           "SELECT string_agg(run_key || '|' || state, ',' ORDER BY run_key) FROM "
           "warren.run_states(ARRAY['" KA "', '" KB "'])");
    ck_warned("run_states", "\"qb\"", KB, NULL);
    ck_fails(c1, "SELECT warren.refuse('" KB "', 'w1', 'not mine')", "42501", w.login[0], "\"qb\"",
             NULL);
    ck_db(&w, "published", "SELECT state FROM warren.runs WHERE run_key = '" KB "'");
    /* Nor a running one: no state, no lock held for the asking. */
    ck_ask(c2, "1", "SELECT attempt FROM warren.claim('" KB "', 'w2')");
    ck_fails(c1, "SELECT warren.refuse('" KB "', 'w1', 'not mine')", "42501", w.login[0], "\"qb\"",
             NULL);
    ck_ask(c2, "t", "SELECT warren.complete('" KB "', 1, 'retry', 'again')");
    testenv_exec_on(w.admin, "UPDATE warren.runs SET state = 'published' WHERE run_key = '" KB "'");
    /* The login granted the queue can end it. */
    ck_ask(c2, "dead", "SELECT warren.refuse('" KB "', 'w2', 'no handler here')");
    ck_db(&w, "dead|no handler here",
          "SELECT state || '|' || last_error FROM warren.runs WHERE run_key = '" KB "'");
    PQfinish(c1);
    PQfinish(c2);
    world_close(&w);
}
END_TEST

/* Right after the upgrade to migration 011 no login has grants yet: a run
 * claimed before it (no lease_login) can still be heartbeated and completed
 * by the worker holding its attempt, so its handler is not stopped. */
START_TEST(test_grants_a_claim_made_before_the_upgrade_survives_it)
{
    world w;
    world_init(&w);
    PGconn *c1 = connect_as(&w, 0);
    testenv_exec_on(w.admin,
                    "UPDATE warren.runs SET state = 'running', attempt = 1, lease_owner = 'w1', "
                    "lease_until = now() + interval '30 s', lease_login = NULL, lease_ms = NULL "
                    "WHERE run_key = '" KA "'");
    ck_ask(c1, "t", "SELECT warren.heartbeat('" KA "', 1)");
    ck_ask(c1, "t", "SELECT warren.complete('" KA "', 1, 'succeeded')");
    ck_db(&w, "succeeded", "SELECT state FROM warren.runs WHERE run_key = '" KA "'");
    /* Claims are checked in full: the other runs of the queue stay out of reach. */
    ck_fails(c1, "SELECT attempt FROM warren.claim('" KA2 "', 'w1')", "42501", w.login[0], "\"qa\"",
             NULL);
    PQfinish(c1);
    world_close(&w);
}
END_TEST

static Suite *grants_suite(void)
{
    Suite *s = suite_create("grants");
    TCase *tc = tcase_create("queues");
    tcase_add_test(tc, test_grants_a_login_without_grants_can_neither_claim_nor_touch_a_claim);
    tcase_add_test(tc, test_grants_a_login_granted_queue_a_cannot_touch_queue_b);
    tcase_add_test(tc, test_grants_a_login_cannot_touch_another_logins_claim_of_its_own_queue);
    tcase_add_test(tc, test_grants_revoke_takes_effect_at_the_next_call);
    tcase_add_test(tc, test_grants_run_states_and_refuse_see_and_end_only_granted_queues);
    tcase_add_test(tc, test_grants_a_claim_made_before_the_upgrade_survives_it);
    suite_add_tcase(s, tc);
    tc = tcase_create("bounds");
    tcase_add_test(tc, test_grants_batch_sizes_and_worker_names_are_bounded_with_clear_errors);
    tcase_add_test(tc, test_grants_claims_asleep_until_due_are_bounded_per_login);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    /* Fail, never skip, without servers (testenv exits 1 when unset). */
    testenv_pg_admin_url();
    sr = srunner_create(grants_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
