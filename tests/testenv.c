/* testenv: fresh databases and vhosts on the servers of tests/servers.sh.
 * Test code, so it may use libpq and rabbitmq-c directly; see testenv.h. */
#include "internal.h"
#include "testenv.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <libpq-fe.h>

#include <warren/broker.h>
#include <warren/store.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MGMT_DEFAULT_PORT "55673"
#define HTTP_TIMEOUT_S 30
#define HTTP_MAX_RESPONSE (64u << 20)

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Fails the test: in a Check child this is "early exit with return value 1",
 * in a plain program the program's failure. */
static void fail(const char *fmt, ...)
{
    va_list ap;
    fputs("testenv: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    exit(EXIT_FAILURE);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        fail("out of memory");
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

char *testenv_vfmt(const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0)
        fail("bad format");
    char *s = xmalloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

char *testenv_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = testenv_vfmt(fmt, ap);
    va_end(ap);
    return s;
}

/* ------------------------------------------------------------------ time */

/* The library's clock.c, under the tests' names. */
void testenv_sleep_ms(long ms)
{
    warren__sleep_ms(ms);
}

int64_t testenv_mono_ms(void)
{
    return warren__mono_ms();
}

double testenv_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t testenv_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

warren_us testenv_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (warren_us)ts.tv_sec * WARREN_US_PER_S + ts.tv_nsec / 1000;
}

warren_us testenv_at(const char *text)
{
    warren_us t;
    warren_error err = {0};
    if (warren_time_parse(text, &t, &err) != 0)
        fail("\"%s\": %s", text, err.message);
    return t;
}

uint64_t testenv_xorshift(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* ----------------------------------------------------------------- files */

/* The whole file, NUL-terminated (its size in *len); NULL if it does not
 * exist and missing_ok. Fails the test on any other error. */
static char *read_whole(const char *path, size_t *len, int missing_ok)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (missing_ok && errno == ENOENT)
            return NULL;
        fail("cannot open %s: %s", path, strerror(errno));
    }
    size_t cap = 8192, used = 0, got;
    char *buf = xmalloc(cap);
    while ((got = fread(buf + used, 1, cap - used - 1, f)) > 0) {
        used += got;
        if (cap - used - 1 == 0) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                fail("out of memory reading %s", path);
            buf = nb;
        }
    }
    if (ferror(f))
        fail("cannot read %s", path);
    fclose(f);
    buf[used] = '\0';
    if (len != NULL)
        *len = used;
    return buf;
}

char *testenv_read_file(const char *path, size_t *len)
{
    return read_whole(path, len, 0);
}

char *testenv_read_file_or_empty(const char *path)
{
    char *text = read_whole(path, NULL, 1);
    return text != NULL ? text : xstrdup("");
}

void testenv_read_into(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail("cannot read %s: %s", path, strerror(errno));
    size_t n = len > 0 ? fread(buf, 1, len - 1, f) : 0;
    if (len > 0)
        buf[n] = '\0';
    fclose(f);
}

void testenv_write_bytes(const char *path, const void *data, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        fail("cannot write %s: %s", path, strerror(errno));
    if (fwrite(data, 1, len, f) != len)
        fail("cannot write %s: %s", path, strerror(errno));
    if (fclose(f) != 0)
        fail("cannot write %s: %s", path, strerror(errno));
    if (chmod(path, mode) != 0)
        fail("chmod %s: %s", path, strerror(errno));
}

void testenv_write_file(const char *path, const char *text, mode_t mode)
{
    testenv_write_bytes(path, text, strlen(text), mode);
}

char *testenv_temp_file(const char *prefix, const char *suffix, const char *text)
{
    char *path = testenv_fmt("/tmp/%s-XXXXXX%s", prefix, suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0)
        fail("mkstemps %s: %s", path, strerror(errno));
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("cannot write %s: %s", path, strerror(errno));
        done += (size_t)n;
    }
    if (close(fd) != 0)
        fail("cannot write %s: %s", path, strerror(errno));
    return path;
}

char *testenv_tmpdir(const char *prefix)
{
    char *path = testenv_fmt("/tmp/%s-XXXXXX", prefix);
    if (mkdtemp(path) == NULL)
        fail("mkdtemp %s: %s", path, strerror(errno));
    return path;
}

int testenv_file_wait(const char *path, const char *needle, long timeout_ms)
{
    for (long waited = 0;; waited += 50) {
        char *text = testenv_read_file_or_empty(path);
        int has = strstr(text, needle) != NULL;
        if (has || waited >= timeout_ms) {
            if (!has)
                fprintf(stderr, "--- %s (no \"%s\") ---\n%s\n", path, needle, text);
            free(text);
            return has;
        }
        free(text);
        testenv_sleep_ms(50);
    }
}

/* ------------------------------------------------------------ benchmarks */

void testenv_die(const char *what, const char *detail)
{
    char exe[4096];
    const char *prog = "test";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        prog = strrchr(exe, '/') != NULL ? strrchr(exe, '/') + 1 : exe;
    }
    fprintf(stderr, "%s: %s%s%s\n", prog, what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

void testenv_loadavg(char *buf, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (f != NULL) {
        if (fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
            a = b = c = -1;
        fclose(f);
    }
    snprintf(buf, len, "[%.2f, %.2f, %.2f]", a, b, c);
}

long testenv_rss_peak_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = atol(line + 6);
    if (f != NULL)
        fclose(f);
    return kib;
}

volatile sig_atomic_t testenv_term;

static void on_term(int sig)
{
    (void)sig;
    testenv_term = 1;
}

void testenv_catch_term(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
}

static const char *need_env(const char *name, const char *what)
{
    const char *v = getenv(name);
    if (!v || !*v)
        fail("%s is not set: this test needs %s. Start the servers with\n"
             "    eval \"$(tests/servers.sh start)\"\n"
             "(tests that need servers fail instead of skipping)",
             name, what);
    return v;
}

const char *testenv_pg_admin_url(void)
{
    return need_env("WARREN_TEST_PG_URL", "PostgreSQL");
}

const char *testenv_amqp_url(void)
{
    return need_env("WARREN_TEST_AMQP_URL", "RabbitMQ");
}

static const char *source_dir(void)
{
#ifdef WARREN_SOURCE_DIR
    return WARREN_SOURCE_DIR;
#else
    return need_env("WARREN_SOURCE_DIR", "the source tree");
#endif
}

const char *testenv_servers_script(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/tests/servers.sh", source_dir());
    return path;
}

char *testenv_sql1f(const char *db_url, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = testenv_vfmt(fmt, ap);
    va_end(ap);
    char *v = testenv_sql1(db_url, sql);
    free(sql);
    return v;
}

int testenv_servers(const char *command)
{
    char *cmd = testenv_fmt("bash '%s' %s 1>&2", testenv_servers_script(), command);
    fflush(NULL);
    int st = system(cmd);
    free(cmd);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* In the child: path onto fd, or _exit(126). Async-signal-safe calls only. */
static void spawn_redirect(const char *path, int fd, int append)
{
    int f;
    if (path == NULL)
        return;
    f = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (f < 0 || dup2(f, fd) < 0)
        _exit(126);
    close(f);
}

pid_t testenv_spawn(char *const argv[], const char *out_path, const char *err_path, int append)
{
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    fflush(NULL);
    /* Check's runner installs SIGTERM/SIGINT handlers that kill the test's
     * process group; the child must not run them before its exec. */
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        spawn_redirect(out_path, STDOUT_FILENO, append);
        spawn_redirect(err_path, STDERR_FILENO, append);
        execv(argv[0], argv);
        _exit(127);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    return pid;
}

int testenv_pid_alive(pid_t pid)
{
    char path[64], buf[512];
    if (pid <= 0 || kill(pid, 0) != 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return !(rp != NULL && rp[1] == ' ' && rp[2] == 'Z');
}

int testenv_wait_exit(pid_t pid, long timeout_ms)
{
    int status;
    for (long waited = 0; waited <= timeout_ms; waited += 50) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        testenv_sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

int testenv_restart(const char *which)
{
    if (strcmp(which, "pg") != 0 && strcmp(which, "rabbit") != 0)
        fail("testenv_restart: \"%s\" is neither \"pg\" nor \"rabbit\"", which);
    char *cmd = testenv_fmt("restart-%s", which);
    int rc = testenv_servers(cmd);
    free(cmd);
    return rc;
}

/* ------------------------------------------------------------------ names */

static unsigned long random_bits(void)
{
    unsigned long r = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &r, sizeof r) != (ssize_t)sizeof r)
            r = 0;
        close(fd);
    }
    if (r == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (unsigned long)ts.tv_nsec ^ ((unsigned long)getpid() << 16);
    }
    return r;
}

char *testenv_unique_name(const char *prefix)
{
    /* The creation time lets `tests/servers.sh clean` drop old ones; the pid
     * separates Check's forked tests (each child inherits the same counter);
     * the counter separates calls in one process; the random part separates
     * reruns after pid reuse. */
    static unsigned counter;
    char tail[80];
    snprintf(tail, sizeof tail, "_%lld_%ld_%u_%04lx", (long long)time(NULL), (long)getpid(),
             ++counter, random_bits() & 0xffffUL);
    size_t plen = strlen(prefix), tlen = strlen(tail);
    if (plen + tlen > 63)
        plen = 63 - tlen;
    char *s = xmalloc(plen + tlen + 1);
    for (size_t i = 0; i < plen; i++) {
        char c = prefix[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
        s[i] = ok ? c : (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : '_';
    }
    memcpy(s + plen, tail, tlen + 1);
    return s;
}

/* -------------------------------------------------------------- PostgreSQL */

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

PGconn *testenv_connect(const char *url)
{
    const char *keys[] = {"dbname", "connect_timeout", NULL};
    const char *vals[] = {url, "10", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c)
        fail("out of memory connecting to %s", url);
    if (PQstatus(c) != CONNECTION_OK) {
        char *msg = xstrdup(PQerrorMessage(c));
        PQfinish(c);
        fail("cannot connect to %s: %s(are the servers running? tests/servers.sh status)", url,
             msg);
    }
    PQsetNoticeProcessor(c, quiet_notices, NULL);
    return c;
}

/* Runs sql; returns -1 on error after printing "context: message". */
static int pg_run(PGconn *c, const char *sql, const char *context, char **first)
{
    if (first)
        *first = NULL;
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        fprintf(stderr, "testenv: %s: %s", context,
                r ? PQresultErrorMessage(r) : PQerrorMessage(c));
        PQclear(r);
        return -1;
    }
    int n;
    if (st == PGRES_TUPLES_OK)
        n = PQntuples(r);
    else
        n = atoi(PQcmdTuples(r));
    if (first && st == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0 &&
        !PQgetisnull(r, 0, 0))
        *first = xstrdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return n;
}

int testenv_run(const char *cmd, char *out, size_t len)
{
    char buf[4096];
    size_t used = 0, n;
    FILE *p = popen(cmd, "r");
    int status;

    if (p == NULL) {
        fprintf(stderr, "testenv_run: popen %s: %s\n", cmd, strerror(errno));
        abort();
    }
    /* read to the end even when out is full, so the command never blocks */
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
        size_t take = used + 1 < len ? len - 1 - used : 0;
        if (take > n)
            take = n;
        memcpy(out + used, buf, take);
        used += take;
    }
    if (len > 0)
        out[used] = '\0';
    status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int testenv_run_split(const char *cmd, char *out, size_t outlen, char *err, size_t errlen)
{
    char *errpath = testenv_temp_file("testenv-stderr", "", "");
    char *full = testenv_fmt("( %s\n) 2>'%s'", cmd, errpath);
    int rc = testenv_run(full, out, outlen);
    testenv_read_into(errpath, err, errlen);
    unlink(errpath);
    free(full);
    free(errpath);
    return rc;
}

int testenv_psql(const char *db_url, const char *sql, char **out_first_value)
{
    PGconn *c = testenv_connect(db_url);
    int n = pg_run(c, sql, db_url, out_first_value);
    PQfinish(c);
    return n;
}

char *testenv_sql1(const char *db_url, const char *sql)
{
    char *v = NULL;
    if (testenv_psql(db_url, sql, &v) < 0)
        fail("SQL failed: %s", sql);
    return v;
}

void testenv_exec(const char *db_url, const char *sql)
{
    if (testenv_psql(db_url, sql, NULL) < 0)
        fail("failed: %s", sql);
}

long testenv_sql_long(const char *db_url, const char *sql)
{
    char *v = testenv_sql1(db_url, sql);
    if (v == NULL)
        fail("no value: %s", sql);
    long n = strtol(v, NULL, 10);
    free(v);
    return n;
}

void testenv_exec_on(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

/* A connection to url, or NULL (its error in why, new) when the server
 * cannot be reached. */
static PGconn *pg_try_connect(const char *url, char **why)
{
    const char *keys[] = {"dbname", "connect_timeout", NULL};
    const char *vals[] = {url, "10", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c)
        fail("out of memory connecting to %s", url);
    if (PQstatus(c) != CONNECTION_OK) {
        *why = xstrdup(PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, quiet_notices, NULL);
    return c;
}

char *testenv_try_sql(const char *db_url, const char *sql)
{
    char *why = NULL;
    PGconn *c = pg_try_connect(db_url, &why);
    if (c == NULL)
        fail("cannot connect to %s: %s", db_url, why);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    char *out;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        out = xstrdup(PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    } else {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        out = testenv_fmt("%s: %s", state ? state : "?", msg ? msg : PQerrorMessage(c));
    }
    PQclear(r);
    PQfinish(c);
    return out;
}

/* The first value of sql on url: 1 (*value new, NULL for none), 0 when the
 * server is away (*why new: the error), or -1 on any other error (printed). */
static int poll_value(const char *url, const char *sql, char **value, char **why)
{
    *value = NULL;
    PGconn *c = pg_try_connect(url, why);
    if (c == NULL)
        return 0;
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    int rc = 1;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        if (st == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0 && !PQgetisnull(r, 0, 0))
            *value = xstrdup(PQgetvalue(r, 0, 0));
    } else {
        const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
        const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
        if (PQstatus(c) != CONNECTION_OK || state == NULL || strncmp(state, "08", 2) == 0 ||
            strcmp(state, "57P01") == 0 || strcmp(state, "57P02") == 0 ||
            strcmp(state, "57P03") == 0) {
            *why = xstrdup(msg);
            rc = 0;
        } else {
            fprintf(stderr, "testenv: %s: %s", url, msg);
            rc = -1;
        }
    }
    PQclear(r);
    PQfinish(c);
    return rc;
}

int testenv_wait_for(const char *db_url, const char *want, long timeout_ms, const char *sql)
{
    for (long waited = 0;; waited += 100) {
        char *v = NULL, *why = NULL;
        if (poll_value(db_url, sql, &v, &why) < 0)
            fail("testenv_wait_for: failed: %s", sql);
        int ok = v != NULL && strcmp(v, want) == 0;
        if (!ok && waited >= timeout_ms) {
            if (why != NULL)
                fprintf(stderr, "testenv_wait_for: \"%s\": server unreachable: %s", sql, why);
            else
                fprintf(stderr, "testenv_wait_for: \"%s\" gave \"%s\", want \"%s\"\n", sql,
                        v ? v : "NULL", want);
        }
        free(v);
        free(why);
        if (ok)
            return 1;
        if (waited >= timeout_ms)
            return 0;
        testenv_sleep_ms(100);
    }
}

int testenv_wait_forf(const char *db_url, const char *want, long timeout_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = testenv_vfmt(fmt, ap);
    va_end(ap);
    int ok = testenv_wait_for(db_url, want, timeout_ms, sql);
    free(sql);
    return ok;
}

char *testenv_url_as(const char *url, const char *login)
{
    const char *at = strstr(url, "://"), *userend = at ? strchr(at + 3, '@') : NULL;
    if (userend == NULL)
        fail("not a URL with a user: %s", url);
    return testenv_fmt("%.*s%s%s", (int)(at + 3 - url), url, login, userend);
}

warren_us testenv_db_clock_offset(const char *db_url, int samples)
{
    warren_store *st = NULL;
    warren_error err = {0};
    warren_us best = 0, best_rtt = INT64_MAX;
    if (warren_store_open(db_url, NULL, &st, &err) != 0)
        fail("store: %s", err.message);
    for (int i = 0; i < samples; i++) {
        warren_us a = testenv_wall_us(), now = 0, b;
        if (warren_store_now(st, &now, &err) != 0)
            fail("now: %s", err.message);
        b = testenv_wall_us();
        if (b - a < best_rtt) {
            best_rtt = b - a;
            best = now - (a + b) / 2;
        }
    }
    warren_store_free(st);
    return best;
}

/* The admin URL with its database replaced by db. URLs keep their query
 * string; a keyword/value conninfo gets "dbname=db" appended (later wins). */
static char *url_with_db(const char *admin, const char *db)
{
    const char *scheme = strstr(admin, "://");
    if (!scheme)
        return testenv_fmt("%s dbname=%s", admin, db);
    const char *auth = scheme + 3;
    const char *path = auth + strcspn(auth, "/?");
    const char *query = path + strcspn(path, "?");
    return testenv_fmt("%.*s/%s%s", (int)(path - admin), admin, db, query);
}

char *testenv_db(void)
{
    const char *admin = testenv_pg_admin_url();
    char *name = testenv_unique_name("warren_t");
    char *sql = testenv_fmt("CREATE DATABASE \"%s\"", name);
    PGconn *c = testenv_connect(admin);
    if (pg_run(c, sql, "CREATE DATABASE", NULL) < 0) {
        PQfinish(c);
        fail("could not create database %s on %s", name, admin);
    }
    PQfinish(c);
    char *url = url_with_db(admin, name);
    free(sql);
    free(name);
    return url;
}

static int is_sql_file(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return d->d_name[0] != '.' && n > 4 && strcmp(d->d_name + n - 4, ".sql") == 0;
}

static void apply_sql_file(PGconn *c, const char *path, const char *url)
{
    char *sql = testenv_read_file(path, NULL);
    if (pg_run(c, sql, path, NULL) < 0) {
        PQfinish(c);
        fail("%s failed on %s", path, url);
    }
    free(sql);
}

char *testenv_db_migrated(void)
{
    char *url = testenv_db();
    char *dir = testenv_fmt("%s/sql/migrations", source_dir());
    char *list = testenv_fmt("%s/sql/functions.sql", source_dir());
    char *text = testenv_read_file(list, NULL);
    struct dirent **files = NULL;
    int n = scandir(dir, &files, is_sql_file, alphasort);
    if (n < 0)
        fail("cannot list %s: %s", dir, strerror(errno));
    if (n == 0)
        fail("no migrations (*.sql) in %s", dir);
    PGconn *c = testenv_connect(url);
    for (int i = 0; i < n; i++) {
        char *path = testenv_fmt("%s/%s", dir, files[i]->d_name);
        apply_sql_file(c, path, url);
        free(path);
        free(files[i]);
    }
    free(files);
    /* Then the function files, as psql runs sql/functions.sql: its
     * "\ir functions/NAME.sql" lines in order. */
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char name[256];
        if (sscanf(line, "\\ir functions/%255s", name) == 1) {
            char *path = testenv_fmt("%s/sql/functions/%s", source_dir(), name);
            apply_sql_file(c, path, url);
            free(path);
        }
    }
    PQfinish(c);
    free(text);
    free(list);
    free(dir);
    return url;
}

/* ------------------------------------------------------------ AMQP / HTTP */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static char *pct_decode(const char *s, size_t n)
{
    char *out = xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            *o++ = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

static char *pct_encode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = xmalloc(strlen(s) * 3 + 1), *o = out;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

/* Splits scheme://[user[:pass]@]host[:port][/rest] into new strings (NULL
 * when absent). Returns 0, or -1 when s has no "://". */
struct url_parts {
    char *user, *pass, *host, *port, *rest;
};

static void url_parts_free(struct url_parts *u)
{
    free(u->user);
    free(u->pass);
    free(u->host);
    free(u->port);
    free(u->rest);
}

static int url_split(const char *s, struct url_parts *u)
{
    memset(u, 0, sizeof *u);
    const char *p = strstr(s, "://");
    if (!p)
        return -1;
    p += 3;
    const char *end = p + strcspn(p, "/?");
    const char *at = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            u->user = pct_decode(p, (size_t)(colon - p));
            u->pass = pct_decode(colon + 1, (size_t)(at - colon - 1));
        } else {
            u->user = pct_decode(p, (size_t)(at - p));
        }
        p = at + 1;
    }
    const char *colon = memchr(p, ':', (size_t)(end - p));
    if (colon) {
        u->host = pct_decode(p, (size_t)(colon - p));
        u->port = pct_decode(colon + 1, (size_t)(end - colon - 1));
    } else {
        u->host = pct_decode(p, (size_t)(end - p));
    }
    u->rest = xstrdup(end);
    return 0;
}

char *testenv_vhost_name(const char *amqp_url)
{
    struct url_parts u;
    if (url_split(amqp_url, &u) < 0)
        fail("not an AMQP URL: %s", amqp_url);
    const char *v = u.rest[0] == '/' ? u.rest + 1 : u.rest;
    size_t n = strcspn(v, "?");
    char *name = n ? pct_decode(v, n) : xstrdup("/");
    url_parts_free(&u);
    return name;
}

char *testenv_vhost_path(const char *amqp_url)
{
    char *name = testenv_vhost_name(amqp_url);
    char *enc = pct_encode(name);
    free(name);
    return enc;
}

static char *base64(const char *s)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(s);
    char *out = xmalloc((n + 2) / 3 * 4 + 1), *o = out;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        *o++ = tab[(v >> 18) & 63];
        *o++ = tab[(v >> 12) & 63];
        *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* Management API endpoint: WARREN_TEST_MGMT_URL, else the AMQP URL's
 * credentials and host on port 55673. */
static void mgmt_endpoint(struct url_parts *u)
{
    const char *m = getenv("WARREN_TEST_MGMT_URL");
    if (m && *m) {
        if (url_split(m, u) < 0)
            fail("WARREN_TEST_MGMT_URL is not a URL: %s", m);
    } else {
        if (url_split(testenv_amqp_url(), u) < 0)
            fail("WARREN_TEST_AMQP_URL is not a URL");
        free(u->port);
        u->port = NULL;
    }
    if (!u->user)
        u->user = xstrdup("guest");
    if (!u->pass)
        u->pass = xstrdup("guest");
    if (!u->host || !*u->host) {
        free(u->host);
        u->host = xstrdup("127.0.0.1");
    }
    if (!u->port)
        u->port = xstrdup(MGMT_DEFAULT_PORT);
}

static int dial(const char *host, const char *port)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "testenv: %s:%s: %s\n", host, port, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {HTTP_TIMEOUT_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* also bounds connect */
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        fprintf(stderr, "testenv: cannot connect to the management API at %s:%s: %s\n", host, port,
                strerror(errno));
    freeaddrinfo(res);
    return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int testenv_http(const char *method, const char *path, const char *body, char **response)
{
    if (response)
        *response = NULL;
    struct url_parts u;
    mgmt_endpoint(&u);
    char *cred = testenv_fmt("%s:%s", u.user, u.pass);
    char *auth = base64(cred);
    size_t blen = body ? strlen(body) : 0;
    char *req = testenv_fmt("%s %s HTTP/1.0\r\nHost: %s:%s\r\nAuthorization: Basic %s\r\n"
                            "Accept: application/json\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\n\r\n",
                            method, path, u.host, u.port, auth, blen);
    int status = -1;
    char *buf = NULL;
    int fd = dial(u.host, u.port);
    if (fd < 0)
        goto done;
    if (write_all(fd, req, strlen(req)) < 0 || (blen && write_all(fd, body, blen) < 0)) {
        fprintf(stderr, "testenv: %s %s: send failed: %s\n", method, path, strerror(errno));
        goto done;
    }
    /* HTTP/1.0: the server closes the connection after the response. */
    size_t cap = 16384, len = 0;
    buf = xmalloc(cap);
    for (;;) {
        if (len + 1 == cap) {
            if (cap >= HTTP_MAX_RESPONSE) {
                fprintf(stderr, "testenv: %s %s: response larger than %u bytes\n", method, path,
                        HTTP_MAX_RESPONSE);
                goto done;
            }
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                fail("out of memory");
            buf = nb;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fprintf(stderr, "testenv: %s %s: %s\n", method, path,
                    errno == EAGAIN ? "timed out" : strerror(errno));
            goto done;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    int code;
    char *hdr_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || !hdr_end) {
        fprintf(stderr, "testenv: %s %s: not an HTTP response: %.80s\n", method, path, buf);
        goto done;
    }
    status = code;
    if (response)
        *response = xstrdup(hdr_end + 4);
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    free(req);
    free(auth);
    free(cred);
    url_parts_free(&u);
    return status;
}

/* Vhosts this process created, deleted when it exits: hundreds of leftover
 * vhosts make a RabbitMQ restart (the fault tests) take minutes. Only the
 * creating process deletes (a forked child exiting must not pull the vhost
 * from under its parent). */
#define TESTENV_MAX_VHOSTS 64
static char *created_vhosts[TESTENV_MAX_VHOSTS];
static pid_t created_vhosts_pid[TESTENV_MAX_VHOSTS];
static int ncreated_vhosts;

static void delete_created_vhosts(void)
{
    for (int i = 0; i < ncreated_vhosts; i++) {
        if (created_vhosts_pid[i] != getpid())
            continue;
        char *path = testenv_fmt("/api/vhosts/%s", created_vhosts[i]);
        testenv_http("DELETE", path, NULL, NULL);
        free(path);
    }
}

static void remember_vhost(const char *name)
{
    static pid_t registered_in;
    if (ncreated_vhosts >= TESTENV_MAX_VHOSTS)
        return;
    if (registered_in != getpid()) {
        atexit(delete_created_vhosts);
        registered_in = getpid();
    }
    created_vhosts[ncreated_vhosts] = xstrdup(name);
    created_vhosts_pid[ncreated_vhosts++] = getpid();
}

char *testenv_vhost(void)
{
    const char *base = testenv_amqp_url();
    struct url_parts u;
    if (url_split(base, &u) < 0)
        fail("WARREN_TEST_AMQP_URL is not an AMQP URL: %s", base);
    char *name = testenv_unique_name("warren_t");
    char *path = testenv_fmt("/api/vhosts/%s", name);
    char *resp = NULL;
    int st = testenv_http("PUT", path, "{}", &resp);
    if (st != 201 && st != 204)
        fail("creating vhost %s: HTTP %d %s (management API: %s)", name, st, resp ? resp : "",
             getenv("WARREN_TEST_MGMT_URL") ? getenv("WARREN_TEST_MGMT_URL") : "default");
    free(resp);
    free(path);
    char *user = pct_encode(u.user ? u.user : "guest");
    path = testenv_fmt("/api/permissions/%s/%s", name, user);
    st =
        testenv_http("PUT", path, "{\"configure\":\".*\",\"write\":\".*\",\"read\":\".*\"}", &resp);
    if (st != 201 && st != 204)
        fail("granting %s on vhost %s: HTTP %d %s", u.user ? u.user : "guest", name, st,
             resp ? resp : "");
    free(resp);
    free(path);
    free(user);
    if (getenv("WARREN_TEST_KEEP_VHOSTS") == NULL)
        remember_vhost(name);
    /* Same scheme, credentials, host and port; new vhost; query kept. */
    const char *auth = strstr(base, "://") + 3;
    const char *vpos = auth + strcspn(auth, "/?");
    const char *query = vpos + strcspn(vpos, "?");
    char *url = testenv_fmt("%.*s/%s%s", (int)(vpos - base), base, name, query);
    free(name);
    url_parts_free(&u);
    return url;
}

long testenv_queue_unacked(const char *amqp_url, const char *queue)
{
    char *vh = testenv_vhost_path(amqp_url), *resp = NULL;
    char *path = testenv_fmt("/api/queues/%s/%s", vh, queue);
    long n = -1;
    if (testenv_http("GET", path, NULL, &resp) == 200 && resp != NULL) {
        const char *f = strstr(resp, "\"messages_unacknowledged\":");
        if (f != NULL)
            n = atol(f + strlen("\"messages_unacknowledged\":"));
    }
    free(resp);
    free(path);
    free(vh);
    return n;
}

long testenv_queue_depth(const char *amqp_url, const char *queue)
{
    char *buf = xstrdup(amqp_url);
    struct amqp_connection_info ci;
    amqp_default_connection_info(&ci);
    if (amqp_parse_url(buf, &ci) != AMQP_STATUS_OK)
        fail("not an AMQP URL: %s", amqp_url);
    long depth = -1;
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    struct timeval tv = {10, 0};
    if (!sock || amqp_socket_open_noblock(sock, ci.host, ci.port, &tv) != AMQP_STATUS_OK) {
        fprintf(stderr, "testenv: cannot connect to %s:%d\n", ci.host, ci.port);
        goto done;
    }
    amqp_rpc_reply_t r =
        amqp_login(conn, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        fprintf(stderr, "testenv: AMQP login to vhost %s failed\n", ci.vhost);
        goto done;
    }
    amqp_channel_open(conn, 1);
    r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        fprintf(stderr, "testenv: AMQP channel.open failed\n");
        goto close;
    }
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(conn, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
    if (ok)
        depth = (long)ok->message_count;
    /* A missing queue (404) closes the channel; the connection close below
     * covers both cases. */
close:
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
done:
    amqp_destroy_connection(conn);
    free(buf);
    return depth;
}

/* -------------------------------------------------------------- executions */

void testenv_execlog_create(const char *db_url)
{
    if (testenv_psql(db_url,
                     "CREATE TABLE IF NOT EXISTS " TESTENV_EXECLOG " (run_key text NOT NULL, "
                     "attempt int, who text, at timestamptz NOT NULL DEFAULT clock_timestamp())",
                     NULL) < 0)
        fail("cannot create %s in %s", TESTENV_EXECLOG, db_url);
}

long testenv_execlog_load(const char *db_url, const char *path)
{
    char *text = read_whole(path, NULL, 1);
    if (text == NULL)
        return 0;
    /* the text goes in as a parameter: nothing in it is parsed as SQL */
    PGconn *c = testenv_connect(db_url);
    const char *params[] = {text};
    PGresult *r = PQexecParams(
        c,
        "INSERT INTO " TESTENV_EXECLOG " (run_key, attempt, who) SELECT split_part(l, ' ', 1), "
        "CASE WHEN split_part(l, ' ', 2) ~ '^[0-9]+$' THEN split_part(l, ' ', 2)::int END, l "
        "FROM unnest(string_to_array($1, E'\\n')) l WHERE l <> ''",
        1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        fail("loading %s into %s: %s", path, TESTENV_EXECLOG, PQresultErrorMessage(r));
    long loaded = atol(PQcmdTuples(r));
    PQclear(r);
    PQfinish(c);
    free(text);
    return loaded;
}

char *testenv_executions_mismatch(const char *db_url, const char *runs_sql, const char *log_sql,
                                  const char *explained_sql)
{
    /* First 20 keys of each kind; the counts say how many there are. */
    char *sql = testenv_fmt(
        "WITH r AS (SELECT DISTINCT run_key FROM (%s) r0(run_key)), "
        "x AS (SELECT run_key, count(*) AS n FROM (%s) x0(run_key) GROUP BY run_key), "
        "ok AS (SELECT DISTINCT run_key FROM (%s) a0(run_key)) "
        "SELECT concat_ws('; ', "
        "(SELECT count(*) || ' expected run(s) never executed: ' || array_to_string((array_agg("
        "run_key ORDER BY run_key))[1:20], ' ') FROM r WHERE NOT EXISTS (SELECT 1 FROM x WHERE "
        "x.run_key = r.run_key) HAVING count(*) > 0), "
        "(SELECT count(*) || ' run(s) executed more than once, not caused by the test: ' || "
        "array_to_string((array_agg(x.run_key || ' x' || x.n ORDER BY x.run_key))[1:20], ' ') "
        "FROM x JOIN r USING (run_key) WHERE x.n > 1 AND NOT EXISTS (SELECT 1 FROM ok WHERE "
        "ok.run_key = x.run_key) HAVING count(*) > 0), "
        "(SELECT count(*) || ' execution(s) of unexpected runs: ' || array_to_string((array_agg("
        "x.run_key || ' x' || x.n ORDER BY x.run_key))[1:20], ' ') FROM x WHERE NOT EXISTS "
        "(SELECT 1 FROM r WHERE r.run_key = x.run_key) HAVING count(*) > 0))",
        runs_sql, log_sql != NULL ? log_sql : "SELECT run_key FROM " TESTENV_EXECLOG,
        explained_sql != NULL ? explained_sql : "SELECT NULL::text WHERE false");
    char *why = NULL;
    if (testenv_psql(db_url, sql, &why) < 0)
        fail("comparing executions with runs failed: %s", sql);
    free(sql);
    if (why != NULL && why[0] == '\0') {
        free(why);
        why = NULL;
    }
    return why;
}

char *testenv_server_identity(const char *which)
{
    if (strcmp(which, "pg") == 0) {
        const char *keys[] = {"dbname", "connect_timeout", NULL};
        const char *vals[] = {testenv_pg_admin_url(), "10", NULL};
        PGconn *c = PQconnectdbParams(keys, vals, 1);
        char *id = NULL;
        if (c != NULL && PQstatus(c) == CONNECTION_OK) {
            PQsetNoticeProcessor(c, quiet_notices, NULL);
            pg_run(c, "SELECT 'postmaster started ' || pg_postmaster_start_time()", "identity",
                   &id);
        } else {
            fprintf(stderr, "testenv: PostgreSQL unreachable: %s",
                    c ? PQerrorMessage(c) : "out of memory\n");
        }
        PQfinish(c);
        return id;
    }
    if (strcmp(which, "rabbit") == 0) {
        char *resp = NULL, *id = NULL;
        /* A node that has just started lists itself before its first stats
         * (os_pid among them): ask again for up to 30 s. */
        for (int i = 0; i < 150 && id == NULL; i++) {
            if (i > 0) {
                struct timespec ts = {0, 200 * 1000000L};
                nanosleep(&ts, NULL);
            }
            free(resp);
            resp = NULL;
            if (testenv_http("GET", "/api/nodes?columns=name,os_pid", NULL, &resp) != 200 ||
                resp == NULL)
                continue;
            const char *name = strstr(resp, "\"name\":\""), *pid = strstr(resp, "\"os_pid\":\"");
            if (name != NULL && pid != NULL) {
                name += strlen("\"name\":\"");
                pid += strlen("\"os_pid\":\"");
                id = testenv_fmt("node %.*s os pid %.*s", (int)strcspn(name, "\""), name,
                                 (int)strcspn(pid, "\""), pid);
            }
        }
        if (id == NULL)
            fprintf(stderr, "testenv: no node identity from the management API: %s\n",
                    resp ? resp : "(unreachable)");
        free(resp);
        return id;
    }
    fail("testenv_server_identity: \"%s\" is neither \"pg\" nor \"rabbit\"", which);
}

/* ------------------------------------------------------------ planner */

static void *planner_thread(void *arg)
{
    testenv_planner *tp = arg;
    warren_error err = {0};
    if (warren_planner_run(tp->planner, &tp->stop, &err) != 0)
        fprintf(stderr, "planner: %s\n", err.message);
    return NULL;
}

void testenv_planner_start(testenv_planner *tp, const warren_config *cfg, const char *db_url,
                           const char *amqp_url, const warren_logger *log)
{
    warren_error err = {0};
    memset(tp, 0, sizeof(*tp));
    if (warren_planner_new(cfg, db_url, amqp_url, log, &tp->planner, &err) != 0)
        fail("planner: %s", err.message);
    if (pthread_create(&tp->th, NULL, planner_thread, tp) != 0)
        fail("cannot start the planner's thread");
    tp->running = 1;
}

void testenv_planner_stop(testenv_planner *tp)
{
    if (!tp->running)
        return;
    __atomic_store_n(&tp->stop, 1, __ATOMIC_RELAXED);
    pthread_join(tp->th, NULL);
    warren_planner_free(tp->planner);
    tp->planner = NULL;
    tp->running = 0;
}

void testenv_publish(const char *amqp_url, const warren_message *m, int confirm_timeout_ms)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    uint64_t seq = 0;
    if (warren_broker_open(amqp_url, NULL, &b, &err) != 0)
        fail("broker %s: %s", amqp_url, err.message);
    if (warren_broker_confirm_select(b, &err) != 0)
        fail("confirm mode: %s", err.message);
    if (warren_broker_publish(b, m, &seq, &err) != 0)
        fail("publish: %s", err.message);
    if (warren_broker_confirm_wait(b, seq, confirm_timeout_ms, NULL, NULL, &err) != 0)
        fail("confirm of the publish: %s", err.message);
    warren_broker_free(b);
}

/* ------------------------------------------------------------ config */

void testenv_topology(const char *amqp_url, const char *const *queues, size_t n, int delivery_limit)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    if (warren_broker_open(amqp_url, NULL, &b, &err) != 0)
        fail("broker %s: %s", amqp_url, err.message);
    if (warren_broker_topology(b, queues, n, delivery_limit, &err) != 0)
        fail("topology: %s", err.message);
    warren_broker_free(b);
}

warren_config *testenv_config_load(const char *path)
{
    warren_config *cfg = NULL;
    warren_diags diags = {0};
    warren_error err = {0};
    if (warren_config_load(path, &cfg, &diags, &err) != 0) {
        for (size_t i = 0; i < diags.count; i++)
            fprintf(stderr, "%s\n", diags.items[i]);
        fail("config %s: %s", path, err.message);
    }
    warren_diags_free(&diags);
    return cfg;
}

void testenv_config_apply(const warren_config *cfg, const char *db_url, const char *amqp_url)
{
    warren_store *st = NULL;
    warren_error err = {0};
    if (warren_store_open(db_url, NULL, &st, &err) != 0)
        fail("store %s: %s", db_url, err.message);
    if (warren_store_sync(st, cfg, NULL, &err) != 0)
        fail("sync: %s", err.message);
    warren_store_free(st);
    if (amqp_url != NULL) {
        size_t nq = 0;
        const char **queues = warren_config_queues(cfg, &nq);
        testenv_topology(amqp_url, queues, nq, cfg->delivery_limit);
        free(queues);
    }
}

/* ------------------------------------------------------------ a stack */

void testenv_stack_init(testenv_stack *s, const char *prefix)
{
    memset(s, 0, sizeof(*s));
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    s->db = testenv_db_migrated();
    s->amqp = testenv_vhost();
    s->dir = testenv_tmpdir(prefix);
    s->cfg_path = testenv_fmt("%s/warren.cfg", s->dir);
}

void testenv_stack_config(testenv_stack *s, const char *text)
{
    testenv_write_file(s->cfg_path, text, 0644);
    s->cfg = testenv_config_load(s->cfg_path);
    testenv_config_apply(s->cfg, s->db, s->amqp);
}

void testenv_stack_planner_start(testenv_stack *s, const warren_logger *log)
{
    testenv_planner_start(&s->planner, s->cfg, s->db, s->amqp, log);
}

pid_t testenv_stack_worker(const testenv_stack *s, const char *cfg_path, const char *id,
                           const char *log, int append)
{
    char *path = testenv_fmt("%s/%s", s->dir, log);
    char *argv[] = {WARREN_BINARY, "worker",   "-c", (char *)(cfg_path ? cfg_path : s->cfg_path),
                    "--id",        (char *)id, NULL};
    pid_t pid = testenv_spawn(argv, NULL, path, append);
    free(path);
    return pid;
}

void testenv_stack_workers_start(testenv_stack *s, int n)
{
    if (s->nworkers + n > TESTENV_MAX_WORKERS)
        fail("more than %d workers", TESTENV_MAX_WORKERS);
    for (int i = 0; i < n; i++) {
        char id[16], log[32];
        snprintf(id, sizeof(id), "w%d", s->nworkers + 1);
        snprintf(log, sizeof(log), "%s.log", id);
        s->workers[s->nworkers] = testenv_stack_worker(s, NULL, id, log, 0);
        s->nworkers++;
    }
}

void testenv_stack_workers_stop(testenv_stack *s)
{
    for (int i = 0; i < s->nworkers; i++)
        kill(s->workers[i], SIGTERM);
    for (int i = 0; i < s->nworkers; i++)
        testenv_wait_exit(s->workers[i], 10000);
    s->nworkers = 0;
}

int testenv_stack_log_wait(const testenv_stack *s, const char *log, const char *needle,
                           long timeout_ms)
{
    char *path = testenv_fmt("%s/%s", s->dir, log);
    int has = testenv_file_wait(path, needle, timeout_ms);
    free(path);
    return has;
}

void testenv_stack_free(testenv_stack *s)
{
    testenv_stack_workers_stop(s);
    testenv_planner_stop(&s->planner);
    warren_config_free(s->cfg);
    s->cfg = NULL;
    free(s->db);
    free(s->amqp);
    free(s->dir);
    free(s->cfg_path);
    s->db = s->amqp = s->dir = s->cfg_path = NULL;
}
