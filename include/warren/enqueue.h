/* enqueue.h: one-shot runs from application code (docs/api-jobs.md, "One-shot runs:
 * `warren.enqueue`, `warren.enqueue_many`"), through the SQL function warren.enqueue, for `warren
 * enqueue` and C programs. Other languages call the SQL function directly (inside their own
 * transaction). */
#ifndef WARREN_ENQUEUE_H
#define WARREN_ENQUEUE_H

#include <warren/codec.h>
#include <warren/error.h>
#include <warren/store.h>
#include <warren/timefmt.h>

/* What warren.enqueue answered. */
typedef struct warren_enqueue_result {
    char run_key[WARREN_RUN_KEY_MAX]; /* JOB@KEY */
    int created;                      /* 0: a run already held the key (the fields are its) */
    char state[16];                   /* the run's state ("" if it could not be read) */
    warren_us scheduled_at;           /* the run's instant (milliseconds) */
} warren_enqueue_result;

/* Enqueues a run of job under key (the caller's idempotency key,
 * docs/worker-protocol.md "Run keys") at *at (NULL: now, by the database's clock; rounded up to the
 * millisecond), with payload (a JSON object as text, NULL: the job's) and
 * tenant (NULL: the job's), in a transaction of its own. Runs warren.enqueue
 * as the store's login (which must be the owner or a warren_producer
 * member). Errors: WARREN_EINVAL with warren.enqueue's message (SQLSTATE
 * 22023: unknown or removed job, bad key, payload or tenant; nothing
 * written), WARREN_EDB, WARREN_EDBCONN. */
int warren_enqueue(warren_store *st, const char *job, const char *key, const warren_us *at,
                   const char *payload, const char *tenant, warren_enqueue_result *out,
                   warren_error *err);

#endif
