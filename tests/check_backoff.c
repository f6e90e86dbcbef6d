/* check_backoff.c: the reconnect backoff starts at its minimum, doubles and
 * stays at its maximum. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include <warren/backoff.h>

START_TEST(test_backoff_starts_at_min_doubles_and_stops_at_max)
{
    static const int64_t want[] = {100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000};
    int64_t d = 0;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        d = warren_backoff_next(d, 100, 10000);
        ck_assert_int_eq(d, want[i]);
    }
    ck_assert_int_eq(warren_backoff_next(50, 100, 10000), 100);
    ck_assert_int_eq(warren_backoff_next(5000, 100, 10000), 10000);
    ck_assert_int_eq(warren_backoff_next(5001, 100, 10000), 10000);
    ck_assert_int_eq(warren_backoff_next(4999, 100, 10000), 9998);
}
END_TEST

START_TEST(test_backoff_does_not_overflow_near_int64_max)
{
    ck_assert_int_eq(warren_backoff_next(INT64_MAX / 2 + 1, 1, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(warren_backoff_next(INT64_MAX, 1, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(warren_backoff_next(INT64_MAX / 2, 1, INT64_MAX), INT64_MAX - 1);
}
END_TEST

static Suite *backoff_suite(void)
{
    Suite *s = suite_create("backoff");
    TCase *tc = tcase_create("doubling");
    tcase_add_test(tc, test_backoff_starts_at_min_doubles_and_stops_at_max);
    tcase_add_test(tc, test_backoff_does_not_overflow_near_int64_max);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(backoff_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
