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
 * the URL sets one). *out is new; free with warren_store_free (NULL ok).
 * lg is borrowed and may be NULL. Errors: WARREN_EDBCONN with a message
 * naming host and port ("cannot connect to PostgreSQL at 127.0.0.1:5432:
 * connection refused; is the server running? set WARREN_DATABASE_URL"). */
int warren_store_open(const char *url, const warren_logger *lg, warren_store **out,
                      warren_error *err);
void warren_store_free(warren_store *st);

/* 1 if the connection is up. warren_store_reconnect re-establishes it
 * (re-LISTENing if listening); daemons call it with their own backoff. */
int warren_store_connected(const warren_store *st);
int warren_store_reconnect(warren_store *st, warren_error *err);

/* Applies sql/NNN_*.sql files from dir in order, each in its own transaction,
 * under a session advisory lock (two migrates at once serialise); files
 * already recorded in warren.schema_migrations are skipped. *applied (may be
 * NULL) gets the number applied now. */
int warren_store_migrate(warren_store *st, const char *sql_dir, int *applied, warren_error *err);

/* What sync did, by job name (arrays and names are new; free with
 * warren_sync_report_free). */
typedef struct warren_sync_report {
    char **added;
    size_t nadded;
    char **changed;
    size_t nchanged;
    char **removed; /* in the database, not in the config: paused and marked removed */
    size_t nremoved;
} warren_sync_report;
void warren_sync_report_free(warren_sync_report *r);

/* Upserts the config's jobs into warren.jobs in one transaction, computes
 * each job's partition (stable hash of the name mod cfg->planner.partitions),
 * pauses and marks jobs missing from the config (never deletes), and sends
 * NOTIFY WARREN_NOTIFY_CHANNEL. A job whose schedule changed gets its
 * next_fire_at reset to NULL (start from now). */
int warren_store_sync(warren_store *st, const warren_config *cfg, warren_sync_report *report,
                      warren_error *err);

/* PostgreSQL's clock: SELECT clock_timestamp(). Every due/late decision uses it. */
int warren_store_now(warren_store *st, warren_us *now, warren_error *err);

/* LISTEN on WARREN_NOTIFY_CHANNEL; then warren_store_wait_notify blocks up to
 * timeout_ms for a notification (*got = 1) or returns with *got = 0. */
int warren_store_listen(warren_store *st, warren_error *err);
int warren_store_wait_notify(warren_store *st, int timeout_ms, int *got, warren_error *err);
/* NOTIFY WARREN_NOTIFY_CHANNEL with payload (may be NULL). */
int warren_store_notify(warren_store *st, const char *payload, warren_error *err);

/* The partition of a job name: FNV-1a 32-bit of the name, modulo partitions. */
int warren_job_partition(const char *name, int partitions);

#endif
