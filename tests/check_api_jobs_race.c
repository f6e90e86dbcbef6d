/* check_api_jobs_race: warren.upsert_job(s) under concurrency
 * (docs/api-jobs.md, "Concurrency"; sql/functions/api_jobs.sql) against a
 * real PostgreSQL:
 *  - bulk calls whose arrays overlap, in opposite and shuffled orders, from
 *    several connections at once, many rounds: never a deadlock (40P01),
 *    every new name created exactly once, an existing one never `created`;
 *  - two calls on one new name: exactly one `created`; the other, having
 *    waited for the first, reports `changed` (with a note that says what
 *    changed) or `unchanged` from the row the first committed, and
 *    `created` only if the first rolled back. */
#include "api_jobs_fixture.h"

/* --------------------------------------------------------- bulk, no deadlock */

#define NCONN 4
#define NNAMES 6000
#define ROUNDS 10

/* A JSON array of the names idx[0..n) of round r, every schedule sched. */
static char *names_doc(int r, const int *idx, int n, const char *sched)
{
    size_t cap = (size_t)n * 120 + 16, len = 0;
    char *doc = malloc(cap);
    ck_assert_ptr_nonnull(doc);
    len += (size_t)snprintf(doc, cap, "[");
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(doc + len, cap - len,
                                "%s{\"name\":\"r%d-job-%05d\",\"template\":\"report\",%s}",
                                k ? "," : "", r, idx[k], sched);
    snprintf(doc + len, cap - len, "]");
    return doc;
}

START_TEST(test_bulk_upserts_in_opposite_orders_never_deadlock_and_create_each_name_once)
{
    char *db = aj_db();
    PGconn *admin = testenv_connect(db), *c[NCONN];
    static int idx[NCONN][NNAMES];
    int len[NCONN];
    unsigned seed = 33;
    for (int i = 0; i < NCONN; i++)
        c[i] = testenv_connect(db);
    for (int r = 0; r < ROUNDS; r++) {
        /* even rounds: all names new (as in the issue: 20,000 new names in
         * opposite orders deadlocked); odd rounds: every third name exists
         * before the round (its row is locked, not inserted) */
        int pre_exist = r % 2;
        char *pre = testenv_fmt(
            "SELECT count(*) FROM warren.upsert_jobs((SELECT jsonb_agg(jsonb_build_object("
            "'name', format('r%d-job-%%s', lpad(g::text, 5, '0')), 'template', 'report', "
            "'every', '1h')) FROM generate_series(0, %d, 3) g))",
            r, NNAMES - 1);
        if (pre_exist)
            free(aj_val_on(admin, pre));
        free(pre);
        /* 0: all ascending; 1: all descending; 2: the last three quarters
         * descending; 3: the first three quarters shuffled */
        len[0] = len[1] = NNAMES;
        len[2] = len[3] = NNAMES * 3 / 4;
        for (int k = 0; k < NNAMES; k++) {
            idx[0][k] = k;
            idx[1][k] = NNAMES - 1 - k;
        }
        for (int k = 0; k < len[2]; k++) {
            idx[2][k] = NNAMES - 1 - k;
            idx[3][k] = k;
        }
        for (int k = len[3] - 1; k > 0; k--) {
            int j = (int)(rand_r(&seed) % (unsigned)(k + 1)), t = idx[3][k];
            idx[3][k] = idx[3][j];
            idx[3][j] = t;
        }
        char *doc[NCONN];
        for (int i = 0; i < NCONN; i++) {
            doc[i] =
                names_doc(r, idx[i], len[i], i % 2 ? "\"every\":\"2h\"" : "\"cron\":\"0 9 * * *\"");
            const char *p[1] = {doc[i]};
            ck_assert_int_eq(PQsendQueryParams(c[i],
                                               "SELECT name, result FROM warren.upsert_jobs($1)", 1,
                                               NULL, p, NULL, NULL, 0),
                             1);
        }
        /* per name: how many calls created it */
        static int created[NNAMES];
        memset(created, 0, sizeof(created));
        for (int i = 0; i < NCONN; i++) {
            PGresult *res;
            int rows = -1;
            while ((res = PQgetResult(c[i])) != NULL) {
                const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
                ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK,
                              "round %d, connection %d: %s %.300s", r, i, st ? st : "",
                              PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
                rows = PQntuples(res);
                for (int k = 0; k < rows; k++) {
                    /* in array order */
                    char want[64];
                    snprintf(want, sizeof(want), "r%d-job-%05d", r, idx[i][k]);
                    ck_assert_str_eq(PQgetvalue(res, k, 0), want);
                    const char *what = PQgetvalue(res, k, 1);
                    if (strcmp(what, "created") == 0) {
                        ck_assert_msg(!pre_exist || idx[i][k] % 3 != 0,
                                      "round %d: %s existed, yet created", r, want);
                        created[idx[i][k]]++;
                    } else {
                        ck_assert_msg(strcmp(what, "changed") == 0 ||
                                          strcmp(what, "unchanged") == 0,
                                      "%s: %s", want, what);
                    }
                }
                PQclear(res);
            }
            ck_assert_int_eq(rows, len[i]);
            free(doc[i]);
        }
        for (int k = 0; k < NNAMES; k++)
            ck_assert_msg(created[k] == (!pre_exist || k % 3 != 0),
                          "round %d: r%d-job-%05d created %d times", r, r, k, created[k]);
        char *q = testenv_fmt("SELECT count(*) FROM warren.jobs WHERE name LIKE 'r%d-job-%%'", r);
        char *n = aj_val_on(admin, q);
        ck_assert_int_eq(atoi(n), NNAMES);
        free(n);
        free(q);
    }
    for (int i = 0; i < NCONN; i++)
        PQfinish(c[i]);
    PQfinish(admin);
    free(db);
}
END_TEST

/* ------------------------------------------------------- one name, two calls */

/* B's call waits for A's uncommitted create of the same name; A ends with
 * a_end (COMMIT or ROLLBACK); returns B's result (new). */
static char *second_waits_for_first(PGconn *admin, PGconn *a, PGconn *b, const char *sql_a,
                                    const char *sql_b, const char *a_end)
{
    testenv_exec_on(a, "BEGIN");
    char *ra = aj_val_on(a, sql_a);
    ck_assert_str_eq(ra, "created");
    free(ra);
    ck_assert_int_eq(PQsendQuery(b, sql_b), 1);
    ck_assert_msg(aj_wait_for_lock_wait(admin, PQbackendPID(b)),
                  "the second call did not wait for the first");
    testenv_exec_on(a, a_end);
    PGresult *res = PQgetResult(b);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    char *rb = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    while ((res = PQgetResult(b)) != NULL)
        PQclear(res);
    return rb;
}

START_TEST(test_two_upserts_of_one_new_name_one_created_the_other_sees_the_first)
{
    char *db = aj_db();
    PGconn *admin = testenv_connect(db), *a = testenv_connect(db), *b = testenv_connect(db);
    for (int r = 0; r < 20; r++) {
        /* different template, tenant and schedule: changed, and the note
         * says so; the row is the second's */
        char *sa = testenv_fmt("SELECT warren.upsert_job('one-%d', 'report', '{\"cron\": \"0 9 * * "
                               "*\", \"timezone\": \"Europe/Berlin\", \"tenant\": \"t-a\"}')",
                               r);
        char *sb = testenv_fmt("SELECT warren.upsert_job('one-%d', 'report2', '{\"every\": "
                               "\"1h\", \"tenant\": \"t-b\"}')",
                               r);
        char *rb = second_waits_for_first(admin, a, b, sa, sb, "COMMIT");
        ck_assert_msg(strcmp(rb, "changed") == 0, "round %d: the second call said %s", r, rb);
        free(rb);
        char *q = testenv_fmt("SELECT concat_ws('|', template, tenant, schedule_kind, expression, "
                              "note LIKE '%%schedule changed at %% by %%: cron \"0 9 * * *\" "
                              "(Europe/Berlin) -> every \"1h\"; its future unclaimed runs "
                              "replaced%%', note LIKE '%%template changed at %% by %%: report -> "
                              "report2%%', note LIKE '%%tenant changed at %% by %%: t-a -> t-b%%') "
                              "FROM warren.jobs WHERE name = 'one-%d'",
                              r);
        aj_expect_val(db, q, "report2|t-b|every|1h|t|t|t");
        free(q);
        free(sa);
        free(sb);
        /* the same definition: unchanged, nothing noted */
        sa = testenv_fmt("SELECT warren.upsert_job('same-%d', 'report', '{\"every\": \"5m\"}')", r);
        rb = second_waits_for_first(admin, a, b, sa, sa, "COMMIT");
        ck_assert_msg(strcmp(rb, "unchanged") == 0, "round %d: the second call said %s", r, rb);
        free(rb);
        q = testenv_fmt("SELECT note IS NULL FROM warren.jobs WHERE name = 'same-%d'", r);
        aj_expect_val(db, q, "t");
        free(q);
        free(sa);
        /* the first rolled back: the second created it */
        sa = testenv_fmt("SELECT warren.upsert_job('rb-%d', 'report', '{\"every\": \"5m\"}')", r);
        rb = second_waits_for_first(admin, a, b, sa, sa, "ROLLBACK");
        ck_assert_msg(strcmp(rb, "created") == 0, "round %d: the second call said %s", r, rb);
        free(rb);
        free(sa);
    }
    PQfinish(a);
    PQfinish(b);

    /* free-running: four connections upsert one new name at once, 20
     * rounds: exactly one created */
    PGconn *c[4];
    for (int i = 0; i < 4; i++)
        c[i] = testenv_connect(db);
    for (int r = 0; r < 20; r++) {
        int made = 0;
        for (int i = 0; i < 4; i++) {
            char *s = testenv_fmt("SELECT warren.upsert_job('free-%d', 'report', '{\"every\": "
                                  "\"%dm\", \"tenant\": \"t-%d\"}')",
                                  r, i + 1, i);
            ck_assert_int_eq(PQsendQuery(c[i], s), 1);
            free(s);
        }
        for (int i = 0; i < 4; i++) {
            PGresult *res;
            while ((res = PQgetResult(c[i])) != NULL) {
                ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s",
                              PQresultErrorMessage(res));
                const char *v = PQgetvalue(res, 0, 0);
                made += strcmp(v, "created") == 0;
                ck_assert_msg(strcmp(v, "created") == 0 || strcmp(v, "changed") == 0, "%s", v);
                PQclear(res);
            }
        }
        ck_assert_msg(made == 1, "round %d: %d calls said created", r, made);
    }
    for (int i = 0; i < 4; i++)
        PQfinish(c[i]);
    PQfinish(admin);
    free(db);
}
END_TEST

/* The documented answer at REPEATABLE READ (docs/api-jobs.md,
 * "Concurrency"): the second caller of one new name fails with 40001 once
 * the first commits; its retry answers changed. */
START_TEST(test_second_upsert_at_repeatable_read_fails_to_serialize_and_its_retry_sees_the_job)
{
    char *db = aj_db();
    PGconn *admin = testenv_connect(db), *a = testenv_connect(db), *b = testenv_connect(db);
    for (int r = 0; r < 10; r++) {
        char *sa =
            testenv_fmt("SELECT warren.upsert_job('rr-%d', 'report', '{\"every\": \"1h\"}')", r);
        char *sb =
            testenv_fmt("SELECT warren.upsert_job('rr-%d', 'report', '{\"every\": \"2h\"}')", r);
        testenv_exec_on(a, "BEGIN");
        char *ra = aj_val_on(a, sa);
        ck_assert_str_eq(ra, "created");
        free(ra);
        testenv_exec_on(b, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        ck_assert_int_eq(PQsendQuery(b, sb), 1);
        ck_assert(aj_wait_for_lock_wait(admin, PQbackendPID(b)));
        testenv_exec_on(a, "COMMIT");
        PGresult *res = PQgetResult(b);
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        ck_assert_msg(PQresultStatus(res) == PGRES_FATAL_ERROR && st && strcmp(st, "40001") == 0,
                      "round %d: the second call at REPEATABLE READ gave %s %s", r,
                      PQresStatus(PQresultStatus(res)), st ? st : "");
        PQclear(res);
        while ((res = PQgetResult(b)) != NULL)
            PQclear(res);
        testenv_exec_on(b, "ROLLBACK");
        testenv_exec_on(b, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        char *rb = aj_val_on(b, sb);
        ck_assert_str_eq(rb, "changed");
        free(rb);
        testenv_exec_on(b, "COMMIT");
        free(sa);
        free(sb);
    }
    PQfinish(a);
    PQfinish(b);
    PQfinish(admin);
    free(db);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("api_jobs_race");
    TCase *tc = tcase_create("race");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc,
                   test_bulk_upserts_in_opposite_orders_never_deadlock_and_create_each_name_once);
    tcase_add_test(tc, test_two_upserts_of_one_new_name_one_created_the_other_sees_the_first);
    tcase_add_test(
        tc, test_second_upsert_at_repeatable_read_fails_to_serialize_and_its_retry_sees_the_job);
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
