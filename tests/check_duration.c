/* check_duration.c: duration strings ("250ms", "1h30m") parse strictly and format shortest. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <warren/duration.h>

static const struct {
    const char *text;
    int64_t ms;
} valid[] = {
    {"0", 0},
    {"0s", 0},
    {"0ms", 0},
    {"1ms", 1},
    {"250ms", 250},
    {"1s", 1000},
    {"90s", 90000},
    {"5m", 300000},
    {"1h", 3600000},
    {"2d", 172800000},
    {"1h30m", 5400000},
    {"1m30s500ms", 90500},
    {"1d2h3m4s5ms", 93784005},
    {"007s", 7000},
    {"3600s", 3600000},
    {"1d1ms", 86400001},
    {"106751991167d", INT64_C(106751991167) * 86400000},
    {"9223372036854775807ms", INT64_MAX},
};

static const struct {
    const char *text;
    int code;
    const char *msg; /* substring */
} invalid[] = {
    {"", WARREN_EPARSE, "is empty"},
    {"10x", WARREN_EPARSE, "\"10x\" is not a duration (use e.g. \"10s\", \"5m\")"},
    {"10", WARREN_EPARSE, "needs a unit"},
    {"1h30", WARREN_EPARSE, "needs a unit"},
    {"-5s", WARREN_EPARSE, "cannot be negative"},
    {"+5s", WARREN_EPARSE, "is not a duration"},
    {"s", WARREN_EPARSE, "is not a duration"},
    {"5 s", WARREN_EPARSE, "is not a duration"},
    {" 5s", WARREN_EPARSE, "is not a duration"},
    {"5s ", WARREN_EPARSE, "is not a duration"},
    {"5S", WARREN_EPARSE, "is not a duration"},
    {"1.5s", WARREN_EPARSE, "is not a duration"},
    {"5sec", WARREN_EPARSE, "is not a duration"},
    {"5min", WARREN_EPARSE, "is not a duration"},
    {"5us", WARREN_EPARSE, "is not a duration"},
    {"1w", WARREN_EPARSE, "is not a duration"},
    {"30m1h", WARREN_EPARSE, "largest to smallest"},
    {"1s1s", WARREN_EPARSE, "largest to smallest"},
    {"1ms1s", WARREN_EPARSE, "largest to smallest"},
    {"5m5m", WARREN_EPARSE, "largest to smallest"},
    {"00", WARREN_EPARSE, "needs a unit"},
    {"106751991168d", WARREN_ERANGE, "too long"},
    {"99999999999999999999ms", WARREN_ERANGE, "too long"},
    {"9223372036854775807ms1", WARREN_EPARSE, "needs a unit"},
    {"9223372036854775808ms", WARREN_ERANGE, "too long"},
    {"106751991167d1d", WARREN_EPARSE, "largest to smallest"},
    {"106751991167d23h59m59s999ms", WARREN_ERANGE, "too long"},
};

START_TEST(test_duration_parses_valid_forms)
{
    int64_t ms = -1;
    warren_error err = {0};
    ck_assert_msg(warren_duration_parse(valid[_i].text, &ms, &err) == 0, "%s: %s", valid[_i].text,
                  err.message);
    ck_assert_int_eq(ms, valid[_i].ms);
}
END_TEST

START_TEST(test_duration_rejects_invalid_forms)
{
    int64_t ms = 12345;
    warren_error err = {0};
    int rc = warren_duration_parse(invalid[_i].text, &ms, &err);
    ck_assert_msg(rc == invalid[_i].code, "\"%s\": rc %d", invalid[_i].text, rc);
    ck_assert_int_eq(err.code, invalid[_i].code);
    ck_assert_msg(strstr(err.message, invalid[_i].msg) != NULL,
                  "\"%s\": message \"%s\" lacks \"%s\"", invalid[_i].text, err.message,
                  invalid[_i].msg);
    ck_assert_int_eq(ms, 12345); /* untouched on error */
}
END_TEST

START_TEST(test_duration_rejects_null)
{
    int64_t ms;
    ck_assert_int_eq(warren_duration_parse(NULL, &ms, NULL), WARREN_EPARSE);
}
END_TEST

START_TEST(test_duration_quotes_long_input_truncated)
{
    char big[500];
    warren_error err = {0};
    int64_t ms;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(warren_duration_parse(big, &ms, &err), WARREN_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, "...\" is not a duration"));
    ck_assert_uint_lt(strlen(err.message), 200);
}
END_TEST

START_TEST(test_duration_formats_shortest)
{
    char buf[64];
    ck_assert_str_eq(warren_duration_format(0, buf, sizeof(buf)), "0s");
    ck_assert_str_eq(warren_duration_format(250, buf, sizeof(buf)), "250ms");
    ck_assert_str_eq(warren_duration_format(90000, buf, sizeof(buf)), "1m30s");
    ck_assert_str_eq(warren_duration_format(5400000, buf, sizeof(buf)), "1h30m");
    ck_assert_str_eq(warren_duration_format(172800000, buf, sizeof(buf)), "2d");
    ck_assert_str_eq(warren_duration_format(93784005, buf, sizeof(buf)), "1d2h3m4s5ms");
    ck_assert_str_eq(warren_duration_format(-1500, buf, sizeof(buf)), "-1s500ms");
    ck_assert_str_eq(warren_duration_format(INT64_MIN, buf, sizeof(buf)),
                     "-106751991167d7h12m55s808ms");
}
END_TEST

START_TEST(test_duration_format_never_overflows_buffer)
{
    char buf[6];
    memset(buf, 'z', sizeof(buf));
    warren_duration_format(93784005, buf, sizeof(buf));
    /* "1d2h3m4s5ms" cut to what fits, terminated */
    ck_assert_str_eq(buf, "1d2h3");
}
END_TEST

START_TEST(test_duration_round_trips)
{
    /* format then parse gives the value back, over a spread of magnitudes */
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t v = (int64_t)(x >> (1 + (x & 63) % 62)) & INT64_MAX;
        char buf[64];
        int64_t back = -1;
        warren_error err = {0};
        warren_duration_format(v, buf, sizeof(buf));
        ck_assert_msg(warren_duration_parse(buf, &back, &err) == 0, "%s: %s", buf, err.message);
        ck_assert_int_eq(back, v);
    }
}
END_TEST

static Suite *duration_suite(void)
{
    Suite *s = suite_create("duration");
    TCase *tc = tcase_create("parse");
    tcase_add_loop_test(tc, test_duration_parses_valid_forms, 0,
                        (int)(sizeof(valid) / sizeof(valid[0])));
    tcase_add_loop_test(tc, test_duration_rejects_invalid_forms, 0,
                        (int)(sizeof(invalid) / sizeof(invalid[0])));
    tcase_add_test(tc, test_duration_rejects_null);
    tcase_add_test(tc, test_duration_quotes_long_input_truncated);
    suite_add_tcase(s, tc);
    tc = tcase_create("format");
    tcase_add_test(tc, test_duration_formats_shortest);
    tcase_add_test(tc, test_duration_format_never_overflows_buffer);
    tcase_add_test(tc, test_duration_round_trips);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(duration_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
