/* testenv: fresh PostgreSQL databases and RabbitMQ vhosts for integration tests.
 *
 * The servers come from tests/servers.sh, which prints the environment this
 * module reads:
 *   WARREN_TEST_PG_URL    admin URL, e.g. postgresql://postgres@127.0.0.1:55432/postgres
 *   WARREN_TEST_AMQP_URL  e.g. amqp://guest:guest@127.0.0.1:55672/%2f
 *   WARREN_TEST_MGMT_URL  management API, e.g. http://guest:guest@127.0.0.1:55673
 *                         (optional: derived from the AMQP URL's user, password
 *                         and host with port 55673 when unset)
 *
 * A test that needs a server and finds its variable unset FAILS (the process
 * exits with status 1 after a message on stderr): the project's test command
 * must never skip integration tests silently.
 *
 * Every database and vhost gets a new unique name (time, pid, counter, random
 * suffix), so tests never share state and may run concurrently, also in the
 * processes Check forks for each test. Nothing is dropped afterwards, to keep
 * failures debuggable; `tests/servers.sh clean` (run by tests/run-all.sh)
 * drops the ones older than an hour.
 * No connection or other state is kept between calls (fork-safe).
 *
 * Returned strings are new: the caller frees them. On any server error these
 * functions print the error and exit(1) (the test fails), except where a
 * return code is documented.
 */
#ifndef WARREN_TESTENV_H
#define WARREN_TESTENV_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <pthread.h>
#include <signal.h>

#include <libpq-fe.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>
#include <warren/planner.h>
#include <warren/timefmt.h>

/* The admin URL (WARREN_TEST_PG_URL), borrowed from the environment. Fails the
 * test when unset. */
const char *testenv_pg_admin_url(void);

/* The AMQP URL of the default vhost (WARREN_TEST_AMQP_URL), borrowed. Fails
 * the test when unset. */
const char *testenv_amqp_url(void);

/* Creates a new empty database and returns its URL (new). */
char *testenv_db(void);

/* Like testenv_db(), then applies every .sql file in the source tree's
 * sql/migrations in name order, then the function files sql/functions.sql
 * lists, in its order, each with one PQexec (so they must be plain SQL). It
 * does not depend on `warren migrate`. */
char *testenv_db_migrated(void);

/* Creates a new vhost (through the management API), gives the AMQP URL's user
 * all permissions on it, and returns the AMQP URL for it (new), e.g.
 * amqp://guest:guest@127.0.0.1:55672/warren_t_123_1_ab12cd. */
char *testenv_vhost(void);

/* The vhost name of an AMQP URL (new string, percent-decoded; "/" for
 * ".../%2f"), and the same percent-encoded for management API paths. */
char *testenv_vhost_name(const char *amqp_url);
char *testenv_vhost_path(const char *amqp_url);

/* One request to the management API: METHOD PATH (e.g. "GET",
 * "/api/queues/VHOST/NAME") with an optional JSON body (NULL for none).
 * Returns the HTTP status (200, 201, 204, 404, ...) or -1 if the server could
 * not be reached or answered garbage (message on stderr). If response is not
 * NULL it receives the body (new, NUL-terminated; "" when empty, NULL on -1).
 * Times out after 30 s. Note the API's queue statistics lag up to 500 ms
 * (collect_statistics_interval in tests/servers.sh); use
 * testenv_queue_depth() for exact counts. */
int testenv_http(const char *method, const char *path, const char *body, char **response);

/* Exact number of ready messages in a queue, by a passive queue.declare on
 * the vhost of amqp_url. Returns -1 if the queue does not exist (or on a
 * connection error, with a message on stderr). */
long testenv_queue_depth(const char *amqp_url, const char *queue);

/* Messages delivered and not yet acknowledged in a queue, from the
 * management API (lags up to 500 ms); -1 if it cannot be read. */
long testenv_queue_unacked(const char *amqp_url, const char *queue);

/* Runs sql (one or more statements, no parameters) on db_url.
 * Returns -1 on error (the server's message printed to stderr), otherwise
 * the number of rows the last statement returned, or affected for
 * INSERT/UPDATE/DELETE (0 for other commands). If out_first_value is not NULL
 * it receives the first row's first column of the last result (new), or NULL
 * when there is none or it is SQL NULL. */
int testenv_psql(const char *db_url, const char *sql, char **out_first_value);

/* Like testenv_psql(), but fails the test on error; returns the first value
 * (new, may be NULL). Handy for `char *n = testenv_sql1(url, "SELECT ...")`. */
char *testenv_sql1(const char *db_url, const char *sql);

/* Runs cmd through /bin/sh and reads its standard output into out (at most
 * len - 1 bytes kept, always NUL-terminated; add 2>&1 to the command for
 * stderr too). Returns the exit status, or -1 if it did not exit normally. */
int testenv_run(const char *cmd, char *out, size_t len);

/* testenv_run with cmd's standard error apart: into err (at most errlen - 1
 * bytes kept, always NUL-terminated; through a temporary file). */
int testenv_run_split(const char *cmd, char *out, size_t outlen, char *err, size_t errlen);

/* Path of tests/servers.sh in the source tree (borrowed), for fault tests:
 * system(...) with "restart-pg" or "restart-rabbit". Restarting disturbs
 * every test using the servers at that moment: tests/run-all.sh runs tests
 * one at a time. */
const char *testenv_servers_script(void);

/* Runs `tests/servers.sh COMMAND` (e.g. "stop-pg", "restart-pg"), its output
 * on stderr. Returns the script's exit status (0 ok), -1 if it did not exit. */
int testenv_servers(const char *command);

/* fork and execv(argv[0], argv), stdout to out_path and stderr to err_path
 * (NULL: inherited; appended if append, else truncated). The child calls only
 * async-signal-safe functions before exec, so it cannot hang on a lock
 * (malloc, stdio) that another thread of the test (an in-process planner)
 * held at the fork. Exits 126 if a file cannot be opened, 127 if exec fails.
 * Returns the pid. */
pid_t testenv_spawn(char *const argv[], const char *out_path, const char *err_path, int append);

/* 1 if pid is running; a zombie (exited, not yet reaped, e.g. under an init
 * that does not reap) counts as gone. */
int testenv_pid_alive(pid_t pid);

/* Runs `tests/servers.sh restart-pg` (which "pg") or `restart-rabbit`
 * ("rabbit") and waits until the server accepts connections again. Returns
 * the script's exit status (0 ok). PostgreSQL restarts in well under a
 * second, RabbitMQ in about 10-15 s; databases and vhosts survive. */
int testenv_restart(const char *which);

/* A new unique name with the given prefix (lowercased, other characters
 * than [a-z0-9_] replaced by '_'): PREFIX_<unix time>_<pid>_<counter>_<random>,
 * at most 63 bytes. Databases and vhosts are named warren_t_...; tests/servers.sh
 * clean drops those older than an hour. */
char *testenv_unique_name(const char *prefix);

/* vsnprintf into a new string (fails the test if out of memory). */
char *testenv_vfmt(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* printf into a new string (free it); fails the test when out of memory. */
char *testenv_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* testenv_sql1 of a printf-formatted statement. */
char *testenv_sql1f(const char *db_url, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs sql (one or more statements); fails the test on error. */
void testenv_exec(const char *db_url, const char *sql);

/* The first value of sql as a number; fails the test on error and when there
 * is no value (no row, or SQL NULL). */
long testenv_sql_long(const char *db_url, const char *sql);

/* A new connection to db_url (connect_timeout 10 s, notices not shown; close
 * it with PQfinish). Fails the test if it cannot connect. */
PGconn *testenv_connect(const char *db_url);

/* Runs sql on an open connection; fails the test on error (the statement
 * and the server's message on stderr). */
void testenv_exec_on(PGconn *c, const char *sql);

/* Runs sql on a new connection to db_url: its first value ("" for no row or
 * SQL NULL) when it succeeds, "SQLSTATE: primary message" when it fails
 * (new). Fails the test if it cannot connect. */
char *testenv_try_sql(const char *db_url, const char *sql);

/* Check assertions (macros, so that Check names the caller's line; for
 * runners that include <check.h>):
 * ck_assert_sql_eq: testenv_try_sql(db_url, sql) is want;
 * ck_assert_sql_prefix: it starts with want;
 * ck_assert_sqlf: the first value of the printf-formatted query is want
 * ("<null>" for SQL NULL; an SQL error fails the test, as testenv_sql1). */
#define ck_assert_sql_eq(db_url, sql, want)                                                        \
    do {                                                                                           \
        const char *sql_ = (sql), *want_ = (want);                                                 \
        char *got_ = testenv_try_sql(db_url, sql_);                                                \
        ck_assert_msg(strcmp(got_, want_) == 0, "%s\n  gave: %s\n  want: %s", sql_, got_, want_);  \
        free(got_);                                                                                \
    } while (0)
#define ck_assert_sql_prefix(db_url, sql, want)                                                    \
    do {                                                                                           \
        const char *sql_ = (sql), *want_ = (want);                                                 \
        char *got_ = testenv_try_sql(db_url, sql_);                                                \
        ck_assert_msg(strncmp(got_, want_, strlen(want_)) == 0, "%s\n  gave: %s\n  want: %s...",   \
                      sql_, got_, want_);                                                          \
        free(got_);                                                                                \
    } while (0)
#define ck_assert_sqlf(db_url, want, ...)                                                          \
    do {                                                                                           \
        char *got_ = testenv_sql1f(db_url, __VA_ARGS__);                                           \
        ck_assert_str_eq(got_ ? got_ : "<null>", want);                                            \
        free(got_);                                                                                \
    } while (0)

/* Polls sql every 100 ms until its first value is want: 1 when it is, 0 once
 * timeout_ms of polling (the sleeps between polls; the queries' own time
 * comes on top) have passed, with the last value on stderr. The server going
 * away (no connection, SQLSTATE class 08, 57P01-57P03: a restart) counts as
 * "not yet"; any other error fails the test. A bound on waiting, not a timed
 * assertion: the condition is what is tested. */
int testenv_wait_for(const char *db_url, const char *want, long timeout_ms, const char *sql);
/* testenv_wait_for of a printf-formatted statement. */
int testenv_wait_forf(const char *db_url, const char *want, long timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The URL with login as its user (same scheme, host, port, database and
 * query; new). Fails the test if url has no "scheme://user@". */
char *testenv_url_as(const char *url, const char *login);

/* Database clock minus this machine's real-time clock, in µs: of samples
 * reads of warren_store_now, the one with the shortest round trip, against
 * the middle of that trip. Fails the test on error. */
warren_us testenv_db_clock_offset(const char *db_url, int samples);

/* ------------------------------------------------------------ time */

/* Sleeps ms milliseconds (resuming after a signal). */
void testenv_sleep_ms(long ms);

/* CLOCK_MONOTONIC in milliseconds and in seconds. */
int64_t testenv_mono_ms(void);
double testenv_mono_s(void);

/* CLOCK_REALTIME in milliseconds and in microseconds. */
int64_t testenv_wall_ms(void);
warren_us testenv_wall_us(void);

/* An RFC 3339 instant (warren_time_parse) in µs; fails the test when text
 * does not parse. */
warren_us testenv_at(const char *text);

/* xorshift64: the next number of *state (never 0 if it starts non-zero),
 * for reproducible pseudo-random test input. */
uint64_t testenv_xorshift(uint64_t *state);

/* ------------------------------------------------------------ files */

/* The whole file (new, NUL-terminated after its *len bytes; len may be
 * NULL). Fails the test if it cannot be opened or read. */
char *testenv_read_file(const char *path, size_t *len);

/* Like testenv_read_file, but a file that does not exist (yet) reads as ""
 * (a log a process has not written, a pid file not made yet). */
char *testenv_read_file_or_empty(const char *path);

/* The first len - 1 bytes of the file into buf, NUL-terminated. Fails the
 * test if it cannot be opened. */
void testenv_read_into(const char *path, char *buf, size_t len);

/* Writes len bytes of data (or the string text) to path, created or
 * truncated, then chmod(mode). Fails the test on any error. */
void testenv_write_bytes(const char *path, const void *data, size_t len, mode_t mode);
void testenv_write_file(const char *path, const char *text, mode_t mode);

/* A new file /tmp/PREFIX-XXXXXXSUFFIX (mkstemps; SUFFIX may be "") holding
 * text; its path (new; unlink it when done). Fails the test on error. */
char *testenv_temp_file(const char *prefix, const char *suffix, const char *text);

/* A new directory /tmp/PREFIX-XXXXXX (mkdtemp); its path (new). Fails the
 * test if it cannot be made. Left behind, like the databases. */
char *testenv_tmpdir(const char *prefix);

/* Polls the file at path every 50 ms until it contains needle: 1 when it
 * does, 0 once timeout_ms of polling have passed (the file then printed to
 * stderr). A missing file has nothing in it (yet). */
int testenv_file_wait(const char *path, const char *needle, long timeout_ms);

/* ------------------------------------------------------------ processes */

/* Waits up to timeout_ms (polling every 50 ms) for the child pid to exit:
 * its exit status, 128 + the signal that ended it, or -1 when it did not
 * exit in time (then it is killed with SIGKILL and reaped). */
int testenv_wait_exit(pid_t pid, long timeout_ms);

/* Publishes m on amqp_url in confirm mode and waits up to confirm_timeout_ms
 * for the broker's confirm. Fails the test on error. */
void testenv_publish(const char *amqp_url, const warren_message *m, int confirm_timeout_ms);

/* ------------------------------------------------------------ config */

/* Declares the topology of queues (warren_broker_topology) on amqp_url.
 * Fails the test on error. */
void testenv_topology(const char *amqp_url, const char *const *queues, size_t n,
                      int delivery_limit);

/* Loads the config file at path (new; its diagnostics on stderr). Fails the
 * test if it does not load. */
warren_config *testenv_config_load(const char *path);

/* Syncs cfg into db_url (as `warren sync`) and, unless amqp_url is NULL,
 * declares the topology of its queues on amqp_url (as `warren topology`).
 * Fails the test on error. */
void testenv_config_apply(const warren_config *cfg, const char *db_url, const char *amqp_url);

/* ------------------------------------------------------------ benchmarks */

/* Prints "PROGRAM: what: detail" (": detail" only when detail is not NULL)
 * on stderr and exits with status 1. */
void testenv_die(const char *what, const char *detail) __attribute__((noreturn));

/* /proc/loadavg's three figures as a JSON array "[1.00, 0.50, 0.25]" (each
 * -1 when it cannot be read). */
void testenv_loadavg(char *buf, size_t len);

/* This process's peak resident set (VmHWM) in KiB; -1 if unknown. */
long testenv_rss_peak_kib(void);

/* Set to 1 by the SIGTERM handler testenv_catch_term installs (with
 * sigaction, no SA_RESTART): a child process's stop flag, e.g. for
 * warren_planner_run or warren_worker_run. */
extern volatile sig_atomic_t testenv_term;
void testenv_catch_term(void);

/* ------------------------------------------------------------ executions
 * An effect sink keyed by run key (PRIMARY KEY, ON CONFLICT DO NOTHING) holds
 * at most one row per run by construction: it cannot show a handler that ran
 * twice. So every handler in the suite also appends one row per execution to
 * an execution log with no unique constraint, and the tests compare that log
 * with the runs: in a fault-free test executions = runs exactly; in a fault
 * test every extra execution must be one the test caused. */

/* The execution log table every handler appends to: public.execlog (run_key,
 * attempt, who, at), no key, no constraint beyond NOT NULL run_key. */
#define TESTENV_EXECLOG "public.execlog"

/* Creates TESTENV_EXECLOG in db_url (if missing). Fails the test on error. */
void testenv_execlog_create(const char *db_url);

/* Appends the lines of the file at path to TESTENV_EXECLOG: each line is
 * "RUN_KEY ATTEMPT [anything]" (what an exec handler appends with
 * `echo "$WARREN_RUN_KEY $WARREN_ATTEMPT ..." >> FILE`); the whole line goes
 * to `who`. A missing file loads nothing. Returns the number of lines loaded;
 * fails the test on error. */
long testenv_execlog_load(const char *db_url, const char *path);

/* Compares executions with runs. runs_sql selects (first column) the run keys
 * that must each have executed; log_sql selects one row per execution, run
 * key first (NULL: every row of TESTENV_EXECLOG); explained_sql (NULL: none)
 * selects the run keys the test itself made execute more than once (a killed
 * or paused holder's), which must have executed at least once. Returns NULL
 * when every expected run executed exactly once (explained ones at least
 * once) and nothing else executed; otherwise a new message listing the
 * missing, the unexplained duplicates (with their counts) and the unexpected
 * ones, for ck_assert_msg(why == NULL, "%s", why). Fails the test on an SQL
 * error. */
char *testenv_executions_mismatch(const char *db_url, const char *runs_sql, const char *log_sql,
                                  const char *explained_sql);

/* An identity of the running server that a restart changes: "pg" gives
 * pg_postmaster_start_time() of the admin URL's server, "rabbit" the node
 * name and OS pid from the management API (/api/nodes; a node that has just
 * started is asked again for up to 30 s until it reports its pid). New
 * string, or NULL when the server cannot be reached (message on stderr). Fault tests compare
 * it before and after a restart to prove the restart happened. */
char *testenv_server_identity(const char *which);

/* The real planner (relay, outbox, reconciler) on a thread of this process,
 * as `warren planner` runs it: testenv_planner_start creates it from cfg and
 * starts the thread (the test fails if it cannot);
 * testenv_planner_stop asks it to stop, joins and frees it (nothing if it
 * was not started). */
typedef struct testenv_planner {
    warren_planner *planner;
    pthread_t th;
    volatile sig_atomic_t stop;
    int running;
} testenv_planner;
void testenv_planner_start(testenv_planner *tp, const warren_config *cfg, const char *db_url,
                           const char *amqp_url, const warren_logger *log);
void testenv_planner_stop(testenv_planner *tp);

/* ------------------------------------------------------------ a stack
 * What the runners of the worker share: a fresh migrated database and vhost,
 * a new directory DIR holding the config DIR/warren.cfg that names them, the
 * config synced and its queues declared, the real planner on a thread and
 * `warren worker` processes. A runner's env may be this struct itself. */
#define TESTENV_MAX_WORKERS 8
typedef struct testenv_stack {
    char *db, *amqp;      /* the database's URL, the vhost's AMQP URL */
    char *dir, *cfg_path; /* DIR, DIR/warren.cfg */
    warren_config *cfg;   /* loaded by testenv_stack_config */
    testenv_planner planner;
    pid_t workers[TESTENV_MAX_WORKERS]; /* of testenv_stack_workers_start */
    int nworkers;
} testenv_stack;

/* Zeroes s; unsets WARREN_DATABASE_URL and WARREN_AMQP_URL (the config file
 * names the servers: nothing in the environment may override it); makes
 * the database (migrated), the vhost and DIR = /tmp/PREFIX-XXXXXX.
 * cfg_path is set, not written. */
void testenv_stack_init(testenv_stack *s, const char *prefix);

/* Writes text to cfg_path, loads it into s->cfg, syncs it and declares the
 * topology of its queues (testenv_config_apply). */
void testenv_stack_config(testenv_stack *s, const char *text);

/* testenv_planner_start of s->planner with s's config and servers. */
void testenv_stack_planner_start(testenv_stack *s, const warren_logger *log);

/* `warren worker -c CFG --id ID` (CFG: cfg_path, or s->cfg_path when NULL),
 * its stderr to DIR/LOG (appended if append, else truncated). Not one of
 * s->workers: the caller stops it. */
pid_t testenv_stack_worker(const testenv_stack *s, const char *cfg_path, const char *id,
                           const char *log, int append);

/* n more workers of s->cfg_path into s->workers, ids w1, w2, ... (counting
 * on from those already there), stderr to DIR/wI.log. */
void testenv_stack_workers_start(testenv_stack *s, int n);

/* SIGTERM to every worker of s->workers, then up to 10 s each to exit
 * (SIGKILL after); none left. */
void testenv_stack_workers_stop(testenv_stack *s);

/* testenv_file_wait of DIR/LOG. */
int testenv_stack_log_wait(const testenv_stack *s, const char *log, const char *needle,
                           long timeout_ms);

/* Stops the workers and the planner and frees s's memory (DIR stays). */
void testenv_stack_free(testenv_stack *s);

#endif
