/* store.h: warren's PostgreSQL access (all of libpq lives in src/store*.c):
 * connecting, migrations, job sync, the database clock, LISTEN/NOTIFY.
 * The planner's and the worker's queries live in store_plan.c / store_work.c
 * with their own headers; they reach the connection through src/store_int.h. */
#ifndef WARREN_STORE_H
#define WARREN_STORE_H

#include <stddef.h>

#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>
#include <warren/timefmt.h>

typedef struct warren_store warren_store;

/* The NOTIFY channel planners LISTEN on; sync, trigger, pause and resume notify it. */
#define WARREN_NOTIFY_CHANNEL "warren_jobs"

/* Connects to url (libpq conninfo or URI) with a connect timeout (5 s unless
 * the URL sets connect_timeout), TCP keepalives (30 s idle, 3 probes 10 s
 * apart) and tcp_user_timeout 60 s unless the URL sets any of those, and
 * application_name "warren" unless set. The session runs with TimeZone UTC
 * and DateStyle ISO. Server notices go to lg (debug; warnings at warn).
 * *out is new; free with warren_store_free (NULL ok). lg is borrowed, may be
 * NULL, and must outlive the store. Errors: WARREN_EINVAL for a malformed URL
 * (the message never echoes a password); WARREN_EDBCONN with a message naming
 * host and port and the fix ("cannot connect to PostgreSQL at 127.0.0.1:5432:
 * Connection refused; is the server running? check database.url or
 * WARREN_DATABASE_URL"; a missing database or bad password get their own
 * fix). */
int warren_store_open(const char *url, const warren_logger *lg, warren_store **out,
                      warren_error *err);
void warren_store_free(warren_store *st);

/* 1 if the connection is up (as far as libpq knows: a dead server is noticed
 * by the next call). warren_store_reconnect re-establishes it with the same
 * parameters (re-LISTENing if listening; prepared statements of store_int.h
 * are re-prepared on next use); it fails like warren_store_open with
 * "cannot reconnect to PostgreSQL at HOST:PORT: ...". Daemons call it with
 * their own backoff after a WARREN_EDBCONN; one-shot commands just fail. */
int warren_store_connected(const warren_store *st);
/* "HOST:PORT" of the server, for messages (borrowed, valid until the next
 * reconnect or warren_store_free). */
const char *warren_store_where(const warren_store *st);
int warren_store_reconnect(warren_store *st, warren_error *err);
/* Bounds every call on the connection. On the server: statement_timeout and
 * lock_timeout of the session, in milliseconds (0: the server's default),
 * applied now and again after every reconnect; a statement that runs or
 * waits for a lock longer fails with WARREN_EDB, and warren_store_timed_out
 * then says so. In this process: with answer_ms > 0 a call (and a
 * reconnect) waits at most that long for the server's answer; past it the
 * connection is dropped and the call fails with WARREN_EDBCONN ("no answer
 * from PostgreSQL at HOST:PORT within N ms"), as if the connection had been
 * lost (a frozen server, a silent network). The worker's loop connection
 * uses both: no call may keep it from its heartbeats and lease deadlines. */
int warren_store_set_timeouts(warren_store *st, int64_t statement_ms, int64_t lock_ms,
                              int64_t answer_ms, warren_error *err);
/* 1 if the last failed call on st was refused for a timeout (SQLSTATE 57014
 * statement_timeout or a cancel, 55P03 lock_timeout): nothing of it took
 * effect, and the same call may succeed once the lock is released. */
int warren_store_timed_out(const warren_store *st);

/* Applies the migrations DIR/migrations/NNN_*.sql not yet recorded in
 * warren.schema_migrations, in order, then every function file DIR/functions.sql
 * lists ("\ir functions/NAME.sql" lines; every DIR/functions/ *.sql must be
 * listed), all in one transaction under the migration lock
 * (warren.schema_migrations locked IN SHARE ROW EXCLUSIVE MODE, which only
 * the schema's owner or a superuser can take: two migrates at once
 * serialise, and no other login can delay one). The function files are applied by every
 * migrate, also when no migration is pending; not on a database with a
 * migration newer than any in DIR (a warning: they would be older than its
 * functions). *applied (may be NULL) gets the number of migrations applied
 * now. Each file is run as one multi-statement string (like psql -f); a
 * migration's version is recorded after it (files also record themselves,
 * so a psql application counts: sql/install.sql). Errors: WARREN_ENOENT (no
 * such directory, no migrations, a listed file missing), WARREN_EINVAL (two
 * migrations of one version, a bad line in functions.sql, a function file
 * not listed), WARREN_EDB naming FILE:LINE of the failing statement (then
 * nothing of this run stays). */
int warren_store_migrate(warren_store *st, const char *sql_dir, int *applied, warren_error *err);
/* 1 if migration version is recorded in warren.schema_migrations, 0 if not
 * (or the table is missing), <0 on a database error. */
int warren_store_has_migration(warren_store *st, int version, warren_error *err);
/* 1 if the function signature (as to_regprocedure takes it, e.g.
 * "warren.run_states(text[])") exists, 0 if not, <0 on a database error.
 * Needs no privilege on the function: a worker login may ask. */
int warren_store_has_function(warren_store *st, const char *signature, warren_error *err);

/* What sync did, by job name (arrays and names are new; free with
 * warren_sync_report_free). */
typedef struct warren_sync_report {
    char **added;
    size_t nadded;
    char **changed;
    size_t nchanged;
    char **removed; /* in the database, not in the config: paused and marked removed */
    size_t nremoved;
    size_t api_updated; /* API jobs given their changed template's settings */
    size_t api_paused;  /* API jobs paused because their template was removed */
    size_t api_resumed; /* API jobs resumed because their template is back */
} warren_sync_report;
void warren_sync_report_free(warren_sync_report *r);

/* Upserts the config's jobs into warren.jobs in one transaction, computes
 * each job's partition (stable hash of the name mod cfg->planner.partitions;
 * 64 when that is 0), pauses and marks jobs missing from the config (never
 * deletes; their runs are history), and sends NOTIFY WARREN_NOTIFY_CHANNEL.
 * config_hash is the md5 of the job's settings as canonical jsonb text, so
 * reordering payload keys is not a change. Rules:
 * - new job: inserted, reported added; paused as the config says.
 * - changed settings (hash differs): updated, reported changed; paused is
 *   set from the config. Unchanged jobs are not written, so an operator's
 *   `warren pause` survives a sync until the job's settings change.
 * - schedule (kind, expression, timezone) changed: next_fire_at = NULL
 *   (the planner starts from now).
 * - in the database, not in the config: paused = removed = true, reported
 *   removed (once).
 * - a removed job back in the config: removed = false, paused as the config
 *   says, next_fire_at = NULL, reported added.
 * Runs already materialised (up to the planner's horizon) follow, as with
 * `warren pause`/`resume`, touching only scheduled runs never claimed: a
 * schedule change or a restore deletes the job's future planned/published
 * runs (the old definition's); paused or removed by the config cancels them
 * with the note "cancelled: job paused at T (...)"; unpaused by the config
 * deletes the runs the pause cancelled and moves next_fire_at back to the
 * first of them (the misfire policy then applies). Triggered and backfilled
 * runs stay.
 * API jobs (origin 'api', docs/api-jobs.md) are not the config's: their own
 * fields are never written. A template whose settings changed copies them
 * (queue, handler, misfire, overlap, retry, lease, timeout) to its API jobs;
 * a removed template pauses its active API jobs (noted, marked
 * paused_by_template, runs cancelled as by a pause); a template back in the
 * config resumes exactly those. A config job named like a live API job is an
 * error (WARREN_EINVAL, nothing changed).
 * Two syncs at once serialise (LOCK TABLE warren.sync_state); each lock
 * wait is bounded by 10 s (WARREN_ETIMEOUT; warren_ops_sync in ops.h sets
 * the bound and take-over). Errors: WARREN_EDB
 * (e.g. a value the schema rejects; nothing is changed), WARREN_EDBCONN. */
int warren_store_sync(warren_store *st, const warren_config *cfg, warren_sync_report *report,
                      warren_error *err);

/* PostgreSQL's clock: SELECT clock_timestamp(). Every due/late decision uses it. */
int warren_store_now(warren_store *st, warren_us *now, warren_error *err);

/* What woke warren_store_wait_notify (bits of *got): a notification that needs
 * planning (a sync, a job created, changed, paused, resumed or deleted, any
 * payload not listed next), and one whose runs exist already and only need
 * publishing (payloads "enqueue", "release", "replay" and "retry"). */
#define WARREN_NOTIFY_PLAN 1
#define WARREN_NOTIFY_RELAY 2

/* LISTEN on WARREN_NOTIFY_CHANNEL (re-issued by warren_store_reconnect); then
 * warren_store_wait_notify blocks up to timeout_ms (< 0: no limit) for a
 * notification and returns 0 with *got != 0, the WARREN_NOTIFY_* bits of
 * what arrived (all pending notifications are consumed: several NOTIFYs wake
 * the caller once), or 0 with *got = 0 after
 * the timeout or when a signal interrupted the wait (so a daemon's loop can
 * look at its flags). Notifications that arrived during other queries on the
 * same store count. Errors: WARREN_EDBCONN when the connection is lost. */
int warren_store_listen(warren_store *st, warren_error *err);
int warren_store_wait_notify(warren_store *st, int timeout_ms, int *got, warren_error *err);
/* NOTIFY WARREN_NOTIFY_CHANNEL with payload (may be NULL). */
int warren_store_notify(warren_store *st, const char *payload, warren_error *err);

/* The partition of a job name: FNV-1a 32-bit of the name's bytes (offset
 * basis 2166136261, prime 16777619), modulo partitions; 0 when partitions <= 1. */
int warren_job_partition(const char *name, int partitions);

#endif
