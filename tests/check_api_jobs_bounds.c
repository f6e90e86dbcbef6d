/* check_api_jobs_bounds: the bounds of warren.upsert_job(s) and the API
 * job functions (docs/api-jobs.md, "Bounds"; sql/functions/api_jobs.sql)
 * against a real PostgreSQL:
 *  - upsert_jobs takes at most warren.wp_upsert_max_batch() elements;
 *  - an array with hundreds of distinct unknown zones is refused as fast as
 *    one with a single unknown zone, naming the first;
 *  - a payload or an `at` instant that a run message cannot carry (an
 *    integer beyond int64, a number beyond a double, a year outside 1-9999
 *    UTC) is refused at the call, naming the field;
 *  - every text field is bounded (cron 256 characters, as the C parser)
 *    and free of control characters, and no error echoes more than an
 *    80-character prefix of a bad value or any control character. */
#include "api_jobs_fixture.h"

/* ---------------------------------------------------------------- elements */

START_TEST(test_upsert_jobs_takes_at_most_the_limit_and_the_error_says_how_to_split)
{
    char *db = aj_db();
    char *before = aj_val(db, AJ_STATE_SQL);
    free(aj_expect_error(db, "22023",
                         "SELECT count(*) FROM warren.upsert_jobs((SELECT jsonb_agg("
                         "jsonb_build_object('name', 'big-' || g, 'template', 'report', 'every', "
                         "'1h')) FROM generate_series(1, 10001) g))",
                         "warren.upsert_jobs", "10001 elements", "at most 10000 per call",
                         "split the array", NULL));
    char *after = aj_val(db, AJ_STATE_SQL);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    aj_expect_val(db, "SELECT warren.wp_upsert_max_batch()", "10000");
    /* the limit itself is taken */
    aj_expect_val(db,
                  "SELECT count(*) FROM warren.upsert_jobs((SELECT jsonb_agg("
                  "jsonb_build_object('name', 'big-' || g, 'template', 'report', 'every', "
                  "'1h')) FROM generate_series(1, 10000) g)) WHERE result = 'created'",
                  "10000");
    free(db);
}
END_TEST

/* Seconds of the fastest of 3 runs of sql, which fails with 22023 naming
 * want. */
static double refusal_seconds(const char *db, const char *sql, const char *want)
{
    PGconn *c = testenv_connect(db);
    double best = 1e9;
    for (int i = 0; i < 3; i++) {
        double t0 = aj_now_s();
        char *got = aj_try_on(c, sql);
        double t = aj_now_s() - t0;
        ck_assert_msg(strncmp(got, "22023: ", 7) == 0 && strstr(got, want) != NULL,
                      "gave \"%.400s\", expected a 22023 naming %s", got, want);
        free(got);
        if (t < best)
            best = t;
    }
    PQfinish(c);
    return best;
}

START_TEST(test_many_distinct_unknown_zones_cost_what_one_costs)
{
    char *db = aj_db();
    /* 10 good elements, then 1 (or 400 distinct) unknown zones */
    static const char FMT[] =
        "SELECT count(*) FROM warren.upsert_jobs((SELECT jsonb_agg(jsonb_build_object('name', "
        "'z-' || g, 'template', 'report', 'cron', '0 9 * * *', 'timezone', CASE WHEN g < 10 "
        "THEN 'Europe/Berlin' ELSE 'Mars/Crater-' || (g %% %d) END) ORDER BY g) FROM "
        "generate_series(0, 409) g))";
    char *one = testenv_fmt(FMT, 1);
    char *many = testenv_fmt(FMT, 1000);
    double t_one = refusal_seconds(db, one, "jobs[10] (\"z-10\"): field \"timezone\"");
    double t_many = refusal_seconds(db, many, "jobs[10] (\"z-10\"): field \"timezone\"");
    fprintf(stderr, "unknown zones: 1 distinct %.3f s, 400 distinct %.3f s\n", t_one, t_many);
    /* at fcce054 each distinct unknown zone read pg_timezone_names (~38 ms
     * each: 15 s here); now they are read once: the bound leaves a loaded
     * machine a factor of 3 and a second */
    ck_assert_msg(t_many < 3 * t_one + 1.0,
                  "400 distinct unknown zones took %.3f s, one took %.3f s", t_many, t_one);
    free(one);
    free(many);
    free(db);
}
END_TEST

/* ------------------------------------------------- what a message can carry */

START_TEST(test_payload_and_at_a_run_message_cannot_carry_are_refused_at_the_call)
{
    char *db = aj_db();
    char *before = aj_val(db, AJ_STATE_SQL);
    free(aj_expect_error(db, "22023",
                         "SELECT warren.upsert_job('p1', 'report', '{\"every\": \"1h\", "
                         "\"payload\": {\"n\": 18446744073709551616}}')",
                         "warren.upsert_job", "job \"p1\"", "field \"payload\"",
                         "18446744073709551616", NULL));
    /* the bulk form's fast path too */
    free(aj_expect_error(db, "22023",
                         "SELECT * FROM warren.upsert_jobs('[{\"name\": \"p0\", \"template\": "
                         "\"report\", \"every\": \"1h\", \"payload\": {\"n\": 1}}, {\"name\": "
                         "\"p2\", \"template\": \"report\", \"every\": \"1h\", \"payload\": "
                         "{\"a\": [{\"n\": -9223372036854775809}]}}]')",
                         "jobs[1] (\"p2\")", "field \"payload\"", NULL));
    free(aj_expect_error(db, "22023",
                         "SELECT warren.upsert_job('p3', 'report', jsonb_build_object('every', "
                         "'1h', 'payload', jsonb_build_object('x', ('1' || repeat('0', 309) || "
                         "'.5')::numeric)))",
                         "field \"payload\"", "double", NULL));
    free(aj_expect_error(db, "22023",
                         "SELECT warren.upsert_job('a1', 'report', '{\"at\": "
                         "\"0001-01-01T00:00:00+01:00\"}')",
                         "job \"a1\"", "field \"at\"", "years 1-9999", NULL));
    free(aj_expect_error(db, "22023",
                         "SELECT * FROM warren.upsert_jobs('[{\"name\": \"a2\", \"template\": "
                         "\"report\", \"at\": \"9999-12-31T23:30:00-01:00\"}]')",
                         "jobs[0] (\"a2\")", "field \"at\"", "years 1-9999", NULL));
    char *after = aj_val(db, AJ_STATE_SQL);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    /* the edges themselves, and the largest numbers, are carried */
    aj_expect_val(db,
                  "SELECT string_agg(result, ',') FROM warren.upsert_jobs('["
                  "{\"name\": \"e1\", \"template\": \"report\", \"at\": \"0001-01-01T00:00:00Z\"},"
                  "{\"name\": \"e2\", \"template\": \"report\", \"at\": \"9999-12-31T23:59:59Z\"},"
                  "{\"name\": \"e3\", \"template\": \"report\", \"every\": \"1h\", \"payload\": "
                  "{\"a\": 9223372036854775807, \"b\": -9223372036854775808, \"c\": 2.5}}]')",
                  "created,created,created");
    free(db);
}
END_TEST

/* ------------------------------------------------------------- text fields */

/* sql fails with 22023 holding each substring; the message is at most 400
 * bytes and holds no control character. */
static void expect_short_error(const char *db, const char *sql, ...)
{
    va_list ap;
    va_start(ap, sql);
    char *got = aj_expect_error_v(db, "22023", sql, ap);
    va_end(ap);
    ck_assert_msg(strlen(got) <= 400, "%.200s\n  error of %zu bytes: \"%.600s\"", sql, strlen(got),
                  got);
    for (const char *p = got; *p; p++)
        ck_assert_msg((unsigned char)*p >= 0x20 && *p != 0x7f,
                      "%.200s\n  error holds control character 0x%02x: \"%.600s\"", sql,
                      (unsigned char)*p, got);
    free(got);
}

START_TEST(test_text_fields_are_bounded_without_control_characters_and_errors_echo_a_prefix)
{
    char *db = aj_db();
    char *before = aj_val(db, AJ_STATE_SQL);
    /* cron: the C parser's 256 characters (a 5 MB one was stored) */
    expect_short_error(db,
                       "SELECT warren.upsert_job('c1', 'report', jsonb_build_object('cron', "
                       "'0 9 * * ' || repeat('1,', 2500000) || '1'))",
                       "field \"cron\"", "longer than 256 characters", "(5000009 characters)",
                       NULL);
    expect_short_error(db,
                       "SELECT warren.upsert_job('c1', 'report', jsonb_build_object('cron', "
                       "'0 9 * * 1' || repeat(',1', 124)))",
                       "field \"cron\"", "longer than 256", NULL);
    /* a 1 MB wrong one: a short error */
    expect_short_error(db,
                       "SELECT warren.upsert_job('c1', 'report', jsonb_build_object('cron', "
                       "repeat('x ', 500000)))",
                       "field \"cron\"", NULL);
    /* a line break (the cron grammar's spaces once let it in), a tab */
    expect_short_error(db,
                       "SELECT warren.upsert_job('c1', 'report', jsonb_build_object('cron', "
                       "E'0 9 * * *\\nINJECTED'))",
                       "field \"cron\"", "control character", "\\nINJECTED", NULL);
    expect_short_error(db,
                       "SELECT * FROM warren.upsert_jobs(jsonb_build_array(jsonb_build_object("
                       "'name', 'c2', 'template', 'report', 'cron', E'0 9 * *\\t*')))",
                       "jobs[0] (\"c2\")", "field \"cron\"", "control character", NULL);
    /* every, at, jitter, timezone, tenant: long and with control characters */
    static const char *const fields[] = {"every", "at", "jitter", "timezone", "tenant"};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const char *sched = strcmp(fields[i], "every") == 0 || strcmp(fields[i], "at") == 0
                                ? ""
                                : "'every', '1h', ";
        char *want = testenv_fmt("field \"%s\"", fields[i]);
        char *sql =
            testenv_fmt("SELECT warren.upsert_job('t1', 'report', jsonb_build_object(%s'%s', "
                        "repeat('1', 1000000)))",
                        sched, fields[i]);
        expect_short_error(db, sql, want, "(1000000 characters)", NULL);
        free(sql);
        sql = testenv_fmt("SELECT warren.upsert_job('t1', 'report', jsonb_build_object(%s'%s', "
                          "E'1h\\r\\nX'))",
                          sched, fields[i]);
        expect_short_error(db, sql, want, NULL);
        free(sql);
        free(want);
    }
    /* names: a 10,000-character one gave a 10,414-character error */
    expect_short_error(db,
                       "SELECT warren.upsert_job(repeat('n', 10000), 'report', '{\"every\": "
                       "\"1h\"}')",
                       "field \"name\"", "(10000 characters)", NULL);
    expect_short_error(db,
                       "SELECT * FROM warren.upsert_jobs(jsonb_build_array(jsonb_build_object("
                       "'name', repeat('n', 10000), 'template', 'report', 'every', '1h')))",
                       "jobs[0] (\"nnnn", "field \"name\"", NULL);
    expect_short_error(db, "SELECT warren.upsert_job(E'a\\nb', 'report', '{\"every\": \"1h\"}')",
                       "field \"name\"", "control character", NULL);
    expect_short_error(db,
                       "SELECT warren.upsert_job('t1', repeat('t', 10000), '{\"every\": "
                       "\"1h\"}')",
                       "field \"template\"", NULL);
    expect_short_error(db, "SELECT warren.upsert_job('t1', E'rep\\nort', '{\"every\": \"1h\"}')",
                       "field \"template\"", NULL);
    expect_short_error(db,
                       "SELECT warren.upsert_job('t1', 'report', jsonb_build_object('every', "
                       "'1h', repeat('k', 10000), 1))",
                       "unknown field", NULL);
    expect_short_error(db,
                       "SELECT * FROM warren.upsert_jobs(jsonb_build_array(jsonb_build_object("
                       "'name', repeat('d', 150), 'template', 'report', 'every', '1h'), "
                       "jsonb_build_object('name', repeat('d', 150), 'template', 'report', "
                       "'every', '1h')))",
                       "jobs[0] and jobs[1]", NULL);
    expect_short_error(db, "SELECT warren.upsert_job(repeat('s', 10000), 'report', '[]')",
                       "spec must be a JSON object", NULL);
    static const char *const fns[] = {"pause_job", "resume_job", "delete_job"};
    for (size_t i = 0; i < 3; i++) {
        char *sql = testenv_fmt("SELECT warren.%s(repeat('x', 10000))", fns[i]);
        expect_short_error(db, sql, "no job", NULL);
        free(sql);
        sql = testenv_fmt("SELECT warren.%s(E'x\\ny')", fns[i]);
        expect_short_error(db, sql, "no job", NULL);
        free(sql);
    }
    char *after = aj_val(db, AJ_STATE_SQL);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    /* the bounds themselves are taken */
    aj_expect_val(db,
                  "SELECT warren.upsert_job('c256', 'report', jsonb_build_object('cron', "
                  "'00 9 * * 1' || repeat(',1', 123)))",
                  "created");
    aj_expect_val(db, "SELECT length(expression) FROM warren.jobs WHERE name = 'c256'", "256");
    free(db);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("api_jobs_bounds");
    TCase *tc = tcase_create("bounds");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_upsert_jobs_takes_at_most_the_limit_and_the_error_says_how_to_split);
    tcase_add_test(tc, test_many_distinct_unknown_zones_cost_what_one_costs);
    tcase_add_test(tc, test_payload_and_at_a_run_message_cannot_carry_are_refused_at_the_call);
    tcase_add_test(
        tc, test_text_fields_are_bounded_without_control_characters_and_errors_echo_a_prefix);
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
