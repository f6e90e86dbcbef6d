/* store.c: warren's PostgreSQL connection (all libpq errors are translated
 * here), migrations, job sync, the database clock and LISTEN/NOTIFY, plus the
 * helpers src/store_int.h gives the planner's and worker's store_*.c files. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* Session-level advisory lock keys (pg_advisory_lock takes a bigint). Any
 * other tool that changes warren's schema or jobs can take the same keys. */
#define MIGRATE_LOCK_KEY WARREN_MIGRATE_LOCK_KEY
#define SYNC_LOCK_KEY WARREN_SYNC_LOCK_KEY

/* A migration file larger than this is refused (every buffer has a cap). */
#define MIGRATION_MAX_BYTES (64L * 1024 * 1024)

#define CONN_FIX "is the server running? check database.url or WARREN_DATABASE_URL"

struct warren_store {
    PGconn *conn;
    const warren_logger *lg;
    char where[300];  /* "host:port" for messages */
    char sqlstate[6]; /* of the last failure */
    int listening;
    char **prepared; /* names prepared on this connection */
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

int warren__store_exec(warren_store *st, const char *sql, int nparams, const char *const *params,
                       PGresult **out, const char *what, warren_error *err)
{
    PGresult *res;

    if (out != NULL)
        *out = NULL;
    res = PQexecParams(st->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    return finish(st, res, out, what, err);
}

int warren__store_exec_simple(warren_store *st, const char *sql, const char *what,
                              warren_error *err)
{
    return finish(st, PQexec(st->conn, sql), NULL, what, err);
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
            res = PQprepare(st->conn, name, sql, nparams, NULL);
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
        res = PQexecPrepared(st->conn, name, nparams, params, NULL, NULL, 0);
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

int warren__store_begin(warren_store *st, warren_error *err)
{
    PGTransactionStatusType ts = PQtransactionStatus(st->conn);

    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
        warren_log(st->lg, WARREN_LOG_WARN,
                   "store: a transaction was left open; rolling it back before BEGIN");
        warren__store_rollback(st);
    }
    return warren__store_exec_simple(st, "BEGIN", "begin transaction", err);
}

int warren__store_commit(warren_store *st, warren_error *err)
{
    PGresult *res = PQexec(st->conn, "COMMIT");
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
        PQclear(PQexec(st->conn, "ROLLBACK"));
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

static int session_setup(warren_store *st, warren_error *err)
{
    int rc;

    st->sqlstate[0] = '\0';
    prepared_forget(st, NULL);
    rc = warren__store_exec_simple(st, "SET TIME ZONE 'UTC'; SET DateStyle TO 'ISO, YMD'",
                                   "set the session time zone", err);
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

    PQreset(st->conn);
    if (PQstatus(st->conn) != CONNECTION_OK)
        return conn_error(st, "cannot reconnect to", err);
    set_where(st);
    rc = session_setup(st, err);
    if (rc != 0)
        return rc;
    warren_log(st->lg, WARREN_LOG_INFO, "reconnected to PostgreSQL at %s", st->where);
    return 0;
}

int warren_store_has_migration(warren_store *st, int version, warren_error *err)
{
    PGresult *res;
    char buf[16];
    const char *p[] = {warren__store_int_param(version, buf, sizeof(buf))};
    int rc = warren__store_exec(st, "SELECT to_regclass('warren.schema_migrations') IS NOT NULL", 0,
                                NULL, &res, "read warren.schema_migrations", err);
    if (rc != 0)
        return rc;
    rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (rc == 0)
        return 0;
    rc = warren__store_exec(st, "SELECT count(*) FROM warren.schema_migrations WHERE version = $1",
                            1, p, &res, "read warren.schema_migrations", err);
    if (rc != 0)
        return rc;
    rc = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
    PQclear(res);
    return rc;
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

static int drain_notifies(warren_store *st)
{
    PGnotify *n;
    int got = 0;

    while ((n = PQnotifies(st->conn)) != NULL) {
        warren_log(st->lg, WARREN_LOG_DEBUG, "notification on %s: %s", n->relname,
                   n->extra ? n->extra : "");
        PQfreemem(n);
        got = 1;
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
    if (drain_notifies(st)) {
        *got = 1;
        return 0;
    }
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

/* ------------------------------------------------------------- migrations */

typedef struct {
    char **names;
    size_t n, cap;
} namelist;

static void namelist_free(namelist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->n = l->cap = 0;
}

static int namelist_add(namelist *l, const char *s)
{
    char *copy;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->names, cap * sizeof(*p));
        if (p == NULL)
            return WARREN_ENOMEM;
        l->names = p;
        l->cap = cap;
    }
    copy = strdup(s);
    if (copy == NULL)
        return WARREN_ENOMEM;
    l->names[l->n++] = copy;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* NNN_*.sql with exactly three leading digits. */
static int is_migration_name(const char *s)
{
    size_t len = strlen(s);

    return len > 8 && isdigit((unsigned char)s[0]) && isdigit((unsigned char)s[1]) &&
           isdigit((unsigned char)s[2]) && s[3] == '_' && strcmp(s + len - 4, ".sql") == 0;
}

/* The version of a name is_migration_name accepted: its three leading digits. */
static int migration_version(const char *name)
{
    char digits[4];
    char *end;
    long v;

    memcpy(digits, name, 3);
    digits[3] = '\0';
    v = strtol(digits, &end, 10);
    return *end == '\0' && v >= 0 && v < 1000 ? (int)v : -1;
}

static int list_migrations(const char *dir, namelist *out, warren_error *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (d == NULL)
        return warren_error_set(err, WARREN_ENOENT,
                                "cannot read the SQL directory %s: %s (use --sql-dir or "
                                "WARREN_SQL_DIR)",
                                dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        if (!is_migration_name(e->d_name))
            continue;
        if (namelist_add(out, e->d_name) != 0) {
            closedir(d);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
    }
    closedir(d);
    if (out->n == 0)
        return warren_error_set(err, WARREN_ENOENT,
                                "no migrations (NNN_*.sql) in %s (use --sql-dir or WARREN_SQL_DIR)",
                                dir);
    qsort(out->names, out->n, sizeof(char *), cmp_names);
    for (size_t i = 1; i < out->n; i++)
        if (strncmp(out->names[i], out->names[i - 1], 3) == 0)
            return warren_error_set(err, WARREN_EINVAL,
                                    "migrations %s and %s in %s share version %.3s: renumber one",
                                    out->names[i - 1], out->names[i], dir, out->names[i]);
    return 0;
}

static int read_file(const char *path, char **out, warren_error *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    *out = NULL;
    if (f == NULL)
        return warren_error_set(err, WARREN_EIO, "cannot open %s: %s", path, strerror(errno));
    for (;;) {
        if (cap - len < 65536) {
            char *p;
            if (cap > (size_t)MIGRATION_MAX_BYTES) {
                free(buf);
                fclose(f);
                return warren_error_set(err, WARREN_EIO, "%s is larger than %ld bytes", path,
                                        MIGRATION_MAX_BYTES);
            }
            cap = cap ? cap * 2 : 65536 * 2;
            p = realloc(buf, cap + 1);
            if (p == NULL) {
                free(buf);
                fclose(f);
                return warren_error_set(err, WARREN_ENOMEM, "out of memory");
            }
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return warren_error_set(err, WARREN_EIO, "cannot read %s", path);
    }
    fclose(f);
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        return warren_error_set(err, WARREN_EINVAL, "%s contains a NUL byte", path);
    }
    *out = buf;
    return 0;
}

/* The 1-based line of the 1-based character position pos in text (UTF-8). */
static int line_of(const char *text, long pos)
{
    int line = 1;
    long chars = 0;

    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if ((*p & 0xC0) != 0x80 && ++chars >= pos)
            break;
        if (*p == '\n')
            line++;
    }
    return line;
}

/* Applies one file in its own transaction and records it. */
static int apply_migration(warren_store *st, const char *dir, const char *name, warren_error *err)
{
    char path[4096], version[4], base[256];
    char *text = NULL;
    PGresult *res;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(version, sizeof(version), "%.3s", name);
    snprintf(base, sizeof(base), "%.*s", (int)(strlen(name) - 4), name);
    rc = read_file(path, &text, err);
    if (rc != 0)
        return rc;
    rc = warren__store_begin(st, err);
    if (rc != 0)
        goto fail;
    res = PQexec(st->conn, text);
    if (!result_ok(res)) {
        const char *pos = res ? PQresultErrorField(res, PG_DIAG_STATEMENT_POSITION) : NULL;
        char what[4200];
        if (pos != NULL)
            snprintf(what, sizeof(what), "migration %s:%d", path, line_of(text, atol(pos)));
        else
            snprintf(what, sizeof(what), "migration %s", path);
        rc = warren__store_fail(st, res, what, err);
        PQclear(res);
        goto fail;
    }
    PQclear(res);
    {
        const char *params[2] = {version, base};
        rc = warren__store_exec(st,
                                "INSERT INTO warren.schema_migrations (version, name) "
                                "VALUES ($1::int, $2) ON CONFLICT (version) DO NOTHING",
                                2, params, NULL, "record the migration", err);
    }
    if (rc != 0)
        goto fail;
    rc = warren__store_commit(st, err);
    if (rc != 0)
        goto fail;
    free(text);
    warren_log(st->lg, WARREN_LOG_INFO, "applied migration %s", name);
    return 0;
fail:
    warren__store_rollback(st);
    free(text);
    return rc;
}

int warren_store_migrate(warren_store *st, const char *sql_dir, int *applied, warren_error *err)
{
    namelist files = {0};
    PGresult *res = NULL;
    char *done = NULL;
    int rc, locked = 0, count = 0, maxknown = 0;
    const char *lockp[1] = {MIGRATE_LOCK_KEY};

    if (applied != NULL)
        *applied = 0;
    rc = list_migrations(sql_dir, &files, err);
    if (rc != 0)
        goto out;
    /* Blocks while another migrate holds it: the second process then sees
     * every version recorded and applies nothing. */
    rc = warren__store_exec(st, "SELECT pg_advisory_lock($1::bigint)", 1, lockp, NULL,
                            "take the migration lock", err);
    if (rc != 0)
        goto out;
    locked = 1;
    rc = warren__store_exec_simple(st,
                                   "CREATE SCHEMA IF NOT EXISTS warren; "
                                   "CREATE TABLE IF NOT EXISTS warren.schema_migrations ("
                                   " version int PRIMARY KEY, name text NOT NULL,"
                                   " applied_at timestamptz NOT NULL DEFAULT now())",
                                   "create warren.schema_migrations", err);
    if (rc != 0)
        goto out;
    rc = warren__store_exec(st, "SELECT version FROM warren.schema_migrations ORDER BY version", 0,
                            NULL, &res, "read warren.schema_migrations", err);
    if (rc != 0)
        goto out;
    done = calloc(1000, 1);
    if (done == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        int v;
        if (warren__store_get_int(res, i, 0, &v) == 0 && v >= 0 && v < 1000) {
            done[v] = 1;
            if (v > maxknown)
                maxknown = v;
        }
    }
    PQclear(res);
    res = NULL;
    for (size_t i = 0; i < files.n; i++) {
        int v = migration_version(files.names[i]);
        if (v < 0 || done[v]) {
            warren_log(st->lg, WARREN_LOG_DEBUG, "migration %s already applied", files.names[i]);
            continue;
        }
        rc = apply_migration(st, sql_dir, files.names[i], err);
        if (rc != 0)
            goto out;
        count++;
    }
    if (maxknown > migration_version(files.names[files.n - 1]))
        warren_log(st->lg, WARREN_LOG_WARN,
                   "the database has migration %03d, newer than any in %s: is this warren older "
                   "than the one that migrated it?",
                   maxknown, sql_dir);
    rc = 0;
out:
    PQclear(res);
    if (locked && PQstatus(st->conn) == CONNECTION_OK)
        PQclear(PQexecParams(st->conn, "SELECT pg_advisory_unlock($1::bigint)", 1, NULL, lockp,
                             NULL, NULL, 0));
    free(done);
    namelist_free(&files);
    if (rc == 0 && applied != NULL)
        *applied = count;
    return rc;
}

/* ------------------------------------------------------------------- sync */

int warren_job_partition(const char *name, int partitions)
{
    uint32_t h = 2166136261u;

    if (partitions <= 1 || name == NULL)
        return 0;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return (int)(h % (uint32_t)partitions);
}

/* A growing buffer for the JSON document sync sends as one parameter. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} dbuf;

static void db_put(dbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *p;
        while (cap < b->len + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void db_puts(dbuf *b, const char *s)
{
    db_put(b, s, strlen(s));
}

static void db_printf(dbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void db_printf(dbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        db_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string literal (UTF-8 passes through; the server validates it). */
static void db_json_str(dbuf *b, const char *s)
{
    db_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p != '\0'; p++) {
        if (*p == '"')
            db_puts(b, "\\\"");
        else if (*p == '\\')
            db_puts(b, "\\\\");
        else if (*p < 0x20)
            db_printf(b, "\\u%04x", *p);
        else
            db_put(b, (const char *)p, 1);
    }
    db_puts(b, "\"");
}

static void db_key_str(dbuf *b, const char *key, const char *val)
{
    db_printf(b, ",\"%s\":", key);
    db_json_str(b, val);
}

static const char *kind_name(warren_sched_kind k)
{
    switch (k) {
    case WARREN_SCHED_CRON:
        return "cron";
    case WARREN_SCHED_EVERY:
        return "every";
    case WARREN_SCHED_AT:
        return "at";
    }
    return "?";
}

static const char *misfire_name(warren_misfire m)
{
    switch (m) {
    case WARREN_MISFIRE_RUN_ONCE:
        return "run_once";
    case WARREN_MISFIRE_SKIP:
        return "skip";
    case WARREN_MISFIRE_CATCH_UP:
        return "catch_up";
    }
    return "?";
}

static const char *overlap_name(warren_overlap o)
{
    switch (o) {
    case WARREN_OVERLAP_SKIP:
        return "skip";
    case WARREN_OVERLAP_ALLOW:
        return "allow";
    case WARREN_OVERLAP_QUEUE:
        return "queue";
    case WARREN_OVERLAP_CANCEL_PREVIOUS:
        return "cancel_previous";
    }
    return "?";
}

/* The handler column: {"kind":"exec","argv":[...],"shell":false},
 * {"kind":"sql","sql":"..."}, {"kind":"c","name":"..."} or {"kind":"none"}. */
static void db_handler(dbuf *b, const warren_job *j)
{
    switch (j->handler) {
    case WARREN_HANDLER_EXEC:
        db_puts(b, "{\"kind\":\"exec\",\"argv\":[");
        for (size_t i = 0; j->exec_argv != NULL && j->exec_argv[i] != NULL; i++) {
            if (i > 0)
                db_puts(b, ",");
            db_json_str(b, j->exec_argv[i]);
        }
        db_printf(b, "],\"shell\":%s}", j->exec_shell ? "true" : "false");
        return;
    case WARREN_HANDLER_SQL:
        db_puts(b, "{\"kind\":\"sql\"");
        db_key_str(b, "sql", j->sql);
        db_puts(b, "}");
        return;
    case WARREN_HANDLER_C:
        db_puts(b, "{\"kind\":\"c\"");
        db_key_str(b, "name", j->c_handler);
        db_puts(b, "}");
        return;
    case WARREN_HANDLER_NONE:
        break;
    }
    db_puts(b, "{\"kind\":\"none\"}");
}

/* One JSON array of the config's jobs, keys named as warren.jobs columns. */
static int jobs_document(const warren_config *cfg, int partitions, dbuf *b, warren_error *err)
{
    db_puts(b, "[");
    for (size_t i = 0; i < cfg->njobs; i++) {
        const warren_job *j = &cfg->jobs[i];
        if (j->name == NULL || j->queue == NULL || j->schedule == NULL)
            return warren_error_set(err, WARREN_EINVAL,
                                    "sync: job %zu (\"%s\") lacks a name, queue or schedule", i,
                                    j->name ? j->name : "");
        db_puts(b, i > 0 ? ",{" : "{");
        db_puts(b, "\"name\":");
        db_json_str(b, j->name);
        db_key_str(b, "schedule_kind", kind_name(j->kind));
        db_key_str(b, "expression", j->schedule);
        db_key_str(b, "timezone", j->timezone ? j->timezone : "UTC");
        db_key_str(b, "queue", j->queue);
        db_puts(b, ",\"payload\":");
        db_puts(b, j->payload_json && j->payload_json[0] ? j->payload_json : "{}");
        db_puts(b, ",\"handler\":");
        db_handler(b, j);
        db_key_str(b, "misfire", misfire_name(j->misfire));
        db_printf(b, ",\"max_catch_up\":%d", j->max_catch_up);
        db_key_str(b, "overlap", overlap_name(j->overlap));
        db_printf(b, ",\"retry_max_attempts\":%d", j->retry_max_attempts);
        db_printf(b, ",\"retry_base_ms\":%" PRId64, j->retry_base_ms);
        db_printf(b, ",\"retry_cap_ms\":%" PRId64, j->retry_cap_ms);
        db_printf(b, ",\"lease_ms\":%" PRId64, j->lease_ms);
        db_printf(b, ",\"timeout_ms\":%" PRId64, j->timeout_ms);
        db_printf(b, ",\"jitter_ms\":%" PRId64, j->jitter_ms);
        db_printf(b, ",\"paused\":%s", j->paused ? "true" : "false");
        db_printf(b, ",\"partition\":%d}", warren_job_partition(j->name, partitions));
    }
    db_puts(b, "]");
    if (b->oom)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    return 0;
}

/* Sync stages the config's jobs in a temporary table (parsed once from one
 * JSON parameter, then ANALYZEd so the joins below are hash joins: with
 * jsonb_array_elements' default estimate of 100 rows, 100,000 jobs took
 * nested loops for minutes). config_hash = md5 of the job's settings as
 * canonical jsonb text (jsonb sorts keys and drops whitespace), without the
 * partition, which follows planner.partitions rather than the job. The
 * primary key rejects a duplicate name. */
static const char SYNC_STAGE_SQL[] =
    "CREATE TEMPORARY TABLE warren_sync_cfg ("
    "  name text PRIMARY KEY, schedule_kind text, expression text, timezone text, queue text,"
    "  payload jsonb, handler jsonb, misfire text, max_catch_up int, overlap text,"
    "  retry_max_attempts int, retry_base_ms bigint, retry_cap_ms bigint, lease_ms bigint,"
    "  timeout_ms bigint, jitter_ms bigint, paused boolean, partition int, config_hash text,"
    "  existed boolean NOT NULL DEFAULT false, old_paused boolean, old_removed boolean,"
    "  old_kind text, old_expr text, old_tz text, old_hash text,"
    "  resched boolean NOT NULL DEFAULT false"
    ") ON COMMIT DROP";

static const char SYNC_LOAD_SQL[] =
    "INSERT INTO warren_sync_cfg (name, schedule_kind, expression, timezone, queue, payload,"
    "    handler, misfire, max_catch_up, overlap, retry_max_attempts, retry_base_ms,"
    "    retry_cap_ms, lease_ms, timeout_ms, jitter_ms, paused, partition, config_hash)"
    "  SELECT r.*, md5((e - 'partition')::text)"
    "  FROM jsonb_array_elements($1::jsonb) AS e,"
    "       jsonb_to_record(e) AS r(name text, schedule_kind text, expression text,"
    "         timezone text, queue text, payload jsonb, handler jsonb, misfire text,"
    "         max_catch_up int, overlap text, retry_max_attempts int, retry_base_ms bigint,"
    "         retry_cap_ms bigint, lease_ms bigint, timeout_ms bigint, jitter_ms bigint,"
    "         paused boolean, partition int)";

/* What each job was before this sync (one snapshot, taken under the sync
 * lock): decides what happens to its not-yet-run runs below. */
static const char SYNC_SNAPSHOT_SQL[] =
    "UPDATE warren_sync_cfg c SET existed = true, old_paused = j.paused,"
    "  old_removed = j.removed, old_kind = j.schedule_kind, old_expr = j.expression,"
    "  old_tz = j.timezone, old_hash = j.config_hash,"
    "  resched = (j.schedule_kind, j.expression, j.timezone)"
    "            IS DISTINCT FROM (c.schedule_kind, c.expression, c.timezone)"
    " FROM warren.jobs j WHERE j.name = c.name";

/* The upsert. A row is written only when its hash differs, it was removed,
 * or its partition moved (unchanged rows are filtered before the INSERT,
 * so they are not even locked); the config's paused value is applied with a
 * settings change (so `warren pause` on an unchanged job survives a sync).
 * A changed schedule, or a job coming back, restarts the planner's cursor
 * (next_fire_at NULL = from now). `old` sees the rows as they were before
 * the INSERT (one snapshot for the whole statement). */
static const char SYNC_UPSERT_SQL[] =
    "WITH up AS ("
    "  INSERT INTO warren.jobs AS j (name, schedule_kind, expression, timezone, queue, payload,"
    "    handler, misfire, max_catch_up, overlap, retry_max_attempts, retry_base_ms,"
    "    retry_cap_ms, lease_ms, timeout_ms, jitter_ms, paused, paused_at, partition,"
    "    config_hash)"
    "  SELECT name, schedule_kind, expression, timezone, queue, payload, handler, misfire,"
    "    max_catch_up, overlap, retry_max_attempts, retry_base_ms, retry_cap_ms, lease_ms,"
    "    timeout_ms, jitter_ms, paused, CASE WHEN paused THEN now() END, partition, config_hash"
    "  FROM warren_sync_cfg c"
    "  WHERE NOT EXISTS (SELECT 1 FROM warren.jobs o WHERE o.name = c.name"
    "                    AND NOT o.removed AND o.config_hash = c.config_hash"
    "                    AND o.partition = c.partition)"
    "  ON CONFLICT (name) DO UPDATE SET"
    "    schedule_kind = EXCLUDED.schedule_kind, expression = EXCLUDED.expression,"
    "    timezone = EXCLUDED.timezone, queue = EXCLUDED.queue, payload = EXCLUDED.payload,"
    "    handler = EXCLUDED.handler, misfire = EXCLUDED.misfire,"
    "    max_catch_up = EXCLUDED.max_catch_up, overlap = EXCLUDED.overlap,"
    "    retry_max_attempts = EXCLUDED.retry_max_attempts,"
    "    retry_base_ms = EXCLUDED.retry_base_ms, retry_cap_ms = EXCLUDED.retry_cap_ms,"
    "    lease_ms = EXCLUDED.lease_ms, timeout_ms = EXCLUDED.timeout_ms,"
    "    jitter_ms = EXCLUDED.jitter_ms,"
    "    paused = CASE WHEN j.removed OR j.config_hash IS DISTINCT FROM EXCLUDED.config_hash"
    "                  THEN EXCLUDED.paused ELSE j.paused END,"
    "    paused_at = CASE"
    "      WHEN NOT (j.removed OR j.config_hash IS DISTINCT FROM EXCLUDED.config_hash)"
    "        THEN j.paused_at"
    "      WHEN NOT EXCLUDED.paused THEN NULL"
    "      WHEN j.paused THEN j.paused_at"
    "      ELSE now() END,"
    "    removed = false,"
    "    partition = EXCLUDED.partition,"
    "    next_fire_at = CASE"
    "      WHEN j.removed OR (j.schedule_kind, j.expression, j.timezone) IS DISTINCT FROM"
    "           (EXCLUDED.schedule_kind, EXCLUDED.expression, EXCLUDED.timezone)"
    "        THEN NULL ELSE j.next_fire_at END,"
    "    config_hash = EXCLUDED.config_hash,"
    "    updated_at = now()"
    "  WHERE j.removed OR j.config_hash IS DISTINCT FROM EXCLUDED.config_hash"
    "     OR j.partition IS DISTINCT FROM EXCLUDED.partition"
    "  RETURNING j.name"
    ")"
    "SELECT up.name,"
    "  CASE WHEN NOT c.existed OR c.old_removed THEN 'added'"
    "       WHEN c.old_hash IS DISTINCT FROM c.config_hash THEN 'changed'"
    "       ELSE 'moved' END AS what"
    " FROM up JOIN warren_sync_cfg c USING (name)"
    " ORDER BY up.name";

/* Runs the planner already materialised (up to its horizon ahead) follow the
 * job, with the same rules and notes as `warren pause` / `warren resume`
 * (store_plan.c): only scheduled runs (origin schedule or misfire) never
 * claimed (attempt 0) are touched; triggered and backfilled runs, and
 * anything started, stay. A published message whose run was deleted or
 * cancelled finds nothing to claim and is dropped by the worker.
 *
 * Schedule changed, or job restored: its future unclaimed runs (planned,
 * published, or cancelled by a pause) belonged to the old definition and are
 * deleted, so the planner, starting again from now, can plan the new fire
 * times under the same keys. */
static const char SYNC_RUNS_REPLAN_SQL[] =
    "DELETE FROM warren.runs r USING warren_sync_cfg c"
    " WHERE r.job = c.name AND c.existed AND (c.resched OR c.old_removed)"
    "   AND r.origin IN ('schedule', 'misfire') AND r.attempt = 0 AND r.due_at > now()"
    "   AND (r.state IN ('planned', 'published')"
    "        OR (r.state = 'cancelled' AND r.note LIKE '%cancelled: job paused at %'))";

/* Unpaused by the config (as `warren resume`): the runs the pause cancelled
 * are deleted and the cursor moves back to the first of them, so the planner
 * plans them again under the job's misfire policy. */
static const char SYNC_RUNS_RESUME_SQL[] =
    "WITH c AS ("
    "  SELECT c.name FROM warren_sync_cfg c JOIN warren.jobs j USING (name)"
    "  WHERE c.existed AND NOT c.old_removed AND NOT c.resched AND c.old_paused AND NOT j.paused"
    "), d AS ("
    "  DELETE FROM warren.runs r USING c"
    "  WHERE r.job = c.name AND r.state = 'cancelled' AND r.origin IN ('schedule', 'misfire')"
    "    AND r.attempt = 0 AND r.note LIKE '%cancelled: job paused at %'"
    "  RETURNING r.job, r.scheduled_at"
    ")"
    "UPDATE warren.jobs j SET next_fire_at = LEAST(j.next_fire_at, m.first)"
    " FROM (SELECT job, min(scheduled_at) AS first FROM d GROUP BY job) m"
    " WHERE j.name = m.job";

/* The note line the pause writes; `warren resume` looks for it. */
#define PAUSE_NOTE(why)                                                                            \
    "'cancelled: job paused at ' ||"                                                               \
    " to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') || ' (" why ")'"
#define APPEND_NOTE(line)                                                                          \
    "CASE WHEN r.note IS NULL OR r.note = '' THEN " line " ELSE r.note || E'\\n' || " line " END"

/* Paused by the config (as `warren pause`): future unclaimed runs cancelled. */
static const char SYNC_RUNS_PAUSE_SQL[] =
    "UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),"
    "  note = " APPEND_NOTE(PAUSE_NOTE(
        "paused in the config; warren sync")) ""
                                              " FROM warren_sync_cfg c JOIN warren.jobs j USING "
                                              "(name)"
                                              " WHERE r.job = c.name AND c.existed AND NOT "
                                              "c.old_paused AND NOT c.old_removed AND j.paused"
                                              "   AND r.origin IN ('schedule', 'misfire') AND "
                                              "r.state IN ('planned', 'published')"
                                              "   AND r.due_at > now()";

/* Jobs no longer in the config: paused and marked, never deleted; their
 * future unclaimed runs cancelled as by a pause. */
static const char SYNC_REMOVE_SQL[] =
    "WITH rm AS ("
    "  UPDATE warren.jobs j SET removed = true, paused = true,"
    "    paused_at = CASE WHEN j.paused THEN j.paused_at ELSE now() END, updated_at = now()"
    "  WHERE NOT j.removed"
    "    AND NOT EXISTS (SELECT 1 FROM warren_sync_cfg c WHERE c.name = j.name)"
    "  RETURNING j.name"
    "), cancelled AS ("
    "  UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),"
    "    note = " APPEND_NOTE(PAUSE_NOTE(
        "removed from the config; warren sync")) ""
                                                 "  FROM rm WHERE r.job = rm.name"
                                                 "    AND r.origin IN ('schedule', 'misfire') AND "
                                                 "r.state IN ('planned', 'published')"
                                                 "    AND r.due_at > now()"
                                                 ")"
                                                 "SELECT name FROM rm ORDER BY name";

static int report_add(char ***arr, size_t *n, const char *name)
{
    char **p = realloc(*arr, (*n + 1) * sizeof(*p));

    if (p == NULL)
        return WARREN_ENOMEM;
    *arr = p;
    p[*n] = strdup(name);
    if (p[*n] == NULL)
        return WARREN_ENOMEM;
    (*n)++;
    return 0;
}

static void free_names(char **a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(a[i]);
    free(a);
}

void warren_sync_report_free(warren_sync_report *r)
{
    if (r == NULL)
        return;
    free_names(r->added, r->nadded);
    free_names(r->changed, r->nchanged);
    free_names(r->removed, r->nremoved);
    memset(r, 0, sizeof(*r));
}

int warren_store_sync(warren_store *st, const warren_config *cfg, warren_sync_report *report,
                      warren_error *err)
{
    warren_sync_report rep = {0};
    dbuf doc = {0};
    PGresult *res = NULL;
    const char *params[1];
    const char *lockp[1] = {SYNC_LOCK_KEY};
    int partitions = cfg->planner.partitions > 0 ? cfg->planner.partitions : 64;
    int rc, moved = 0;

    if (report != NULL)
        memset(report, 0, sizeof(*report));
    rc = jobs_document(cfg, partitions, &doc, err);
    if (rc != 0)
        goto fail;
    params[0] = doc.p;
    rc = warren__store_begin(st, err);
    if (rc != 0)
        goto fail;
    /* Two syncs at once serialise instead of deadlocking or double-reporting. */
    rc = warren__store_exec(st, "SELECT pg_advisory_xact_lock($1::bigint)", 1, lockp, NULL,
                            "take the sync lock", err);
    if (rc != 0)
        goto fail;
    rc = warren__store_exec(st, "SELECT to_regclass('warren.jobs') IS NOT NULL", 0, NULL, &res,
                            "look for warren.jobs", err);
    if (rc != 0)
        goto fail;
    if (strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
        rc = warren_error_set(err, WARREN_EDB,
                              "the database at %s has no table warren.jobs: run `warren migrate` "
                              "first",
                              st->where);
        goto fail;
    }
    PQclear(res);
    res = NULL;
    rc = warren__store_exec_simple(st, SYNC_STAGE_SQL, "stage the config's jobs", err);
    if (rc == 0)
        rc = warren__store_exec(st, SYNC_LOAD_SQL, 1, params, NULL, "load the config's jobs", err);
    if (rc == 0)
        rc = warren__store_exec_simple(st, "ANALYZE warren_sync_cfg", "analyze the config's jobs",
                                       err);
    if (rc == 0)
        rc = warren__store_exec_simple(st, SYNC_SNAPSHOT_SQL, "read the jobs as they were", err);
    if (rc != 0)
        goto fail;
    rc = warren__store_exec(st, SYNC_UPSERT_SQL, 0, NULL, &res, "sync jobs into warren.jobs", err);
    if (rc != 0)
        goto fail;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        const char *name = PQgetvalue(res, i, 0), *what = PQgetvalue(res, i, 1);
        if (strcmp(what, "added") == 0)
            rc = report_add(&rep.added, &rep.nadded, name);
        else if (strcmp(what, "changed") == 0)
            rc = report_add(&rep.changed, &rep.nchanged, name);
        else
            moved++;
    }
    PQclear(res);
    res = NULL;
    if (rc != 0) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto fail;
    }
    rc = warren__store_exec_simple(st, SYNC_RUNS_REPLAN_SQL,
                                   "delete planned runs of changed schedules", err);
    if (rc == 0)
        rc = warren__store_exec_simple(st, SYNC_RUNS_RESUME_SQL, "re-plan runs of unpaused jobs",
                                       err);
    if (rc == 0)
        rc = warren__store_exec_simple(st, SYNC_RUNS_PAUSE_SQL, "cancel runs of paused jobs", err);
    if (rc != 0)
        goto fail;
    rc = warren__store_exec(st, SYNC_REMOVE_SQL, 0, NULL, &res, "mark removed jobs", err);
    if (rc != 0)
        goto fail;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++)
        rc = report_add(&rep.removed, &rep.nremoved, PQgetvalue(res, i, 0));
    PQclear(res);
    res = NULL;
    if (rc != 0) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto fail;
    }
    /* Delivered on commit: planners wake up and plan the new definitions. */
    rc = warren_store_notify(st, "sync", err);
    if (rc != 0)
        goto fail;
    rc = warren__store_commit(st, err);
    if (rc != 0)
        goto fail;
    free(doc.p);
    if (moved > 0)
        warren_log(st->lg, WARREN_LOG_INFO, "sync: %d unchanged jobs moved to a new partition",
                   moved);
    if (report != NULL)
        *report = rep;
    else
        warren_sync_report_free(&rep);
    return 0;
fail:
    PQclear(res);
    warren__store_rollback(st);
    free(doc.p);
    warren_sync_report_free(&rep);
    return rc;
}
