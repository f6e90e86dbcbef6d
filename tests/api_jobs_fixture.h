/* api_jobs_fixture.h: what the check_api_jobs_* runners share: a fresh
 * migrated database synced with two templates ("report", "report2") and a
 * config job ("cfg-daily"), and small SQL helpers that keep the SQLSTATE and
 * the whole message of an error. Header-only (static inline) because
 * tests/CMakeLists.txt links each runner with testenv.c alone. No RabbitMQ:
 * the API functions touch the database only. */
#ifndef WARREN_API_JOBS_FIXTURE_H
#define WARREN_API_JOBS_FIXTURE_H

#include <check.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <warren/config.h>
#include <warren/store.h>

#include "testenv.h"

static const char AJ_CONFIG[] =
    "planner = { partitions = 4; horizon = \"10s\"; };\n"
    "jobs = (\n"
    "  { name = \"report\"; template = true; queue = \"q\"; overlap = \"allow\";\n"
    "    payload = { kind = \"usage\"; }; },\n"
    "  { name = \"report2\"; template = true; queue = \"q\"; overlap = \"allow\"; },\n"
    "  { name = \"cfg-daily\"; cron = \"30 2 * * *\"; timezone = \"Europe/Berlin\"; queue = "
    "\"q\"; }\n"
    ");\n";

/* A new migrated database with AJ_CONFIG synced; its URL (free it). */
static inline char *aj_db(void)
{
    char *db = testenv_db_migrated();
    char *path = testenv_temp_file("check_api_jobs_fx", ".cfg", AJ_CONFIG);
    warren_config *cfg = testenv_config_load(path);
    unlink(path);
    free(path);
    testenv_config_apply(cfg, db, NULL);
    warren_config_free(cfg);
    return db;
}

/* The result of sql on c: "" (ok), or "SQLSTATE: primary message" (new). */
static inline char *aj_try_on(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    char *out;
    if (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK) {
        out = strdup("");
    } else {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        out = testenv_fmt("%s: %s", state ? state : "?", msg ? msg : PQerrorMessage(c));
    }
    PQclear(r);
    return out;
}

/* aj_try_on with a connection of its own to url. */
static inline char *aj_try(const char *url, const char *sql)
{
    PGconn *c = testenv_connect(url);
    char *out = aj_try_on(c, sql);
    PQfinish(c);
    return out;
}

/* The first value of sql on c, which must succeed ("" for SQL NULL; new). */
static inline char *aj_val_on(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s\n  failed: %s", sql,
                  PQresultErrorMessage(r));
    char *v = strdup(PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    return v;
}

static inline char *aj_val(const char *url, const char *sql)
{
    PGconn *c = testenv_connect(url);
    char *v = aj_val_on(c, sql);
    PQfinish(c);
    return v;
}

static inline void aj_expect_val(const char *url, const char *sql, const char *want)
{
    char *v = aj_val(url, sql);
    ck_assert_msg(strcmp(v, want) == 0, "%s\n  gave \"%s\", expected \"%s\"", sql, v, want);
    free(v);
}

/* sql fails on url with SQLSTATE state ("22023", "42501") and a message
 * holding each of the NULL-terminated substrings. Returns the message (new). */
static inline char *aj_expect_error_v(const char *url, const char *state, const char *sql,
                                      va_list ap)
{
    char *got = aj_try(url, sql);
    ck_assert_msg(strncmp(got, state, 5) == 0 && got[5] == ':',
                  "%.300s\n  should fail with %s, gave \"%.600s\"", sql, state, got);
    for (const char *s = va_arg(ap, const char *); s != NULL; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(got, s) != NULL, "%.300s\n  error \"%.600s\" lacks \"%s\"", sql, got,
                      s);
    return got;
}

static inline char *aj_expect_error(const char *url, const char *state, const char *sql, ...)
{
    va_list ap;
    va_start(ap, sql);
    char *got = aj_expect_error_v(url, state, sql, ap);
    va_end(ap);
    return got;
}

/* Everything of the jobs and runs tables but the instants of the writes. */
#define AJ_STATE_SQL                                                                               \
    "SELECT md5(coalesce((SELECT string_agg(row_to_json(j)::text, ',' ORDER BY j.name) FROM "      \
    "warren.jobs j), '') || coalesce((SELECT string_agg(row_to_json(r)::text, ',' ORDER BY "       \
    "r.run_key) FROM warren.runs r), ''))"

static inline double aj_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits (at most 10 s) until the backend pid waits for a lock; 1 if it does. */
static inline int aj_wait_for_lock_wait(PGconn *admin, int pid)
{
    char *sql = testenv_fmt("SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
                            "wait_event_type = 'Lock'",
                            pid);
    int ok = 0;
    for (int i = 0; i < 1000 && !ok; i++) {
        char *v = aj_val_on(admin, sql);
        ok = strcmp(v, "1") == 0;
        free(v);
        if (!ok)
            usleep(10000);
    }
    free(sql);
    return ok;
}

#endif
