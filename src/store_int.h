/* store_int.h: private to src/store*.c: the libpq connection behind a
 * warren_store and the helpers every store_*.c uses, so libpq errors are
 * translated in one place (store.c). Not installed; not for other modules
 * (tests use it to reach below the public API).
 *
 * Session settings every connection gets (after each connect and reconnect):
 * TimeZone 'UTC', DateStyle 'ISO, YMD', application_name "warren" (unless the
 * URL names one). Timestamps therefore come back as "2026-11-29 08:58:04.123+00";
 * warren__store_get_us parses them (or an integer of microseconds). */
#ifndef WARREN_STORE_INT_H
#define WARREN_STORE_INT_H

#include <libpq-fe.h>
#include <stdint.h>

#include <warren/error.h>
#include <warren/log.h>
#include <warren/ops.h>
#include <warren/store.h>
#include <warren/timefmt.h>

/* The connection (borrowed, valid until warren_store_free; a reconnect keeps
 * the same PGconn object). Never PQfinish it. */
PGconn *warren__store_conn(warren_store *st);
/* The logger given to warren_store_open (borrowed; may be NULL). */
const warren_logger *warren__store_logger(const warren_store *st);
/* "HOST:PORT" of the server (borrowed, valid until the next (re)connect). */
const char *warren__store_where(const warren_store *st);

/* Translates a failure into err. res is the failed result (may be NULL when
 * libpq returned none); it is NOT cleared. what names the operation for the
 * message ("claim run x@..."). Returns WARREN_EDBCONN when the connection is
 * gone (PQstatus bad, or SQLSTATE class 08 / 57P01..57P03), otherwise
 * WARREN_EDB. Messages: "<what>: <server message> (SQLSTATE 23505)[; detail:
 * ...][; hint: ...]" or "lost connection to PostgreSQL at HOST:PORT
 * (<what>): <reason>; is the server running? ...". The SQLSTATE is remembered
 * (warren__store_sqlstate). */
int warren__store_fail(warren_store *st, const PGresult *res, const char *what, warren_error *err);
/* The SQLSTATE of the last failure seen by the helpers ("" if none since the
 * last successful helper call), e.g. "23505" unique_violation, "40001"
 * serialization_failure, "40P01" deadlock. Borrowed. */
const char *warren__store_sqlstate(const warren_store *st);

/* Runs sql with nparams text parameters ($1..$n; a NULL entry is SQL NULL;
 * params may be NULL when nparams is 0) and text results. Success is
 * PGRES_COMMAND_OK or PGRES_TUPLES_OK. On success *out (if out is not NULL)
 * gets the result, which the caller must PQclear; with out NULL it is cleared
 * here. On failure *out is NULL and err is set via warren__store_fail. */
int warren__store_exec(warren_store *st, const char *sql, int nparams, const char *const *params,
                       PGresult **out, const char *what, warren_error *err);

/* Like warren__store_exec, but prepares sql once per connection under name
 * (a constant, unique per statement, e.g. "plan_insert_run") and then runs
 * the prepared statement. Prepared names are forgotten on reconnect and
 * re-prepared on next use. Parameter types are inferred by the server; cast
 * in the SQL ($1::timestamptz) where it matters. */
int warren__store_exec_prepared(warren_store *st, const char *name, const char *sql, int nparams,
                                const char *const *params, PGresult **out, const char *what,
                                warren_error *err);

/* Runs one or more statements without parameters (PQexec); the last result
 * must be COMMAND_OK or TUPLES_OK. */
int warren__store_exec_simple(warren_store *st, const char *sql, const char *what,
                              warren_error *err);

/* Transactions. begin rolls back a transaction left open (a bug; with a
 * warning: warren__store_end_open, also for a BEGIN sent in a pipeline).
 * rollback is best effort and safe to call at any time (no-op when idle or
 * disconnected); call it on every error path after begin. */
void warren__store_end_open(warren_store *st);
int warren__store_begin(warren_store *st, warren_error *err);
int warren__store_commit(warren_store *st, warren_error *err);
void warren__store_rollback(warren_store *st);

/* Result accessors (text format). get_text: borrowed, NULL for SQL NULL.
 * The numeric ones return WARREN_EPARSE on a malformed value and
 * WARREN_ENOENT for SQL NULL (*out untouched). get_bool accepts t/f. get_us
 * accepts an integer (microseconds since the epoch) or a timestamptz text in
 * the session format above (any +HH[:MM[:SS]] offset; "infinity" is an
 * error, and an instant past what warren_us holds, which PostgreSQL's range
 * reaches near 294276 AD, is WARREN_ERANGE). get_int also returns
 * WARREN_ERANGE outside int. */
const char *warren__store_get_text(const PGresult *res, int row, int col);
int warren__store_get_int64(const PGresult *res, int row, int col, int64_t *out);
int warren__store_get_int(const PGresult *res, int row, int col, int *out);
/* The row count of an INSERT/UPDATE/DELETE result (PQcmdTuples), 0 when it
 * has none or it does not parse. */
int warren__store_cmd_tuples(PGresult *res);
int warren__store_get_bool(const PGresult *res, int row, int col, int *out);
int warren__store_get_us(const PGresult *res, int row, int col, warren_us *out);

/* Formats an instant as a timestamptz parameter the server reads exactly:
 * "YYYY-MM-DD HH:MM:SS.ffffff+00" (microseconds). buf >= WARREN_TIME_BUF.
 * Returns buf. */
char *warren__store_us_param(warren_us t, char *buf, size_t len);
/* Formats an int64 as a parameter; buf >= 24. Returns buf. */
char *warren__store_int_param(int64_t v, char *buf, size_t len);

/* warren_ops_sync's body (store_sync.c; ops.h has the contract).
 * warren_store_sync is this with the default options. */
int warren__store_sync(warren_store *st, const warren_config *cfg, const warren_ops_sync_options *o,
                       warren_ops_sync_result *out, warren_error *err);

/* warren_store_migrate, applying only the pending migrations up to version
 * target (all when target < 0), then the function files as always (they must
 * therefore create on any schema from migration 001 on). For tests that
 * migrate one version at a time (store_migrate.c). */
int warren__store_migrate_to(warren_store *st, const char *sql_dir, int target, int *applied,
                             warren_error *err);

/* Shared by store_work.c (the protocol calls) and store_sql.c (the sql
 * handler's transactions). */
#define SQL_COMPLETE_MANY                                                                          \
    "SELECT run_key, recorded FROM warren.complete_many($1::text[], $2::int[])"
#define SQL_COMPLETE_ONE "SELECT warren.complete($1::text, $2::int, 'succeeded')"
struct warren__buf;
/* Appends one element of a text[] literal: NULL, or a quoted string. */
void warren__sb_elem(struct warren__buf *b, const char *s, int first);
/* Closes a text[] literal: 0, or the buffer's error. */
int warren__sb_done(struct warren__buf *b, warren_error *err);

#endif
