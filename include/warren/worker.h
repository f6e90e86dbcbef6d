/* worker.h: the C worker (docs/design.md §6.2): consumes ready queues with a prefetch
 * of at least its handler slots (worker.prefetch; by default twice them up to
 * 256 slots), claims each run through warren.claim_many, runs its
 * handler (exec, sql, or an in-process C function registered here),
 * heartbeats at a third of the lease, completes through warren.complete and
 * only then acknowledges the message.
 *
 * Guarantees: a message is acknowledged only after its completion committed
 * (or after the run turned out not to be ours: a duplicate, a lost lease, a
 * malformed message that was dead-lettered first); a handler whose lease is
 * lost (heartbeat false, or no successful heartbeat for lease - margin on the
 * monotonic clock) is stopped and not completed; PostgreSQL outages keep
 * messages unacknowledged and are retried with backoff; RabbitMQ outages
 * reconnect (the broker redelivers; the claim dedupes). */
#ifndef WARREN_WORKER_H
#define WARREN_WORKER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>
#include <warren/timefmt.h>

typedef struct warren_worker warren_worker;

/* ------------------------------------------------------------ in-process handlers */

/* What an in-process handler hands back (exec handlers map exit codes to
 * these: 0 succeeded, 75 retry, 64/65 failed, anything else retry). */
typedef enum {
    WARREN_OUTCOME_SUCCEEDED = 0,
    WARREN_OUTCOME_RETRY = 1, /* a retryable failure: backoff, then again */
    WARREN_OUTCOME_FAILED = 2 /* permanent: the run is dead at once */
} warren_outcome;

/* The run a handler works on. Valid during the handler call only. */
typedef struct warren_handler_ctx warren_handler_ctx;

const char *warren_handler_run_key(const warren_handler_ctx *ctx); /* the idempotency key */
const char *warren_handler_job(const warren_handler_ctx *ctx);
warren_us warren_handler_scheduled_at(const warren_handler_ctx *ctx);
int warren_handler_attempt(const warren_handler_ctx *ctx);         /* the fencing token */
const char *warren_handler_payload(const warren_handler_ctx *ctx); /* compact JSON object */
/* 1 once the handler must stop: its lease was lost, it timed out, or the
 * worker is shutting down past its grace. Poll it; return soon after. A run
 * whose lease was lost is not completed, whatever the handler returns. */
int warren_handler_should_stop(const warren_handler_ctx *ctx);
/* Records the error text stored with a retry or failed outcome (copied). */
void warren_handler_set_error(warren_handler_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* An in-process handler. Runs on a thread of the worker's handler pool, one
 * thread per running handler: it must be thread-safe with respect to ud. */
typedef warren_outcome (*warren_handler_fn)(warren_handler_ctx *ctx, void *ud);

/* ------------------------------------------------------------ the worker */

/* Creates a worker for cfg (borrowed: must outlive the worker). Nothing
 * connects yet. Defaults: every queue that has a job with a handler,
 * concurrency cfg->worker.concurrency, id cfg->worker.id or "host:pid".
 * lg is borrowed (may be NULL). *out is new; free with warren_worker_free. */
int warren_worker_new(const warren_config *cfg, const warren_logger *lg, warren_worker **out,
                      warren_error *err);
void warren_worker_free(warren_worker *w);

/* Registers fn under name for jobs whose handler = { c = "name"; }. Call
 * before warren_worker_run. Returns 0, WARREN_EINVAL (bad or duplicate
 * name) or WARREN_ENOMEM. */
int warren_worker_register(warren_worker *w, const char *name, warren_handler_fn fn, void *ud);

/* Consume only these job queues (names as in the config, not the
 * warren.ready. names; copied). n = 0 restores the default. */
int warren_worker_set_queues(warren_worker *w, const char *const *queues, size_t n,
                             warren_error *err);
/* Handler slots (1..4096). */
int warren_worker_set_concurrency(warren_worker *w, int n, warren_error *err);
/* The lease owner id written into warren.runs.lease_owner (copied, <= 200 bytes). */
int warren_worker_set_id(warren_worker *w, const char *id, warren_error *err);
const char *warren_worker_id(const warren_worker *w);
/* Connection URLs (default cfg->database_url / cfg->amqp_url; copied). */
int warren_worker_set_urls(warren_worker *w, const char *database_url, const char *amqp_url,
                           warren_error *err);

/* A finished run, reported after its completion committed (and its message
 * was acknowledged). Times are PostgreSQL's (0: unknown). */
typedef struct warren_run_report {
    const char *run_key;
    const char *job;
    int attempt;
    const char *outcome; /* succeeded, retry, failed (what the handler said) */
    const char *state;   /* the run's state after completion: succeeded, retrying, dead */
    const char *error;   /* NULL on success */
    warren_us scheduled_at;
    warren_us due_at;       /* the due time this attempt's message was released for */
    warren_us published_at; /* the relay's confirmed publish (into a delay queue if early) */
    warren_us released_at;  /* arrival at this worker, on the database's clock (estimated:
                               claim time minus the monotonic time since the delivery) */
    warren_us started_at, finished_at;
} warren_run_report;
typedef void (*warren_run_report_fn)(void *ud, const warren_run_report *r);
/* Called on the worker's thread for every completion (fn NULL: none). */
void warren_worker_on_finished(warren_worker *w, warren_run_report_fn fn, void *ud);

/* Runs until *stop becomes non-zero (set it from a signal handler): then
 * stops taking runs, lets running handlers finish within
 * cfg->worker.shutdown_grace_ms, stops the rest (SIGTERM to exec process
 * groups, SIGKILL after a grace; should_stop for C handlers; those are
 * completed as retry) and returns 0. Errors at start (WARREN_EDBCONN,
 * WARREN_EBROKERCONN, WARREN_ENOENT for a missing ready queue, WARREN_EINVAL
 * for nothing to consume) are returned; later outages are retried. */
int warren_worker_run(warren_worker *w, volatile sig_atomic_t *stop, warren_error *err);
/* Wakes the loop of warren_worker_run from its wait: call it after setting
 * *stop from another thread (a signal delivered to the loop's thread
 * interrupts the wait by itself; without either, the stop is seen within
 * 10 s). Async-signal-safe; any thread. */
void warren_worker_wake(warren_worker *w);

/* Counters since the worker was created. */
typedef struct warren_worker_stats {
    uint64_t received;  /* deliveries */
    uint64_t started;   /* claimed and started */
    uint64_t succeeded; /* completions recorded, by outcome */
    uint64_t retried;
    uint64_t failed;
    uint64_t duplicates;    /* unclaimable: acked and dropped */
    uint64_t dead_lettered; /* malformed or unknown: sent to warren.dead */
    uint64_t given_back;    /* received while stopping: requeued for other workers */
    uint64_t stale;         /* complete returned false */
    uint64_t lease_lost;    /* handlers stopped for a lost lease */
    uint64_t timeouts;      /* handlers stopped for their timeout */
    uint64_t db_errors;     /* PostgreSQL calls that failed (retried) */
    uint64_t broker_reconnects;
    uint64_t taken; /* of started: sql runs claimed, run and completed in one transaction
                       (worker.sql_take, warren.take_many) */
    uint64_t waits; /* times the loop slept (it sleeps only when nothing is due) */
} warren_worker_stats;
void warren_worker_stats_get(const warren_worker *w, warren_worker_stats *out);

#endif
