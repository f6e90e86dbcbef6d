/* store_plan.h: the planner's SQL (src/store_plan.c): partition leases,
 * locking due jobs, inserting runs, advancing cursors, the relay's and the
 * outbox's queries, the reconciler. Every statement is a named constant with
 * $n parameters; instants cross the boundary as warren_us (microseconds since
 * the epoch, database clock).
 *
 * Private to the library (planner.c, relay.c, ops.c) and its tests: plumbing
 * under the planner, not an API. No program needs it: the warren executable's
 * commands go through <warren/ops.h> and <warren/planner.h>. */
#ifndef WARREN_STORE_PLAN_H
#define WARREN_STORE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <warren/error.h>
#include <warren/store.h>
#include <warren/timefmt.h>

/* Transactions on the store's connection (rollback is best effort, any time). */
int warren_plan_begin(warren_store *st, warren_error *err);
int warren_plan_commit(warren_store *st, warren_error *err);
void warren_plan_rollback(warren_store *st);

/* ------------------------------------------------------------------ leases */

/* The partition count the last `warren sync` placed the jobs by
 * (warren.sync_state; migration 015): *n, or 0 when no sync recorded one. */
int warren_plan_sync_partitions(warren_store *st, int *n, warren_error *err);

/* Announces planner owner as live until now + ttl_ms and makes sure lease rows
 * 0..partitions-1 exist. Own transaction. */
int warren_plan_heartbeat(warren_store *st, const char *owner, int64_t ttl_ms, int partitions,
                          warren_error *err);

/* In one transaction: renews owner's leases to now + lease_ms, counts live
 * planners, gives up partitions above the fair share ceil(partitions / live)
 * or takes free/expired ones up to it (FOR UPDATE SKIP LOCKED). *owned gets
 * the number of partitions owned afterwards; *taken / *dropped (may be NULL)
 * how many changed hands; *live the live planner count. */
int warren_plan_leases(warren_store *st, const char *owner, int partitions, int64_t lease_ms,
                       int *owned, int *taken, int *dropped, int *live, warren_error *err);

/* Gives up every lease of owner and its membership row. */
int warren_plan_release(warren_store *st, const char *owner, warren_error *err);

/* -------------------------------------------------------------------- jobs */

/* A job row as the planner and the commands need it. Strings are new (freed
 * by warren_plan_jobs_free / warren_plan_job_clear). */
typedef struct warren_plan_job {
    char *name;
    char *kind; /* cron, every, at */
    char *expression;
    char *timezone;
    char *queue;
    char *misfire; /* run_once, skip, catch_up */
    int max_catch_up;
    int64_t jitter_ms;
    int has_next; /* 0: next_fire_at is NULL (start from now) */
    warren_us next_fire_at;
    int paused;
    int removed;
    char *broken_reason;    /* NULL: not broken (see warren_plan_mark_broken) */
    warren_us broken_since; /* 0 when not broken */
    int cursor_invalid;     /* next_fire_at is '-infinity' (has_next is 0) */
    int replan;             /* marked replan (017; set by warren_plan_lock_due_jobs only) */
} warren_plan_job;
void warren_plan_job_clear(warren_plan_job *j);
void warren_plan_jobs_free(warren_plan_job *jobs, size_t n);

/* Inside a transaction: locks up to limit jobs after *pos (which moves to the
 * last one locked) of partitions leased (and not
 * expired) by owner that are not paused/removed and have a next_fire_at NULL
 * or <= now + horizon_ms and are not broken with a retry time still ahead
 * (unless changed since they broke),
 * with FOR UPDATE SKIP LOCKED (and FOR SHARE on the
 * lease rows, so the lease cannot change hands before commit). *jobs is new
 * (warren_plan_jobs_free), *now gets the transaction's now(). */
/* Where a tick's batches got to in the due-jobs order (coalesce(next_fire_at,
 * '-infinity'), name): the next batch locks only jobs after it. Start each
 * tick with warren_plan_pos_start (everything due). */
typedef struct warren_plan_pos {
    int set;       /* 0: key is '-infinity' */
    warren_us key; /* the last job's cursor */
    char name[256];
} warren_plan_pos;
void warren_plan_pos_start(warren_plan_pos *pos);
/* From floor on (the jobs whose cursor is floor included). */
void warren_plan_pos_from(warren_plan_pos *pos, warren_us floor);

/* replan_only: only the jobs marked replan (migration 017), through index
 * jobs_replan; otherwise every due job after *pos. */
int warren_plan_lock_due_jobs(warren_store *st, const char *owner, int64_t horizon_ms, int limit,
                              int replan_only, warren_plan_pos *pos, warren_plan_job **jobs,
                              size_t *n, warren_us *now, warren_error *err);

/* Outside a transaction, after a tick planned everything due: the smallest
 * cursor at or above lo ('-infinity' when !has_lo) of the eligible jobs of
 * owner's partitions that are not marked replan. *found 0: none with a
 * finite cursor (the others never fire again); -1: one has none (NULL or
 * '-infinity', which the replan rule never leaves unmarked: no floor). */
int warren_plan_floor(warren_store *st, const char *owner, int has_lo, warren_us lo, int *found,
                      warren_us *floor, warren_error *err);

/* Reads one job (ENOENT if there is none). */
int warren_plan_job_get(warren_store *st, const char *name, warren_plan_job *out,
                        warren_error *err);

/* A run row to insert. Strings are borrowed. */
typedef struct warren_plan_run {
    const char *job;
    warren_us scheduled_at; /* whole seconds */
    warren_us due_at;
    const char *state;   /* "planned" or "skipped" */
    const char *origin;  /* schedule, trigger, backfill, misfire */
    const char *note;    /* may be NULL */
    const char *payload; /* JSON object or NULL (the job's payload) */
} warren_plan_run;

/* INSERT ... ON CONFLICT DO NOTHING of n rows in one statement; *inserted
 * (may be NULL) gets how many were new. */
int warren_plan_insert_runs(warren_store *st, const warren_plan_run *runs, size_t n, int *inserted,
                            warren_error *err);

/* The planner's new runs, inside its transaction: a plain INSERT (no
 * speculative insertion) under a savepoint; if a run key is taken already
 * (SQLSTATE 23505) the rows again with ON CONFLICT DO NOTHING, so the result
 * is that of warren_plan_insert_runs. */
int warren_plan_insert_new_runs(warren_store *st, const warren_plan_run *runs, size_t n,
                                int *inserted, warren_error *err);

/* Sets next_fire_at of n jobs; never_again[i] != 0 stores 'infinity'. A job
 * that was broken is no longer: its mark is cleared and the event
 * job.recovered.<job> written to the outbox. was_broken[i] says whether job
 * i's broken_reason was set when it was locked (FOR UPDATE, in the same
 * transaction): the others take a cheaper statement; NULL: not known, every
 * job is looked at before its update. A job's replan mark (017) is cleared
 * when its new cursor is after now() + horizon_ms (the scan's horizon, in
 * the same transaction), kept otherwise. */
int warren_plan_advance(warren_store *st, const char *const *names, const warren_us *next,
                        const int *never_again, const int *was_broken, size_t n, int64_t horizon_ms,
                        warren_error *err);

/* Marks n jobs broken: their fire times cannot be computed (reasons[i], copied
 * into jobs.broken_reason). broken_since keeps the first failure; the job is
 * locked by warren_plan_lock_due_jobs again only after broken_retry_at, a
 * backoff of the time it has been broken (5 s doubling to 60 s). The cursor
 * stays, unless has_cursor[i]: then it becomes cursors[i]. A new or changed
 * reason writes the event job.broken.<job> to the outbox. Inside the
 * materialise transaction. A job changed after it broke (updated_at, set by
 * sync, pause and resume) is locked again at once, and if it is still broken
 * its broken_since starts again. */
int warren_plan_mark_broken(warren_store *st, const char *const *names, const char *const *reasons,
                            const warren_us *cursors, const int *has_cursor, size_t n,
                            warren_error *err);

/* ------------------------------------------------------------------- relay */

/* A run to publish (strings new; warren_plan_relay_rows_free). */
typedef struct warren_relay_row {
    char *run_key;
    char *job;
    char *queue;
    char *payload;       /* JSON text of the run's payload or the job's */
    char *template_name; /* an API job's template (NULL: none) */
    char *tenant;        /* the run's tenant, else its job's (NULL: none) */
    warren_us scheduled_at;
    warren_us due_at;
    int attempt;
    int invalid; /* scheduled_at or due_at is not a finite instant (both then 0) */
} warren_relay_row;
void warren_plan_relay_rows_free(warren_relay_row *rows, size_t n);

/* Inside a transaction: locks (FOR UPDATE SKIP LOCKED) up to limit runs in
 * state planned/retrying with due_at <= now + lead_ms and no pending relay
 * retry, in due order. *now gets clock_timestamp() at the query. */
int warren_plan_relay_select(warren_store *st, int64_t lead_ms, int limit, warren_relay_row **rows,
                             size_t *n, warren_us *now, warren_error *err);
/* Marks confirmed runs published (no-op for runs a worker already claimed). */
int warren_plan_mark_published(warren_store *st, const char *const *keys, size_t n, int *marked,
                               warren_error *err);
/* Records a failed publish on the run (last_error) and gates the next try by
 * retry_ms; the run stays planned/retrying. */
int warren_plan_mark_publish_error(warren_store *st, const char *key, const char *error,
                                   int64_t retry_ms, warren_error *err);

/* A run that cannot be published at all (its message cannot be built, or the
 * broker refuses it as invalid): state dead, last_error = error, a note, its
 * dead letter and run.dead event in the outbox (as the worker protocol writes
 * them). No-op unless the run is planned or retrying. */
int warren_plan_mark_unpublishable(warren_store *st, const char *key, const char *error,
                                   warren_error *err);

/* ------------------------------------------------------------------ outbox */

typedef struct warren_outbox_header {
    char *key;
    char *value;
} warren_outbox_header;

typedef struct warren_outbox_row {
    int64_t id;
    char *exchange;
    char *routing_key;
    char *message_id; /* may be NULL */
    char *type;       /* may be NULL */
    char *body;       /* jsonb text (not compact) */
    warren_outbox_header *headers;
    size_t nheaders;
    int ripe; /* WARREN_OUTBOX_EVENTS: written at least ripe_ms ago (else 1) */
} warren_outbox_row;
void warren_plan_outbox_rows_free(warren_outbox_row *rows, size_t n);

/* Which outbox rows a select takes. */
typedef enum warren_outbox_kind {
    WARREN_OUTBOX_ALL,    /* every row */
    WARREN_OUTBOX_URGENT, /* rows that are not events (dead letters) */
    WARREN_OUTBOX_EVENTS  /* events (exchange warren.events), with ripe */
} warren_outbox_kind;

/* Inside a transaction: locks up to limit outbox rows of kind in id order
 * (SKIP LOCKED) with their headers. For WARREN_OUTBOX_EVENTS, only rows with
 * id >= from_id, and ripe says whether the row was written ripe_ms or longer
 * ago (database clock). */
int warren_plan_outbox_select(warren_store *st, int limit, warren_outbox_kind kind, int64_t from_id,
                              int64_t ripe_ms, warren_outbox_row **rows, size_t *n,
                              warren_error *err);
/* Events with id >= from_id: *count of them, counting no further than cap,
 * and *ripe = 1 when the oldest was written ripe_ms or longer ago. Takes no
 * locks. */
int warren_plan_outbox_events_waiting(warren_store *st, int64_t from_id, int cap, int64_t ripe_ms,
                                      int *count, int *ripe, warren_error *err);
int warren_plan_outbox_delete(warren_store *st, const int64_t *ids, size_t n, warren_error *err);

/* -------------------------------------------------------------- reconciler */

/* Runs published, still not started at due + grace and at least grace (doubling
 * with each republish, up to 64x) after their last publish go back to planned
 * with a note; *n gets how many. */
int warren_plan_reconcile_published(warren_store *st, int64_t grace_ms, int limit, int *n,
                                    warren_error *err);
/* SELECT warren.reap_expired_leases(max) (sql/functions/lease.sql); *n gets
 * its result. WARREN_ENOENT if the function does not exist (worker protocol
 * not migrated). */
int warren_plan_reap(warren_store *st, int max, int *n, warren_error *err);

#endif
