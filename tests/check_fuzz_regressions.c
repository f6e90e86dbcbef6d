/* check_fuzz_regressions.c: replays every input under tests/fuzz/regressions/
 * (one directory per harness: codec, cron, tzif) through the libFuzzer harnesses'
 * own entry points, without libFuzzer, on every run of the suite. A crash, an
 * ASan/UBSan report or a harness's abort() on a broken invariant fails the
 * test; so does a harness directory that is missing or empty, or a directory
 * that names no harness. The file list is read at run time. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testenv.h"

/* The harnesses are compiled in as they are, each entry point renamed (all
 * are LLVMFuzzerTestOneInput). */
#define LLVMFuzzerTestOneInput fuzz_codec_one_input
#include "fuzz/fuzz_codec.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_cron_one_input
#include "fuzz/fuzz_cron.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tzif_one_input
#include "fuzz/fuzz_tzif.c"
#undef LLVMFuzzerTestOneInput

#define REGRESSIONS WARREN_SOURCE_DIR "/tests/fuzz/regressions"

typedef int (*fuzz_target)(const uint8_t *data, size_t size);

static const struct {
    const char *dir;
    fuzz_target fn;
} targets[] = {
    {"codec", fuzz_codec_one_input},
    {"cron", fuzz_cron_one_input},
    {"tzif", fuzz_tzif_one_input},
};

static int is_input(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* Replays every file of REGRESSIONS/dir through fn; returns how many. */
static int replay_dir(const char *dir, fuzz_target fn)
{
    char path[4096];
    struct dirent **names = NULL;
    snprintf(path, sizeof path, "%s/%s", REGRESSIONS, dir);
    int n = scandir(path, &names, is_input, alphasort);
    ck_assert_msg(n >= 0, "cannot read %s: every harness keeps its regressions there", path);
    for (int i = 0; i < n; i++) {
        char file[4096 + 256];
        size_t size = 0;
        snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
        uint8_t *data = (uint8_t *)testenv_read_file(file, &size);
        fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", file, size);
        ck_assert_int_eq(fn(data, size), 0);
        free(data);
        free(names[i]);
    }
    free(names);
    return n;
}

START_TEST(test_fuzz_regressions_replay_without_crashing)
{
    int i = _i;
    int n = replay_dir(targets[i].dir, targets[i].fn);
    ck_assert_msg(n > 0, "%s/%s holds no input: the replay would prove nothing", REGRESSIONS,
                  targets[i].dir);
}
END_TEST

/* Every directory under regressions/ is a harness this runner replays: an
 * input filed under a new name would otherwise never run. */
START_TEST(test_fuzz_regressions_directories_name_known_harnesses)
{
    DIR *d = opendir(REGRESSIONS);
    struct dirent *e;
    int dirs = 0;
    ck_assert_msg(d != NULL, "cannot open %s", REGRESSIONS);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int known = 0;
        for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
            known |= strcmp(e->d_name, targets[i].dir) == 0;
        ck_assert_msg(known, "%s/%s is not a harness directory (codec, cron, tzif)", REGRESSIONS,
                      e->d_name);
        dirs++;
    }
    closedir(d);
    ck_assert_int_eq(dirs, (int)(sizeof targets / sizeof targets[0]));
}
END_TEST

static Suite *fuzz_regressions_suite(void)
{
    Suite *s = suite_create("fuzz_regressions");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_fuzz_regressions_replay_without_crashing, 0,
                        (int)(sizeof targets / sizeof targets[0]));
    tcase_add_test(tc, test_fuzz_regressions_directories_name_known_harnesses);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fuzz_regressions_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
