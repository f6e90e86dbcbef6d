/* worker_exec.h: exec handler processes (docs/design.md §6.3), the worker's internal API
 * for them: start a command in its own process group with the payload on
 * stdin and the run facts in the environment, keep the tail of its output,
 * reap it and map its exit to an outcome. Needs no server (tests/check_exec.c). */
#ifndef WARREN_WORKER_EXEC_H
#define WARREN_WORKER_EXEC_H

#include <stddef.h>
#include <sys/types.h>

#include <warren/error.h>
#include <warren/timefmt.h>
#include <warren/worker.h>

#define ERROR_MAX 2000 /* bytes of handler error text kept */
#define TAIL_MAX 1500  /* bytes of exec output kept for the error */
/* Bytes of a handler's output one warren__exec_read takes at most (the
 * worker's loop reads each slot once per turn). */
#define WARREN__EXEC_READ_MAX (256 * 1024)

/* One exec handler process. Caller-allocated: warren__exec_init, then
 * warren__exec_start. */
typedef struct warren__exec {
    pid_t pid;  /* the child, also its process group; 0: none */
    int out_fd; /* read end of its stdout and stderr (non-blocking); -1: closed */
    int pidfd;  /* readable when the child exits (pidfd_open); -1: none */
    char tail[TAIL_MAX + 1];
    size_t tail_len;
    unsigned long long out_total; /* bytes of output read so far */
} warren__exec;

/* The run an exec handler works on (all borrowed for the call). */
typedef struct warren__exec_run {
    const char *run_key;
    const char *job;
    warren_us scheduled_at;
    int attempt;
    warren_us due_at;    /* the due time the message was released for */
    const char *payload; /* given on stdin; NULL: {} */
    /* Names of variables of this process the handler also gets (worker.exec_env;
     * "PFX*": every name starting with PFX; NULL-terminated; NULL: none). */
    const char *const *pass_env;
} warren__exec_run;

/* How often the worker's loop looks at a child it has no pidfd for (ms). */
#define WARREN__EXEC_POLL_MS 20

/* No process, no pipe. */
void warren__exec_init(warren__exec *x);
/* Starts argv (argv[0] looked up on PATH unless it contains a '/'; with shell
 * set, argv[0] is run by /bin/sh -c) in a process group of its own, with the
 * payload on stdin, stdout and stderr into one pipe, and a scrubbed
 * environment: of this process's variables only PATH, HOME, LANG, LC_*, TZ,
 * TMPDIR, USER, LOGNAME and those run->pass_env names, plus WARREN_RUN_KEY,
 * WARREN_JOB, WARREN_SCHEDULED_AT, WARREN_ATTEMPT and WARREN_DUE_AT
 * (inherited variables of those names are replaced). A command that cannot
 * be executed exits 127. Returns 0, WARREN_ENOMEM or WARREN_ESYS (x
 * unchanged). */
int warren__exec_start(warren__exec *x, char *const *argv, int shell, const warren__exec_run *run,
                       warren_error *err);
/* Reads what the handler wrote so far, at most WARREN__EXEC_READ_MAX bytes
 * (the rest stays in the pipe for the next call), into the tail (the last
 * TAIL_MAX bytes are kept); closes out_fd at end of file. Does not block.
 * Returns how many bytes it read. */
size_t warren__exec_read(warren__exec *x);
/* Sends sig to the handler's process group. */
void warren__exec_kill(const warren__exec *x, int sig);
/* 1 once the handler exited (its wait status in *status), else 0. Once it
 * exited, the rest of its output is read (up to 1 MiB), what is left in its process group
 * is killed (SIGKILL) and pid becomes 0. A child reaped by someone else
 * (SIGCHLD ignored) counts as exit status 255. Does not block. */
int warren__exec_reap(warren__exec *x, int *status);
/* The last line(s) of the handler's output, trimmed of trailing newlines and
 * spaces, NUL bytes made spaces (in place), for error texts. Borrowed from x. */
const char *warren__exec_tail(warren__exec *x);
/* The outcome of a handler that exited with wait status status: exit 0
 * succeeded, 64 and 65 failed, any other exit or a signal retry. *error gets
 * the error text (exit status or signal, then the tail; new), NULL on
 * success. */
warren_outcome warren__exec_outcome(warren__exec *x, int status, char **error);
/* Closes the output pipe. A process still running is left alone: kill and
 * reap it first. */
void warren__exec_close(warren__exec *x);

/* A handler's error text, formatted (at most ERROR_MAX bytes; new, NULL when
 * out of memory). */
char *warren__fmt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
