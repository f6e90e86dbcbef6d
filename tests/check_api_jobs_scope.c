/* check_api_jobs_scope: producer grants on the API job functions
 * (docs/api-jobs.md, "Producer grants"; sql/functions/producer.sql and
 * api_jobs.sql) against a real PostgreSQL, with real logins:
 *  - app1 (template report, tenant prefix "acme:") creates a job; app2
 *    (template report, no prefix: other grants) can neither change its
 *    template, tenant or schedule (upsert_job, upsert_jobs) nor pause,
 *    resume or delete it: 42501 naming the login and the fix, the job's
 *    state never shown, nothing written;
 *  - app1 cannot create a job for tenant "globex", nor without a tenant,
 *    nor from a template not granted to it, nor pause a config job;
 *  - app3, with exactly app1's grants, owns app1's jobs;
 *  - a member of warren_producer without grants in this database is
 *    refused at once; the owner (privileged) acts on every job. */
#include "api_jobs_fixture.h"

static void owner_exec(const char *db, const char *sql)
{
    char *e = aj_try(db, sql);
    ck_assert_msg(e[0] == '\0', "%s: %s", sql, e);
    free(e);
}

/* sql as the login at url is refused with 42501 naming the login and the
 * operator's command; the refusal says nothing of the job's state. */
static void expect_refused(const char *url, const char *sql, const char *login, const char *also)
{
    char *got = aj_expect_error(url, "42501", sql, login, "warren grant-producer", also, NULL);
    ck_assert_msg(strstr(got, "paused") == NULL && strstr(got, "deleted") == NULL &&
                      strstr(got, "0 9 * * *") == NULL && strstr(got, "acme:1") == NULL,
                  "the refusal shows the job's state: %s", got);
    free(got);
}

START_TEST(test_producers_act_only_on_their_own_jobs_templates_and_tenants)
{
    char *db = aj_db();
    char *app1 = testenv_unique_name("ajs_app1"), *app2 = testenv_unique_name("ajs_app2"),
         *app3 = testenv_unique_name("ajs_app3"), *none = testenv_unique_name("ajs_none");
    char *sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_producer; CREATE ROLE %s LOGIN "
                            "IN ROLE warren_producer; CREATE ROLE %s LOGIN IN ROLE "
                            "warren_producer; CREATE ROLE %s LOGIN IN ROLE warren_producer",
                            app1, app2, app3, none);
    owner_exec(db, sql);
    free(sql);
    /* at fcce054 there were no producer grants (any member of
     * warren_producer could do anything): the rest of the test shows what
     * that allowed */
    char *have = aj_val(db, "SELECT to_regprocedure('warren.grant_producer(text,text[],text[],"
                            "text)') IS NOT NULL");
    if (strcmp(have, "t") == 0) {
        sql = testenv_fmt("SELECT warren.grant_producer('%s', ARRAY['report'], NULL, 'acme:');"
                          "SELECT warren.grant_producer('%s', ARRAY['report'], NULL, NULL);"
                          "SELECT warren.grant_producer('%s', ARRAY['report'], NULL, 'acme:')",
                          app1, app2, app3);
        owner_exec(db, sql);
        free(sql);
    } else {
        fprintf(stderr, "no warren.grant_producer: the old schema\n");
    }
    free(have);
    char *u1 = testenv_url_as(db, app1), *u2 = testenv_url_as(db, app2),
         *u3 = testenv_url_as(db, app3), *un = testenv_url_as(db, none);

    aj_expect_val(u1,
                  "SELECT warren.upsert_job('acme-report', 'report', '{\"cron\": \"0 9 * * *\", "
                  "\"timezone\": \"Europe/Berlin\", \"tenant\": \"acme:1\"}')",
                  "created");
    char *before = aj_val(db, AJ_STATE_SQL);

    /* app2: the reproduction, each refused now */
    expect_refused(u2,
                   "SELECT warren.upsert_job('acme-report', 'report2', '{\"every\": \"1m\", "
                   "\"tenant\": \"victim\"}')",
                   app2, "warren.upsert_job");
    expect_refused(u2,
                   "SELECT warren.upsert_job('acme-report', 'report', '{\"every\": \"1m\", "
                   "\"tenant\": \"acme:1\"}')",
                   app2, "\"acme-report\"");
    expect_refused(u2,
                   "SELECT * FROM warren.upsert_jobs('[{\"name\": \"app2-own\", \"template\": "
                   "\"report\", \"every\": \"1h\"}, {\"name\": \"acme-report\", \"template\": "
                   "\"report\", \"every\": \"1m\", \"tenant\": \"acme:1\"}]')",
                   app2, "jobs[1] (\"acme-report\")");
    expect_refused(u2, "SELECT warren.pause_job('acme-report')", app2, "warren.pause_job");
    expect_refused(u2, "SELECT warren.resume_job('acme-report')", app2, "warren.resume_job");
    expect_refused(u2, "SELECT warren.delete_job('acme-report')", app2, "warren.delete_job");
    /* app1 is bound to its tenants and templates */
    expect_refused(u1,
                   "SELECT warren.upsert_job('globex-report', 'report', '{\"every\": \"1h\", "
                   "\"tenant\": \"globex\"}')",
                   app1, "\"globex\"");
    expect_refused(u1, "SELECT warren.upsert_job('no-tenant', 'report', '{\"every\": \"1h\"}')",
                   app1, "no tenant");
    expect_refused(u1,
                   "SELECT * FROM warren.upsert_jobs('[{\"name\": \"acme-2\", \"template\": "
                   "\"report\", \"every\": \"1h\", \"tenant\": \"acme:2\"}, {\"name\": "
                   "\"acme-3\", \"template\": \"report2\", \"every\": \"1h\", \"tenant\": "
                   "\"acme:3\"}]')",
                   app1, "template \"report2\"");
    expect_refused(u1, "SELECT warren.pause_job('cfg-daily')", app1, "\"cfg-daily\"");
    /* a template granted to it is still no API job */
    free(aj_expect_error(u1, "22023", "SELECT warren.delete_job('report')",
                         "is a template from the config file", NULL));
    /* a member of warren_producer with no grants here: nothing at all */
    expect_refused(un, "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1h\"}')", none,
                   "no producer grants");
    expect_refused(un, "SELECT warren.pause_job('acme-report')", none, "no producer grants");
    char *after = aj_val(db, AJ_STATE_SQL);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);

    /* app3 has exactly app1's grants: app1's jobs are its own too */
    aj_expect_val(u3, "SELECT warren.pause_job('acme-report')", "t");
    aj_expect_val(u1, "SELECT warren.resume_job('acme-report')", "t");
    aj_expect_val(u3,
                  "SELECT string_agg(result, ',') FROM warren.upsert_jobs('[{\"name\": "
                  "\"acme-report\", \"template\": \"report\", \"cron\": \"0 10 * * *\", "
                  "\"tenant\": \"acme:1\"}, {\"name\": \"acme-4\", \"template\": \"report\", "
                  "\"every\": \"1h\", \"tenant\": \"acme:4\"}]')",
                  "changed,created");
    /* app2 makes and deletes its own */
    aj_expect_val(u2, "SELECT warren.upsert_job('app2-own', 'report', '{\"every\": \"1h\"}')",
                  "created");
    aj_expect_val(u2, "SELECT warren.delete_job('app2-own')", "t");
    expect_refused(u1,
                   "SELECT warren.upsert_job('app2-own', 'report', '{\"every\": \"1h\", "
                   "\"tenant\": \"acme:9\"}')",
                   app1, "\"app2-own\"");
    /* the owner acts on every job */
    aj_expect_val(db, "SELECT warren.delete_job('acme-report')", "t");
    aj_expect_val(db, "SELECT created_by FROM warren.jobs WHERE name = 'acme-4'", app3);

    sql = testenv_fmt("DELETE FROM warren.producer_logins; DROP ROLE %s; DROP ROLE %s; DROP ROLE "
                      "%s; DROP ROLE %s",
                      app1, app2, app3, none);
    char *e = aj_try(db, sql);
    if (e[0] != '\0') /* the old schema: no producer_logins */
        free(aj_try(db, strstr(sql, "DROP")));
    free(e);
    free(sql);
    free(u1);
    free(u2);
    free(u3);
    free(un);
    free(app1);
    free(app2);
    free(app3);
    free(none);
    free(db);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("api_jobs_scope");
    TCase *tc = tcase_create("scope");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_producers_act_only_on_their_own_jobs_templates_and_tenants);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
