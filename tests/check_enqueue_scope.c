/* check_enqueue_scope.c: warren.enqueue and warren.enqueue_many within a
 * producer login's grants (issue 33 items 1, 2, 6; sql/functions/producer.sql,
 * sql/functions/enqueue.sql "Scope"), with real logins of the role
 * warren_producer against the real PostgreSQL:
 *  - app1 (granted template tmpl, tenant prefix "acme:") enqueues on tmpl
 *    and on its own API job; it is refused (42501, naming the login and
 *    `warren grant-producer`) on the operator's config job ops-purge, on a
 *    template not granted, with another tenant's name, and on app2's API job;
 *  - a key held by another tenant's run answers as a refusal, never with
 *    that run's state (enqueue and enqueue_many, naming runs[i]);
 *  - a login granted in one database cannot enqueue in another;
 *  - the owner (privileged) enqueues anywhere. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "testenv.h"

/* Runs sql on c; returns "ok:FIRST VALUE" or "SQLSTATE:MESSAGE". New. */
static char *try_q(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    char *out;
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        out = testenv_fmt("ok:%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    else if (PQresultStatus(r) == PGRES_COMMAND_OK)
        out = testenv_fmt("ok:");
    else
        out = testenv_fmt("%s:%s", PQresultErrorField(r, PG_DIAG_SQLSTATE),
                          PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
    PQclear(r);
    return out;
}

/* expect(conn, sql, prefix, substrings...): the answer starts with prefix and
 * holds every substring. */
#define expect(c, sql, ...)                                                                        \
    do {                                                                                           \
        char *got_ = try_q(c, sql);                                                                \
        const char *subs_[] = {__VA_ARGS__};                                                       \
        ck_assert_msg(strncmp(got_, subs_[0], strlen(subs_[0])) == 0,                              \
                      "%s: got \"%s\", want %s...", sql, got_, subs_[0]);                          \
        for (size_t i_ = 1; i_ < sizeof(subs_) / sizeof(subs_[0]); i_++)                           \
            ck_assert_msg(strstr(got_, subs_[i_]) != NULL, "%s: \"%s\" lacks \"%s\"", sql, got_,   \
                          subs_[i_]);                                                              \
        free(got_);                                                                                \
    } while (0)

typedef struct fixture {
    char *db, *app1, *app2;
    PGconn *owner, *c1, *c2;
} fixture;

/* A database with config job ops-purge, templates tmpl and tmpl2, app1
 * (template tmpl, prefix "acme:") and app2 (template tmpl, prefix
 * "globex:"), each with an API job of its own made by upsert_job. */
static void setup(fixture *f)
{
    memset(f, 0, sizeof(*f));
    f->db = testenv_db_migrated();
    f->app1 = testenv_unique_name("app1_");
    f->app2 = testenv_unique_name("app2_");
    char *sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_producer; CREATE ROLE %s LOGIN "
                            "IN ROLE warren_producer",
                            f->app1, f->app2);
    testenv_exec(f->db, sql);
    free(sql);
    testenv_exec(
        f->db,
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue) VALUES "
        "('ops-purge', 'at', '2099-01-01T00:00:00Z', 'q');"
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, is_template) VALUES "
        "('tmpl', 'none', '', 'q', true), ('tmpl2', 'none', '', 'q', true)");
    sql = testenv_fmt("SELECT warren.grant_producer('%s', ARRAY['tmpl'], NULL, 'acme:');"
                      "SELECT warren.grant_producer('%s', ARRAY['tmpl'], NULL, 'globex:')",
                      f->app1, f->app2);
    testenv_exec(f->db, sql);
    free(sql);
    f->owner = PQconnectdb(f->db);
    ck_assert_int_eq(PQstatus(f->owner), CONNECTION_OK);
    char *u1 = testenv_url_as(f->db, f->app1), *u2 = testenv_url_as(f->db, f->app2);
    f->c1 = PQconnectdb(u1);
    f->c2 = PQconnectdb(u2);
    ck_assert_msg(PQstatus(f->c1) == CONNECTION_OK, "%s", PQerrorMessage(f->c1));
    ck_assert_msg(PQstatus(f->c2) == CONNECTION_OK, "%s", PQerrorMessage(f->c2));
    free(u1);
    free(u2);
    expect(f->c1,
           "SELECT warren.upsert_job('job-a', 'tmpl', '{\"at\": \"2099-01-01T00:00:00Z\", "
           "\"tenant\": \"acme:1\"}')",
           "ok:created");
    expect(f->c2,
           "SELECT warren.upsert_job('job-g', 'tmpl', '{\"at\": \"2099-01-01T00:00:00Z\", "
           "\"tenant\": \"globex:1\"}')",
           "ok:created");
}

static void teardown(fixture *f)
{
    PQfinish(f->c1);
    PQfinish(f->c2);
    char *sql = testenv_fmt("DROP OWNED BY %s, %s", f->app1, f->app2);
    testenv_exec(f->db, sql);
    free(sql);
    PQfinish(f->owner);
    /* the database goes first: the grants are its rows */
    char *admin_sql =
        testenv_fmt("DROP ROLE IF EXISTS %s; DROP ROLE IF EXISTS %s", f->app1, f->app2);
    (void)testenv_psql(testenv_pg_admin_url(), admin_sql, NULL);
    free(admin_sql);
    free(f->db);
    free(f->app1);
    free(f->app2);
}

START_TEST(test_enqueue_within_grants_and_refused_outside)
{
    fixture f;
    setup(&f);
    /* within: the granted template with its tenant, its own API job */
    expect(f.c1, "SELECT created FROM warren.enqueue('tmpl', 'k1', NULL, '{}', 'acme:1')", "ok:t");
    expect(f.c1, "SELECT created FROM warren.enqueue('job-a', 'k1')", "ok:t");
    expect(
        f.c1,
        "SELECT string_agg(created::text, ',' ORDER BY idx) FROM warren.enqueue_many('[{\"job\": "
        "\"tmpl\", \"key\": \"m1\", \"tenant\": \"acme:2\"}, {\"job\": \"job-a\", \"key\": "
        "\"m1\"}]')",
        "ok:true,true");
    /* the reproductions: the operator's config job, with a payload */
    expect(f.c1,
           "SELECT * FROM warren.enqueue('ops-purge', 'x1', NULL, '{\"keep\": \"0 seconds\"}')",
           "42501:warren.enqueue: login \"", f.app1, "may not enqueue on job \"ops-purge\"",
           "warren grant-producer");
    /* a template with another tenant's name; with none (the prefix needs one) */
    expect(f.c1, "SELECT * FROM warren.enqueue('tmpl', 'k', NULL, '{}', 'victim-tenant')",
           "42501:", "may not enqueue runs of tenant \"victim-tenant\"",
           "tenants must start with \"acme:\"");
    expect(f.c1, "SELECT * FROM warren.enqueue('tmpl', 'k')",
           "42501:", "may not enqueue runs of tenant NULL");
    /* a template not granted; app2's API job; a job that does not exist */
    expect(f.c1, "SELECT * FROM warren.enqueue('tmpl2', 'k', NULL, NULL, 'acme:1')",
           "42501:", "may not enqueue on job \"tmpl2\"");
    expect(f.c1, "SELECT * FROM warren.enqueue('job-g', 'k')",
           "42501:", "may not enqueue on job \"job-g\"");
    expect(f.c1, "SELECT * FROM warren.enqueue('no-such-job', 'k')",
           "42501:", "may not enqueue on job \"no-such-job\"");
    /* enqueue_many: the first element outside, by index; nothing written */
    expect(f.c1,
           "SELECT * FROM warren.enqueue_many('[{\"job\": \"tmpl\", \"key\": \"n1\", \"tenant\": "
           "\"acme:1\"}, {\"job\": \"ops-purge\", \"key\": \"n2\"}]')",
           "42501:warren.enqueue_many: login \"", "runs[1]: may not enqueue on job \"ops-purge\"");
    expect(f.c1,
           "SELECT * FROM warren.enqueue_many('[{\"job\": \"tmpl\", \"key\": \"n1\", \"tenant\": "
           "\"acme:1\"}, {\"job\": \"tmpl\", \"key\": \"n3\", \"tenant\": \"globex:9\"}]')",
           "42501:", "runs[1]: may not enqueue runs of tenant \"globex:9\"");
    expect(f.owner, "SELECT count(*) FROM warren.runs WHERE run_key LIKE '%@n%'", "ok:0");
    /* item 6: app2 probes app1's key on the shared template: a refusal, not
     * its state; its own key on the template it can see */
    expect(f.c2, "SELECT * FROM warren.enqueue('tmpl', 'k1', NULL, NULL, 'globex:1')", "42501:",
           "may not enqueue key \"k1\" on job \"tmpl\": a run outside its tenants holds it");
    expect(f.c2,
           "SELECT * FROM warren.enqueue_many('[{\"job\": \"tmpl\", \"key\": \"g1\", \"tenant\": "
           "\"globex:1\"}, {\"job\": \"tmpl\", \"key\": \"m1\", \"tenant\": \"globex:1\"}]')",
           "42501:", "runs[1]: may not enqueue key \"m1\"");
    expect(f.c2, "SELECT created FROM warren.enqueue('tmpl', 'g1', NULL, NULL, 'globex:1')",
           "ok:t");
    expect(f.c2,
           "SELECT created || state FROM warren.enqueue('tmpl', 'g1', NULL, NULL, 'globex:1')",
           "ok:falseplanned");
    /* app1's second enqueue of its own key: its state */
    expect(f.c1, "SELECT created || state FROM warren.enqueue('tmpl', 'k1', NULL, NULL, 'acme:1')",
           "ok:falseplanned");
    /* the owner: anything */
    expect(f.owner, "SELECT created FROM warren.enqueue('ops-purge', 'x1')", "ok:t");
    expect(f.owner, "SELECT created || state FROM warren.enqueue('tmpl', 'k1')", "ok:falseplanned");
    /* nothing of the refused calls was written */
    expect(f.owner, "SELECT string_agg(run_key, ',' ORDER BY run_key) FROM warren.runs",
           "ok:job-a@k1,job-a@m1,ops-purge@x1,tmpl@g1,tmpl@k1,tmpl@m1");
    teardown(&f);
}
END_TEST

/* Item 2: a login granted in database A has no grants in database B (same
 * cluster, both migrated): refused there, naming B and the fix. */
START_TEST(test_enqueue_grant_in_one_database_does_not_reach_another)
{
    fixture f;
    setup(&f);
    char *b = testenv_db_migrated();
    testenv_exec(
        b, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, is_template) VALUES "
           "('tmpl', 'none', '', 'q', true)");
    char *ub = testenv_url_as(b, f.app1);
    PGconn *cb = PQconnectdb(ub);
    ck_assert_msg(PQstatus(cb) == CONNECTION_OK, "%s", PQerrorMessage(cb));
    expect(cb, "SELECT * FROM warren.enqueue('tmpl', 'k', NULL, NULL, 'acme:1')",
           "42501:warren.enqueue: login \"", "has no producer grants in database");
    expect(cb,
           "SELECT * FROM warren.enqueue_many('[{\"job\": \"tmpl\", \"key\": \"k\", \"tenant\": "
           "\"acme:1\"}]')",
           "42501:warren.enqueue_many: login \"", "has no producer grants in database");
    expect(f.c1, "SELECT created FROM warren.enqueue('tmpl', 'k', NULL, NULL, 'acme:1')", "ok:t");
    PQfinish(cb);
    char *sql = testenv_fmt("DROP OWNED BY %s", f.app1);
    testenv_exec(b, sql);
    free(sql);
    free(ub);
    free(b);
    teardown(&f);
}
END_TEST

static Suite *scope_suite(void)
{
    Suite *s = suite_create("enqueue_scope");
    TCase *tc = tcase_create("scope");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_enqueue_within_grants_and_refused_outside);
    tcase_add_test(tc, test_enqueue_grant_in_one_database_does_not_reach_another);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    SRunner *sr = srunner_create(scope_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
