/* worker_exec.c: exec handler processes (docs/design.md §6.3): PATH lookup, the run
 * facts in a scrubbed environment, the payload on stdin, a process group per
 * handler, the tail of its output, and its exit status as an outcome. A
 * handler pool thread starts them (worker_pool.c: the loop thread never waits
 * for a spawn); the worker's loop reads, kills and reaps them. */
/* posix_spawn_file_actions_addclosefrom_np (glibc 2.34+) is a GNU extension. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker_exec.h"

extern char **environ;

char *warren__fmt_error(const char *fmt, ...)
{
    char buf[ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* Finds argv0 on PATH (in the parent: the child only calls async-signal-safe
 * functions, since other threads may hold locks). New string. */
static char *resolve_path(const char *argv0)
{
    const char *path = getenv("PATH");
    if (strchr(argv0, '/') != NULL || path == NULL)
        return strdup(argv0);
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        char *cand = malloc(n + strlen(argv0) + 3);
        if (cand == NULL)
            return NULL;
        if (n == 0)
            snprintf(cand, n + strlen(argv0) + 3, "./%s", argv0);
        else
            snprintf(cand, n + strlen(argv0) + 2, "%.*s/%s", (int)n, path, argv0);
        if (access(cand, X_OK) == 0)
            return cand;
        free(cand);
        if (end == NULL)
            break;
        path = end + 1;
    }
    return strdup(argv0);
}

static int env_skip(const char *e)
{
    static const char *const ours[] = {"WARREN_RUN_KEY=", "WARREN_JOB=", "WARREN_SCHEDULED_AT=",
                                       "WARREN_ATTEMPT=", "WARREN_DUE_AT="};
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
        if (strncmp(e, ours[i], strlen(ours[i])) == 0)
            return 1;
    return 0;
}

/* 1 if e ("NAME=value") is on the allow-list (docs/config.md,
 * worker.exec_env) or named by pass (NULL-terminated, may be NULL; "PFX*"
 * names every variable starting with PFX). The
 * worker's own secrets (WARREN_DATABASE_URL, WARREN_AMQP_URL, PGPASSWORD,
 * ...) are not on it: a handler gets them only where the config names them. */
static int env_pass(const char *e, const char *const *pass)
{
    static const char *const allow[] = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "USER", "LOGNAME"};
    const char *eq = strchr(e, '=');
    size_t n;
    if (eq == NULL)
        return 0;
    n = (size_t)(eq - e);
    if (n > 3 && strncmp(e, "LC_", 3) == 0)
        return 1;
    for (size_t i = 0; i < sizeof(allow) / sizeof(allow[0]); i++)
        if (strlen(allow[i]) == n && strncmp(e, allow[i], n) == 0)
            return 1;
    for (size_t i = 0; pass != NULL && pass[i] != NULL; i++) {
        size_t k = strlen(pass[i]);
        if (k > 1 && pass[i][k - 1] == '*' ? k - 1 <= n && strncmp(e, pass[i], k - 1) == 0
                                           : k == n && strncmp(e, pass[i], n) == 0)
            return 1;
    }
    return 0;
}

void warren__exec_init(warren__exec *x)
{
    memset(x, 0, sizeof(*x));
    x->out_fd = -1;
    x->pidfd = -1;
}

int warren__exec_start(warren__exec *x, char *const *argv, int shell, const warren__exec_run *run,
                       warren_error *err)
{
    char *argv_sh[4];
    char *file = NULL;
    char **envp = NULL;
    size_t nenv = 0, k = 0;
    char sched[WARREN_TIME_BUF], due[WARREN_TIME_BUF];
    char *own[5] = {0};
    FILE *in = NULL;
    int outp[2] = {-1, -1};
    pid_t pid;
    int rc = 0;

    if (shell) {
        argv_sh[0] = "/bin/sh";
        argv_sh[1] = "-c";
        argv_sh[2] = argv[0];
        argv_sh[3] = NULL;
        argv = argv_sh;
    }
    file = resolve_path(argv[0]);
    while (environ[nenv] != NULL)
        nenv++;
    envp = calloc(nenv + 6, sizeof(char *));
    warren_time_format(run->scheduled_at, sched, sizeof(sched));
    warren_time_format_ms(run->due_at, due, sizeof(due));
    own[0] = warren__fmt_error("WARREN_RUN_KEY=%s", run->run_key);
    own[1] = warren__fmt_error("WARREN_JOB=%s", run->job);
    own[2] = warren__fmt_error("WARREN_SCHEDULED_AT=%s", sched);
    own[3] = warren__fmt_error("WARREN_ATTEMPT=%d", run->attempt);
    own[4] = warren__fmt_error("WARREN_DUE_AT=%s", due);
    if (own[0] == NULL || own[1] == NULL || own[2] == NULL || own[3] == NULL || own[4] == NULL ||
        file == NULL || envp == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory starting a handler");
        goto done;
    }
    for (size_t i = 0; i < nenv; i++)
        if (env_pass(environ[i], run->pass_env) && !env_skip(environ[i]))
            envp[k++] = environ[i];
    for (int i = 0; i < 5; i++)
        envp[k++] = own[i];
    envp[k] = NULL;
    /* The payload goes through an unlinked temporary file: no pipe to feed. */
    if ((in = tmpfile()) == NULL || fputs(run->payload ? run->payload : "{}", in) == EOF ||
        fflush(in) != 0 || fseek(in, 0, SEEK_SET) != 0) {
        rc = warren_error_set(err, WARREN_ESYS, "cannot write the payload file: %s",
                              strerror(errno));
        goto done;
    }
    if (pipe(outp) != 0) {
        rc = warren_error_set(err, WARREN_ESYS, "pipe: %s", strerror(errno));
        goto done;
    }
    /* posix_spawn, not fork: glibc starts the child with vfork semantics
     * (CLONE_VM | CLONE_VFORK), so the calling thread (a handler pool
     * thread, worker_pool.c) is held only until the child has exec'd,
     * without copying the worker's page tables first (9.0-9.3 ms a spawn with fork against 3.6-4.4
     * ms, a 10 MB process at load 13: docs/benchmarks.md). In the child, before the exec: its own
     * process group, every signal's default action, no signal blocked, stdin = the payload, stdout
     * and stderr = the pipe, nothing else open. */
    {
        posix_spawnattr_t attr;
        posix_spawn_file_actions_t fa;
        sigset_t none, dfl;
        int src;
        sigemptyset(&none);
        sigemptyset(&dfl);
        for (int sig = 1; sig < 32; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaddset(&dfl, sig);
        if (posix_spawnattr_init(&attr) != 0) {
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory starting a handler");
            goto done;
        }
        if (posix_spawn_file_actions_init(&fa) != 0) {
            posix_spawnattr_destroy(&attr);
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory starting a handler");
            goto done;
        }
        src = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                                  POSIX_SPAWN_SETSIGMASK);
        if (src == 0)
            src = posix_spawnattr_setpgroup(&attr, 0);
        if (src == 0)
            src = posix_spawnattr_setsigdefault(&attr, &dfl);
        if (src == 0)
            src = posix_spawnattr_setsigmask(&attr, &none);
        if (src == 0)
            src = posix_spawn_file_actions_adddup2(&fa, fileno(in), 0);
        if (src == 0)
            src = posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
        if (src == 0)
            src = posix_spawn_file_actions_adddup2(&fa, outp[1], 2);
        if (src == 0)
            src = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        if (src == 0)
            src = posix_spawn(&pid, file, &fa, &attr, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (src == ENOENT || src == EACCES || src == ENOEXEC || src == ENOTDIR || src == ELOOP ||
            src == ENAMETOOLONG || src == ETXTBSY || src == EISDIR) {
            /* The program cannot be executed (rare): a forked child that
             * fails its exec exits 127, as a shell reports a command it
             * cannot run, with the same process group, pipe and outcome as
             * any handler. */
            pid = fork();
            if (pid < 0) {
                rc = warren_error_set(err, WARREN_ESYS, "fork: %s", strerror(errno));
                goto done;
            }
            if (pid == 0) {
                /* Child: async-signal-safe calls only. */
                struct sigaction sa;
                setpgid(0, 0);
                memset(&sa, 0, sizeof(sa));
                sa.sa_handler = SIG_DFL;
                for (int sig = 1; sig < 32; sig++)
                    if (sig != SIGKILL && sig != SIGSTOP)
                        sigaction(sig, &sa, NULL);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (dup2(fileno(in), 0) < 0 || dup2(outp[1], 1) < 0 || dup2(outp[1], 2) < 0)
                    _exit(126);
                closefrom(3);
                execve(file, argv, envp);
                _exit(127);
            }
            src = 0;
        }
        if (src != 0) {
            rc = warren_error_set(err, WARREN_ESYS, "cannot start the handler: %s", strerror(src));
            goto done;
        }
    }
    setpgid(pid, pid); /* also in the parent: no window where a kill misses the group */
    close(outp[1]);
    outp[1] = -1;
    fcntl(outp[0], F_SETFL, fcntl(outp[0], F_GETFL) | O_NONBLOCK);
    fcntl(outp[0], F_SETFD, FD_CLOEXEC);
    x->pid = pid;
    /* Readable once the child exits: the worker's loop waits on it (no
     * periodic waitpid). Not available (a kernel before 5.3): -1, and the
     * loop looks at the child every WARREN__EXEC_POLL_MS instead. */
    x->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (x->pidfd >= 0)
        fcntl(x->pidfd, F_SETFD, FD_CLOEXEC);
    x->out_fd = outp[0];
    outp[0] = -1;
    x->tail_len = 0;
    x->tail[0] = '\0';
done:
    if (in != NULL)
        fclose(in);
    if (outp[0] >= 0)
        close(outp[0]);
    if (outp[1] >= 0)
        close(outp[1]);
    for (int i = 0; i < 5; i++)
        free(own[i]);
    free(envp);
    free(file);
    return rc;
}

size_t warren__exec_read(warren__exec *x)
{
    char buf[64 * 1024];
    size_t got = 0;
    ssize_t n = -1;
    if (x->out_fd < 0)
        return 0;
    /* At most WARREN__EXEC_READ_MAX bytes: a handler that writes without
     * pause must not keep the worker's one loop thread here (no heartbeat,
     * no timeout check for any slot). The rest waits in the pipe for the
     * next turn; the handler blocks on the full pipe meanwhile. */
    while (got < WARREN__EXEC_READ_MAX &&
           (n = read(x->out_fd, buf,
                     WARREN__EXEC_READ_MAX - got < sizeof(buf) ? WARREN__EXEC_READ_MAX - got
                                                               : sizeof(buf))) > 0) {
        size_t m = (size_t)n;
        got += m;
        x->out_total += m;
        if (m >= TAIL_MAX) {
            memcpy(x->tail, buf + m - TAIL_MAX, TAIL_MAX);
            x->tail_len = TAIL_MAX;
        } else {
            if (x->tail_len + m > TAIL_MAX) {
                size_t drop = x->tail_len + m - TAIL_MAX;
                memmove(x->tail, x->tail + drop, x->tail_len - drop);
                x->tail_len -= drop;
            }
            memcpy(x->tail + x->tail_len, buf, m);
            x->tail_len += m;
        }
        x->tail[x->tail_len] = '\0';
    }
    if (n == 0) {
        close(x->out_fd);
        x->out_fd = -1;
    }
    return got;
}

void warren__exec_kill(const warren__exec *x, int sig)
{
    if (x->pid > 0)
        kill(-x->pid, sig);
}

int warren__exec_reap(warren__exec *x, int *status)
{
    pid_t r;
    if (x->pid <= 0) {
        /* no process (never started, or reaped already): waitpid(0) would
         * take any child of the group, and kill(-0) signal the worker's own
         * group */
        *status = 255 << 8;
        return 1;
    }
    r = waitpid(x->pid, status, WNOHANG);
    if (r < 0 && errno == ECHILD) {
        /* Reaped by someone else (SIGCHLD ignored by the embedding program):
         * the exit status is lost; count it as a retryable failure. */
        *status = 255 << 8;
        r = x->pid;
    }
    if (r != x->pid)
        return 0;
    /* What it wrote before it exited, up to the largest pipe an unprivileged
     * process can ask for (1 MiB), then what stragglers added. */
    for (int i = 0; i < 4 && warren__exec_read(x) == WARREN__EXEC_READ_MAX; i++)
        ;
    kill(-x->pid, SIGKILL); /* stragglers left in its process group */
    warren__exec_read(x);
    x->pid = 0;
    if (x->pidfd >= 0)
        close(x->pidfd);
    x->pidfd = -1;
    return 1;
}

const char *warren__exec_tail(warren__exec *x)
{
    char *t = x->tail;
    while (x->tail_len > 0 && (t[x->tail_len - 1] == '\n' || t[x->tail_len - 1] == ' '))
        t[--x->tail_len] = '\0';
    for (size_t i = 0; i < x->tail_len; i++)
        if (t[i] == '\0')
            t[i] = ' ';
    return t;
}

warren_outcome warren__exec_outcome(warren__exec *x, int status, char **error)
{
    warren_outcome outcome;
    *error = NULL;
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        outcome = code == 0                  ? WARREN_OUTCOME_SUCCEEDED
                  : code == 64 || code == 65 ? WARREN_OUTCOME_FAILED
                                             : WARREN_OUTCOME_RETRY;
        if (code != 0)
            *error = warren__fmt_error("exit status %d%s%s%s", code,
                                       code == 127 ? " (command not found?)" : "",
                                       x->tail_len ? ": " : "", warren__exec_tail(x));
    } else {
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        outcome = WARREN_OUTCOME_RETRY;
        *error = warren__fmt_error("killed by signal %d (%s)%s%s", sig, strsignal(sig),
                                   x->tail_len ? ": " : "", warren__exec_tail(x));
    }
    return outcome;
}

void warren__exec_close(warren__exec *x)
{
    if (x->out_fd >= 0)
        close(x->out_fd);
    x->out_fd = -1;
    if (x->pidfd >= 0)
        close(x->pidfd);
    x->pidfd = -1;
}
