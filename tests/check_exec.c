/* check_exec.c: exec handler processes (src/worker_exec.c) with /bin/sh and no
 * servers: PATH lookup, the environment and stdin a handler gets, its process
 * group, the tail of its output, and exit statuses as outcomes. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testenv.h"
#include "worker_exec.h"

#define SCHEDULED_AT (INT64_C(1796047200) * WARREN_US_PER_S) /* 2026-11-30T14:00:00Z */
#define DUE_AT (SCHEDULED_AT + 250000)                       /* 2026-11-30T14:00:00.250Z */

static const warren__exec_run facts = {
    .run_key = "report@2026-11-30T14:00:00Z",
    .job = "report",
    .scheduled_at = SCHEDULED_AT,
    .attempt = 3,
    .due_at = DUE_AT,
    .payload = "{\"kind\":\"usage\",\"n\":1}",
};

/* Waits up to ms for output (or the pipe's end), then reads it. */
static void read_some(warren__exec *x, int ms)
{
    if (x->out_fd >= 0) {
        struct pollfd p = {x->out_fd, POLLIN, 0};
        poll(&p, 1, ms);
    } else {
        poll(NULL, 0, ms < 5 ? ms : 5);
    }
    warren__exec_read(x);
}

/* Reads and reaps until the handler exits (1, *status set) or ms pass (0). */
static int wait_exit(warren__exec *x, int64_t ms, int *status)
{
    int64_t until = testenv_mono_ms() + ms;
    do {
        read_some(x, 10);
        if (warren__exec_reap(x, status))
            return 1;
    } while (testenv_mono_ms() < until);
    return 0;
}

/* Reads until the output pipe reaches its end, i.e. no process holds its
 * write end any more (1), or ms pass (0). */
static int wait_eof(warren__exec *x, int64_t ms)
{
    int64_t until = testenv_mono_ms() + ms;
    while (x->out_fd >= 0 && testenv_mono_ms() < until)
        read_some(x, 10);
    return x->out_fd < 0;
}

/* Starts argv (shell: argv[0] through /bin/sh -c) with facts; fails the test
 * if it cannot. */
static void start(warren__exec *x, const char *const *argv, int shell, const warren__exec_run *run)
{
    warren_error e = {0};
    warren__exec_init(x);
    int rc = warren__exec_start(x, (char *const *)argv, shell, run, &e);
    ck_assert_msg(rc == 0, "warren__exec_start: %s", e.message);
    ck_assert_int_gt(x->pid, 0);
    ck_assert_int_ge(x->out_fd, 0);
}

/* Runs a /bin/sh -c script to its end: its outcome, error (new) and wait status. */
static warren_outcome run_sh(warren__exec *x, const char *script, const warren__exec_run *run,
                             char **error, int *status)
{
    const char *argv[] = {script, NULL};
    int st = 0;
    start(x, argv, 1, run);
    ck_assert_msg(wait_exit(x, 60000, &st), "the handler did not exit: %s", script);
    ck_assert_int_eq(x->pid, 0);
    if (status != NULL)
        *status = st;
    return warren__exec_outcome(x, st, error);
}

/* The whole output of a /bin/sh -c script that exits 0 (borrowed from x). */
static const char *output_of(warren__exec *x, const char *script, const warren__exec_run *run)
{
    char *error = NULL;
    warren_outcome o = run_sh(x, script, run, &error, NULL);
    ck_assert_msg(o == WARREN_OUTCOME_SUCCEEDED, "%s: %s", script, error ? error : "");
    ck_assert_ptr_null(error);
    ck_assert(wait_eof(x, 10000));
    return x->tail;
}

static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Check forks each test, but keep PATH for a runner started with CK_FORK=no. */
static char *saved_path;

static void save_path(void)
{
    const char *p = getenv("PATH");
    saved_path = p ? strdup(p) : NULL;
}

static void restore_path(void)
{
    if (saved_path != NULL)
        setenv("PATH", saved_path, 1);
    else
        unsetenv("PATH");
    free(saved_path);
    saved_path = NULL;
}

/* ------------------------------------------------------------ PATH lookup */

/* Reaping an exec with no process (never started, or reaped already) ends
 * at once as a lost status, and touches no other process: waitpid(0) would
 * take any child of the group and kill(-0) signal the caller's own group. */
START_TEST(test_exec_reap_without_a_process_touches_no_other_process)
{
    warren__exec x;
    int status = 0;
    pid_t other = fork();
    ck_assert_int_ge(other, 0);
    if (other == 0) {
        sleep(30);
        _exit(0);
    }
    warren__exec_init(&x);
    ck_assert_int_eq(warren__exec_reap(&x, &status), 1);
    ck_assert_int_eq(status, 255 << 8);
    ck_assert_int_eq(waitpid(other, &status, WNOHANG), 0); /* still running, not reaped */
    kill(other, SIGKILL);
    ck_assert_int_eq(waitpid(other, &status, 0), other);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}
END_TEST

START_TEST(test_exec_finds_a_command_on_path_skipping_files_not_executable)
{
    char *d1 = testenv_tmpdir("check_exec"), *d2 = testenv_tmpdir("check_exec");
    char *f1 = path_in(d1, "warren-check-tool"), *f2 = path_in(d2, "warren-check-tool");
    testenv_write_file(f1, "#!/bin/sh\necho \"wrong one: $0\"\n", 0644); /* not executable */
    testenv_write_file(f2, "#!/bin/sh\necho \"$0\"\n", 0755);
    char *path = malloc(strlen(d1) + strlen(d2) + 32);
    ck_assert_ptr_nonnull(path);
    sprintf(path, "%s:%s:/usr/bin:/bin", d1, d2);
    ck_assert_int_eq(setenv("PATH", path, 1), 0);

    const char *argv[] = {"warren-check-tool", NULL};
    warren__exec x;
    int st = 0;
    start(&x, argv, 0, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the script ran as the file found second on PATH */
    ck_assert_str_eq(warren__exec_tail(&x), f2);
    warren__exec_close(&x);

    unlink(f1);
    unlink(f2);
    rmdir(d1);
    rmdir(d2);
    free(f1);
    free(f2);
    free(d1);
    free(d2);
    free(path);
}
END_TEST

START_TEST(test_exec_reports_a_command_not_on_path_as_exit_127_retry)
{
    const char *argv[] = {"warren-check-no-such-command", NULL};
    warren__exec x;
    char *error = NULL;
    int st = 0;
    start(&x, argv, 0, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 127);
    ck_assert_int_eq(warren__exec_outcome(&x, st, &error), WARREN_OUTCOME_RETRY);
    ck_assert_str_eq(error, "exit status 127 (command not found?)");
    free(error);
    warren__exec_close(&x);
}
END_TEST

START_TEST(test_exec_runs_a_relative_command_with_a_slash_from_the_working_directory)
{
    char *d = testenv_tmpdir("check_exec");
    char *sub = path_in(d, "bin");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    char *f = path_in(sub, "tool.sh");
    testenv_write_file(f, "#!/bin/sh\necho \"$0 in $(pwd -P)\"\n", 0755);
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    ck_assert_int_eq(chdir(d), 0);
    /* not looked up on PATH: a name with a '/' is used as it is */
    ck_assert_int_eq(setenv("PATH", "/usr/bin:/bin", 1), 0);

    const char *argv[] = {"bin/tool.sh", NULL};
    warren__exec x;
    int st = 0;
    start(&x, argv, 0, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *real = realpath(d, NULL);
    ck_assert_ptr_nonnull(real);
    char *want = malloc(strlen(real) + 32);
    ck_assert_ptr_nonnull(want);
    sprintf(want, "bin/tool.sh in %s", real);
    free(real);
    ck_assert_str_eq(warren__exec_tail(&x), want);
    warren__exec_close(&x);

    ck_assert_int_eq(chdir(cwd), 0);
    unlink(f);
    rmdir(sub);
    rmdir(d);
    free(want);
    free(f);
    free(sub);
    free(d);
}
END_TEST

/* A name without '/' that is not found on PATH is given to execve as it is,
 * which then finds it in the working directory (unlike a shell's lookup). */
START_TEST(test_exec_runs_a_name_not_on_path_from_the_working_directory)
{
    char *d = testenv_tmpdir("check_exec");
    char *f = path_in(d, "warren-check-here");
    testenv_write_file(f, "#!/bin/sh\necho \"$0\"\n", 0755);
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    ck_assert_int_eq(chdir(d), 0);
    const char *argv[] = {"warren-check-here", NULL};
    warren__exec x;
    int st = 0;

    ck_assert_int_eq(setenv("PATH", "/usr/bin:/bin", 1), 0);
    start(&x, argv, 0, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_str_eq(warren__exec_tail(&x), "warren-check-here");
    warren__exec_close(&x);

    /* an empty PATH entry is the working directory, found on the way */
    ck_assert_int_eq(setenv("PATH", ":/usr/bin:/bin", 1), 0);
    start(&x, argv, 0, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_str_eq(warren__exec_tail(&x), "./warren-check-here");
    warren__exec_close(&x);

    ck_assert_int_eq(chdir(cwd), 0);
    unlink(f);
    rmdir(d);
    free(f);
    free(d);
}
END_TEST

START_TEST(test_exec_shell_runs_the_command_with_bin_sh_c)
{
    warren__exec x;
    ck_assert_str_eq(output_of(&x, "echo \"$0\" \"$#\"; printf '%s\\n' a b | wc -l", &facts),
                     "/bin/sh 0\n2\n");
    warren__exec_close(&x);
}
END_TEST

START_TEST(test_exec_passes_argv_as_given_without_a_shell)
{
    const char *argv[] = {"/bin/sh", "-c", "printf '[%s]' \"$@\"", "zero", "a b", "$HOME",
                          "*",       NULL};
    warren__exec x;
    int st = 0;
    start(&x, argv, 0, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_str_eq(x.tail, "[a b][$HOME][*]");
    warren__exec_close(&x);
}
END_TEST

/* ------------------------------------------------------------ environment and stdin */

START_TEST(test_exec_gives_the_run_facts_in_the_environment)
{
    warren__exec x;
    ck_assert_str_eq(output_of(&x,
                               "printf '%s|%s|%s|%s|%s' \"$WARREN_RUN_KEY\" \"$WARREN_JOB\" "
                               "\"$WARREN_SCHEDULED_AT\" \"$WARREN_ATTEMPT\" \"$WARREN_DUE_AT\"",
                               &facts),
                     "report@2026-11-30T14:00:00Z|report|2026-11-30T14:00:00Z|3|"
                     "2026-11-30T14:00:00.250Z");
    warren__exec_close(&x);
}
END_TEST

/* The handler gets a scrubbed environment: the allow-list (PATH, HOME, LANG,
 * LC_*, TZ, TMPDIR, USER, LOGNAME) and the run facts, which replace inherited
 * variables of their names. The worker's database and broker URLs,
 * PGPASSWORD and anything else stay out unless named. */
START_TEST(test_exec_scrubs_the_environment_to_the_allow_list_and_the_run_facts)
{
    ck_assert_int_eq(setenv("CHECK_EXEC_FOO", "foo", 1), 0);
    ck_assert_int_eq(setenv("WARREN_DATABASE_URL", "postgresql://u:secret@db/warren", 1), 0);
    ck_assert_int_eq(setenv("WARREN_AMQP_URL", "amqp://u:secret@mq:5672/%2f", 1), 0);
    ck_assert_int_eq(setenv("PGPASSWORD", "secret", 1), 0);
    ck_assert_int_eq(setenv("HOME", "/home/check", 1), 0);
    ck_assert_int_eq(setenv("LANG", "C.UTF-8", 1), 0);
    ck_assert_int_eq(setenv("LC_TIME", "C", 1), 0);
    ck_assert_int_eq(setenv("TZ", "UTC", 1), 0);
    ck_assert_int_eq(setenv("TMPDIR", "/tmp", 1), 0);
    ck_assert_int_eq(setenv("USER", "check", 1), 0);
    ck_assert_int_eq(setenv("LOGNAME", "check", 1), 0);
    ck_assert_int_eq(setenv("WARREN_RUN_KEY", "stale@2000-01-01T00:00:00Z", 1), 0);
    ck_assert_int_eq(setenv("WARREN_JOB", "stale", 1), 0);
    ck_assert_int_eq(setenv("WARREN_ATTEMPT", "99", 1), 0);
    warren__exec x;
    /* env itself is run by PATH: PATH came through */
    ck_assert_str_eq(output_of(&x,
                               "env | grep -E '^(CHECK_EXEC_FOO|WARREN_DATABASE_URL|"
                               "WARREN_AMQP_URL|PGPASSWORD)=' | LC_ALL=C sort; "
                               "printf '%s|%s|%s|%s|%s|%s|%s|' \"$HOME\" \"$LANG\" \"$LC_TIME\" "
                               "\"$TZ\" \"$TMPDIR\" \"$USER\" \"$LOGNAME\"; "
                               "env | grep -cE "
                               "'^WARREN_(RUN_KEY|JOB|SCHEDULED_AT|ATTEMPT|DUE_AT)='; "
                               "echo \"$WARREN_RUN_KEY $WARREN_JOB $WARREN_ATTEMPT\"",
                               &facts),
                     "/home/check|C.UTF-8|C|UTC|/tmp|check|check|5\n"
                     "report@2026-11-30T14:00:00Z report 3\n");
    warren__exec_close(&x);
}
END_TEST

/* worker.exec_env names variables a handler also gets: those, and only those
 * (a named one that is not set stays unset); "PFX*" names a prefix. */
START_TEST(test_exec_passes_the_variables_the_config_names)
{
    static const char *const names[] = {"CHECK_EXEC_FOO", "WARREN_DATABASE_URL", "CHECK_EXEC_UNSET",
                                        "CHECK_PFX_*", NULL};
    warren__exec_run run = facts;
    run.pass_env = names;
    ck_assert_int_eq(setenv("CHECK_EXEC_FOO", "foo", 1), 0);
    ck_assert_int_eq(setenv("CHECK_EXEC_FOOBAR", "not named", 1), 0);
    ck_assert_int_eq(setenv("WARREN_DATABASE_URL", "postgresql://named/db", 1), 0);
    ck_assert_int_eq(setenv("PGPASSWORD", "secret", 1), 0);
    ck_assert_int_eq(unsetenv("CHECK_EXEC_UNSET"), 0);
    ck_assert_int_eq(setenv("CHECK_PFX_1", "one", 1), 0);
    ck_assert_int_eq(setenv("CHECK_PFX_", "empty rest", 1), 0);
    ck_assert_int_eq(setenv("CHECK_PF", "shorter", 1), 0);
    warren__exec x;
    ck_assert_str_eq(output_of(&x,
                               "env | grep -E '^(CHECK_|WARREN_DATABASE_URL|PGPASSWORD)' | "
                               "LC_ALL=C sort",
                               &run),
                     "CHECK_EXEC_FOO=foo\nCHECK_PFX_1=one\nCHECK_PFX_=empty rest\n"
                     "WARREN_DATABASE_URL=postgresql://named/db\n");
    warren__exec_close(&x);
}
END_TEST

START_TEST(test_exec_gives_the_payload_on_stdin)
{
    warren__exec x;
    ck_assert_str_eq(output_of(&x, "cat", &facts), "{\"kind\":\"usage\",\"n\":1}");
    warren__exec_close(&x);
}
END_TEST

START_TEST(test_exec_gives_an_empty_object_without_a_payload)
{
    warren__exec_run run = facts;
    run.payload = NULL;
    warren__exec x;
    ck_assert_str_eq(output_of(&x, "cat", &run), "{}");
    warren__exec_close(&x);
}
END_TEST

/* The payload is a file on stdin, not a pipe: a handler that never reads it,
 * or reads it after writing, does not block the worker. */
START_TEST(test_exec_gives_a_large_payload_whole_to_a_handler_that_reads_it_late)
{
    size_t n = 300000;
    char *big = malloc(n + 3);
    ck_assert_ptr_nonnull(big);
    big[0] = '"';
    memset(big + 1, 'x', n);
    big[n + 1] = '"';
    big[n + 2] = '\0';
    warren__exec_run run = facts;
    run.payload = big;
    warren__exec x;
    ck_assert_str_eq(output_of(&x, "echo first; wc -c | tr -d ' '", &run), "first\n300002\n");
    warren__exec_close(&x);
    free(big);
}
END_TEST

/* ------------------------------------------------------------ process group */

START_TEST(test_exec_runs_the_handler_in_a_process_group_of_its_own)
{
    const char *argv[] = {"exec sleep 30", NULL};
    warren__exec x;
    int st = 0;
    start(&x, argv, 1, &facts);
    ck_assert_int_eq(getpgid(x.pid), x.pid);
    ck_assert_int_ne(getpgid(x.pid), getpgrp());
    warren__exec_kill(&x, SIGKILL);
    ck_assert(wait_exit(&x, 30000, &st));
    warren__exec_close(&x);
}
END_TEST

/* What a timeout does (warren__slot_stop: SIGTERM to the group): a handler
 * that started a grandchild is stopped with it, so no process keeps its
 * output pipe open. */
START_TEST(test_exec_kill_stops_the_whole_process_group)
{
    const char *argv[] = {"sleep 60 & echo started; wait", NULL};
    warren__exec x;
    char *error = NULL;
    int st = 0;
    start(&x, argv, 1, &facts);
    int64_t until = testenv_mono_ms() + 30000;
    while (strstr(x.tail, "started\n") == NULL && testenv_mono_ms() < until)
        read_some(&x, 10);
    ck_assert_str_eq(x.tail, "started\n");
    warren__exec_kill(&x, SIGTERM);
    /* the end of the pipe: the shell and its grandchild are both gone,
     * before warren__exec_reap kills what is left of the group */
    ck_assert(wait_eof(&x, 30000));
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFSIGNALED(st));
    ck_assert_int_eq(WTERMSIG(st), SIGTERM);
    ck_assert_int_eq(warren__exec_outcome(&x, st, &error), WARREN_OUTCOME_RETRY);
    ck_assert_str_eq(error, "killed by signal 15 (Terminated): started");
    free(error);
    warren__exec_close(&x);
}
END_TEST

/* SIGKILL (sent after the kill grace) stops a group that ignores SIGTERM. */
START_TEST(test_exec_sigkill_stops_a_group_that_ignores_sigterm)
{
    const char *argv[] = {"trap '' TERM; sleep 60 & echo started; wait", NULL};
    warren__exec x;
    int st = 0;
    start(&x, argv, 1, &facts);
    int64_t until = testenv_mono_ms() + 30000;
    while (strstr(x.tail, "started\n") == NULL && testenv_mono_ms() < until)
        read_some(&x, 10);
    ck_assert_str_eq(x.tail, "started\n");
    warren__exec_kill(&x, SIGTERM);
    ck_assert(!wait_exit(&x, 300, &st)); /* ignored: still running */
    warren__exec_kill(&x, SIGKILL);
    ck_assert(wait_eof(&x, 30000));
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFSIGNALED(st));
    ck_assert_int_eq(WTERMSIG(st), SIGKILL);
    warren__exec_close(&x);
}
END_TEST

/* A handler that exits and leaves a background process behind: once it is
 * reaped, what is left of its group is killed. */
START_TEST(test_exec_reap_kills_what_the_handler_left_in_its_group)
{
    const char *argv[] = {"sleep 60 & echo left", NULL};
    warren__exec x;
    char *error = NULL;
    int st = 0;
    start(&x, argv, 1, &facts);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert(wait_eof(&x, 30000)); /* the sleep held the pipe until it was killed */
    ck_assert_int_eq(warren__exec_outcome(&x, st, &error), WARREN_OUTCOME_SUCCEEDED);
    ck_assert_ptr_null(error);
    ck_assert_str_eq(x.tail, "left\n");
    warren__exec_close(&x);
}
END_TEST

/* ------------------------------------------------------------ output tail */

START_TEST(test_exec_keeps_short_output_whole_from_stdout_and_stderr)
{
    warren__exec x;
    ck_assert_str_eq(output_of(&x, "echo out; echo err >&2; echo out2", &facts),
                     "out\nerr\nout2\n");
    ck_assert_uint_eq(x.tail_len, strlen("out\nerr\nout2\n"));
    warren__exec_close(&x);
}
END_TEST

START_TEST(test_exec_keeps_only_the_last_1500_bytes_of_output)
{
    warren__exec x;
    /* 5269 bytes in writes of several sizes, the last line on stderr: the
     * tail keeps 231 a, 300 0, 960 b and the last two lines */
    const char *t = output_of(&x,
                              "head -c 4000 /dev/zero | tr '\\0' a; printf '%0300d' 0; "
                              "head -c 960 /dev/zero | tr '\\0' b; echo; echo the-end >&2",
                              &facts);
    ck_assert_uint_eq(x.tail_len, TAIL_MAX);
    ck_assert_uint_eq(strlen(t), TAIL_MAX);
    char want[TAIL_MAX + 1];
    memset(want, 'a', 231);
    memset(want + 231, '0', 300);
    memset(want + 531, 'b', 960);
    memcpy(want + 1491, "\nthe-end\n", 9);
    want[TAIL_MAX] = '\0';
    ck_assert_str_eq(t, want);
    warren__exec_close(&x);
}
END_TEST

START_TEST(test_exec_tail_text_is_trimmed_with_nul_bytes_as_spaces)
{
    warren__exec x;
    char *error = NULL;
    warren_outcome o =
        run_sh(&x, "printf 'one\\ntwo\\000three \\n\\n  \\n'; exit 3", &facts, &error, NULL);
    ck_assert_int_eq(o, WARREN_OUTCOME_RETRY);
    ck_assert_str_eq(error, "exit status 3: one\ntwo three");
    free(error);
    warren__exec_close(&x);
}
END_TEST

/* A handler writing a lot: it is not blocked on a full pipe, the tail stays
 * capped, and the output after its exit is read to the end. */
START_TEST(test_exec_reads_5_mb_of_output_keeping_the_tail)
{
    warren__exec x;
    const char *t = output_of(&x, "yes | head -c 5000000", &facts);
    ck_assert_uint_eq(x.tail_len, TAIL_MAX);
    for (size_t i = 0; i < TAIL_MAX; i++)
        ck_assert_int_eq(t[i], i % 2 == 0 ? 'y' : '\n');
    warren__exec_close(&x);
}
END_TEST

/* One read call does not wait for the handler: it takes what the pipe holds
 * (at most its capacity while the writer is stopped) and returns. (It drains
 * the pipe: against a writer that keeps it full, one call reads for as long
 * as the writer keeps up.) */
START_TEST(test_exec_one_read_returns_with_what_the_pipe_holds)
{
    const char *argv[] = {"yes", NULL};
    warren__exec x;
    int st = 0;
    start(&x, argv, 0, &facts);
    struct pollfd p = {x.out_fd, POLLIN, 0};
    ck_assert_int_eq(poll(&p, 1, 30000), 1);
    warren__exec_kill(&x, SIGSTOP);
    int64_t t0 = testenv_mono_ms();
    warren__exec_read(&x);
    int64_t took = testenv_mono_ms() - t0;
    ck_assert_int_ge(x.out_fd, 0); /* the writer lives: no end of file */
    ck_assert_uint_gt(x.tail_len, 0);
    ck_assert_msg(took < 5000, "one read call took %lld ms", (long long)took);
    /* an empty pipe: returns at once */
    t0 = testenv_mono_ms();
    warren__exec_read(&x);
    ck_assert_int_ge(x.out_fd, 0);
    ck_assert_msg(testenv_mono_ms() - t0 < 5000, "a read of an empty pipe took %lld ms",
                  (long long)(testenv_mono_ms() - t0));
    warren__exec_kill(&x, SIGKILL);
    warren__exec_kill(&x, SIGCONT);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    warren__exec_close(&x);
}
END_TEST

/* One read call is bounded (WARREN__EXEC_READ_MAX bytes) even against
 * writers that keep the pipe full: the worker's loop serves every slot, its
 * heartbeats and its timeouts between two reads of a chatty handler. Four
 * writers on a full pipe, 200 calls: none reads more than the bound, none
 * takes long, and each makes progress. */
START_TEST(test_exec_one_read_is_bounded_against_writers_that_never_pause)
{
    const char *argv[] = {"cat /dev/zero & cat /dev/zero & cat /dev/zero & cat /dev/zero & wait",
                          NULL};
    warren__exec x;
    int st = 0;
    unsigned long long most = 0;
    int64_t slowest = 0;
    start(&x, argv, 1, &facts);
    for (int i = 0; i < 200; i++) {
        struct pollfd p = {x.out_fd, POLLIN, 0};
        ck_assert_int_eq(poll(&p, 1, 30000), 1);
        unsigned long long before = x.out_total;
        int64_t t0 = testenv_mono_ms();
        warren__exec_read(&x);
        int64_t took = testenv_mono_ms() - t0;
        ck_assert_int_ge(x.out_fd, 0);
        ck_assert_uint_gt(x.out_total, before);
        if (x.out_total - before > most)
            most = x.out_total - before;
        if (took > slowest)
            slowest = took;
    }
    ck_assert_msg(most <= WARREN__EXEC_READ_MAX, "one read call took %llu bytes (bound %d)", most,
                  WARREN__EXEC_READ_MAX);
    ck_assert_msg(slowest < 1000, "one read call took %lld ms", (long long)slowest);
    warren__exec_kill(&x, SIGKILL);
    ck_assert(wait_exit(&x, 30000, &st));
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    warren__exec_close(&x);
}
END_TEST

/* ------------------------------------------------------------ outcomes */

static const struct {
    const char *script;
    warren_outcome outcome;
    const char *error; /* NULL: none */
} exits[] = {
    {"exit 0", WARREN_OUTCOME_SUCCEEDED, NULL},
    {"echo fine; exit 0", WARREN_OUTCOME_SUCCEEDED, NULL},
    {"exit 75", WARREN_OUTCOME_RETRY, "exit status 75"},
    {"exit 64", WARREN_OUTCOME_FAILED, "exit status 64"},
    {"echo bad input >&2; exit 65", WARREN_OUTCOME_FAILED, "exit status 65: bad input"},
    {"exit 1", WARREN_OUTCOME_RETRY, "exit status 1"},
    {"exit 66", WARREN_OUTCOME_RETRY, "exit status 66"},
    {"echo boom; exit 3", WARREN_OUTCOME_RETRY, "exit status 3: boom"},
    {"exit 127", WARREN_OUTCOME_RETRY, "exit status 127 (command not found?)"},
    {"exit 255", WARREN_OUTCOME_RETRY, "exit status 255"},
    {"kill -KILL $$", WARREN_OUTCOME_RETRY, "killed by signal 9 (Killed)"},
    {"echo dying; kill -TERM $$", WARREN_OUTCOME_RETRY, "killed by signal 15 (Terminated): dying"},
};

START_TEST(test_exec_maps_exit_statuses_to_outcomes)
{
    warren__exec x;
    char *error = NULL;
    warren_outcome o = run_sh(&x, exits[_i].script, &facts, &error, NULL);
    ck_assert_msg(o == exits[_i].outcome, "%s: outcome %d, not %d", exits[_i].script, (int)o,
                  (int)exits[_i].outcome);
    if (exits[_i].error == NULL)
        ck_assert_ptr_null(error);
    else
        ck_assert_str_eq(error, exits[_i].error);
    free(error);
    warren__exec_close(&x);
}
END_TEST

/* An embedding program that ignores SIGCHLD reaps its children itself: the
 * exit status is lost and counts as 255, a retry. */
START_TEST(test_exec_counts_a_handler_reaped_elsewhere_as_exit_255)
{
    struct sigaction ign, old;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    ck_assert_int_eq(sigaction(SIGCHLD, &ign, &old), 0);
    warren__exec x;
    char *error = NULL;
    int st = 0;
    warren_outcome o = run_sh(&x, "exit 0", &facts, &error, &st);
    ck_assert_int_eq(o, WARREN_OUTCOME_RETRY);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 255);
    ck_assert_str_eq(error, "exit status 255");
    free(error);
    warren__exec_close(&x);
    sigaction(SIGCHLD, &old, NULL);
}
END_TEST

START_TEST(test_exec_error_text_is_capped)
{
    char *long_text = malloc(3 * ERROR_MAX);
    ck_assert_ptr_nonnull(long_text);
    memset(long_text, 'e', 3 * ERROR_MAX - 1);
    long_text[3 * ERROR_MAX - 1] = '\0';
    char *e = warren__fmt_error("%s", long_text);
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(strlen(e), ERROR_MAX - 1);
    free(e);
    free(long_text);
}
END_TEST

static Suite *exec_suite(void)
{
    Suite *s = suite_create("exec");
    TCase *tc;

    tc = tcase_create("path");
    tcase_add_checked_fixture(tc, save_path, restore_path);
    tcase_add_test(tc, test_exec_finds_a_command_on_path_skipping_files_not_executable);
    tcase_add_test(tc, test_exec_reap_without_a_process_touches_no_other_process);
    tcase_add_test(tc, test_exec_reports_a_command_not_on_path_as_exit_127_retry);
    tcase_add_test(tc, test_exec_runs_a_relative_command_with_a_slash_from_the_working_directory);
    tcase_add_test(tc, test_exec_runs_a_name_not_on_path_from_the_working_directory);
    tcase_add_test(tc, test_exec_shell_runs_the_command_with_bin_sh_c);
    tcase_add_test(tc, test_exec_passes_argv_as_given_without_a_shell);
    suite_add_tcase(s, tc);

    tc = tcase_create("environment");
    tcase_add_test(tc, test_exec_gives_the_run_facts_in_the_environment);
    tcase_add_test(tc, test_exec_scrubs_the_environment_to_the_allow_list_and_the_run_facts);
    tcase_add_test(tc, test_exec_passes_the_variables_the_config_names);
    tcase_add_test(tc, test_exec_gives_the_payload_on_stdin);
    tcase_add_test(tc, test_exec_gives_an_empty_object_without_a_payload);
    tcase_add_test(tc, test_exec_gives_a_large_payload_whole_to_a_handler_that_reads_it_late);
    suite_add_tcase(s, tc);

    tc = tcase_create("process_group");
    tcase_add_test(tc, test_exec_runs_the_handler_in_a_process_group_of_its_own);
    tcase_add_test(tc, test_exec_kill_stops_the_whole_process_group);
    tcase_add_test(tc, test_exec_sigkill_stops_a_group_that_ignores_sigterm);
    tcase_add_test(tc, test_exec_reap_kills_what_the_handler_left_in_its_group);
    suite_add_tcase(s, tc);

    tc = tcase_create("output");
    tcase_add_test(tc, test_exec_keeps_short_output_whole_from_stdout_and_stderr);
    tcase_add_test(tc, test_exec_keeps_only_the_last_1500_bytes_of_output);
    tcase_add_test(tc, test_exec_tail_text_is_trimmed_with_nul_bytes_as_spaces);
    tcase_add_test(tc, test_exec_reads_5_mb_of_output_keeping_the_tail);
    tcase_add_test(tc, test_exec_one_read_returns_with_what_the_pipe_holds);
    tcase_add_test(tc, test_exec_one_read_is_bounded_against_writers_that_never_pause);
    suite_add_tcase(s, tc);

    tc = tcase_create("outcome");
    tcase_add_loop_test(tc, test_exec_maps_exit_statuses_to_outcomes, 0,
                        (int)(sizeof(exits) / sizeof(exits[0])));
    tcase_add_test(tc, test_exec_counts_a_handler_reaped_elsewhere_as_exit_255);
    tcase_add_test(tc, test_exec_error_text_is_capped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(exec_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
