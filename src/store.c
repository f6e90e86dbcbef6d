/* store.c: warren's PostgreSQL connection (all libpq errors are translated
 * here), the database clock and LISTEN/NOTIFY, plus the helpers
 * src/store_int.h gives the other store_*.c files (migrations in
 * store_migrate.c, job sync in store_sync.c, the planner's and worker's
 * statements in store_plan.c and store_work.c). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"
#include "store_int.h"

#define CONN_FIX "is the server running? check database.url or WARREN_DATABASE_URL"

struct warren_store {
    PGconn *conn;
    const warren_logger *lg;
    char where[300];  /* "host:port" for messages */
    char sqlstate[6]; /* of the last failure */
    int listening;
    int64_t statement_timeout_ms, lock_timeout_ms; /* 0: the server's (warren_store_set_timeouts) */
    int64_t answer_ms; /* > 0: a call waits this long for its answer, then drops the connection */
    int abandoned;     /* the last call got no answer in time (answer_ms) */
    char **prepared;   /* names prepared on this connection */
    size_t nprepared, capprepared;
};

/* ---------------------------------------------------------------- helpers */

PGconn *warren__store_conn(warren_store *st)
{
    return st->conn;
}

const warren_logger *warren__store_logger(const warren_store *st)
{
    return st->lg;
}

const char *warren__store_where(const warren_store *st)
{
    return st->where;
}

const char *warren_store_where(const warren_store *st)
{
    return st->where;
}

const char *warren__store_sqlstate(const warren_store *st)
{
    return st->sqlstate;
}

/* Copies the first line of msg into buf without libpq's "FATAL:  "/"ERROR:  "
 * prefix and trailing whitespace. */
static void first_line(const char *msg, char *buf, size_t len)
{
    size_t n = 0;

    if (msg == NULL)
        msg = "";
    while (*msg == ' ' || *msg == '\t')
        msg++;
    if (strncmp(msg, "FATAL:  ", 8) == 0 || strncmp(msg, "ERROR:  ", 8) == 0)
        msg += 8;
    while (msg[n] != '\0' && msg[n] != '\n' && n + 1 < len) {
        buf[n] = msg[n];
        n++;
    }
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    if (n == 0)
        snprintf(buf, len, "unknown error");
}

/* libpq's connection failure text is 'connection to server at "H", port P
 * failed: REASON\n\tIs the server running ...'; keep REASON of the last host
 * tried. */
static void conn_reason(PGconn *conn, char *buf, size_t len)
{
    const char *msg = conn ? PQerrorMessage(conn) : "out of memory";
    const char *p = msg, *hit = NULL;

    while ((p = strstr(p, "failed: ")) != NULL) {
        hit = p + 8;
        p = hit;
    }
    first_line(hit ? hit : msg, buf, len);
}

static void set_where(warren_store *st)
{
    const char *host = st->conn ? PQhost(st->conn) : NULL;
    const char *port = st->conn ? PQport(st->conn) : NULL;

    if (host == NULL || host[0] == '\0')
        host = "localhost";
    if (port == NULL || port[0] == '\0')
        port = "5432";
    snprintf(st->where, sizeof(st->where), "%s:%s", host, port);
}

static int conn_error(warren_store *st, const char *verb, warren_error *err)
{
    char reason[512];

    const char *fix = CONN_FIX;

    conn_reason(st->conn, reason, sizeof(reason));
    set_where(st);
    if (strstr(reason, "does not exist") != NULL)
        fix = "create it (createdb) or check database.url or WARREN_DATABASE_URL";
    else if (strstr(reason, "password") != NULL || strstr(reason, "authentication") != NULL)
        fix = "check the user and password in database.url or WARREN_DATABASE_URL";
    return warren_error_set(err, WARREN_EDBCONN, "%s PostgreSQL at %s: %s; %s", verb, st->where,
                            reason, fix);
}

/* Overwrites every occurrence of s in buf with '*'. */
static void mask(char *buf, const char *s, size_t n)
{
    char *p = buf;

    if (n == 0)
        return;
    /* strstr matched all n bytes, so they are there to overwrite. */
    while ((p = strstr(p, s)) != NULL) {
        memset(p, '*', n);
        p += n;
    }
}

/* libpq quotes the URL in some parse errors: mask its password, whether
 * given as URI userinfo (postgresql://user:PASSWORD@host) or password=... */
static void scrub_password(const char *url, char *buf)
{
    const char *p = strstr(url, "://");
    char pw[256];
    size_t n;

    if (p != NULL) {
        const char *at = strchr(p + 3, '@'), *colon = strchr(p + 3, ':');
        if (at != NULL && colon != NULL && colon < at) {
            n = (size_t)(at - colon - 1);
            if (n > 0 && n < sizeof(pw)) {
                memcpy(pw, colon + 1, n);
                pw[n] = '\0';
                mask(buf, pw, n);
            }
        }
    }
    p = strstr(url, "password");
    if (p != NULL && (p = strchr(p, '=')) != NULL) {
        p++;
        while (*p == ' ')
            p++;
        n = strcspn(p, " &'");
        if (n > 0 && n < sizeof(pw)) {
            memcpy(pw, p, n);
            pw[n] = '\0';
            mask(buf, pw, n);
        }
    }
}

static int state_is_connection_loss(const char *s)
{
    if (s == NULL)
        return 0;
    /* class 08: connection exception; 57P01-57P03: admin/crash shutdown,
     * cannot connect now. */
    return strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 ||
           strcmp(s, "57P03") == 0;
}

int warren__store_fail(warren_store *st, const PGresult *res, const char *what, warren_error *err)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    char line[768];

    snprintf(st->sqlstate, sizeof(st->sqlstate), "%s", state ? state : "");
    if (st->abandoned)
        return warren_error_set(err, WARREN_EDBCONN,
                                "no answer from PostgreSQL at %s within %lld ms (%s); dropped the "
                                "connection, reconnecting",
                                st->where, (long long)st->answer_ms, what);
    if (PQstatus(st->conn) != CONNECTION_OK || state_is_connection_loss(state)) {
        first_line(res && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
                                                       : PQerrorMessage(st->conn),
                   line, sizeof(line));
        return warren_error_set(err, WARREN_EDBCONN,
                                "lost connection to PostgreSQL at %s (%s): %s; %s", st->where, what,
                                line, CONN_FIX);
    }
    if (res == NULL || PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) == NULL) {
        first_line(res ? PQresultErrorMessage(res) : PQerrorMessage(st->conn), line, sizeof(line));
        if (res != NULL && PQresultStatus(res) != PGRES_FATAL_ERROR &&
            PQresultStatus(res) != PGRES_NONFATAL_ERROR && PQresultErrorMessage(res)[0] == '\0')
            snprintf(line, sizeof(line), "unexpected result %s", PQresStatus(PQresultStatus(res)));
        return warren_error_set(err, WARREN_EDB, "%s: %s", what, line);
    }
    {
        const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
        const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
        return warren_error_set(err, WARREN_EDB, "%s: %s (SQLSTATE %s)%s%s%s%s", what, primary,
                                state ? state : "?????", detail ? "; detail: " : "",
                                detail ? detail : "", hint ? "; hint: " : "", hint ? hint : "");
    }
}

static int result_ok(const PGresult *res)
{
    ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

static int finish(warren_store *st, PGresult *res, PGresult **out, const char *what,
                  warren_error *err)
{
    if (!result_ok(res)) {
        int rc = warren__store_fail(st, res, what, err);
        PQclear(res);
        return rc;
    }
    st->sqlstate[0] = '\0';
    if (out != NULL)
        *out = res;
    else
        PQclear(res);
    return 0;
}

/* The answer to the query just sent, waiting at most st->answer_ms for it:
 * as PQexec, the last result, or the first that failed. Past the deadline
 * the connection is dropped (a frozen server or network would otherwise hold
 * the caller until TCP gives up, a minute or more): the result is then a
 * connection failure, reported as "no answer within" (st->abandoned). */
static PGresult *await_answer(warren_store *st)
{
    int64_t deadline = warren__mono_ms() + st->answer_ms;
    PGresult *keep = NULL, *r;

    for (;;) {
        while (!st->abandoned && PQisBusy(st->conn)) {
            struct pollfd p = {PQsocket(st->conn), POLLIN, 0};
            int64_t left = deadline - warren__mono_ms();
            int n;
            if (left <= 0) {
                /* libpq then reads the end of the connection at once */
                shutdown(PQsocket(st->conn), SHUT_RDWR);
                st->abandoned = 1;
                break;
            }
            n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
            if (n < 0 && errno != EINTR)
                break;
            if (n > 0 && !PQconsumeInput(st->conn))
                break; /* PQgetResult reports the failure */
        }
        if ((r = PQgetResult(st->conn)) == NULL)
            break;
        if (keep != NULL && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
            PQclear(r);
        } else {
            PQclear(keep);
            keep = r;
        }
        if (PQstatus(st->conn) != CONNECTION_OK)
            break;
    }
    return keep;
}

/* The calls every helper makes: libpq's blocking ones, or with st->answer_ms
 * set their asynchronous forms and await_answer. */
static PGresult *q_exec(warren_store *st, const char *sql)
{
    if (st->answer_ms <= 0)
        return PQexec(st->conn, sql);
    st->abandoned = 0;
    return PQsendQuery(st->conn, sql) ? await_answer(st) : NULL;
}

static PGresult *q_params(warren_store *st, const char *sql, int nparams, const char *const *params)
{
    if (st->answer_ms <= 0)
        return PQexecParams(st->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    st->abandoned = 0;
    return PQsendQueryParams(st->conn, sql, nparams, NULL, params, NULL, NULL, 0) ? await_answer(st)
                                                                                  : NULL;
}

static PGresult *q_prepare(warren_store *st, const char *name, const char *sql, int nparams)
{
    if (st->answer_ms <= 0)
        return PQprepare(st->conn, name, sql, nparams, NULL);
    st->abandoned = 0;
    return PQsendPrepare(st->conn, name, sql, nparams, NULL) ? await_answer(st) : NULL;
}

static PGresult *q_prepared(warren_store *st, const char *name, int nparams,
                            const char *const *params)
{
    if (st->answer_ms <= 0)
        return PQexecPrepared(st->conn, name, nparams, params, NULL, NULL, 0);
    st->abandoned = 0;
    return PQsendQueryPrepared(st->conn, name, nparams, params, NULL, NULL, 0) ? await_answer(st)
                                                                               : NULL;
}

int warren__store_exec(warren_store *st, const char *sql, int nparams, const char *const *params,
                       PGresult **out, const char *what, warren_error *err)
{
    PGresult *res;

    if (out != NULL)
        *out = NULL;
    res = q_params(st, sql, nparams, params);
    return finish(st, res, out, what, err);
}

int warren__store_exec_simple(warren_store *st, const char *sql, const char *what,
                              warren_error *err)
{
    return finish(st, q_exec(st, sql), NULL, what, err);
}

static int prepared_has(const warren_store *st, const char *name)
{
    for (size_t i = 0; i < st->nprepared; i++)
        if (strcmp(st->prepared[i], name) == 0)
            return 1;
    return 0;
}

static int prepared_add(warren_store *st, const char *name, warren_error *err)
{
    char *copy;

    if (st->nprepared == st->capprepared) {
        size_t cap = st->capprepared ? st->capprepared * 2 : 16;
        char **p = realloc(st->prepared, cap * sizeof(*p));
        if (p == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        st->prepared = p;
        st->capprepared = cap;
    }
    copy = strdup(name);
    if (copy == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    st->prepared[st->nprepared++] = copy;
    return 0;
}

static void prepared_forget(warren_store *st, const char *name)
{
    for (size_t i = 0; i < st->nprepared; i++) {
        if (name == NULL || strcmp(st->prepared[i], name) == 0) {
            free(st->prepared[i]);
            if (name == NULL)
                continue;
            st->prepared[i] = st->prepared[--st->nprepared];
            return;
        }
    }
    if (name == NULL)
        st->nprepared = 0;
}

int warren__store_exec_prepared(warren_store *st, const char *name, const char *sql, int nparams,
                                const char *const *params, PGresult **out, const char *what,
                                warren_error *err)
{
    PGresult *res;

    if (out != NULL)
        *out = NULL;
    for (int tries = 0; tries < 2; tries++) {
        if (!prepared_has(st, name)) {
            res = q_prepare(st, name, sql, nparams);
            if (!result_ok(res)) {
                const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
                /* 42P05: already prepared on this session (we lost track). */
                if (s == NULL || strcmp(s, "42P05") != 0) {
                    int rc = warren__store_fail(st, res, what, err);
                    PQclear(res);
                    return rc;
                }
            }
            PQclear(res);
            if (prepared_add(st, name, err) != 0)
                return WARREN_ENOMEM;
        }
        res = q_prepared(st, name, nparams, params);
        if (!result_ok(res) && res != NULL && PQstatus(st->conn) == CONNECTION_OK) {
            const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            /* 26000: the session lost the statement (DISCARD ALL, a pooler):
             * prepare again, once, unless inside a failed transaction. */
            if (tries == 0 && s != NULL && strcmp(s, "26000") == 0 &&
                PQtransactionStatus(st->conn) == PQTRANS_IDLE) {
                PQclear(res);
                prepared_forget(st, name);
                continue;
            }
        }
        return finish(st, res, out, what, err);
    }
    return warren_error_set(err, WARREN_EDB, "%s: prepared statement %s vanished", what, name);
}

void warren__store_end_open(warren_store *st)
{
    PGTransactionStatusType ts = PQtransactionStatus(st->conn);

    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
        warren_log(st->lg, WARREN_LOG_WARN,
                   "store: a transaction was left open; rolling it back before BEGIN");
        warren__store_rollback(st);
    }
}

int warren__store_begin(warren_store *st, warren_error *err)
{
    warren__store_end_open(st);
    return warren__store_exec_simple(st, "BEGIN", "begin transaction", err);
}

int warren__store_commit(warren_store *st, warren_error *err)
{
    PGresult *res = q_exec(st, "COMMIT");
    int rc;

    if (!result_ok(res)) {
        rc = warren__store_fail(st, res, "commit transaction", err);
        PQclear(res);
        return rc;
    }
    /* COMMIT of a failed transaction "succeeds" with the tag ROLLBACK. */
    if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        PQclear(res);
        return warren_error_set(err, WARREN_EDB,
                                "commit transaction: the server rolled it back (an earlier "
                                "statement in it failed)");
    }
    PQclear(res);
    st->sqlstate[0] = '\0';
    return 0;
}

void warren__store_rollback(warren_store *st)
{
    PGTransactionStatusType ts;

    if (st == NULL || st->conn == NULL || PQstatus(st->conn) != CONNECTION_OK)
        return;
    ts = PQtransactionStatus(st->conn);
    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
        PQclear(q_exec(st, "ROLLBACK"));
}

const char *warren__store_get_text(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return NULL;
    return PQgetvalue(res, row, col);
}

static int parse_int64(const char *s, int64_t *out)
{
    char *end;
    long long v;

    if (s == NULL || *s == '\0')
        return WARREN_EPARSE;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return WARREN_EPARSE;
    *out = (int64_t)v;
    return 0;
}

int warren__store_get_int64(const PGresult *res, int row, int col, int64_t *out)
{
    if (PQgetisnull(res, row, col))
        return WARREN_ENOENT;
    return parse_int64(PQgetvalue(res, row, col), out);
}

int warren__store_cmd_tuples(PGresult *res)
{
    int64_t n;

    if (parse_int64(PQcmdTuples(res), &n) != 0 || n < 0 || n > INT32_MAX)
        return 0;
    return (int)n;
}

int warren__store_get_int(const PGresult *res, int row, int col, int *out)
{
    int64_t v;
    int rc = warren__store_get_int64(res, row, col, &v);

    if (rc != 0)
        return rc;
    if (v < INT32_MIN || v > INT32_MAX)
        return WARREN_ERANGE;
    *out = (int)v;
    return 0;
}

int warren__store_get_bool(const PGresult *res, int row, int col, int *out)
{
    const char *s;

    if (PQgetisnull(res, row, col))
        return WARREN_ENOENT;
    s = PQgetvalue(res, row, col);
    if (strcmp(s, "t") == 0)
        *out = 1;
    else if (strcmp(s, "f") == 0)
        *out = 0;
    else
        return WARREN_EPARSE;
    return 0;
}

/* Reads exactly n digits. */
static int digits(const char **p, int n, int64_t *out)
{
    int64_t v = 0;

    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

/* "YYYY-MM-DD HH:MM:SS[.f{1,6}](+|-)HH[:MM[:SS]]" (DateStyle ISO), or "T"
 * instead of the space. */
static int parse_pg_timestamp(const char *s, warren_us *out)
{
    const char *p = s;
    int64_t y = 0, mo, d, h, mi, sec, frac = 0, oh, om = 0, os = 0;
    int ny = 0, sign;

    while (isdigit((unsigned char)*p) && ny < 7) {
        y = y * 10 + (*p++ - '0');
        ny++;
    }
    if (ny < 4 || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' || digits(&p, 2, &d))
        return WARREN_EPARSE;
    if ((*p != ' ' && *p != 'T') || (p++, digits(&p, 2, &h)) || *p++ != ':' || digits(&p, 2, &mi) ||
        *p++ != ':' || digits(&p, 2, &sec))
        return WARREN_EPARSE;
    if (*p == '.') {
        int n = 0;
        p++;
        while (isdigit((unsigned char)*p)) {
            if (n < 6) {
                frac = frac * 10 + (*p - '0');
                n++;
            }
            p++;
        }
        if (n == 0)
            return WARREN_EPARSE;
        for (; n < 6; n++)
            frac *= 10;
    }
    if (*p != '+' && *p != '-')
        return WARREN_EPARSE;
    sign = *p++ == '-' ? -1 : 1;
    if (digits(&p, 2, &oh))
        return WARREN_EPARSE;
    if (*p == ':' && (p++, digits(&p, 2, &om)))
        return WARREN_EPARSE;
    if (*p == ':' && (p++, digits(&p, 2, &os)))
        return WARREN_EPARSE;
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 24 || mi > 59 || sec > 60)
        return WARREN_EPARSE;
    {
        int64_t days = warren_days_from_civil(y, (unsigned)mo, (unsigned)d);
        int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - sign * (oh * 3600 + om * 60 + os);
        /* PostgreSQL's own range (to 294276 AD) reaches past int64 microseconds since 1970. */
        if (secs > (INT64_MAX - frac) / WARREN_US_PER_S || secs < INT64_MIN / WARREN_US_PER_S)
            return WARREN_ERANGE;
        *out = secs * WARREN_US_PER_S + frac;
    }
    return 0;
}

int warren__store_get_us(const PGresult *res, int row, int col, warren_us *out)
{
    const char *s;
    int64_t v;

    if (PQgetisnull(res, row, col))
        return WARREN_ENOENT;
    s = PQgetvalue(res, row, col);
    if (parse_int64(s, &v) == 0) {
        *out = v;
        return 0;
    }
    return parse_pg_timestamp(s, out);
}

char *warren__store_us_param(warren_us t, char *buf, size_t len)
{
    int64_t secs = warren_us_to_s(t);
    int64_t us = t - secs * WARREN_US_PER_S;
    int64_t days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
    int64_t sod = secs - days * 86400;
    int64_t y;
    unsigned m, d;

    warren_civil_from_days(days, &y, &m, &d);
    snprintf(buf, len, "%04" PRId64 "-%02u-%02u %02d:%02d:%02d.%06d+00", y, m, d, (int)(sod / 3600),
             (int)(sod / 60 % 60), (int)(sod % 60), (int)us);
    return buf;
}

char *warren__store_int_param(int64_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRId64, v);
    return buf;
}

/* ------------------------------------------------------------- connecting */

/* Server NOTICEs and WARNINGs go to the logger, never to stderr (libpq's
 * default): "schema already exists, skipping" is debug noise. */
static void on_notice(void *arg, const PGresult *res)
{
    const warren_store *st = arg;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    char line[512];

    first_line(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY), line, sizeof(line));
    warren_log(st->lg,
               sev != NULL && strcmp(sev, "WARNING") == 0 ? WARREN_LOG_WARN : WARREN_LOG_DEBUG,
               "PostgreSQL %s: %s", sev ? sev : "notice", line);
}

/* The session's statement_timeout and lock_timeout (milliseconds as
 * PostgreSQL takes them: at most INT_MAX; 0 here: the server's default). */
static int apply_timeouts(warren_store *st, warren_error *err)
{
    char stmt[24], lock[24];
    const char *params[2] = {stmt, lock};
    snprintf(
        stmt, sizeof(stmt), "%lld",
        (long long)(st->statement_timeout_ms > INT32_MAX ? INT32_MAX : st->statement_timeout_ms));
    snprintf(lock, sizeof(lock), "%lld",
             (long long)(st->lock_timeout_ms > INT32_MAX ? INT32_MAX : st->lock_timeout_ms));
    return warren__store_exec(st,
                              "SELECT set_config('statement_timeout', CASE WHEN $1 = '0' THEN "
                              "current_setting('statement_timeout') ELSE $1 END, false), "
                              "set_config('lock_timeout', CASE WHEN $2 = '0' THEN "
                              "current_setting('lock_timeout') ELSE $2 END, false)",
                              2, params, NULL, "set the session's timeouts", err);
}

static int session_setup(warren_store *st, warren_error *err)
{
    int rc;

    st->sqlstate[0] = '\0';
    prepared_forget(st, NULL);
    rc = warren__store_exec_simple(st, "SET TIME ZONE 'UTC'; SET DateStyle TO 'ISO, YMD'",
                                   "set the session time zone", err);
    if (rc == 0 && (st->statement_timeout_ms > 0 || st->lock_timeout_ms > 0))
        rc = apply_timeouts(st, err);
    if (rc == 0 && st->listening)
        rc = warren__store_exec_simple(st, "LISTEN " WARREN_NOTIFY_CHANNEL,
                                       "listen on " WARREN_NOTIFY_CHANNEL, err);
    return rc;
}

int warren_store_open(const char *url, const warren_logger *lg, warren_store **out,
                      warren_error *err)
{
    PQconninfoOption *opts;
    char *perr = NULL;
    const char *keys[10], *vals[10];
    int n = 0, has_timeout = 0, has_keepalive = 0;
    warren_store *st;
    int rc;

    *out = NULL;
    if (url == NULL)
        url = "";
    opts = PQconninfoParse(url, &perr);
    if (opts == NULL) {
        char reason[512];
        first_line(perr ? perr : "out of memory", reason, sizeof(reason));
        PQfreemem(perr);
        scrub_password(url, reason);
        /* Never echo the URL: it may hold a password. */
        return warren_error_set(err, WARREN_EINVAL,
                                "invalid database URL: %s; check database.url or "
                                "WARREN_DATABASE_URL (postgresql://USER@HOST:PORT/DB)",
                                reason);
    }
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val == NULL || o->val[0] == '\0')
            continue;
        if (strcmp(o->keyword, "connect_timeout") == 0)
            has_timeout = 1;
        else if (strncmp(o->keyword, "keepalives", 10) == 0 ||
                 strcmp(o->keyword, "tcp_user_timeout") == 0)
            has_keepalive = 1;
    }
    PQconninfoFree(opts);

    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    st->lg = lg;

    keys[n] = "dbname", vals[n++] = url;
    keys[n] = "fallback_application_name", vals[n++] = "warren";
    if (!has_timeout)
        keys[n] = "connect_timeout", vals[n++] = "5";
    if (!has_keepalive) {
        /* A dead peer is noticed in about a minute instead of hours. */
        keys[n] = "keepalives_idle", vals[n++] = "30";
        keys[n] = "keepalives_interval", vals[n++] = "10";
        keys[n] = "keepalives_count", vals[n++] = "3";
        /* Unacknowledged writes fail after 60 s instead of ~15 min. */
        keys[n] = "tcp_user_timeout", vals[n++] = "60000";
    }
    keys[n] = NULL, vals[n] = NULL;

    st->conn = PQconnectdbParams(keys, vals, 1);
    if (st->conn != NULL)
        PQsetNoticeReceiver(st->conn, on_notice, st);
    if (st->conn == NULL || PQstatus(st->conn) != CONNECTION_OK) {
        rc = conn_error(st, "cannot connect to", err);
        warren_store_free(st);
        return rc;
    }
    set_where(st);
    rc = session_setup(st, err);
    if (rc != 0) {
        warren_store_free(st);
        return rc;
    }
    warren_log(lg, WARREN_LOG_DEBUG, "connected to PostgreSQL at %s (server %d)", st->where,
               PQserverVersion(st->conn));
    *out = st;
    return 0;
}

void warren_store_free(warren_store *st)
{
    if (st == NULL)
        return;
    if (st->conn != NULL)
        PQfinish(st->conn);
    prepared_forget(st, NULL);
    free(st->prepared);
    free(st);
}

int warren_store_connected(const warren_store *st)
{
    return st != NULL && st->conn != NULL && PQstatus(st->conn) == CONNECTION_OK;
}

int warren_store_reconnect(warren_store *st, warren_error *err)
{
    int rc;

    st->abandoned = 0;
    if (st->answer_ms <= 0) {
        PQreset(st->conn);
    } else if (PQresetStart(st->conn)) {
        /* the connection's own connect_timeout is at least 2 s: this one is
         * answer_ms (PQconnectPoll's loop, from "writing") */
        int64_t deadline = warren__mono_ms() + st->answer_ms;
        PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
        while (ps != PGRES_POLLING_OK && ps != PGRES_POLLING_FAILED) {
            struct pollfd p = {PQsocket(st->conn), ps == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                               0};
            int64_t left = deadline - warren__mono_ms();
            if (left <= 0) {
                set_where(st);
                return warren_error_set(err, WARREN_EDBCONN,
                                        "cannot reconnect to PostgreSQL at %s: no answer within "
                                        "%lld ms; " CONN_FIX,
                                        st->where, (long long)st->answer_ms);
            }
            if (poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left) == 0)
                continue;
            ps = PQresetPoll(st->conn);
        }
    }
    if (PQstatus(st->conn) != CONNECTION_OK)
        return conn_error(st, "cannot reconnect to", err);
    set_where(st);
    rc = session_setup(st, err);
    if (rc != 0)
        return rc;
    warren_log(st->lg, WARREN_LOG_INFO, "reconnected to PostgreSQL at %s", st->where);
    return 0;
}

int warren_store_set_timeouts(warren_store *st, int64_t statement_ms, int64_t lock_ms,
                              int64_t answer_ms, warren_error *err)
{
    if (st == NULL || statement_ms < 0 || lock_ms < 0 || answer_ms < 0)
        return warren_error_set(err, WARREN_EINVAL, "warren_store_set_timeouts: bad arguments");
    st->statement_timeout_ms = statement_ms;
    st->lock_timeout_ms = lock_ms;
    st->answer_ms = answer_ms;
    return apply_timeouts(st, err);
}

int warren_store_timed_out(const warren_store *st)
{
    /* 57014 query_canceled (statement_timeout, or a cancel request), 55P03
     * lock_not_available (lock_timeout): the statement was refused whole. */
    return st != NULL && (strcmp(st->sqlstate, "57014") == 0 || strcmp(st->sqlstate, "55P03") == 0);
}

/* ------------------------------------------------------------- the clock */

int warren_store_now(warren_store *st, warren_us *now, warren_error *err)
{
    PGresult *res;
    int rc;

    rc = warren__store_exec(st, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8", 0,
                            NULL, &res, "read the database clock", err);
    if (rc != 0)
        return rc;
    rc = warren__store_get_int64(res, 0, 0, now);
    PQclear(res);
    if (rc != 0)
        return warren_error_set(err, WARREN_EDB, "read the database clock: malformed answer");
    return 0;
}

/* ---------------------------------------------------------- LISTEN/NOTIFY */

int warren_store_listen(warren_store *st, warren_error *err)
{
    int rc = warren__store_exec_simple(st, "LISTEN " WARREN_NOTIFY_CHANNEL,
                                       "listen on " WARREN_NOTIFY_CHANNEL, err);
    if (rc == 0)
        st->listening = 1;
    return rc;
}

/* What a notification asks of the planner: WARREN_NOTIFY_RELAY for runs that
 * exist already and only need publishing (an enqueue, a cap's release, a
 * replay, a retry: sql/functions/), WARREN_NOTIFY_PLAN for everything else
 * (a sync, a job's change, "job:NAME" from the CLI, an unknown payload: the
 * safe side). */
static int notify_kind(const char *payload)
{
    static const char *const relay_only[] = {"enqueue", "release", "replay", "retry"};
    for (size_t i = 0; payload != NULL && i < sizeof(relay_only) / sizeof(relay_only[0]); i++)
        if (strcmp(payload, relay_only[i]) == 0)
            return WARREN_NOTIFY_RELAY;
    return WARREN_NOTIFY_PLAN;
}

static int drain_notifies(warren_store *st)
{
    PGnotify *n;
    int got = 0;

    while ((n = PQnotifies(st->conn)) != NULL) {
        warren_log(st->lg, WARREN_LOG_DEBUG, "notification on %s: %s", n->relname,
                   n->extra ? n->extra : "");
        got |= notify_kind(n->extra);
        PQfreemem(n);
    }
    return got;
}

static int consume(warren_store *st, warren_error *err)
{
    if (PQconsumeInput(st->conn) == 0)
        return warren__store_fail(st, NULL, "waiting for notifications", err);
    return 0;
}

int warren_store_wait_notify(warren_store *st, int timeout_ms, int *got, warren_error *err)
{
    struct pollfd pfd;
    int sock, r, rc;

    *got = 0;
    if ((rc = consume(st, err)) != 0)
        return rc;
    if ((*got = drain_notifies(st)) != 0)
        return 0;
    sock = PQsocket(st->conn);
    if (sock < 0)
        return warren__store_fail(st, NULL, "waiting for notifications", err);
    pfd.fd = sock;
    pfd.events = POLLIN;
    pfd.revents = 0;
    r = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
    if (r < 0) {
        if (errno == EINTR)
            return 0; /* a signal: let the caller's loop look at its flags */
        return warren_error_set(err, WARREN_ESYS, "poll on the PostgreSQL socket: %s",
                                strerror(errno));
    }
    if (r == 0)
        return 0;
    if ((rc = consume(st, err)) != 0)
        return rc;
    *got = drain_notifies(st);
    return 0;
}

int warren_store_notify(warren_store *st, const char *payload, warren_error *err)
{
    const char *params[2] = {WARREN_NOTIFY_CHANNEL, payload ? payload : ""};

    return warren__store_exec(st, "SELECT pg_notify($1, $2)", 2, params, NULL,
                              "notify " WARREN_NOTIFY_CHANNEL, err);
}
