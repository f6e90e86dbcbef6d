/* check_producer_upgrade: an installation made by the schema before producer
 * grants (tests/data/sql/legacy-017, main at fcce054) upgraded by today's
 * `warren migrate` (migration 018, docs/api-jobs.md "Producer grants"):
 * a producer login that created API jobs keeps what it used (its jobs'
 * templates: it still changes its jobs), is held to that scope (a config job
 * it never was granted is refused), a member of warren_producer that made
 * nothing is refused with the command that grants it, and migrate says so
 * for each in a WARNING line. Against the real PostgreSQL. */
#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testenv.h"

START_TEST(test_upgrade_keeps_each_creator_its_templates_and_refuses_the_rest)
{
    char *url = testenv_db();
    char *app = testenv_unique_name("up_app"), *idle = testenv_unique_name("up_idle");
    char *app_url = testenv_url_as(url, app), *idle_url = testenv_url_as(url, idle);
    char *cmd, *sql, out[16384];
    int rc;

    /* The previous schema, as production has it: psql -f install.sql. */
    cmd = testenv_fmt("psql -X -q -v ON_ERROR_STOP=1 -f '%s/sql/legacy-017/install.sql' '%s' "
                      "2>&1",
                      WARREN_TEST_DATA, url);
    rc = testenv_run(cmd, out, sizeof(out));
    ck_assert_msg(rc == 0, "%s", out);
    free(cmd);
    ck_assert_sql_eq(url, "SELECT max(version) FROM warren.schema_migrations", "17");

    /* A template and a config job, as `warren sync` writes them. */
    ck_assert_sql_eq(
        url,
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, is_template) "
        "VALUES ('tmpl', 'none', '', 'q', true), ('tmpl-b', 'none', '', 'q', true);"
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue) "
        "VALUES ('ops-purge', 'cron', '0 3 * * *', 'q')",
        "");
    sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_producer;"
                      "CREATE ROLE %s LOGIN IN ROLE warren_producer",
                      app, idle);
    ck_assert_sql_eq(url, sql, "");
    free(sql);

    /* Before the upgrade any producer could do anything: the application
     * makes its job, and enqueues on the operator's config job. */
    ck_assert_sql_eq(app_url,
                     "SELECT warren.upsert_job('app-report', 'tmpl', '{\"cron\": \"0 9 * * *\"}')",
                     "created");
    ck_assert_sql_eq(app_url, "SELECT created FROM warren.enqueue('ops-purge', 'k1')", "t");

    /* The upgrade: migration 018 and the new function files. */
    cmd = testenv_fmt("'%s' migrate --database '%s' 2>&1", WARREN_BINARY, url);
    rc = testenv_run(cmd, out, sizeof(out));
    ck_assert_msg(rc == 0, "%s", out);
    free(cmd);
    ck_assert_msg(strstr(out, "applied migration 018_producer_grants.sql") != NULL, "%s", out);
    sql = testenv_fmt("producer login \"%s\" was granted the templates of the API jobs it "
                      "created (--template tmpl)",
                      app);
    ck_assert_msg(strstr(out, sql) != NULL, "no line for %s in:\n%s", app, out);
    free(sql);
    sql = testenv_fmt("login \"%s\" is a member of warren_producer but has no producer grants in "
                      "this database",
                      idle);
    ck_assert_msg(strstr(out, sql) != NULL, "no line for %s in:\n%s", idle, out);
    free(sql);

    /* The creator keeps its job and its template... */
    sql = testenv_fmt("SELECT login || ':' || kind || ':' || name FROM warren.producer_grants "
                      "WHERE login = '%s'",
                      app);
    {
        char *want = testenv_fmt("%s:template:tmpl", app);
        ck_assert_sql_eq(url, sql, want);
        free(want);
    }
    free(sql);
    ck_assert_sql_eq(app_url,
                     "SELECT warren.upsert_job('app-report', 'tmpl', '{\"cron\": \"0 10 * * *\"}')",
                     "changed");
    ck_assert_sql_eq(app_url, "SELECT warren.pause_job('app-report')::text", "true");
    ck_assert_sql_eq(app_url, "SELECT created FROM warren.enqueue('tmpl', 'k2')", "t");
    /* ... and nothing else: not the config job, not another template. */
    ck_assert_sql_prefix(app_url, "SELECT created FROM warren.enqueue('ops-purge', 'k3')",
                         "42501: ");
    ck_assert_sql_prefix(
        app_url, "SELECT warren.upsert_job('app-other', 'tmpl-b', '{\"cron\": \"0 9 * * *\"}')",
        "42501: ");
    /* The member that made nothing is refused with the fix. */
    sql =
        testenv_fmt("42501: warren.enqueue: login \"%s\" has no producer grants in database", idle);
    ck_assert_sql_prefix(idle_url, "SELECT created FROM warren.enqueue('tmpl', 'k4')", sql);
    free(sql);

    /* A second migrate changes nothing and says nothing of them again. */
    cmd = testenv_fmt("'%s' migrate --database '%s' 2>&1", WARREN_BINARY, url);
    rc = testenv_run(cmd, out, sizeof(out));
    ck_assert_msg(rc == 0, "%s", out);
    ck_assert_msg(strstr(out, "migration 018") == NULL, "%s", out);
    free(cmd);

    /* Grants are rows, not dependencies: the logins drop cleanly. */
    sql = testenv_fmt("DROP ROLE %s; DROP ROLE %s", app, idle);
    ck_assert_sql_eq(testenv_pg_admin_url(), sql, "");
    free(sql);
    free(app_url);
    free(idle_url);
    free(app);
    free(idle);
    free(url);
}
END_TEST

static Suite *upgrade_suite(void)
{
    Suite *s = suite_create("producer_upgrade");
    TCase *tc = tcase_create("upgrade");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_upgrade_keeps_each_creator_its_templates_and_refuses_the_rest);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(upgrade_suite());
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
