/* store_work.h: the worker's PostgreSQL calls (src/store_work.c): the
 * protocol functions of sql/functions/ (claim, heartbeat,
 * complete), batched for throughput, the sql handler's statement inside the
 * completion transaction, and a run's times for the report line.
 *
 * Private to the library (worker.c) and its tests: plumbing under the worker,
 * not an API. No program needs it: the operator's replay, runs and show are
 * in <warren/ops.h>. */
#ifndef WARREN_STORE_WORK_H
#define WARREN_STORE_WORK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <warren/codec.h>
#include <warren/error.h>
#include <warren/store.h>
#include <warren/timefmt.h>

/* What warren.claim returned for one run key. */
typedef struct warren_claim {
    int claimed;                       /* 0: no row (finished, leased, unknown, held back) */
    int attempt;                       /* the fencing token */
    char job[WARREN_JOB_NAME_MAX + 1]; /* the run's job */
    /* The config job whose handler runs it (the database's word, never the
     * message's): the job's template, else the job itself. */
    char handler[WARREN_JOB_NAME_MAX + 1];
    warren_us scheduled_at; /* whole seconds */
    char *payload_json;     /* new (free()); the run's or job's payload */
    int lease_seconds;      /* the lease runs from the claim (database clock) */
} warren_claim;
/* Frees payload_json and zeroes c; NULL allowed. */
void warren_claim_clear(warren_claim *c);

/* Claims n runs for worker in one round trip (one transaction, keys in the
 * given order: pass them sorted so concurrent batches lock rows in one
 * order). out[i] (n entries, zeroed first) receives the result for keys[i].
 * Errors: WARREN_EDBCONN (connection lost: nothing was claimed, or the
 * commit's fate is unknown: see warren_store_reclaim_batch), WARREN_EDB. */
int warren_store_claim_batch(warren_store *st, const char *const *keys, size_t n,
                             const char *worker, warren_claim *out, warren_error *err);
/* After a claim batch failed with its commit's fate unknown (sent
 * within_ms milliseconds ago, plus slack): takes again, with a new attempt,
 * those of keys that are running under this worker's lease, claimed since and
 * never heartbeated (warren.reclaim_many); out[i] as above. The caller claims
 * the others as usual. */
int warren_store_reclaim_batch(warren_store *st, const char *const *keys, size_t n,
                               const char *worker, int64_t within_ms, warren_claim *out,
                               warren_error *err);
/* One key. */
int warren_store_claim(warren_store *st, const char *run_key, const char *worker, warren_claim *out,
                       warren_error *err);

/* warren.heartbeat for n (key, attempt) pairs in one round trip; held[i] = 1
 * while the caller still holds keys[i]. */
int warren_store_heartbeat_batch(warren_store *st, const char *const *keys, const int *attempts,
                                 size_t n, int *held, warren_error *err);
int warren_store_heartbeat(warren_store *st, const char *run_key, int attempt, int *held,
                           warren_error *err);

/* One completion: outcome is "succeeded", "retry" or "failed"; error may be NULL. */
typedef struct warren_completion {
    const char *run_key;
    int attempt;
    const char *outcome;
    const char *error;
} warren_completion;

/* warren.complete for n completions in one transaction; recorded[i] = 1 if
 * it was recorded, 0 if the token was stale. A failure affects the whole
 * batch (nothing recorded); callers may retry one by one. */
int warren_store_complete_batch(warren_store *st, const warren_completion *c, size_t n,
                                int *recorded, warren_error *err);
int warren_store_complete(warren_store *st, const char *run_key, int attempt, const char *outcome,
                          const char *error, int *recorded, warren_error *err);

/* The sql handler: in one transaction, sql with $1 = run key (text), $2 =
 * scheduled_at (timestamptz), $3 = payload (jsonb), under statement_timeout
 * timeout_ms (0: none), and then warren.complete(run_key, attempt,
 * 'succeeded'). The effect and the completion commit together or not at all;
 * the run's row is locked only for the completion at the end, so the caller
 * heartbeats the run while the statement runs. While the transaction runs,
 * the session's application_name is tag (unless NULL), which
 * warren_store_cancel_tagged finds. *recorded = 1: committed; 0: the token
 * was stale, or *lost was set (the caller lost the lease): rolled
 * back, no effect. lost may be NULL. If the statement itself fails,
 * everything is rolled back, *stmt_error gets the server's message (new,
 * free()) and the function returns 0 with *recorded = 0: the caller then
 * completes the attempt with 'retry'. Errors: WARREN_EDBCONN / WARREN_EDB for
 * the connection or the protocol. */
int warren_store_complete_sql(warren_store *st, const char *run_key, int attempt,
                              warren_us scheduled_at, const char *payload_json, const char *sql,
                              int64_t timeout_ms, const char *tag, const atomic_int *lost,
                              int *recorded, char **stmt_error, warren_error *err);

/* One run of warren_store_complete_sql_batch: the arguments of
 * warren_store_complete_sql, and its results. */
typedef struct warren_sql_run {
    const char *run_key;
    int attempt;
    warren_us scheduled_at;
    const char *payload_json, *sql;
    int64_t timeout_ms;
    const char *tag;
    const atomic_int *lost;
    int recorded;     /* out: committed with its effect */
    char *stmt_error; /* out (new): its statement failed; its effect rolled back */
    int done;         /* out: settled (recorded, stale, lost or stmt_error); 0: not tried */
    int64_t stmt_us;  /* out: its statement's own time on the server (µs, the server's clock
                       * before it and after it, in the pipelined path), its timeout if it
                       * timed out; -1 not measured */
} warren_sql_run;

/* Several sql handler runs in ONE transaction: for each run, in a savepoint,
 * its statement (application_name = its tag, statement_timeout = its
 * timeout); a statement that fails rolls back to its savepoint only (its
 * stmt_error is set, the others go on). Then the completions of the runs
 * whose statement succeeded, all at the end (warren.complete_many, keys
 * sorted), so a run's row is locked only from then until the COMMIT, never
 * while another run's statement runs. If any of them is stale, or lost
 * (*lost set) by then, the whole transaction is rolled back and run again
 * without it (marked done, recorded = 0): so only the effects of runs
 * recorded succeeded commit, each exactly once, and fencing stays per run.
 * Returns 0 when every run is done; WARREN_EDBCONN (nothing committed, or the
 * commit's answer lost: a run tried again is then found stale); any other
 * error (a refused completion, a failing COMMIT: a deferred constraint) with
 * nothing committed and no run done: the caller runs them one by one with
 * warren_store_complete_sql, which knows whose error it is. */
int warren_store_complete_sql_batch(warren_store *st, warren_sql_run *runs, size_t n,
                                    warren_error *err);

/* What became of a run of warren_store_take_sql_batch. */
enum {
    WARREN_TAKE_BACK = 0, /* not taken, or its transaction rolled back: claim it as usual */
    WARREN_TAKE_RECORDED, /* taken, its effect and its success committed together */
    WARREN_TAKE_FAILED,   /* its statement failed: claimed on its own (committed), to be
                           * completed as retry with stmt_error */
};

/* One run of warren_store_take_sql_batch: an sql handler's delivery not
 * claimed yet. */
typedef struct warren_take_run {
    const char *run_key, *sql, *tag;
    const char *handler; /* the config job whose sql this is: a run of another is not taken */
    int64_t timeout_ms;
    int fate;           /* out: WARREN_TAKE_* */
    int back_unknown;   /* out, BACK: its claim's answer was lost (it may be this worker's) */
    warren_claim claim; /* out, RECORDED or FAILED: the attempt (payload_json new) */
    char *stmt_error;   /* out, FAILED (new): its statement's error */
    int64_t stmt_us;    /* out: as warren_sql_run.stmt_us; -1 not measured */
} warren_take_run;

/* Sql handler runs not claimed yet, claimed, run and completed in ONE
 * transaction (warren.take_many, the statements, warren.finish_many, COMMIT:
 * two round trips, one commit): the runs take_many returns (fresh, due, of
 * an uncapped allow job) are RECORDED when the COMMIT succeeds. A statement
 * that fails rolls the transaction back; that run is claimed on its own
 * (FAILED, with its error: it is not run a second time) and the others are
 * taken again without it. Everything else (not taken, a refused finish or
 * COMMIT, a lost connection) is BACK: nothing of it committed, or, if the
 * COMMIT's answer was lost, it committed whole (the run is then finished
 * and its next claim gives no row). Returns 0, or the error that ended the
 * batch (the runs not settled are BACK). */
int warren_store_take_sql_batch(warren_store *st, const char *worker, warren_take_run *runs,
                                size_t n, warren_error *err);

/* Warms a fresh connection up for the worker protocol: calls claim_many,
 * take_many, finish_many and complete_many once, for a run key no run can
 * have, in a transaction it rolls back, so that this backend has compiled
 * them and planned their statements before the first run needs them (a
 * backend's first calls cost about 35 ms of the server's CPU, against about
 * 4 ms warm: a worker's dozen fresh connections at once stalled its first
 * runs by 0.2-0.7 s). Writes nothing. Returns 0 or the error (the caller
 * goes on: the connection works cold too). */
int warren_store_warm_up(warren_store *st, warren_error *err);

/* Cancels (pg_cancel_backend, on st's own connection) the statement of every
 * other session whose application_name is tag: an sql handler of this
 * worker whose lease was lost. *cancelled = 1 if one was
 * signalled (it may have been between statements: send again later). */
int warren_store_cancel_tagged(warren_store *st, const char *tag, int *cancelled,
                               warren_error *err);

/* Times of one run, for the worker's per-run report line. */
typedef struct warren_run_times {
    char state[16];
    warren_us scheduled_at, due_at, published_at, started_at, finished_at; /* 0: NULL */
} warren_run_times;
int warren_store_run_times(warren_store *st, const char *run_key, warren_run_times *out,
                           warren_error *err);

/* What the database says of one run key (warren.run_states). */
typedef struct warren_run_state {
    int found;      /* 0: no such run */
    char state[16]; /* planned, published, running, ... */
    warren_us due_at;
} warren_run_state;
/* warren.run_states for n keys (at most 4096) in one round trip: out[i] (zeroed first) for
 * keys[i]; *db_now (may be NULL) the database's clock when it answered. */
int warren_store_run_states(warren_store *st, const char *const *keys, size_t n,
                            warren_run_state *out, warren_us *db_now, warren_error *err);
/* warren.refuse: a published run no worker could handle becomes dead with reason. state
 * (>= 16 bytes) gets "dead" (made dead now), the state of a run that was not published, or ""
 * when there is no such run. */
int warren_store_refuse(warren_store *st, const char *run_key, const char *worker,
                        const char *reason, char *state, size_t len, warren_error *err);

/* For store_sql.c (the sql handler's transactions), from store_work.c: */
struct warren__buf;
/* warren.complete_many's parameters for c[idx[j]] (c[j] if idx is NULL),
 * j < m: the text[] of their keys in *ka, the int[] of their attempts in
 * *aa. 0, or the error (both freed). */
int warren__completion_arrays(const warren_completion *c, const size_t *idx, size_t m,
                              struct warren__buf *ka, struct warren__buf *aa, warren_error *err);

#endif
