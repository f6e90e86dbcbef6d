/* check_store.c: the store against the real PostgreSQL of tests/servers.sh:
 * connecting (and failing clearly), migrations (twice, concurrently, broken
 * files, function files; an upgraded, a stepwise, a psql-installed and a
 * fresh database alike), job sync (add, change, remove, restore), the clock, LISTEN/NOTIFY,
 * reconnecting, the store_int.h helpers, and the `warren migrate`/`sync`
 * commands. Every test gets its own database (testenv_db). */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/config.h>
#include <warren/store.h>

#include "store_int.h"
#include "testenv.h"

#define SQL_DIR WARREN_SOURCE_DIR "/sql"

/* ---------------------------------------------------------------- helpers */

static warren_store *open_ok(const char *url)
{
    warren_store *st = NULL;
    warren_error err = {0};
    int rc = warren_store_open(url, NULL, &st, &err);
    ck_assert_msg(rc == 0, "open %s: %s", url, err.message);
    return st;
}

static warren_store *migrated_store(char **url_out)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, NULL, &err) == 0, "%s", err.message);
    *url_out = url;
    return st;
}

static int count_migration_files(void)
{
    DIR *d = opendir(SQL_DIR "/migrations");
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 8 && e->d_name[3] == '_' && strcmp(e->d_name + len - 4, ".sql") == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* First value as a string compared with want (NULL = SQL NULL). */
static void sql_eq(const char *url, const char *sql, const char *want)
{
    char *v = testenv_sql1(url, sql);
    if (want == NULL)
        ck_assert_msg(v == NULL, "%s: want NULL, got %s", sql, v);
    else
        ck_assert_msg(v != NULL && strcmp(v, want) == 0, "%s: want %s, got %s", sql, want,
                      v ? v : "NULL");
    free(v);
}

static warren_job job(char *name, warren_sched_kind kind, char *schedule, char *queue)
{
    warren_job j;
    memset(&j, 0, sizeof(j));
    j.name = name;
    j.kind = kind;
    j.schedule = schedule;
    j.timezone = "UTC";
    j.queue = queue;
    j.payload_json = "{}";
    j.retry_max_attempts = 5;
    j.retry_base_ms = 10000;
    j.retry_cap_ms = 600000;
    j.lease_ms = 30000;
    j.timeout_ms = 1800000;
    return j;
}

static warren_config config(warren_job *jobs, size_t n)
{
    warren_config c;
    memset(&c, 0, sizeof(c));
    c.planner.partitions = 64;
    c.jobs = jobs;
    c.njobs = n;
    return c;
}

static void sync_ok(warren_store *st, const warren_config *cfg, warren_sync_report *rep)
{
    warren_error err = {0};
    int rc = warren_store_sync(st, cfg, rep, &err);
    ck_assert_msg(rc == 0, "sync: %s", err.message);
}

static void assert_names(char **names, size_t n, const char *const *want, size_t nwant)
{
    ck_assert_uint_eq(n, nwant);
    for (size_t i = 0; i < n; i++)
        ck_assert_str_eq(names[i], want[i]);
}

/* Runs the warren binary with args through /bin/sh, capturing stdout+stderr.
 * Returns the exit status; *out gets the output (new). */
static int run_warren(const char *env, const char *args, char **out)
{
    char cmd[4096];

    snprintf(cmd, sizeof(cmd), "%s '%s' %s 2>&1", env ? env : "", WARREN_BINARY, args);
    *out = calloc(1, 65536);
    ck_assert_ptr_nonnull(*out);
    return testenv_run(cmd, *out, 65536);
}

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* ------------------------------------------------------------- connecting */

START_TEST(test_store_unreachable_server_is_edbconn_with_host_port)
{
    warren_store *st = NULL;
    warren_error err = {0};
    int rc = warren_store_open("postgresql://postgres@127.0.0.1:1/postgres", NULL, &st, &err);
    ck_assert_int_eq(rc, WARREN_EDBCONN);
    ck_assert_ptr_null(st);
    ck_assert_msg(strstr(err.message, "cannot connect to PostgreSQL at 127.0.0.1:1:") != NULL, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, "refused") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "WARREN_DATABASE_URL") != NULL, "%s", err.message);
}
END_TEST

START_TEST(test_store_silent_server_times_out_after_5s_by_default)
{
    /* A socket that listens but never answers: the TCP handshake completes
     * in the kernel, the startup packet is never answered. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    char url[128];
    struct timespec t0;
    warren_store *st = NULL;
    warren_error err = {0};
    double took;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    snprintf(url, sizeof(url), "postgresql://postgres@127.0.0.1:%d/postgres", ntohs(a.sin_port));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(warren_store_open(url, NULL, &st, &err), WARREN_EDBCONN);
    took = since(&t0);
    ck_assert_msg(took > 4.0 && took < 9.0, "took %.1f s", took);
    ck_assert_msg(strstr(err.message, "timeout") != NULL, "%s", err.message);

    /* A URL's own connect_timeout wins. */
    snprintf(url, sizeof(url), "postgresql://postgres@127.0.0.1:%d/postgres?connect_timeout=2",
             ntohs(a.sin_port));
    warren_error_clear(&err);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(warren_store_open(url, NULL, &st, &err), WARREN_EDBCONN);
    took = since(&t0);
    ck_assert_msg(took > 1.5 && took < 4.0, "took %.1f s", took);
    close(fd);
}
END_TEST

START_TEST(test_store_bad_url_is_einval_without_echoing_password)
{
    warren_store *st = NULL;
    warren_error err = {0};
    int rc = warren_store_open("postgresql://u:s3cret@[::1/db", NULL, &st, &err);
    ck_assert_int_eq(rc, WARREN_EINVAL);
    ck_assert_ptr_null(strstr(err.message, "s3cret"));
    ck_assert_msg(strstr(err.message, "invalid database URL") != NULL, "%s", err.message);
}
END_TEST

/* libpq quotes the whole password in this parse error; every byte of it is masked. */
START_TEST(test_store_bad_url_masks_all_of_a_quoted_password)
{
    warren_store *st = NULL;
    warren_error err = {0};
    int rc = warren_store_open("postgresql://u:pass%ZZword@localhost/db", NULL, &st, &err);
    ck_assert_int_eq(rc, WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "invalid percent-encoded token") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "word") == NULL && strstr(err.message, "ZZ") == NULL, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, "***********") != NULL, "%s", err.message);
}
END_TEST

START_TEST(test_store_missing_database_says_create_it)
{
    char url[512];
    warren_store *st = NULL;
    warren_error err = {0};
    const char *admin = testenv_pg_admin_url();
    const char *slash = strrchr(admin, '/');
    snprintf(url, sizeof(url), "%.*s/warren_no_such_db", (int)(slash - admin), admin);
    ck_assert_int_eq(warren_store_open(url, NULL, &st, &err), WARREN_EDBCONN);
    ck_assert_msg(strstr(err.message, "\"warren_no_such_db\" does not exist") != NULL, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, "createdb") != NULL, "%s", err.message);
}
END_TEST

START_TEST(test_store_clock_is_the_servers)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    warren_us a = 0, b = 0;
    const char *server_us = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint";
    char *before = testenv_sql1(url, server_us);
    ck_assert_int_eq(warren_store_now(st, &a, &err), 0);
    ck_assert_int_eq(warren_store_now(st, &b, &err), 0);
    char *after = testenv_sql1(url, server_us);
    ck_assert_int_gt(b, a); /* clock_timestamp(), not the transaction's now() */
    /* The server's clock, read between two readings of it on another
     * connection (whatever this machine's clock says). */
    ck_assert_ptr_nonnull(before);
    ck_assert_ptr_nonnull(after);
    ck_assert_int_le(atoll(before), a);
    ck_assert_int_le(b, atoll(after));
    free(before);
    free(after);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_reconnects_after_backend_killed_and_listens_again)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_store *other = open_ok(url);
    warren_error err = {0};
    PGresult *res = NULL;
    char sql[256];
    int got = 0;
    warren_us now;

    ck_assert_int_eq(warren_store_listen(st, &err), 0);
    ck_assert_int_eq(warren__store_exec(st, "SELECT pg_backend_pid()", 0, NULL, &res, "pid", &err),
                     0);
    char *gone =
        testenv_fmt("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", PQgetvalue(res, 0, 0));
    snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%s)", PQgetvalue(res, 0, 0));
    PQclear(res);
    ck_assert_int_eq(warren__store_exec(other, sql, 0, NULL, NULL, "kill", &err), 0);
    /* the backend has exited (pg_terminate_backend only signals it) */
    char *left = NULL;
    for (int i = 0; i < 200; i++) {
        free(left);
        left = testenv_sql1(url, gone);
        if (left != NULL && strcmp(left, "0") == 0)
            break;
        usleep(20 * 1000);
    }
    ck_assert_str_eq(left, "0");
    free(left);
    free(gone);

    /* A planner waiting for notifications learns at once, not at its timeout. */
    {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ck_assert_int_eq(warren_store_wait_notify(st, 10000, &got, &err), WARREN_EDBCONN);
        ck_assert_msg(since(&t0) < 5.0, "noticed after %.1f s", since(&t0));
    }
    ck_assert_msg(strstr(err.message, "lost connection to PostgreSQL at 127.0.0.1:") != NULL, "%s",
                  err.message);
    ck_assert_int_eq(warren_store_connected(st), 0);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_store_now(st, &now, &err), WARREN_EDBCONN);

    warren_error_clear(&err);
    ck_assert_msg(warren_store_reconnect(st, &err) == 0, "%s", err.message);
    ck_assert_int_eq(warren_store_connected(st), 1);
    ck_assert_int_eq(warren_store_now(st, &now, &err), 0);
    /* The LISTEN came back with the connection. */
    ck_assert_int_eq(warren_store_notify(other, "after reconnect", &err), 0);
    ck_assert_int_eq(warren_store_wait_notify(st, 5000, &got, &err), 0);
    ck_assert_int_eq(got, 1);
    warren_store_free(other);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_reconnect_to_vanished_database_fails_with_edbconn)
{
    /* The database goes away under a connected store (DROP ... WITH FORCE
     * terminates its backend): the next call and every reconnect fail with
     * EDBCONN naming host:port, which daemons back off on. */
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    warren_us now;
    char *db = testenv_sql1(url, "SELECT current_database()");
    char sql[256];

    snprintf(sql, sizeof(sql), "DROP DATABASE \"%s\" WITH (FORCE)", db);
    ck_assert_int_eq(testenv_psql(testenv_pg_admin_url(), sql, NULL), 0);
    ck_assert_int_eq(warren_store_now(st, &now, &err), WARREN_EDBCONN);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_store_reconnect(st, &err), WARREN_EDBCONN);
    ck_assert_msg(strstr(err.message, "cannot reconnect to PostgreSQL at 127.0.0.1:") != NULL, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, "does not exist") != NULL, "%s", err.message);
    ck_assert_int_eq(warren_store_connected(st), 0);
    warren_store_free(st);
    free(db);
    free(url);
}
END_TEST

/* ---------------------------------------------------------------- helpers */

START_TEST(test_store_helpers_translate_sql_errors_with_sqlstate)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    const char *p[1] = {"x"};
    ck_assert_int_eq(warren__store_exec(st, "SELECT 1/0", 0, NULL, NULL, "divide", &err),
                     WARREN_EDB);
    ck_assert_msg(strstr(err.message, "divide: division by zero (SQLSTATE 22012)") != NULL, "%s",
                  err.message);
    ck_assert_str_eq(warren__store_sqlstate(st), "22012");
    /* A failed statement inside a transaction: COMMIT is reported as a failure. */
    warren_error_clear(&err);
    ck_assert_int_eq(warren__store_begin(st, &err), 0);
    ck_assert_int_eq(warren__store_exec(st, "SELECT $1::int", 1, p, NULL, "cast", &err),
                     WARREN_EDB);
    warren_error_clear(&err);
    ck_assert_int_eq(warren__store_commit(st, &err), WARREN_EDB);
    ck_assert_msg(strstr(err.message, "rolled it back") != NULL, "%s", err.message);
    ck_assert_int_eq(PQtransactionStatus(warren__store_conn(st)), PQTRANS_IDLE);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_prepared_statements_survive_reconnect)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    PGresult *res = NULL;
    const char *p[1] = {"41"};
    for (int i = 0; i < 3; i++) {
        if (i == 2)
            ck_assert_int_eq(warren_store_reconnect(st, &err), 0);
        ck_assert_msg(warren__store_exec_prepared(st, "t_add1", "SELECT $1::int + 1", 1, p, &res,
                                                  "add", &err) == 0,
                      "%s", err.message);
        ck_assert_str_eq(PQgetvalue(res, 0, 0), "42");
        PQclear(res);
    }
    /* DISCARD ALL drops it behind our back: re-prepared transparently. */
    ck_assert_int_eq(warren__store_exec_simple(st, "DISCARD ALL", "discard", &err), 0);
    ck_assert_msg(warren__store_exec_prepared(st, "t_add1", "SELECT $1::int + 1", 1, p, &res, "add",
                                              &err) == 0,
                  "%s", err.message);
    PQclear(res);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_timestamps_round_trip_to_the_microsecond)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    PGresult *res = NULL;
    char buf[WARREN_TIME_BUF];
    /* 2026-03-08T07:00:00.123456Z, a pre-1970 instant, and one in 2100. */
    const warren_us samples[] = {INT64_C(1772953200123456), INT64_C(-86399999999),
                                 INT64_C(4102444800000001)};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        const char *p[1] = {warren__store_us_param(samples[i], buf, sizeof(buf))};
        warren_us back = 0, epoch = 0;
        ck_assert_int_eq(warren__store_exec(st,
                                            "SELECT $1::timestamptz, "
                                            "(extract(epoch FROM $1::timestamptz) * 1000000)::int8",
                                            1, p, &res, "ts", &err),
                         0);
        ck_assert_int_eq(warren__store_get_us(res, 0, 0, &back), 0);
        ck_assert_int_eq(warren__store_get_us(res, 0, 1, &epoch), 0);
        ck_assert_int_eq(back, samples[i]);
        ck_assert_int_eq(epoch, samples[i]);
        PQclear(res);
    }
    /* Other offsets the server may print (a session that changed TimeZone). */
    ck_assert_int_eq(warren__store_exec_simple(st, "SET TIME ZONE 'Asia/Kathmandu'", "tz", &err),
                     0);
    ck_assert_int_eq(warren__store_exec(st, "SELECT '2026-03-08 07:00:00.5+00'::timestamptz", 0,
                                        NULL, &res, "ts", &err),
                     0);
    {
        warren_us back = 0;
        ck_assert_int_eq(warren__store_get_us(res, 0, 0, &back), 0);
        ck_assert_int_eq(back, INT64_C(1772953200500000));
    }
    PQclear(res);
    /* PostgreSQL's last year does not fit warren_us: an error, not an overflow. */
    ck_assert_int_eq(warren__store_exec(st, "SELECT '294276-12-31 23:59:59+00'::timestamptz", 0,
                                        NULL, &res, "ts", &err),
                     0);
    {
        warren_us back = 0;
        ck_assert_int_eq(warren__store_get_us(res, 0, 0, &back), WARREN_ERANGE);
        ck_assert_int_eq(back, 0);
    }
    PQclear(res);
    warren_store_free(st);
    free(url);
}
END_TEST

/* ------------------------------------------------------------- migrations */

START_TEST(test_store_migrate_twice_applies_once)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    int applied = -1, n = count_migration_files();

    ck_assert_int_ge(n, 1);
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, n);
    ck_assert_int_eq(testenv_sql_long(url, "SELECT count(*) FROM warren.schema_migrations"), n);
    sql_eq(url, "SELECT to_regclass('warren.runs') IS NOT NULL", "t");
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(testenv_sql_long(url, "SELECT count(*) FROM warren.schema_migrations"), n);
    /* The lock was released: another session can take it at once. */
    sql_eq(url,
           "BEGIN; SET LOCAL lock_timeout = '1s'; "
           "LOCK TABLE warren.schema_migrations IN SHARE ROW EXCLUSIVE MODE; COMMIT; SELECT 't'",
           "t");
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_migrate_after_psql_application_applies_nothing)
{
    /* testenv_db_migrated applies every file with plain PQexec, as psql
     * would: each file records its own version, so migrate finds none to do. */
    char *url = testenv_db_migrated();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    int applied = -1;
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_msg(applied == 0,
                  "%d migrations were applied again: every sql/migrations/NNN_*.sql must "
                  "INSERT its own "
                  "row into warren.schema_migrations",
                  applied);
    warren_store_free(st);
    free(url);
}
END_TEST

#define NPROC 4

START_TEST(test_store_migrate_from_several_processes_at_once)
{
    char *url = testenv_db();
    int n = count_migration_files();
    int gate[2], results[2];
    pid_t pids[NPROC];
    int total = 0;

    ck_assert_int_eq(pipe(gate), 0);
    ck_assert_int_eq(pipe(results), 0);
    for (int i = 0; i < NPROC; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            warren_store *st = NULL;
            warren_error err = {0};
            int applied = -1;
            char c;
            close(gate[1]);
            if (warren_store_open(url, NULL, &st, &err) != 0)
                _exit(100);
            /* Everyone connected: start together when the gate closes. */
            if (read(gate[0], &c, 1) != 0)
                _exit(101);
            if (warren_store_migrate(st, SQL_DIR, &applied, &err) != 0) {
                fprintf(stderr, "child migrate: %s\n", err.message);
                _exit(102);
            }
            if (write(results[1], &applied, sizeof(applied)) != sizeof(applied))
                _exit(103);
            warren_store_free(st);
            _exit(0);
        }
    }
    close(gate[0]);
    close(results[1]);
    /* every child connected (its session is open) before the gate closes */
    char *connected = NULL;
    for (int i = 0; i < 500; i++) {
        free(connected);
        connected = testenv_sql1(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                      "current_database() AND pid <> pg_backend_pid()");
        if (connected != NULL && atoi(connected) >= NPROC)
            break;
        usleep(20 * 1000);
    }
    ck_assert_msg(connected != NULL && atoi(connected) >= NPROC, "%s of %d children connected",
                  connected ? connected : "?", NPROC);
    free(connected);
    close(gate[1]);
    for (int i = 0; i < NPROC; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %d", i,
                      status);
    }
    for (int i = 0; i < NPROC; i++) {
        int applied = 0;
        ck_assert_int_eq(read(results[0], &applied, sizeof(applied)), (ssize_t)sizeof(applied));
        total += applied;
    }
    close(results[0]);
    ck_assert_int_eq(total, n); /* each file applied exactly once overall */
    ck_assert_int_eq(testenv_sql_long(url, "SELECT count(*) FROM warren.schema_migrations"), n);
    free(url);
}
END_TEST

/* A directory laid out as sql/: names are paths in it ("functions.sql",
 * "migrations/001_a.sql", "functions/f.sql"); migrations/ and functions/
 * always exist. */
static char *make_sql_dir(const char *const *names, const char *const *texts, size_t n)
{
    char tmpl[] = "/tmp/warren_sql_XXXXXX";
    char *dir = mkdtemp(tmpl);
    char path[512];
    ck_assert_ptr_nonnull(dir);
    snprintf(path, sizeof(path), "%s/migrations", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/functions", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    for (size_t i = 0; i < n; i++) {
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(texts[i], f);
        fclose(f);
    }
    return strdup(dir);
}

static void put_sql_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void remove_sql_dir(const char *dir)
{
    char cmd[600];
    char out[64];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(testenv_run(cmd, out, sizeof(out)), 0);
}

START_TEST(test_store_migrate_broken_file_names_file_and_line_and_rolls_back)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    int applied = -1;
    const char *names[] = {"migrations/001_a.sql",    "migrations/002_b.sql",
                           "migrations/003_c.sql",    "migrations/README",
                           "migrations/01_short.sql", "functions.sql"};
    const char *texts[] = {
        "CREATE SCHEMA IF NOT EXISTS warren;\nCREATE TABLE warren.a (x int);\n",
        "CREATE TABLE warren.b (x int);\n-- comment\nSELEC 1;\n",
        "CREATE TABLE warren.c (x int);\n",
        "not sql",
        "garbage",
        "-- no function files\n",
    };
    char *dir = make_sql_dir(names, texts, 6);

    ck_assert_int_eq(warren_store_migrate(st, dir, &applied, &err), WARREN_EDB);
    ck_assert_msg(strstr(err.message, "002_b.sql:3:") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "syntax error") != NULL, "%s", err.message);
    ck_assert_int_eq(applied, 0);
    /* One transaction: 001 is rolled back with 002; 003 not tried. A first
     * install leaves nothing behind, not even warren.schema_migrations. */
    sql_eq(url, "SELECT to_regclass('warren.schema_migrations') IS NOT NULL", "f");
    sql_eq(url, "SELECT to_regclass('warren.a') IS NOT NULL", "f");
    sql_eq(url, "SELECT to_regclass('warren.b') IS NOT NULL", "f");
    sql_eq(url, "SELECT to_regclass('warren.c') IS NOT NULL", "f");
    /* The store is usable afterwards (no transaction left open). */
    ck_assert_int_eq(PQtransactionStatus(warren__store_conn(st)), PQTRANS_IDLE);
    /* Fixed, it applies all three. */
    put_sql_file(dir, "migrations/002_b.sql", "CREATE TABLE warren.b (x int);\n");
    ck_assert_msg(warren_store_migrate(st, dir, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, 3);
    sql_eq(url, "SELECT string_agg(name, ',' ORDER BY version) FROM warren.schema_migrations",
           "001_a,002_b,003_c");
    warren_store_free(st);
    remove_sql_dir(dir);
    free(dir);
    free(url);
}
END_TEST

START_TEST(test_store_migrate_rejects_missing_dir_and_duplicate_versions)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    const char *names[] = {"migrations/001_a.sql", "migrations/001_b.sql", "functions.sql"};
    const char *texts[] = {"SELECT 1;", "SELECT 2;", ""};
    char *dir = make_sql_dir(names, texts, 3);

    ck_assert_int_eq(warren_store_migrate(st, "/nonexistent/sql", NULL, &err), WARREN_ENOENT);
    ck_assert_msg(strstr(err.message, "/nonexistent/sql") != NULL, "%s", err.message);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_store_migrate(st, dir, NULL, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "share version 001") != NULL, "%s", err.message);
    warren_store_free(st);
    remove_sql_dir(dir);
    free(dir);
    free(url);
}
END_TEST

START_TEST(test_store_migrate_applies_the_listed_function_files_in_order_every_time)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_error err = {0};
    int applied = -1;
    /* f2 is an SQL function calling f1: created before f1, it fails. */
    const char *names[] = {"migrations/001_a.sql", "functions.sql", "functions/f1.sql",
                           "functions/f2.sql"};
    const char *texts[] = {
        "CREATE SCHEMA IF NOT EXISTS warren;\nCREATE TABLE warren.a (x int);\n",
        "-- f1 first\n\n\\ir functions/f1.sql\n  \\ir functions/f2.sql  \n",
        "CREATE OR REPLACE FUNCTION warren.f1() RETURNS int LANGUAGE sql AS 'SELECT 1';\n",
        "CREATE OR REPLACE FUNCTION warren.f2() RETURNS int LANGUAGE sql\n"
        "AS 'SELECT warren.f1() + 1';\n",
    };
    char *dir = make_sql_dir(names, texts, 4);

    ck_assert_msg(warren_store_migrate(st, dir, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, 1);
    sql_eq(url, "SELECT warren.f2()", "2");
    /* Re-applied by every migrate, also with no migration pending. */
    put_sql_file(
        dir, "functions/f1.sql",
        "CREATE OR REPLACE FUNCTION warren.f1() RETURNS int LANGUAGE sql AS 'SELECT 10';\n");
    ck_assert_msg(warren_store_migrate(st, dir, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, 0);
    sql_eq(url, "SELECT warren.f2()", "11");

    /* A broken function file names FILE:LINE and rolls back the migration
     * applied in the same run. */
    put_sql_file(dir, "migrations/002_b.sql", "CREATE TABLE warren.b (x int);\n");
    put_sql_file(dir, "functions/f2.sql",
                 "CREATE OR REPLACE FUNCTION warren.f2() RETURNS int LANGUAGE sql\n"
                 "AS 'SELECT warren.f1() + 2';\nSELEC 1;\n");
    ck_assert_int_eq(warren_store_migrate(st, dir, &applied, &err), WARREN_EDB);
    ck_assert_msg(strstr(err.message, "functions/f2.sql:3:") != NULL, "%s", err.message);
    ck_assert_int_eq(applied, 0);
    sql_eq(url, "SELECT to_regclass('warren.b') IS NOT NULL", "f");
    sql_eq(url, "SELECT count(*) FROM warren.schema_migrations", "1");
    sql_eq(url, "SELECT warren.f2()", "11");
    warren_error_clear(&err);

    /* A file in functions/ that the list does not name is refused before
     * anything is applied. */
    put_sql_file(dir, "functions/f2.sql",
                 "CREATE OR REPLACE FUNCTION warren.f2() RETURNS int LANGUAGE sql\n"
                 "AS 'SELECT warren.f1() + 2';\n");
    put_sql_file(dir, "functions/stray.sql", "SELECT 1;\n");
    ck_assert_int_eq(warren_store_migrate(st, dir, &applied, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "stray.sql is not listed in") != NULL, "%s", err.message);
    sql_eq(url, "SELECT to_regclass('warren.b') IS NOT NULL", "f");
    warren_error_clear(&err);

    /* So is a line of the list that is not "\ir functions/NAME.sql". */
    put_sql_file(dir, "functions.sql",
                 "\\ir functions/f1.sql\n\\ir functions/f2.sql\n\\ir functions/stray.sql\n"
                 "SELECT 1;\n");
    ck_assert_int_eq(warren_store_migrate(st, dir, &applied, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "functions.sql:4: expected") != NULL, "%s", err.message);
    warren_error_clear(&err);

    /* And a listed file that is missing. */
    put_sql_file(dir, "functions.sql",
                 "\\ir functions/f1.sql\n\\ir functions/f2.sql\n\\ir functions/stray.sql\n"
                 "\\ir functions/gone.sql\n");
    ck_assert_int_eq(warren_store_migrate(st, dir, &applied, &err), WARREN_ENOENT);
    ck_assert_msg(strstr(err.message, "gone.sql") != NULL, "%s", err.message);
    sql_eq(url, "SELECT to_regclass('warren.b') IS NOT NULL", "f");
    ck_assert_int_eq(PQtransactionStatus(warren__store_conn(st)), PQTRANS_IDLE);
    warren_store_free(st);
    remove_sql_dir(dir);
    free(dir);
    free(url);
}
END_TEST

/* The text of path, upper-cased, without its -- comments (new). */
static char *sql_code(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text;
    long len;
    size_t o = 0;
    int comment = 0;

    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, (size_t)len + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    for (long i = 0; i < len; i++) {
        if (text[i] == '-' && text[i + 1] == '-')
            comment = 1;
        else if (text[i] == '\n')
            comment = 0;
        if (!comment)
            text[o++] = (char)toupper((unsigned char)text[i]);
    }
    text[o] = '\0';
    return text;
}

START_TEST(test_store_migrations_hold_schema_and_function_files_hold_functions)
{
    /* The equivalence below cannot see a function a new migration creates
     * (both databases run it): migrations create no function (but run_key,
     * which runs.run_key was generated from, runs_fill_key, the trigger
     * that fills it in since 012, and jobs_mark_replan, the trigger that
     * marks warren.jobs.replan since 017, and worker_grants_make_slots, the
     * trigger that makes a granted login's wait slots since 019: part of
     * their tables) and grant nothing; function
     * files change no table. */
    static const char *const not_in_migrations[] = {"FUNCTION WARREN.", "GRANT ", "REVOKE ",
                                                    "CREATE ROLE"};
    static const struct {
        const char *file, *function;
    } table_functions[] = {{"001_schema.sql", "FUNCTION WARREN.RUN_KEY("},
                           {"012_api_jobs.sql", "FUNCTION WARREN.RUNS_FILL_KEY("},
                           {"017_jobs_replan.sql", "FUNCTION WARREN.JOBS_MARK_REPLAN("},
                           {"019_claim_locks.sql", "FUNCTION WARREN.WORKER_GRANTS_MAKE_SLOTS("}};
    static const char *const not_in_functions[] = {"CREATE TABLE", "ALTER TABLE", "CREATE INDEX",
                                                   "CREATE UNIQUE INDEX", "DROP TABLE"};
    const char *dirs[2] = {SQL_DIR "/migrations", SQL_DIR "/functions"};
    int nfiles[2] = {0, 0};

    for (int k = 0; k < 2; k++) {
        DIR *d = opendir(dirs[k]);
        struct dirent *e;
        ck_assert_ptr_nonnull(d);
        while ((e = readdir(d)) != NULL) {
            size_t len = strlen(e->d_name);
            char path[600], *code;
            if (len < 5 || strcmp(e->d_name + len - 4, ".sql") != 0)
                continue;
            nfiles[k]++;
            snprintf(path, sizeof(path), "%s/%s", dirs[k], e->d_name);
            code = sql_code(path);
            if (k == 0) {
                for (size_t i = 0; i < 4; i++) {
                    const char *hit = code;
                    while ((hit = strstr(hit, not_in_migrations[i])) != NULL) {
                        int allowed = 0;
                        for (size_t t = 0;
                             i == 0 && t < sizeof(table_functions) / sizeof(table_functions[0]);
                             t++)
                            allowed |= strcmp(e->d_name, table_functions[t].file) == 0 &&
                                       strncmp(hit, table_functions[t].function,
                                               strlen(table_functions[t].function)) == 0;
                        int drop = i == 0 && hit >= code + 5 && strncmp(hit - 5, "DROP ", 5) == 0;
                        ck_assert_msg(allowed || drop,
                                      "%s: \"%.40s\": migrations hold tables, columns, indexes "
                                      "and drops; functions and grants go in sql/functions/",
                                      path, hit);
                        hit++;
                    }
                }
            } else {
                for (size_t i = 0; i < 5; i++)
                    ck_assert_msg(strstr(code, not_in_functions[i]) == NULL,
                                  "%s: %s belongs in a migration", path, not_in_functions[i]);
            }
            free(code);
        }
        closedir(d);
    }
    ck_assert_int_ge(nfiles[0], 9);
    ck_assert_int_ge(nfiles[1], 2);
}
END_TEST

/* Everything of schema warren that an upgrade and a fresh install must agree
 * on, one sorted line (or function definition) per object: functions (their
 * definition, owner, ACL and comment), relations (owner, ACL, comment),
 * columns (type, nullability, default, generation, comment), indexes,
 * constraints, triggers, the schema itself and the recorded migrations. */
static const char FINGERPRINT_SQL[] =
    "SELECT string_agg(x, E'\\n' ORDER BY x) FROM ("
    " SELECT 'function ' || p.oid::regprocedure::text || E'\\n' || pg_get_functiondef(p.oid)"
    "   || E'\\nowner ' || pg_get_userbyid(p.proowner)"
    "   || E'\\nacl ' || coalesce(p.proacl::text, '(default)')"
    "   || E'\\ncomment ' || coalesce(obj_description(p.oid, 'pg_proc'), '(none)') AS x"
    "   FROM pg_proc p WHERE p.pronamespace = 'warren'::regnamespace"
    " UNION ALL"
    " SELECT 'relation ' || c.oid::regclass::text || ' kind ' || c.relkind::text"
    "   || ' owner ' || pg_get_userbyid(c.relowner) || ' acl ' || coalesce(c.relacl::text, "
    "'(default)')"
    "   || ' comment ' || coalesce(obj_description(c.oid, 'pg_class'), '(none)')"
    "   FROM pg_class c WHERE c.relnamespace = 'warren'::regnamespace"
    " UNION ALL"
    " SELECT 'column ' || c.oid::regclass::text || '.' || a.attname || ' #' || a.attnum"
    "   || ' ' || format_type(a.atttypid, a.atttypmod)"
    "   || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END"
    "   || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '(none)')"
    "   || ' generated ' || a.attgenerated::text"
    "   || ' comment ' || coalesce(col_description(c.oid, a.attnum), '(none)')"
    "   FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    "   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
    "   WHERE c.relnamespace = 'warren'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped"
    " UNION ALL"
    " SELECT 'index ' || i.indexname || ' ' || i.indexdef || ' comment '"
    "   || coalesce(obj_description(to_regclass('warren.' || i.indexname), 'pg_class'), "
    "'(none)')"
    "   FROM pg_indexes i WHERE i.schemaname = 'warren'"
    " UNION ALL"
    " SELECT 'constraint ' || n.conrelid::regclass::text || '.' || n.conname || ' '"
    "   || pg_get_constraintdef(n.oid)"
    "   FROM pg_constraint n WHERE n.connamespace = 'warren'::regnamespace"
    " UNION ALL"
    " SELECT 'trigger ' || t.tgrelid::regclass::text || '.' || t.tgname || ' '"
    "   || pg_get_triggerdef(t.oid)"
    "   FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
    "   WHERE c.relnamespace = 'warren'::regnamespace AND NOT t.tgisinternal"
    " UNION ALL"
    " SELECT 'schema owner ' || pg_get_userbyid(s.nspowner) || ' acl '"
    "   || coalesce(s.nspacl::text, '(default)') || ' comment '"
    "   || coalesce(obj_description(s.oid, 'pg_namespace'), '(none)')"
    "   FROM pg_namespace s WHERE s.nspname = 'warren'"
    " UNION ALL"
    " SELECT 'migration ' || m.version || ' ' || m.name FROM warren.schema_migrations m"
    ") f";

static char *fingerprint(const char *url)
{
    char *fp = testenv_sql1(url, FINGERPRINT_SQL);
    ck_assert_ptr_nonnull(fp);
    return fp;
}

/* Fails naming the first line where the two fingerprints part. */
static void assert_same_schema(const char *name_a, const char *a, const char *name_b, const char *b)
{
    size_t i = 0, line = 1, start = 0;
    int na, nb;

    while (a[i] != '\0' && a[i] == b[i]) {
        if (a[i] == '\n') {
            line++;
            start = i + 1;
        }
        i++;
    }
    if (a[i] == '\0' && b[i] == '\0')
        return;
    na = (int)strcspn(a + start, "\n");
    nb = (int)strcspn(b + start, "\n");
    ck_abort_msg("schema warren differs at line %zu:\n  %s: %.*s\n  %s: %.*s", line, name_a, na,
                 a + start, name_b, nb, b + start);
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Applies the frozen files of the layout before sql/functions/ existed,
 * one by one, each in its own transaction, as `warren migrate` did then
 * (each records its own version): a database as production has it. */
static void apply_legacy(const char *url, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char *names[64];
    size_t n = 0;
    PGconn *c = PQconnectdb(url);

    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    while ((e = readdir(d)) != NULL)
        if (strlen(e->d_name) > 4 && strcmp(e->d_name + strlen(e->d_name) - 4, ".sql") == 0) {
            ck_assert_uint_lt(n, 64);
            names[n++] = strdup(e->d_name);
        }
    closedir(d);
    ck_assert_uint_eq(n, 9);
    qsort(names, n, sizeof(names[0]), cmp_str);
    for (size_t i = 0; i < n; i++) {
        char path[600];
        FILE *f;
        long len;
        char *text;
        PGresult *res;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = calloc(1, (size_t)len + 1);
        ck_assert_ptr_nonnull(text);
        ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
        fclose(f);
        PQclear(PQexec(c, "BEGIN"));
        res = PQexec(c, text);
        ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK ||
                          PQresultStatus(res) == PGRES_TUPLES_OK,
                      "%s: %s", path, PQerrorMessage(c));
        PQclear(res);
        res = PQexec(c, "COMMIT");
        ck_assert_str_eq(PQcmdStatus(res), "COMMIT");
        PQclear(res);
        free(text);
        free(names[i]);
    }
    PQfinish(c);
}

/* The versions of the migrations in sql/migrations, ascending. */
static int migration_versions(int *out, int cap)
{
    DIR *d = opendir(SQL_DIR "/migrations");
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 8 && e->d_name[3] == '_' && strcmp(e->d_name + len - 4, ".sql") == 0) {
            ck_assert_int_lt(n, cap);
            out[n++] = atoi(e->d_name);
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

START_TEST(test_store_migrate_upgraded_stepwise_fresh_and_psql_databases_are_identical)
{
    char *fresh = testenv_db(), *upgraded = testenv_db(), *stepwise = testenv_db(),
         *psql = testenv_db();
    warren_store *st;
    warren_error err = {0};
    int applied = -1, versions[256], nv = migration_versions(versions, 256);
    char *fp_fresh, *fp, *cmd, out[8192];

    ck_assert_int_ge(nv, 9);
    /* B: fresh, the new migrate. */
    st = open_ok(fresh);
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, nv);
    warren_store_free(st);
    fp_fresh = fingerprint(fresh);
    ck_assert_msg(strstr(fp_fresh, "function warren.claim(text,text)\n") != NULL, "%s", fp_fresh);

    /* A: production's version-9 database, built by the old files, then the
     * new migrate: only the migrations after 009, then the function files. */
    apply_legacy(upgraded, WARREN_TEST_DATA "/sql/legacy-009");
    sql_eq(upgraded, "SELECT max(version) FROM warren.schema_migrations", "9");
    st = open_ok(upgraded);
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, nv - 9);
    warren_store_free(st);
    fp = fingerprint(upgraded);
    assert_same_schema("fresh", fp_fresh, "upgraded from legacy 009", fp);
    free(fp);

    /* C: the new layout one version at a time (the function files applied
     * after each step, on every intermediate schema). */
    st = open_ok(stepwise);
    for (int i = 0; i < nv; i++) {
        ck_assert_msg(warren__store_migrate_to(st, SQL_DIR, versions[i], &applied, &err) == 0,
                      "to %d: %s", versions[i], err.message);
        ck_assert_int_eq(applied, 1);
    }
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, 0);
    warren_store_free(st);
    fp = fingerprint(stepwise);
    assert_same_schema("fresh", fp_fresh, "stepwise", fp);
    free(fp);

    /* D: psql -f sql/install.sql, twice (safe to re-run), then migrate finds
     * nothing to do. */
    cmd = testenv_fmt("P=/usr/lib/postgresql/15/bin/psql; [ -x \"$P\" ] || P=psql; "
                      "for i in 1 2; do \"$P\" -X -q -v ON_ERROR_STOP=1 -f '%s/install.sql' "
                      "'%s' || exit 1; done 2>&1",
                      SQL_DIR, psql);
    ck_assert_msg(testenv_run(cmd, out, sizeof(out)) == 0, "%s: %s", cmd, out);
    free(cmd);
    fp = fingerprint(psql);
    assert_same_schema("fresh", fp_fresh, "psql -f sql/install.sql", fp);
    free(fp);
    st = open_ok(psql);
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, &applied, &err) == 0, "%s", err.message);
    ck_assert_int_eq(applied, 0);
    warren_store_free(st);
    fp = fingerprint(psql);
    assert_same_schema("fresh", fp_fresh, "psql, then migrate", fp);
    free(fp);

    free(fp_fresh);
    free(fresh);
    free(upgraded);
    free(stepwise);
    free(psql);
}
END_TEST

/* ------------------------------------------------------------------- sync */

START_TEST(test_store_job_partition_is_fnv1a_mod_n)
{
    /* FNV-1a 32-bit test vectors: "" = 0x811c9dc5, "a" = 0xe40c292c,
     * "foobar" = 0xbf9cf968. */
    ck_assert_int_eq(warren_job_partition("a", 64), 0xe40c292c % 64);
    ck_assert_int_eq(warren_job_partition("foobar", 1000), (int)(0xbf9cf968u % 1000));
    ck_assert_int_eq(warren_job_partition("", 7), (int)(0x811c9dc5u % 7));
    ck_assert_int_eq(warren_job_partition("anything", 1), 0);
    ck_assert_int_eq(warren_job_partition("anything", 0), 0);
}
END_TEST

START_TEST(test_store_sync_adds_jobs_with_their_settings)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_job jobs[3] = {
        job("report", WARREN_SCHED_CRON, "30 2 * * *", "reports"),
        job("tick", WARREN_SCHED_EVERY, "90s", "default"),
        job("once", WARREN_SCHED_AT, "2026-12-01T09:00:00Z", "default"),
    };
    char *argv[] = {"/bin/echo", "it's \"quoted\"\\ and\nnew\tline", NULL};
    warren_config cfg;
    warren_sync_report rep;
    const char *added[] = {"once", "report", "tick"};
    char sql[256];

    jobs[0].timezone = "Europe/Berlin";
    jobs[0].payload_json = "{\"b\":[1,2],\"a\":\"x\"}";
    jobs[0].misfire = WARREN_MISFIRE_CATCH_UP;
    jobs[0].max_catch_up = 3;
    jobs[0].overlap = WARREN_OVERLAP_CANCEL_PREVIOUS;
    jobs[0].handler = WARREN_HANDLER_EXEC;
    jobs[0].exec_argv = argv;
    jobs[0].jitter_ms = 5000;
    jobs[1].handler = WARREN_HANDLER_SQL;
    jobs[1].sql = "INSERT INTO t VALUES ($1)";
    jobs[1].paused = 1;
    jobs[2].handler = WARREN_HANDLER_C;
    jobs[2].c_handler = "noop";
    cfg = config(jobs, 3);

    sync_ok(st, &cfg, &rep);
    assert_names(rep.added, rep.nadded, added, 3);
    ck_assert_uint_eq(rep.nchanged, 0);
    ck_assert_uint_eq(rep.nremoved, 0);
    warren_sync_report_free(&rep);

    sql_eq(url,
           "SELECT concat_ws('|', schedule_kind, expression, timezone, queue, payload->>'a', "
           "misfire, max_catch_up, overlap, jitter_ms, paused, removed, next_fire_at IS NULL) "
           "FROM warren.jobs WHERE name = 'report'",
           "cron|30 2 * * *|Europe/Berlin|reports|x|catch_up|3|cancel_previous|5000|f|f|t");
    /* The exec argv survives JSON escaping byte for byte. */
    sql_eq(url,
           "SELECT handler->'argv'->>1 = E'it''s \"quoted\"\\\\ and\\nnew\\tline' "
           "AND handler->>'kind' = 'exec' AND handler->>'shell' = 'false' "
           "FROM warren.jobs WHERE name = 'report'",
           "t");
    sql_eq(url,
           "SELECT concat_ws('|', schedule_kind, handler->>'kind', handler->>'sql', paused, "
           "paused_at IS NOT NULL) FROM warren.jobs WHERE name = 'tick'",
           "every|sql|INSERT INTO t VALUES ($1)|t|t");
    sql_eq(url,
           "SELECT concat_ws('|', schedule_kind, expression, handler->>'kind', handler->>'name') "
           "FROM warren.jobs WHERE name = 'once'",
           "at|2026-12-01T09:00:00Z|c|noop");
    for (int i = 0; i < 3; i++) {
        char want[16];
        snprintf(sql, sizeof(sql), "SELECT partition FROM warren.jobs WHERE name = '%s'",
                 jobs[i].name);
        snprintf(want, sizeof(want), "%d", warren_job_partition(jobs[i].name, 64));
        sql_eq(url, sql, want);
    }
    sql_eq(url, "SELECT count(DISTINCT config_hash) FROM warren.jobs WHERE config_hash <> ''", "3");

    /* The same config again changes nothing and writes nothing. */
    testenv_sql1(url, "UPDATE warren.jobs SET updated_at = '2000-01-01Z'");
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nadded + rep.nchanged + rep.nremoved, 0);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT count(*) FROM warren.jobs WHERE updated_at = '2000-01-01Z'", "3");
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_reports_changes_and_resets_cursor_on_schedule_change)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_job jobs[3] = {
        job("a", WARREN_SCHED_CRON, "* * * * *", "q"),
        job("b", WARREN_SCHED_CRON, "* * * * *", "q"),
        job("c", WARREN_SCHED_CRON, "* * * * *", "q"),
    };
    warren_config cfg = config(jobs, 3);
    warren_sync_report rep;
    const char *changed[] = {"a", "b"};

    jobs[2].payload_json = "{\"x\":1,\"y\":2}";
    sync_ok(st, &cfg, &rep);
    warren_sync_report_free(&rep);
    testenv_sql1(url, "UPDATE warren.jobs SET next_fire_at = '2030-01-01Z'");

    jobs[0].schedule = "*/5 * * * *";           /* schedule: cursor reset */
    jobs[1].retry_max_attempts = 9;             /* not the schedule: cursor kept */
    jobs[2].payload_json = "{\"y\":2,\"x\":1}"; /* same JSON, other key order: no change */
    sync_ok(st, &cfg, &rep);
    assert_names(rep.changed, rep.nchanged, changed, 2);
    ck_assert_uint_eq(rep.nadded, 0);
    ck_assert_uint_eq(rep.nremoved, 0);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT expression FROM warren.jobs WHERE name = 'a'", "*/5 * * * *");
    sql_eq(url, "SELECT next_fire_at FROM warren.jobs WHERE name = 'a'", NULL);
    sql_eq(url, "SELECT retry_max_attempts FROM warren.jobs WHERE name = 'b'", "9");
    sql_eq(url, "SELECT next_fire_at = '2030-01-01Z' FROM warren.jobs WHERE name = 'b'", "t");
    sql_eq(url, "SELECT next_fire_at = '2030-01-01Z' FROM warren.jobs WHERE name = 'c'", "t");

    /* A time zone change is a schedule change too. */
    testenv_sql1(url, "UPDATE warren.jobs SET next_fire_at = '2030-01-01Z'");
    jobs[1].timezone = "America/Santiago";
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nchanged, 1);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT next_fire_at FROM warren.jobs WHERE name = 'b'", NULL);

    /* A new partition count moves jobs without reporting them as changed. */
    cfg.planner.partitions = 7;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nadded + rep.nchanged + rep.nremoved, 0);
    warren_sync_report_free(&rep);
    {
        char want[16];
        snprintf(want, sizeof(want), "%d", warren_job_partition("c", 7));
        sql_eq(url, "SELECT partition FROM warren.jobs WHERE name = 'c'", want);
    }
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_pauses_and_marks_removed_jobs_keeping_runs_and_restores_them)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_job jobs[2] = {
        job("keep", WARREN_SCHED_EVERY, "10s", "q"),
        job("gone", WARREN_SCHED_EVERY, "10s", "q"),
    };
    warren_config cfg = config(jobs, 2);
    warren_sync_report rep;
    const char *removed[] = {"gone"};

    sync_ok(st, &cfg, &rep);
    warren_sync_report_free(&rep);
    testenv_sql1(url, "INSERT INTO warren.runs (job, scheduled_at, due_at, state) VALUES "
                      "('gone', '2026-01-01 00:00:00Z', '2026-01-01 00:00:00Z', 'succeeded'), "
                      "('gone', '2026-01-01 00:00:10Z', '2026-01-01 00:00:10Z', 'planned')");
    testenv_sql1(url, "UPDATE warren.jobs SET next_fire_at = '2030-01-01Z'");

    cfg.njobs = 1;
    sync_ok(st, &cfg, &rep);
    assert_names(rep.removed, rep.nremoved, removed, 1);
    ck_assert_uint_eq(rep.nadded + rep.nchanged, 0);
    warren_sync_report_free(&rep);
    sql_eq(url,
           "SELECT concat_ws('|', paused, removed, paused_at IS NOT NULL) FROM warren.jobs "
           "WHERE name = 'gone'",
           "t|t|t");
    sql_eq(url, "SELECT count(*) FROM warren.runs WHERE job = 'gone'", "2");
    sql_eq(url, "SELECT paused FROM warren.jobs WHERE name = 'keep'", "f");

    /* Reported once, not on every later sync. */
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nadded + rep.nchanged + rep.nremoved, 0);
    warren_sync_report_free(&rep);

    /* Back in the config: restored, unpaused as configured, cursor from now. */
    cfg.njobs = 2;
    sync_ok(st, &cfg, &rep);
    assert_names(rep.added, rep.nadded, removed, 1);
    warren_sync_report_free(&rep);
    sql_eq(url,
           "SELECT concat_ws('|', paused, removed, paused_at IS NULL, next_fire_at IS NULL) "
           "FROM warren.jobs WHERE name = 'gone'",
           "f|f|t|t");
    sql_eq(url, "SELECT count(*) FROM warren.runs WHERE job = 'gone'", "2");

    /* An empty config removes everything, still deleting nothing. */
    cfg.njobs = 0;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nremoved, 2);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT count(*) FROM warren.jobs WHERE removed AND paused", "2");
    warren_store_free(st);
    free(url);
}
END_TEST

/* Runs of job: a past succeeded one, future planned and published scheduled
 * ones, and a future triggered one. */
static void insert_runs(const char *url, const char *job)
{
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "INSERT INTO warren.runs (job, scheduled_at, due_at, state, attempt, origin) "
             "SELECT '%s', t, t, s, a, o FROM (VALUES "
             "  (date_trunc('second', now()) - interval '1 hour', 'succeeded', 1, 'schedule'),"
             "  (date_trunc('second', now()) + interval '60 s', 'planned', 0, 'schedule'),"
             "  (date_trunc('second', now()) + interval '120 s', 'published', 0, 'schedule'),"
             "  (date_trunc('second', now()) + interval '90 s', 'planned', 0, 'trigger')"
             ") AS v(t, s, a, o)",
             job);
    ck_assert_int_eq(testenv_psql(url, sql, NULL), 4);
}

static void runs_eq(const char *url, const char *job, const char *want)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT string_agg(origin || ':' || state, ',' ORDER BY scheduled_at) "
             "FROM warren.runs WHERE job = '%s'",
             job);
    sql_eq(url, sql, want);
}

START_TEST(test_store_sync_applies_pause_resume_and_reschedule_to_planned_runs)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_job jobs[3] = {
        job("resched", WARREN_SCHED_CRON, "* * * * *", "q"),
        job("paused", WARREN_SCHED_CRON, "* * * * *", "q"),
        job("removed", WARREN_SCHED_CRON, "* * * * *", "q"),
    };
    warren_config cfg = config(jobs, 3);
    warren_sync_report rep;

    sync_ok(st, &cfg, &rep);
    warren_sync_report_free(&rep);
    insert_runs(url, "resched");
    insert_runs(url, "paused");
    insert_runs(url, "removed");

    jobs[0].schedule = "*/2 * * * *";
    jobs[1].paused = 1;
    cfg.njobs = 2;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nchanged, 2);
    ck_assert_uint_eq(rep.nremoved, 1);
    warren_sync_report_free(&rep);
    /* New schedule: the old definition's unclaimed runs are gone. */
    runs_eq(url, "resched", "schedule:succeeded,trigger:planned");
    /* Paused or removed: cancelled as `warren pause` does, triggers kept. */
    runs_eq(url, "paused",
            "schedule:succeeded,schedule:cancelled,trigger:planned,schedule:cancelled");
    runs_eq(url, "removed",
            "schedule:succeeded,schedule:cancelled,trigger:planned,schedule:cancelled");
    sql_eq(url,
           "SELECT count(*) FROM warren.runs WHERE job = 'paused' AND state = 'cancelled' AND "
           "finished_at IS NOT NULL AND note LIKE 'cancelled: job paused at %Z (paused in the "
           "config; warren sync)'",
           "2");
    sql_eq(url,
           "SELECT count(*) FROM warren.runs WHERE job = 'removed' AND state = 'cancelled' AND "
           "note LIKE 'cancelled: job paused at % (removed from the config; warren sync)'",
           "2");

    /* Unpaused and restored: the cancelled runs are planned again. */
    testenv_sql1(url, "UPDATE warren.jobs SET next_fire_at = now() + interval '1 day'");
    jobs[1].paused = 0;
    cfg.njobs = 3;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nchanged, 1);
    ck_assert_uint_eq(rep.nadded, 1);
    warren_sync_report_free(&rep);
    runs_eq(url, "paused", "schedule:succeeded,trigger:planned");
    runs_eq(url, "removed", "schedule:succeeded,trigger:planned");
    /* resume semantics: the cursor goes back to the first cancelled fire time. */
    sql_eq(url,
           "SELECT next_fire_at BETWEEN now() AND now() + interval '2 min' "
           "FROM warren.jobs WHERE name = 'paused'",
           "t");
    sql_eq(url, "SELECT next_fire_at FROM warren.jobs WHERE name = 'removed'", NULL);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_keeps_operator_pause_until_the_job_changes)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_job jobs[1] = {job("j", WARREN_SCHED_EVERY, "10s", "q")};
    warren_config cfg = config(jobs, 1);
    warren_sync_report rep;

    sync_ok(st, &cfg, &rep);
    warren_sync_report_free(&rep);
    testenv_sql1(url, "UPDATE warren.jobs SET paused = true, paused_at = now()");
    sync_ok(st, &cfg, &rep);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT paused FROM warren.jobs", "t");

    /* paused = true in the config is a change and pauses; false unpauses. */
    jobs[0].paused = 0;
    jobs[0].jitter_ms = 1000;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nchanged, 1);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT concat_ws('|', paused, paused_at IS NULL) FROM warren.jobs", "f|t");
    jobs[0].paused = 1;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nchanged, 1);
    warren_sync_report_free(&rep);
    sql_eq(url, "SELECT concat_ws('|', paused, paused_at IS NULL) FROM warren.jobs", "t|f");
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_is_one_transaction)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_job jobs[2] = {
        job("fine", WARREN_SCHED_EVERY, "10s", "q"),
        job("bad", WARREN_SCHED_EVERY, "10s", "not a queue!"), /* the schema's CHECK rejects it */
    };
    warren_config cfg = config(jobs, 2);
    warren_sync_report rep;
    warren_error err = {0};

    ck_assert_int_eq(warren_store_sync(st, &cfg, &rep, &err), WARREN_EDB);
    ck_assert_msg(strstr(err.message, "23514") != NULL, "%s", err.message); /* check_violation */
    ck_assert_uint_eq(rep.nadded, 0);
    sql_eq(url, "SELECT count(*) FROM warren.jobs", "0");
    /* The store is still usable. */
    cfg.njobs = 1;
    sync_ok(st, &cfg, &rep);
    ck_assert_uint_eq(rep.nadded, 1);
    warren_sync_report_free(&rep);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_without_schema_says_run_migrate)
{
    char *url = testenv_db();
    warren_store *st = open_ok(url);
    warren_job jobs[1] = {job("j", WARREN_SCHED_EVERY, "10s", "q")};
    warren_config cfg = config(jobs, 1);
    warren_error err = {0};
    ck_assert_int_eq(warren_store_sync(st, &cfg, NULL, &err), WARREN_EDB);
    ck_assert_msg(strstr(err.message, "warren migrate") != NULL, "%s", err.message);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_notifies_listening_planners)
{
    char *url;
    warren_store *st = migrated_store(&url);
    warren_store *planner = open_ok(url);
    warren_job jobs[1] = {job("j", WARREN_SCHED_EVERY, "10s", "q")};
    warren_config cfg = config(jobs, 1);
    warren_error err = {0};
    int got = -1;
    struct timespec t0;

    ck_assert_int_eq(warren_store_listen(planner, &err), 0);
    /* Nothing yet: the wait times out. */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(warren_store_wait_notify(planner, 300, &got, &err), 0);
    ck_assert_int_eq(got, 0);
    ck_assert_msg(since(&t0) >= 0.25, "returned after %.3f s", since(&t0));

    sync_ok(st, &cfg, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(warren_store_wait_notify(planner, 5000, &got, &err), 0);
    ck_assert_int_eq(got, 1);
    ck_assert_msg(since(&t0) < 1.0, "woke after %.3f s", since(&t0));
    warren_store_free(planner);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_sync_two_at_once_both_succeed)
{
    char *url;
    warren_store *st = migrated_store(&url);
    pid_t pids[2];
    warren_store_free(st);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            warren_job jobs[50];
            char names[50][16];
            warren_config cfg;
            warren_error err = {0};
            warren_store *s = NULL;
            for (int k = 0; k < 50; k++) {
                snprintf(names[k], sizeof(names[k]), "job%d", k);
                jobs[k] = job(names[k], WARREN_SCHED_EVERY, "10s", "q");
            }
            cfg = config(jobs, 50);
            if (warren_store_open(url, NULL, &s, &err) != 0)
                _exit(100);
            for (int r = 0; r < 5; r++) {
                if (warren_store_sync(s, &cfg, NULL, &err) != 0) {
                    fprintf(stderr, "child sync: %s\n", err.message);
                    _exit(101);
                }
            }
            warren_store_free(s);
            _exit(0);
        }
    }
    for (int i = 0; i < 2; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %d", i, status);
    }
    sql_eq(url, "SELECT count(*) FROM warren.jobs", "50");
    free(url);
}
END_TEST

/* ----------------------------------------------- config and the commands */

START_TEST(test_store_env_database_url_overrides_the_config_file)
{
    char *url;
    warren_store *st = migrated_store(&url);
    char *path =
        testenv_temp_file("warren_cfg", "",
                          "database = { url = \"postgresql://nobody@127.0.0.1:1/nowhere\"; };\n"
                          "jobs = ( { name = \"envjob\"; every = \"10s\"; queue = \"q\"; } );\n");
    warren_config *cfg = NULL;
    warren_error err = {0};
    warren_sync_report rep;
    char *out = NULL;
    char env[1024];

    setenv("WARREN_DATABASE_URL", url, 1);
    ck_assert_msg(warren_config_load(path, &cfg, NULL, &err) == 0, "%s", err.message);
    unsetenv("WARREN_DATABASE_URL");
    ck_assert_str_eq(cfg->database_url, url);
    sync_ok(st, cfg, &rep);
    ck_assert_uint_eq(rep.nadded, 1);
    warren_sync_report_free(&rep);
    warren_config_free(cfg);

    /* The same through the command: without the variable the file's URL is
     * used and unreachable (69); with it, the sync reaches our database. */
    {
        char args[512];
        snprintf(args, sizeof(args), "sync -c '%s'", path);
        ck_assert_int_eq(run_warren("env -u WARREN_DATABASE_URL", args, &out), 69);
        ck_assert_msg(strstr(out, "127.0.0.1:1") != NULL, "%s", out);
        free(out);
        testenv_sql1(url, "UPDATE warren.jobs SET expression = 'x', config_hash = 'old'");
        snprintf(env, sizeof(env), "WARREN_DATABASE_URL='%s'", url);
        ck_assert_int_eq(run_warren(env, args, &out), 0);
        ck_assert_msg(strstr(out, "changed  envjob") != NULL, "%s", out);
        ck_assert_msg(strstr(out, "0 added, 1 changed, 0 removed, 0 unchanged") != NULL, "%s", out);
        free(out);
    }
    sql_eq(url, "SELECT expression FROM warren.jobs", "10s");
    unlink(path);
    free(path);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_cli_migrate_unreachable_exits_69_naming_host_port)
{
    char *out = NULL;
    int rc =
        run_warren(NULL, "migrate --database postgresql://postgres@127.0.0.1:1/postgres", &out);
    ck_assert_msg(rc == 69, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "cannot connect to PostgreSQL at 127.0.0.1:1") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "is the server running?") != NULL, "%s", out);
    free(out);
    /* The same through WARREN_DATABASE_URL with no config file present. */
    rc = run_warren("cd /tmp && env -u WARREN_CONFIG "
                    "WARREN_DATABASE_URL=postgresql://postgres@127.0.0.1:1/postgres",
                    "migrate", &out);
    ck_assert_msg(rc == 69, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "127.0.0.1:1") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_store_cli_migrate_twice_via_env_without_config)
{
    char *url = testenv_db();
    char env[1024], *out = NULL;
    int rc;
    char tmpl[] = "/tmp/warren_cwd_XXXXXX";
    char *dir = mkdtemp(tmpl);

    ck_assert_ptr_nonnull(dir);
    snprintf(env, sizeof(env),
             "cd '%s' && env -u WARREN_CONFIG WARREN_SQL_DIR='%s' "
             "WARREN_DATABASE_URL='%s'",
             dir, SQL_DIR, url);
    rc = run_warren(env, "migrate", &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "applied") != NULL, "%s", out);
    free(out);
    rc = run_warren(env, "migrate", &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "has every migration; functions re-applied") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(testenv_sql_long(url, "SELECT count(*) FROM warren.schema_migrations"),
                     count_migration_files());
    rmdir(dir);
    free(url);
}
END_TEST

START_TEST(test_store_cli_sync_prints_added_changed_removed)
{
    char *url;
    warren_store *st = migrated_store(&url);
    char *v1 = testenv_temp_file("warren_cfg", "",
                                 "jobs = (\n"
                                 "  { name = \"a\"; every = \"10s\"; queue = \"q\"; },\n"
                                 "  { name = \"b\"; cron = \"0 * * * *\"; queue = \"q\"; }\n"
                                 ");\n");
    char *v2 =
        testenv_temp_file("warren_cfg", "",
                          "jobs = (\n"
                          "  { name = \"a\"; every = \"20s\"; queue = \"q\"; },\n"
                          "  { name = \"c\"; at = \"2030-01-01T00:00:00Z\"; queue = \"q\"; }\n"
                          ");\n");
    char env[1024], args[256], *out = NULL;
    int rc;

    snprintf(env, sizeof(env), "WARREN_DATABASE_URL='%s'", url);
    snprintf(args, sizeof(args), "sync -c '%s'", v1);
    rc = run_warren(env, args, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "added    a\nadded    b\n") != NULL, "%s", out);
    free(out);
    snprintf(args, sizeof(args), "sync -c '%s'", v2);
    rc = run_warren(env, args, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "added    c\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "changed  a\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "removed  b") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "1 added, 1 changed, 1 removed, 0 unchanged") != NULL, "%s", out);
    free(out);
    /* A config error is exit 2, with the file's message. */
    rc = run_warren(env, "sync -c /nonexistent/warren.cfg", &out);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, out);
    free(out);
    unlink(v1);
    unlink(v2);
    free(v1);
    free(v2);
    warren_store_free(st);
    free(url);
}
END_TEST

START_TEST(test_store_cli_help_and_usage_errors)
{
    char *out = NULL;
    ck_assert_int_eq(run_warren(NULL, "migrate --help", &out), 0);
    ck_assert_msg(strstr(out, "usage: warren migrate") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run_warren(NULL, "sync --help", &out), 0);
    ck_assert_msg(strstr(out, "usage: warren sync") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run_warren(NULL, "migrate --bogus", &out), 2);
    ck_assert_msg(strstr(out, "unknown argument \"--bogus\"") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run_warren(NULL, "migrate --database", &out), 2);
    free(out);
}
END_TEST

static Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *conn = tcase_create("connect");
    TCase *help = tcase_create("helpers");
    TCase *mig = tcase_create("migrate");
    TCase *sync = tcase_create("sync");
    TCase *cli = tcase_create("cli");

    tcase_set_timeout(conn, 60);
    tcase_add_test(conn, test_store_unreachable_server_is_edbconn_with_host_port);
    tcase_add_test(conn, test_store_silent_server_times_out_after_5s_by_default);
    tcase_add_test(conn, test_store_bad_url_is_einval_without_echoing_password);
    tcase_add_test(conn, test_store_bad_url_masks_all_of_a_quoted_password);
    tcase_add_test(conn, test_store_missing_database_says_create_it);
    tcase_add_test(conn, test_store_clock_is_the_servers);
    tcase_add_test(conn, test_store_reconnects_after_backend_killed_and_listens_again);
    tcase_add_test(conn, test_store_reconnect_to_vanished_database_fails_with_edbconn);
    suite_add_tcase(s, conn);

    tcase_add_test(help, test_store_helpers_translate_sql_errors_with_sqlstate);
    tcase_add_test(help, test_store_prepared_statements_survive_reconnect);
    tcase_add_test(help, test_store_timestamps_round_trip_to_the_microsecond);
    suite_add_tcase(s, help);

    tcase_set_timeout(mig, 120);
    tcase_add_test(mig, test_store_migrate_twice_applies_once);
    tcase_add_test(mig, test_store_migrate_after_psql_application_applies_nothing);
    tcase_add_test(mig, test_store_migrate_from_several_processes_at_once);
    tcase_add_test(mig, test_store_migrate_broken_file_names_file_and_line_and_rolls_back);
    tcase_add_test(mig, test_store_migrate_rejects_missing_dir_and_duplicate_versions);
    tcase_add_test(mig, test_store_migrate_applies_the_listed_function_files_in_order_every_time);
    tcase_add_test(mig, test_store_migrations_hold_schema_and_function_files_hold_functions);
    tcase_add_test(mig,
                   test_store_migrate_upgraded_stepwise_fresh_and_psql_databases_are_identical);
    suite_add_tcase(s, mig);

    tcase_set_timeout(sync, 120);
    tcase_add_test(sync, test_store_job_partition_is_fnv1a_mod_n);
    tcase_add_test(sync, test_store_sync_adds_jobs_with_their_settings);
    tcase_add_test(sync, test_store_sync_reports_changes_and_resets_cursor_on_schedule_change);
    tcase_add_test(sync,
                   test_store_sync_pauses_and_marks_removed_jobs_keeping_runs_and_restores_them);
    tcase_add_test(sync, test_store_sync_keeps_operator_pause_until_the_job_changes);
    tcase_add_test(sync, test_store_sync_applies_pause_resume_and_reschedule_to_planned_runs);
    tcase_add_test(sync, test_store_sync_is_one_transaction);
    tcase_add_test(sync, test_store_sync_without_schema_says_run_migrate);
    tcase_add_test(sync, test_store_sync_notifies_listening_planners);
    tcase_add_test(sync, test_store_sync_two_at_once_both_succeed);
    suite_add_tcase(s, sync);

    tcase_set_timeout(cli, 120);
    tcase_add_test(cli, test_store_env_database_url_overrides_the_config_file);
    tcase_add_test(cli, test_store_cli_migrate_unreachable_exits_69_naming_host_port);
    tcase_add_test(cli, test_store_cli_migrate_twice_via_env_without_config);
    tcase_add_test(cli, test_store_cli_sync_prints_added_changed_removed);
    tcase_add_test(cli, test_store_cli_help_and_usage_errors);
    suite_add_tcase(s, cli);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(store_suite());
    int failed;

    /* Fail, never skip, without the servers. */
    testenv_pg_admin_url();
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
