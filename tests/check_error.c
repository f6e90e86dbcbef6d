/* check_error.c: the error table is complete and the error struct behaves. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <warren/error.h>

START_TEST(test_error_every_code_has_distinct_name_and_text)
{
    int n = warren_errno_count();
    ck_assert_int_ge(n, 20);
    for (int i = 0; i < n; i++) {
        int code = warren_errno_at(i);
        ck_assert_int_lt(code, 0);
        ck_assert_ptr_nonnull(warren_err_name(code));
        ck_assert_str_ne(warren_strerror(code), "unknown error");
        for (int j = 0; j < i; j++) {
            ck_assert_int_ne(code, warren_errno_at(j));
            ck_assert_str_ne(warren_err_name(code), warren_err_name(warren_errno_at(j)));
        }
    }
    ck_assert_str_eq(warren_strerror(0), "success");
    ck_assert_str_eq(warren_strerror(-9999), "unknown error");
    ck_assert_ptr_null(warren_err_name(-9999));
}
END_TEST

START_TEST(test_error_enum_matches_table)
{
    ck_assert_str_eq(warren_err_name(WARREN_EINVAL), "WARREN_EINVAL");
    ck_assert_str_eq(warren_err_name(WARREN_ESTALE), "WARREN_ESTALE");
    ck_assert_str_eq(warren_strerror(WARREN_EDBCONN), "database unreachable");
}
END_TEST

START_TEST(test_error_first_error_wins)
{
    warren_error err = {0};
    ck_assert_int_eq(warren_error_set(&err, WARREN_ECRON, "field %d bad", 2), WARREN_ECRON);
    ck_assert_int_eq(warren_error_set(&err, WARREN_EIO, "later"), WARREN_EIO);
    ck_assert_int_eq(err.code, WARREN_ECRON);
    ck_assert_str_eq(err.message, "field 2 bad");
    warren_error_clear(&err);
    ck_assert_int_eq(err.code, 0);
    ck_assert_int_eq(warren_error_set(NULL, WARREN_EIO, "x"), WARREN_EIO);
}
END_TEST

START_TEST(test_error_long_message_is_truncated_not_overflowed)
{
    warren_error err = {0};
    char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    warren_error_set(&err, WARREN_EIO, "%s", big);
    ck_assert_uint_eq(strlen(err.message), WARREN_ERROR_MSG_MAX - 1);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_error_every_code_has_distinct_name_and_text);
    tcase_add_test(tc, test_error_enum_matches_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("struct");
    tcase_add_test(tc, test_error_first_error_wins);
    tcase_add_test(tc, test_error_long_message_is_truncated_not_overflowed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(error_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
