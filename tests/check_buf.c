/* check_buf.c: the capped text buffer grows as text is added, stays
 * NUL-terminated, refuses to pass its cap and then drops every later add. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <warren/error.h>

#include "buf.h"

START_TEST(test_buf_appends_and_stays_terminated)
{
    warren__buf b;
    warren__buf_init(&b, 1 << 20);
    ck_assert_int_eq(warren__buf_puts(&b, "{"), 0);
    ck_assert_int_eq(warren__buf_add(&b, "ab\0cd", 2), 0);
    ck_assert_int_eq(warren__buf_printf(&b, ",%d,%s}", 42, "x"), 0);
    ck_assert_str_eq(b.p, "{ab,42,x}");
    ck_assert_uint_eq(b.len, 9);
    /* past the first allocation: 10,000 appends keep every byte */
    for (int i = 0; i < 10000; i++)
        ck_assert_int_eq(warren__buf_printf(&b, "%04d", i % 10000), 0);
    ck_assert_uint_eq(b.len, 9 + 40000);
    ck_assert_uint_eq(strlen(b.p), b.len);
    ck_assert_int_eq(strncmp(b.p + 9, "000000010002", 12), 0);
    ck_assert_str_eq(b.p + b.len - 4, "9999");
    warren__buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.p, "");
    warren__buf_close(&b);
    ck_assert_ptr_null(b.p);
    warren__buf_close(NULL);
}
END_TEST

START_TEST(test_buf_refuses_to_pass_its_cap)
{
    warren__buf b;
    warren__buf_init(&b, 8);
    ck_assert_int_eq(warren__buf_puts(&b, "12345678"), 0); /* exactly the cap */
    ck_assert_int_eq(warren__buf_puts(&b, "9"), WARREN_ERANGE);
    ck_assert_int_eq(b.err, WARREN_ERANGE);
    /* once failed, later adds are dropped (even ones that would fit) */
    warren__buf_reset(&b);
    ck_assert_int_eq(warren__buf_puts(&b, "a"), WARREN_ERANGE);
    ck_assert_int_eq(warren__buf_printf(&b, "%d", 1), WARREN_ERANGE);
    ck_assert_ptr_null(warren__buf_steal(&b));
    ck_assert_ptr_null(b.p);
    /* a closed buffer is usable again */
    ck_assert_int_eq(b.err, 0);
    ck_assert_int_eq(warren__buf_printf(&b, "%s", "123456789"), WARREN_ERANGE);
    warren__buf_close(&b);
}
END_TEST

START_TEST(test_buf_steal_hands_over_the_text)
{
    warren__buf b;
    warren__buf_init(&b, WARREN__BUF_PG_VALUE_MAX);
    char *empty = warren__buf_steal(&b);
    ck_assert_ptr_nonnull(empty);
    ck_assert_str_eq(empty, "");
    free(empty);
    warren__buf_puts(&b, "text");
    char *t = warren__buf_steal(&b);
    ck_assert_str_eq(t, "text");
    ck_assert_ptr_null(b.p);
    ck_assert_uint_eq(b.len, 0);
    free(t);
    warren__buf_init(&b, SIZE_MAX); /* no overflow of len + NUL */
    ck_assert_int_eq(warren__buf_add(&b, "x", 1), 0);
    warren__buf_close(&b);
    /* a zeroed buffer is usable, with PostgreSQL's value limit as its cap */
    warren__buf z = {0};
    ck_assert_int_eq(warren__buf_puts(&z, "ok"), 0);
    ck_assert_int_eq(warren__buf_add(&z, "x", WARREN__BUF_PG_VALUE_MAX), WARREN_ERANGE);
    ck_assert_str_eq(z.p, "ok");
    warren__buf_close(&z);
}
END_TEST

static Suite *buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("buffer");
    tcase_add_test(tc, test_buf_appends_and_stays_terminated);
    tcase_add_test(tc, test_buf_refuses_to_pass_its_cap);
    tcase_add_test(tc, test_buf_steal_hands_over_the_text);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(buf_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
