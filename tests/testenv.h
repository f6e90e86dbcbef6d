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
#include <sys/types.h>
#include <pthread.h>
#include <signal.h>

#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>
#include <warren/planner.h>

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
 * starts the thread (0, or -1 with err set and nothing started);
 * testenv_planner_stop asks it to stop, joins and frees it (nothing if it
 * was not started). */
typedef struct testenv_planner {
    warren_planner *planner;
    pthread_t th;
    volatile sig_atomic_t stop;
    int running;
} testenv_planner;
int testenv_planner_start(testenv_planner *tp, const warren_config *cfg, const char *db_url,
                          const char *amqp_url, const warren_logger *log, warren_error *err);
void testenv_planner_stop(testenv_planner *tp);

#endif
