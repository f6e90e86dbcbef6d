/* worker_int.h: the C worker's private state and the internal API between
 * its files: worker.c (the loop, the public API, connections, slots),
 * worker_claim.c (pending deliveries, early hold, claims), worker_settle.c
 * (heartbeats, completions, acks, dead letters), worker_exec.c (exec handler
 * processes) and worker_pool.c (the handler threads and their SQL
 * connections). Everything here runs on the worker's thread unless it says
 * otherwise. */
#ifndef WARREN_WORKER_INT_H
#define WARREN_WORKER_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/config.h>
#include <warren/store.h>
#include <warren/worker.h>

#include "store_work.h"
#include "worker_exec.h"

#define BACKOFF_MIN_MS 100 /* reconnect / retry backoff: 100 ms doubling to 10 s */
#define BACKOFF_MAX_MS 10000
/* Runs released early (planner.release_lead) wait in the pending FIFO until due: */
#define CLAIM_AHEAD_US 1000      /* claimed this close to due; warren.claim waits the rest */
#define DB_TIMEOUT_MIN_MS 100    /* the loop connection's statement/lock timeout at least */
#define CLAIM_ALONE_RETRY_MS 500 /* a delivery whose own claim timed out: tried again then */
/* A run this worker cannot handle (foreign) is given back to its queue this
 * many times, each after holding it FOREIGN_HOLD_MS x the times it came back
 * already, before the database is told that no worker can (warren.refuse). */
#define FOREIGN_GIVE_BACKS 3
#define FOREIGN_HOLD_MS 1000
#define FOREIGN_FORGET_MS 60000 /* a give-back older than this no longer counts */

enum slot_state {
    SLOT_FREE = 0,
    SLOT_RUNNING, /* handler running (exec child, C thread or sql thread) */
    SLOT_DONE,    /* handler finished: complete (or just ack), then free */
};

enum stop_reason { STOP_NONE = 0, STOP_LOST, STOP_TIMEOUT, STOP_SHUTDOWN };

enum kind { KIND_EXEC, KIND_SQL, KIND_C };

struct warren_handler_ctx {
    char *run_key, *job, *payload, *sql, *db_url;
    warren_us scheduled_at;
    int attempt;
    int64_t timeout_ms;
    warren_handler_fn fn;
    void *ud;
    struct sqlengine *se; /* sql: its engine (connections, costs) lives with the threads */
    struct warren_handler_ctx *next; /* the handler pool's queue */
    enum kind kind;                  /* KIND_C, KIND_SQL or KIND_EXEC (a spawn) */
    atomic_int stop;
    atomic_int done;
    atomic_int lost;   /* sql: the lease was lost: no effect, no completion */
    char sql_tag[40];  /* sql: its session's application_name while it runs (set once) */
    uint64_t sql_hash; /* sql: FNV-1a of sql, its statement's entry in the pool's cost table */
    /* results, written by the thread before done = 1 */
    warren_outcome outcome;
    char error[ERROR_MAX];
    int has_error;
    /* sql, not claimed yet: the pool thread's transaction takes, runs and
     * completes it (warren_store_take_sql_batch); its fate and claim come back */
    int take;
    char *worker;  /* take: the worker's name */
    char *handler; /* take: the config job whose sql this is (take_many's rows of another: not
                      taken) */
    int take_fate, take_back_unknown;
    warren_claim take_claim;
    /* sql handler results */
    int sql_rc; /* 0, or a WARREN_E* code for the protocol/connection */
    int sql_recorded;
    char *sql_stmt_error;
    /* exec: the process a pool thread starts (warren__start_spawn), so that
     * the loop thread never waits for posix_spawn. The command, the run's
     * facts and pass_env are copies: a spawn the loop abandoned at shutdown
     * may outlive the worker's config. */
    char **argv, **pass_env;
    int shell;
    warren_us due_at;
    warren__exec ex;  /* the started process, handed to the slot once done */
    int exec_rc;      /* 0, or the WARREN_E* code warren__exec_start returned (error: why) */
    int exec_skipped; /* not started: the slot was stopped (ctx->stop) before a thread took it */
};

typedef struct handler_reg {
    char *name;
    warren_handler_fn fn;
    void *ud;
} handler_reg;

typedef struct slot {
    enum slot_state state;
    enum kind kind;
    uint64_t tag;
    uint64_t gen; /* broker generation of the delivery */
    char run_key[WARREN_RUN_KEY_MAX];
    const warren_job *job;
    warren_claim claim;
    int64_t lease_ms, hb_every_ms, hb_margin_ms;
    int64_t started_mono, last_hb_ok, next_hb;
    /* 1: its heartbeat timed out in a batch, 2: also on its own (its row is
     * locked): sent on its own, 2 after 1, until one succeeds */
    int hb_alone;
    int64_t received_mono; /* the delivery's arrival (for the report's "released") */
    warren_us msg_due_at;  /* due time this attempt was released for (message header) */
    int64_t timeout_at;
    enum stop_reason stop_reason;
    int64_t next_cancel; /* sql, lost: when to send the cancel (again) */
    int cancels_sent;
    int64_t kill_at; /* exec: SIGKILL after this; c: left behind after a timeout (0: not yet) */
    warren__exec ex; /* exec: its process, output pipe and output tail */
    /* in-process handlers (c, sql): the context is with the handler pool */
    int has_thread;
    warren_handler_ctx *ctx;
    /* result */
    warren_outcome outcome;
    char *error;
    /* its completion timed out (row locked): tried again from then on, after the others */
    int64_t complete_after;
    int complete_sql_retry; /* sql: relaunch after a connection failure */
    int64_t retry_at, sql_backoff;
    /* sql, not claimed: its pool thread takes it in the effect's transaction
     * (warren_store_take_sql_batch): no lease, no heartbeat meanwhile; the
     * delivery (back, new) goes back to the FIFO if it is not taken */
    int take;
    struct pend *back;
} slot;

typedef struct pend {
    warren_delivery d;
    uint64_t gen;
    int64_t received_mono; /* when the delivery reached this worker */
    warren_run_msg msg;
    const warren_job *job;
    int answer_lost;          /* a claim of it failed, its fate unknown: it may be ours */
    int64_t answer_lost_mono; /* when that claim was sent */
    int picked;               /* in the claim batch being built */
    int claim_alone;          /* a claim batch with it timed out (a locked row?): claimed on
                                 its own from now on, so one locked row holds up only itself */
    int64_t claim_retry_mono; /* claim_alone and its own claim timed out: not before then */
    int no_take;              /* sql: claimed by the loop, not taken (a take gave it back) */
    char *foreign;            /* new: why this worker cannot run it (worker_claim.c) */
    int64_t hold_until;       /* foreign: given back (or refused) from then (monotonic ms) */
} pend;

/* Runs this worker could not handle and gave back, by key (worker_claim.c). */
#define REFUSALS 64
typedef struct refusal {
    char key[WARREN_RUN_KEY_MAX];
    int count; /* times given back */
    int64_t at_ms;
} refusal;

/* The pending FIFO (worker_pend.c): deliveries waiting for a slot or for
 * their due time, and the runs this worker gave back. */
typedef struct pendq {
    pend *items; /* circular */
    size_t head, len, cap;
    size_t held;        /* of those, not due at the last warren__claim_pending */
    warren_us next_due; /* the earliest due time of those (0: none) */
    refusal refused[REFUSALS];
    size_t refused_next; /* the entry replaced next when all are taken */
} pendq;

/* The estimate of the database's clock (worker_pend.c, read by worker_claim.c). */
typedef struct dbclock {
    int64_t off;   /* the database's clock (us) minus the monotonic one */
    int64_t at_ms; /* when off was measured (monotonic; 0: never) */
} dbclock;

struct warren_worker {
    const warren_config *cfg;
    const warren_logger *lg;
    char *id;
    char *db_url, *amqp_url;
    char **queues;
    size_t nqueues;
    int concurrency;
    int prefetch; /* basic.qos per consumer (worker.prefetch; at least concurrency) */
    handler_reg *regs;
    size_t nregs;
    warren_run_report_fn report_fn;
    void *report_ud;

    warren_store *st;
    warren_broker *b;
    uint64_t gen;
    int stopping; /* consumers cancelled: what comes back untaken is given back */
    int64_t store_retry_at, store_backoff;
    /* statement_timeout and lock_timeout of st (worker.c, db_timeout): what
     * one blocked call can cost the loop; a fallback to one call per run
     * stops once it has spent that long */
    int64_t db_timeout_ms;
    int complete_alone; /* a completion batch timed out: complete one by one until none does */
    int64_t broker_retry_at, broker_backoff;

    slot *slots;
    int *free_idx; /* stack of free slot indexes (O(1) to find a free slot) */
    int nfree;
    pendq q;       /* deliveries waiting for a slot or for their due time */
    dbclock clock; /* the estimate of the database's clock */

    int wake[2];          /* handler threads write a byte when done (non-blocking) */
    struct pollfd *pfds;  /* loop_wait: the wake pipe, the broker, exec pipes and pidfds */
    struct hpool *hp;     /* persistent handler threads (c and sql handlers, exec spawns) */
    struct sqlengine *se; /* the sql handlers' engine (owned by hp) */

    warren_worker_stats stats;
};

/* How many slots are free (the loop and the claims both ask). */
static inline int free_slots(const warren_worker *w)
{
    return w->nfree;
}

/* The layers, bottom up; each file calls only the ones below it (worker.c,
 * at the top, describes them):
 *   worker_exec.c   exec handler processes (worker_exec.h)
 *   worker_pool.c   the generic thread pool
 *   worker_sql.c    the sql handlers' engine: connections, costs, batches
 *   worker_handler.c  the handler kinds as the pool runs them
 *   worker_pend.c   the pending FIFO, refusals, the database-clock estimate
 *   worker_conn.c   the broker and store connections, acks, dead letters
 *   worker_slot.c   the slot table and the run's state machine
 *   worker_intake.c / worker_claim.c / worker_settle.c   the loop's phases
 *   worker.c        the public API and the loop */

/* ------------------------------------------------------------ worker_pool.c */

/* What the pool runs, from its caller (worker_handler.c): form() puts the
 * contexts queued first (head, linked by next) into batch, at least one and
 * at most max, in queue order, and returns how many (called with the pool's
 * lock held: it must not block); run() runs a batch on a pool thread;
 * dropped() frees a context nobody waits for any more (its loop abandoned
 * it); destroy(ud) runs when the pool is freed. */
typedef struct hpool_ops {
    size_t (*form)(void *ud, warren_handler_ctx *head, warren_handler_ctx **batch, size_t max);
    void (*run)(void *ud, warren_handler_ctx **batch, size_t n);
    void (*dropped)(void *ud, warren_handler_ctx *c);
    void (*destroy)(void *ud);
} hpool_ops;
/* The thread pool, writing to wake_fd (its own duplicate) when a batch
 * finishes while the loop waits (warren__hpool_arm). At most max threads.
 * Its threads block every asynchronous signal: a signal for the process
 * reaches the loop's thread. */
struct hpool *warren__hpool_new(int wake_fd, int max, const hpool_ops *ops, void *ud,
                                warren_error *err);
/* on = 1: queued runs wait (no thread is woken, none takes one) until
 * warren__hpool_hold(hp, 0), which wakes a thread: the loop queues all the
 * runs of one claim batch before a thread forms its sql batch from them. */
void warren__hpool_hold(struct hpool *hp, int on);
/* Queues context c for a pool thread. Fails only when there is no thread at
 * all and none can be started (c is then the caller's). */
int warren__hpool_submit(struct hpool *hp, warren_handler_ctx *c, warren_error *err);
/* The loop is about to wait: 0, and a finishing batch writes to the wake
 * pipe from now on; 1 if one finished since the last warren__hpool_disarm
 * (then do not wait). */
int warren__hpool_arm(struct hpool *hp);
/* The wait is over: finishing batches write no more. */
void warren__hpool_disarm(struct hpool *hp);
/* Stops the pool; returns how many busy threads were left behind with it
 * (the last of them frees it). */
int warren__hpool_free(struct hpool *hp, int wait_ms);

/* ------------------------------------------------------------ worker_sql.c */

typedef struct sqlengine sqlengine;
sqlengine *warren__sql_new(int sql_batch);
void warren__sql_free(sqlengine *se);
/* Opens n (at most the engine's cap) connections to url now, so that the
 * first runs do not wait for them. */
int warren__sql_prefill(sqlengine *se, const char *url, int n, warren_error *err);
/* The key of a statement in the cost table (FNV-1a of its text). */
uint64_t warren__sql_hash(const char *sql);
/* The expected time (us) of an sql statement from the cost table; -1 when
 * it was not measured yet. Any thread. */
int64_t warren__sql_cost_of(sqlengine *se, const char *sql);
/* The budget of one sql batch (us): a statement expected to take longer
 * runs alone, and is claimed before it runs (not taken). */
#define WARREN_SQL_BATCH_BUDGET_US 10000
/* The sql runs queued first (head is one) that share one transaction:
 * hpool_ops.form for sql. */
size_t warren__sql_form(sqlengine *se, warren_handler_ctx *head, warren_handler_ctx **batch,
                        size_t max);
/* Runs a batch formed so (in the completion's transaction, or taken), and
 * learns its statements' costs. */
void warren__sql_run(sqlengine *se, warren_handler_ctx **batch, size_t n);

/* ------------------------------------------------------------ worker_handler.c */

/* The handler pool: the thread pool with the handler kinds' batches and
 * runs, and its sql engine (*se, borrowed: it lives as long as the pool). */
struct hpool *warren__handlers_new(int wake_fd, int max, int sql_batch, sqlengine **se,
                                   warren_error *err);
/* A started exec handler of context c that no slot will take (the loop gave
 * it up): its process group is killed and the process reaped. Any thread. */
void warren__exec_abandoned(warren_handler_ctx *c);
void warren__ctx_free(warren_handler_ctx *c);

/* ------------------------------------------------------------ worker_pend.c */

void warren__pend_clear(pend *p);
/* Moves *p out of the FIFO into *to (the FIFO's entry is left empty and
 * picked, for warren__pq_drop_picked). */
void warren__pend_take(pend *p, pend *to);
/* Frees a delivery moved out of the FIFO (slot.back). */
void warren__pend_free(pend *p);
/* Appends p (its contents are moved): 0 or WARREN_ENOMEM. */
int warren__pq_push(pendq *q, const pend *p);
/* Puts p (moved out of the FIFO) back at its end; p's storage is the
 * caller's. 0, or WARREN_ENOMEM (p cleared: its delivery is redelivered
 * when the broker connection ends). */
int warren__pq_put_back(pendq *q, pend *p);
pend *warren__pq_at(pendq *q, size_t i);
/* Removes the picked deliveries from the FIFO, keeping the others' order. */
void warren__pq_drop_picked(pendq *q);
/* Empties the pending FIFO (no acks: their connection is gone, or they were
 * given back). */
void warren__pq_clear(pendq *q);
/* The entry of run key (added when add is set: the oldest is replaced when
 * all are taken); NULL when absent. */
refusal *warren__refusal_of(pendq *q, const char *key, int add);
/* The database's now from the last reading of its clock (0: none yet). */
warren_us warren__db_now_cached(const dbclock *c);
/* Takes a reading db of the database's clock between monotonic m0 and m1 (us)
 * into *off (database minus monotonic): 1 if used; 0 if its round trip was
 * too slow to trust (*off unchanged when have, else set to a value that is
 * never ahead). */
int warren__clock_reading(int64_t m0, int64_t m1, warren_us db, int have, int64_t *off);
/* Round trip above which a clock reading is not used (us). */
#define WARREN__CLOCK_RTT_MAX_US 20000

/* ------------------------------------------------------------ worker_conn.c */

/* Opens the broker connection: confirms, qos, a consumer per queue. */
int warren__broker_setup(warren_worker *w, warren_error *err);
/* The AMQP connection failed: drop it (and the pending deliveries whose tags
 * died with it) and reconnect after a backoff. */
void warren__worker_broker_lost(warren_worker *w, const warren_error *e);
/* Reconnects the broker once its backoff allows. */
void warren__broker_try_reconnect(warren_worker *w);
/* A PostgreSQL call failed. Connection errors start the reconnect backoff. */
void warren__worker_store_failed(warren_worker *w, int rc, const warren_error *e, const char *what);
/* 1 if the store may be used now (reconnecting when its backoff allows). */
int warren__worker_store_ready(warren_worker *w);
void warren__worker_store_ok(warren_worker *w);
/* Queues the ack of a delivery (sent by warren__ack_flush); nothing if the
 * connection it came on (gen) is gone. key is for the log (may be NULL). */
void warren__ack(warren_worker *w, uint64_t tag, uint64_t gen, const char *key);
void warren__ack_flush(warren_worker *w, int all);
/* The hold of acknowledgements behind an open delivery (ms; 0: none). */
int64_t warren__ack_hold_ms(const warren_worker *w);
void warren__dead_letter(warren_worker *w, warren_delivery *d, const char *reason);
void warren__give_back(warren_worker *w, pend *p);
/* Cancels the consumers and gives back every pending delivery. */
void warren__stop_consuming(warren_worker *w);

/* ------------------------------------------------------------ worker_slot.c */

const handler_reg *warren__worker_find_reg(const warren_worker *w, const char *name);
/* Whether config job j can be run by this worker for a delivery from queue
 * q (NULL: any): JUDGED_OK, or JUDGED_BAD / JUDGED_FOREIGN with why. */
enum { JUDGED_OK = 0, JUDGED_BAD, JUDGED_FOREIGN };
int warren__job_usable(warren_worker *w, const warren_job *j, const char *q, char *why, size_t len);
/* The config job whose handler runs the claimed run of delivery p: the one
 * the database's answer names (cl->handler: the run's template, else its
 * job), never the message's. NULL when this worker cannot run it (why says
 * so: not in its config, another queue, a handler it lacks). */
const warren_job *warren__claimed_job(warren_worker *w, const pend *p, const warren_claim *cl,
                                      char *why, size_t len);
/* A free slot, taken off the free stack (NULL: none). */
slot *warren__slot_alloc(warren_worker *w);
/* A used slot becomes free again. */
void warren__slot_release(warren_worker *w, slot *s);
/* Clears a slot (FREE, nothing held). */
void warren__slot_reset(slot *s);
/* SIGTERM -> SIGKILL, and how long a stopped thread is waited for. */
int64_t warren__kill_grace(const warren_worker *w);
/* Starts a claimed run (p, cl: cl's contents are taken) in slot s. On
 * failure the run is completed as retry. */
void warren__slot_start(warren_worker *w, slot *s, pend *p, warren_claim *cl, int64_t claimed_mono);
/* Starts p, an sql run not claimed yet, in slot s: its pool thread takes it
 * (slot.take). 0: p was moved into the slot (its FIFO entry left empty and
 * picked); else s is released and p left as it was. */
int warren__slot_take(warren_worker *w, slot *s, pend *p, int64_t now);
/* Hands slot s's run (c or sql) to a pool thread. */
int warren__start_thread(warren_worker *w, slot *s, warren_error *err);
/* Hands the start of slot s's exec handler to a pool thread (its context is
 * s->ctx until the loop takes the process: warren__slot_poll). due_at: the
 * due time the message was released for. */
int warren__start_spawn(warren_worker *w, slot *s, warren_us due_at, warren_error *err);
/* Stops a running handler for reason (enum stop_reason). */
void warren__slot_stop(warren_worker *w, slot *s, enum stop_reason reason, int64_t now);
/* An sql handler whose lease was lost: its transaction must not commit. */
void warren__sql_lost(slot *s);
/* An sql handler's thread is done: no heartbeat, its run is recorded or not. */
int warren__sql_finished(const slot *s);
/* Polls one running slot: lease and timeout checks, then whether it finished. */
void warren__slot_poll(warren_worker *w, slot *s, int64_t now);
/* The earliest time (monotonic ms) slot s needs the loop for something of
 * its own (INT64_MAX: never; 0: now), and in *store_at for a call to the
 * database (a heartbeat, a completion, a cancel). */
int64_t warren__slot_deadline(const slot *s, int64_t *store_at);
/* sql handlers whose connection failed: started again once their backoff is over. */
void warren__slots_relaunch_sql(warren_worker *w, int64_t now);

/* ------------------------------------------------------------ worker_intake.c */

/* Reads what the broker has (waiting up to wait_ms for the first) into the
 * pending FIFO; dead-letters what is not a run this worker can handle, and
 * gives back what arrives while stopping. */
void warren__receive(warren_worker *w, int wait_ms, int stopping);

/* ------------------------------------------------------------ worker_claim.c */

/* Claims as many due deliveries as there are free slots, in one batch, and
 * starts them. */
void warren__claim_pending(warren_worker *w);
/* The earliest time (monotonic ms) a held delivery needs the claim phase
 * (a due time, a foreign run's hold, a lone claim's retry; INT64_MAX: none). */
int64_t warren__claim_deadline(warren_worker *w);

/* ------------------------------------------------------------ worker_settle.c */

/* Heartbeats, in one batch, the running slots whose heartbeat is due. */
void warren__heartbeat_due(warren_worker *w, int64_t now);
/* Completes every finished slot in one batch, then acks (lost leases: only acks). */
void warren__complete_done(warren_worker *w, int64_t now);

#endif
