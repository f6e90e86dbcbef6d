/* check_hash.c: FNV-1a 32- and 64-bit give the published test vectors, and H,
 * partitions and jitter are exactly the documented functions of them (their
 * values are persistent, so a change to any must fail here). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <warren/cron.h>
#include <warren/hash.h>
#include <warren/planner.h>
#include <warren/store.h>

/* From the FNV reference (www.isthe.com/chongo/tech/comp/fnv). */
static const struct {
    const char *s;
    uint32_t h32;
    uint64_t h64;
} vectors[] = {
    {"", UINT32_C(0x811c9dc5), UINT64_C(0xcbf29ce484222325)},
    {"a", UINT32_C(0xe40c292c), UINT64_C(0xaf63dc4c8601ec8c)},
    {"foobar", UINT32_C(0xbf9cf968), UINT64_C(0x85944171f73967e8)},
    {"backup-db", UINT32_C(0x49a5185c), UINT64_C(0x80b748e25f00c0bc)},
};
#define NVECTORS (sizeof(vectors) / sizeof(vectors[0]))

START_TEST(test_hash_fnv1a_gives_the_published_vectors)
{
    for (size_t i = 0; i < NVECTORS; i++) {
        ck_assert_uint_eq(warren_hash_fnv1a32(vectors[i].s), vectors[i].h32);
        ck_assert_uint_eq(warren_hash_fnv1a64(vectors[i].s), vectors[i].h64);
    }
    ck_assert_uint_eq(warren_hash_fnv1a32(""), WARREN_HASH_FNV32_BASIS);
    ck_assert_uint_eq(warren_hash_fnv1a64(""), WARREN_HASH_FNV64_BASIS);
}
END_TEST

START_TEST(test_hash_update_continues_over_any_bytes)
{
    /* "foo" then "bar" is "foobar"; bytes past a NUL and high bytes count. */
    uint32_t h32 = warren_hash_fnv1a32_update(warren_hash_fnv1a32("foo"), "bar", 3);
    uint64_t h64 = warren_hash_fnv1a64_update(warren_hash_fnv1a64("foo"), "bar", 3);
    ck_assert_uint_eq(h32, UINT32_C(0xbf9cf968));
    ck_assert_uint_eq(h64, UINT64_C(0x85944171f73967e8));
    ck_assert_uint_eq(warren_hash_fnv1a32_update(WARREN_HASH_FNV32_BASIS, "\xff\0x", 3),
                      UINT32_C(0x0b6d7836));
    ck_assert_uint_eq(warren_hash_fnv1a64_update(WARREN_HASH_FNV64_BASIS, "\xff\0x", 3),
                      UINT64_C(0xf920b11be415a916));
    ck_assert_uint_eq(warren_hash_fnv1a32_update(12345u, "", 0), 12345u);
}
END_TEST

START_TEST(test_hash_h_is_fnv1a32_of_name_and_field_byte)
{
    ck_assert_uint_eq(warren_cron_hash("backup-db", 1), UINT32_C(0x4be55a67));
    ck_assert_uint_eq(warren_cron_hash("", 0), UINT32_C(0x050c5d1f));
    for (int kind = 0; kind <= 5; kind++) {
        unsigned char k = (unsigned char)kind;
        ck_assert_uint_eq(warren_cron_hash("report", kind),
                          warren_hash_fnv1a32_update(warren_hash_fnv1a32("report"), &k, 1));
    }
}
END_TEST

START_TEST(test_hash_partition_is_fnv1a32_mod_n)
{
    for (size_t i = 0; i < NVECTORS; i++) {
        ck_assert_int_eq(warren_job_partition(vectors[i].s, 64), (int)(vectors[i].h32 % 64));
        ck_assert_int_eq(warren_job_partition(vectors[i].s, 65536), (int)(vectors[i].h32 % 65536));
    }
    ck_assert_int_eq(warren_job_partition("foobar", 1), 0);
}
END_TEST

START_TEST(test_hash_jitter_is_fnv1a64_mod_whole_seconds)
{
    for (size_t i = 0; i < NVECTORS; i++) {
        ck_assert_int_eq(warren_jitter_offset_s(vectors[i].s, 1000000),
                         (int64_t)(vectors[i].h64 % 1000));
        /* a fraction of a second rounds up to the next whole second */
        ck_assert_int_eq(warren_jitter_offset_s(vectors[i].s, 6500), (int64_t)(vectors[i].h64 % 7));
    }
    ck_assert_int_eq(warren_jitter_offset_s("foobar", 0), 0);
}
END_TEST

static Suite *hash_suite(void)
{
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("fnv1a");
    tcase_add_test(tc, test_hash_fnv1a_gives_the_published_vectors);
    tcase_add_test(tc, test_hash_update_continues_over_any_bytes);
    suite_add_tcase(s, tc);
    tc = tcase_create("persistent_uses");
    tcase_add_test(tc, test_hash_h_is_fnv1a32_of_name_and_field_byte);
    tcase_add_test(tc, test_hash_partition_is_fnv1a32_mod_n);
    tcase_add_test(tc, test_hash_jitter_is_fnv1a64_mod_whole_seconds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(hash_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
