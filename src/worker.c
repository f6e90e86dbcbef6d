/* worker.c: the C worker (docs/design.md §6.2): its public API and its loop.
 * One thread owns the AMQP connection and the PostgreSQL connection (neither
 * library is thread-safe per connection) and runs the loop: receive, claim,
 * start, heartbeat, collect, complete, acknowledge; then it waits in one
 * poll (loop_wait) until the earliest deadline or until something happens.
 *
 * The layers, each file calling only the ones below it (no cycles):
 *   worker.c          public API, the loop and its one wait
 *   worker_intake.c   receive and judge deliveries -> the pending FIFO
 *   worker_claim.c    FIFO -> claim (or take) -> slot
 *   worker_settle.c   slots -> heartbeat / complete -> acknowledge
 *   worker_slot.c     the slot table and the run's state machine; starts
 *                     each handler kind; each slot's deadlines
 *   worker_conn.c     broker and store connections, backoff, acks, dead
 *                     letters, give-backs
 *   worker_pend.c     the pending FIFO, refusals, the database-clock estimate
 *   worker_handler.c  the handler kinds as the pool runs them (c, exec
 *                     spawn, sql batches); handler contexts
 *   worker_sql.c      the sql handlers' engine: connections, cost table,
 *                     batches (store_sql.c: pipelines, savepoints, take)
 *   worker_pool.c     a generic thread pool and its wake pipe
 *   worker_exec.c     exec handler processes
 * The three phases meet only in the FIFO and the slot table. Handler threads
 * and exec children report through the wake pipe (and their pidfds); the loop
 * never waits on a fixed interval. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/backoff.h>
#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/store.h>
#include <warren/worker.h>

#include "store_work.h"
#include "internal.h"
#include "worker_int.h"

#define MAX_CONCURRENCY 4096 /* as worker.concurrency in the config */
/* The longest wait with nothing due: the broker connection is serviced
 * (its AMQP heartbeat is 30 s), and a stop flag set by a thread that did not
 * call warren_worker_wake is seen, at least this often. */
#define LOOP_WAIT_MAX_MS 10000

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ------------------------------------------------------------ handler context API */

const char *warren_handler_run_key(const warren_handler_ctx *ctx)
{
    return ctx->run_key;
}
const char *warren_handler_job(const warren_handler_ctx *ctx)
{
    return ctx->job;
}
warren_us warren_handler_scheduled_at(const warren_handler_ctx *ctx)
{
    return ctx->scheduled_at;
}
int warren_handler_attempt(const warren_handler_ctx *ctx)
{
    return ctx->attempt;
}
const char *warren_handler_payload(const warren_handler_ctx *ctx)
{
    return ctx->payload;
}
int warren_handler_should_stop(const warren_handler_ctx *ctx)
{
    return atomic_load_explicit(&((warren_handler_ctx *)ctx)->stop, memory_order_acquire) != 0;
}
void warren_handler_set_error(warren_handler_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof(ctx->error), fmt, ap);
    va_end(ap);
    ctx->has_error = 1;
}

/* ------------------------------------------------------------ lifecycle */

int warren_worker_new(const warren_config *cfg, const warren_logger *lg, warren_worker **out,
                      warren_error *err)
{
    warren_worker *w;
    char host[128] = "worker";
    char id[256];

    *out = NULL;
    if (cfg == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_worker_new: no config");
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    w->cfg = cfg;
    w->lg = lg;
    w->concurrency = cfg->worker.concurrency > 0 ? cfg->worker.concurrency : 4;
    if (cfg->worker.id != NULL && cfg->worker.id[0] != '\0') {
        snprintf(id, sizeof(id), "%s", cfg->worker.id);
    } else {
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(id, sizeof(id), "%s:%ld", host, (long)getpid());
    }
    w->id = strdup(id);
    w->db_url = xstrdup(cfg->database_url);
    w->amqp_url = xstrdup(cfg->amqp_url);
    w->wake[0] = w->wake[1] = -1;
    if (pipe(w->wake) != 0) {
        warren_worker_free(w);
        return warren_error_set(err, WARREN_ESYS, "pipe: %s", strerror(errno));
    }
    for (int i = 0; i < 2; i++) {
        fcntl(w->wake[i], F_SETFL, fcntl(w->wake[i], F_GETFL) | O_NONBLOCK);
        fcntl(w->wake[i], F_SETFD, FD_CLOEXEC);
    }
    if (w->id == NULL || (cfg->database_url && !w->db_url) || (cfg->amqp_url && !w->amqp_url)) {
        warren_worker_free(w);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    *out = w;
    return 0;
}

static void free_queues(warren_worker *w)
{
    for (size_t i = 0; i < w->nqueues; i++)
        free(w->queues[i]);
    free(w->queues);
    w->queues = NULL;
    w->nqueues = 0;
}

void warren_worker_free(warren_worker *w)
{
    if (w == NULL)
        return;
    free(w->id);
    free(w->db_url);
    free(w->amqp_url);
    free_queues(w);
    for (size_t i = 0; i < w->nregs; i++)
        free(w->regs[i].name);
    free(w->regs);
    if (w->wake[0] >= 0)
        close(w->wake[0]);
    if (w->wake[1] >= 0)
        close(w->wake[1]);
    free(w);
}

int warren_worker_register(warren_worker *w, const char *name, warren_handler_fn fn, void *ud)
{
    handler_reg *nr;

    if (w == NULL || name == NULL || name[0] == '\0' || fn == NULL)
        return WARREN_EINVAL;
    for (size_t i = 0; i < w->nregs; i++)
        if (strcmp(w->regs[i].name, name) == 0)
            return WARREN_EINVAL;
    if ((nr = realloc(w->regs, (w->nregs + 1) * sizeof(*nr))) == NULL)
        return WARREN_ENOMEM;
    w->regs = nr;
    if ((nr[w->nregs].name = strdup(name)) == NULL)
        return WARREN_ENOMEM;
    nr[w->nregs].fn = fn;
    nr[w->nregs].ud = ud;
    w->nregs++;
    return 0;
}

int warren_worker_set_queues(warren_worker *w, const char *const *queues, size_t n,
                             warren_error *err)
{
    free_queues(w);
    if (n == 0)
        return 0;
    if ((w->queues = calloc(n, sizeof(char *))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!warren_name_valid(queues[i])) {
            free_queues(w);
            return warren_error_set(err, WARREN_EINVAL,
                                    "queue \"%s\" is not a valid queue name "
                                    "([A-Za-z0-9][A-Za-z0-9._-]{0,62})",
                                    queues[i]);
        }
        if ((w->queues[i] = strdup(queues[i])) == NULL) {
            free_queues(w);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
        w->nqueues++;
    }
    return 0;
}

int warren_worker_set_concurrency(warren_worker *w, int n, warren_error *err)
{
    if (n < 1 || n > MAX_CONCURRENCY)
        return warren_error_set(err, WARREN_EINVAL, "concurrency must be between 1 and %d, not %d",
                                MAX_CONCURRENCY, n);
    w->concurrency = n;
    return 0;
}

int warren_worker_set_id(warren_worker *w, const char *id, warren_error *err)
{
    char *c;
    if (id == NULL || id[0] == '\0' || strlen(id) > 200)
        return warren_error_set(err, WARREN_EINVAL, "worker id must be 1..200 bytes");
    if ((c = strdup(id)) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    free(w->id);
    w->id = c;
    return 0;
}

const char *warren_worker_id(const warren_worker *w)
{
    return w->id;
}

int warren_worker_set_urls(warren_worker *w, const char *database_url, const char *amqp_url,
                           warren_error *err)
{
    if (database_url != NULL) {
        char *c = strdup(database_url);
        if (c == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        free(w->db_url);
        w->db_url = c;
    }
    if (amqp_url != NULL) {
        char *c = strdup(amqp_url);
        if (c == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        free(w->amqp_url);
        w->amqp_url = c;
    }
    return 0;
}

void warren_worker_on_finished(warren_worker *w, warren_run_report_fn fn, void *ud)
{
    w->report_fn = fn;
    w->report_ud = ud;
}

void warren_worker_stats_get(const warren_worker *w, warren_worker_stats *out)
{
    *out = w->stats;
}

/* The queues to consume: the configured ones, else every queue with a job
 * that has a handler this worker can run. */
static int default_queues(warren_worker *w, warren_error *err)
{
    const warren_config *cfg = w->cfg;
    if (w->nqueues > 0) {
        /* A named queue must have a job this worker can run: otherwise every
         * message on it would be dead-lettered as "no handler here". */
        for (size_t k = 0; k < w->nqueues; k++) {
            int ok = 0;
            for (size_t i = 0; i < cfg->njobs && !ok; i++)
                ok = strcmp(cfg->jobs[i].queue, w->queues[k]) == 0 &&
                     cfg->jobs[i].handler != WARREN_HANDLER_NONE;
            if (!ok)
                return warren_error_set(err, WARREN_EINVAL,
                                        "queue \"%s\": no job in %s has a handler on it (jobs "
                                        "without a handler are served by workers in other "
                                        "languages)",
                                        w->queues[k], cfg->path ? cfg->path : "the config");
        }
        return 0;
    }
    if ((w->queues = calloc(cfg->njobs + 1, sizeof(char *))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    for (size_t i = 0; i < cfg->njobs; i++) {
        const warren_job *j = &cfg->jobs[i];
        int seen = 0;
        if (j->handler == WARREN_HANDLER_NONE)
            continue;
        for (size_t k = 0; k < w->nqueues; k++)
            if (strcmp(w->queues[k], j->queue) == 0)
                seen = 1;
        if (!seen && (w->queues[w->nqueues++] = strdup(j->queue)) == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    if (w->nqueues == 0)
        return warren_error_set(err, WARREN_EINVAL,
                                "no job in %s has a handler (exec, sql or c), so there is no queue "
                                "to consume; name queues with --queue",
                                cfg->path ? cfg->path : "the config");
    return 0;
}

/* ------------------------------------------------------------ connections */

/* The bound on every statement of the loop's connection (statement_timeout
 * and lock_timeout): a quarter of the shortest margin a slot can get, min(
 * worker.heartbeat_margin, lease/3) over the jobs this worker can run, at
 * least DB_TIMEOUT_MIN_MS. A call blocked on a lock (the relay's FOR UPDATE,
 * an operator's open transaction) fails within that; a loop turn spends at
 * most two such calls (worker_settle.c), so the lease deadline of every slot
 * (lease - margin) is enforced at most half the margin late: before the lease
 * expires in the database. */
static int64_t db_timeout(const warren_worker *w)
{
    const warren_config *cfg = w->cfg;
    int64_t m = cfg->worker.heartbeat_margin_ms;
    for (size_t i = 0; i < cfg->njobs; i++)
        if (cfg->jobs[i].handler != WARREN_HANDLER_NONE && cfg->jobs[i].lease_ms > 0 &&
            cfg->jobs[i].lease_ms / 3 < m)
            m = cfg->jobs[i].lease_ms / 3;
    return m / 4 > DB_TIMEOUT_MIN_MS ? m / 4 : DB_TIMEOUT_MIN_MS;
}

/* ------------------------------------------------------------ slots */

/* ------------------------------------------------------------ the loop */

static int running_count(const warren_worker *w)
{
    return w->concurrency - w->nfree;
}

static int64_t earlier(int64_t a, int64_t b)
{
    return b < a ? b : a;
}

/* The loop's only wait: until the earliest deadline (a slot's heartbeat,
 * lease margin, timeout or kill; a held delivery falling due; a completion
 * or claim once the database's backoff is over; a held acknowledgement; a
 * reconnect; the stop's deadlines), or until something happens: the broker's
 * socket is readable, a handler thread finished (the wake pipe), an exec
 * handler wrote output or exited (its pipe, its pidfd), a signal or
 * warren_worker_wake. Nothing is waited for when there is work now. */
static void loop_wait(warren_worker *w, const volatile sig_atomic_t *stop, int stopping,
                      int64_t stop_at, int64_t hard_at)
{
    int64_t now = warren__mono_ms(), until = INT64_MAX, store_at = INT64_MAX;
    nfds_t np = 0;
    struct pollfd *p = w->pfds;

    if (!stopping && stop != NULL && __atomic_load_n(stop, __ATOMIC_RELAXED))
        return;
    for (int i = 0; i < w->concurrency; i++) {
        int64_t st;
        until = earlier(until, warren__slot_deadline(&w->slots[i], &st));
        store_at = earlier(store_at, st);
    }
    if (!stopping) {
        /* due deliveries (or new ones, not looked at yet) and a free slot */
        if (w->q.len > w->q.held && free_slots(w) > 0)
            store_at = 0;
        store_at = earlier(store_at, warren__claim_deadline(w));
    }
    /* what needs the database waits for its backoff */
    if (store_at != INT64_MAX && w->store_retry_at != 0 && store_at < w->store_retry_at)
        store_at = w->store_retry_at;
    until = earlier(until, store_at);
    if (w->b != NULL) {
        if (warren_broker_readable(w->b))
            until = 0;
        until = earlier(until, warren_broker_ack_due(w->b, warren__ack_hold_ms(w)));
    } else if (!stopping) {
        until = earlier(until, w->broker_retry_at);
    }
    if (stopping) {
        if (now < stop_at)
            until = earlier(until, stop_at);
        until = earlier(until, hard_at);
    }
    if (until <= now)
        return;
    int64_t ms = until - now < LOOP_WAIT_MAX_MS ? until - now : LOOP_WAIT_MAX_MS;
    p[np++] = (struct pollfd){w->wake[0], POLLIN, 0};
    if (w->b != NULL && warren_broker_fd(w->b) >= 0)
        p[np++] = (struct pollfd){warren_broker_fd(w->b), POLLIN, 0};
    for (int i = 0; i < w->concurrency; i++) {
        const slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || s->kind != KIND_EXEC || s->ctx != NULL)
            continue;
        if (s->ex.out_fd >= 0)
            p[np++] = (struct pollfd){s->ex.out_fd, POLLIN, 0};
        if (s->ex.pidfd >= 0)
            p[np++] = (struct pollfd){s->ex.pidfd, POLLIN, 0};
    }
    if (warren__hpool_arm(w->hp))
        return; /* a handler finished meanwhile */
    w->stats.waits++;
    if (poll(p, np, (int)ms) > 0 && (p[0].revents & POLLIN)) {
        /* a byte per wake-up: a few reads empty it; what is left wakes the
         * next wait at once (bounded) */
        char buf[256];
        for (int i = 0; i < 4 && read(w->wake[0], buf, sizeof(buf)) == (ssize_t)sizeof(buf); i++)
            ;
    }
    warren__hpool_disarm(w->hp);
}

void warren_worker_wake(warren_worker *w)
{
    char x = 1;
    if (w != NULL && w->wake[1] >= 0) {
        ssize_t n = write(w->wake[1], &x, 1); /* a full pipe is as good as a byte */
        (void)n;
    }
}

int warren_worker_run(warren_worker *w, volatile sig_atomic_t *stop, warren_error *err)
{
    int rc;
    int stopping = 0;
    int64_t stop_deadline = 0, hard_deadline = 0;

    if ((rc = default_queues(w, err)) != 0)
        return rc;
    /* Deliveries beyond the slots wait in the worker, unclaimed, so that a
     * slot that frees up is filled from memory at once, not after the
     * broker's round trip for the next delivery. */
    /* Unset: 2 x concurrency up to 256 slots; a larger worker keeps prefetch
     * = concurrency, as before (its slots are plenty of buffer, and 2 x
     * 4,096 deliveries per worker only lengthened its turns). */
    w->prefetch = w->cfg->worker.prefetch > 0 ? w->cfg->worker.prefetch
                  : w->concurrency <= 256     ? 2 * w->concurrency
                                              : w->concurrency;
    if (w->prefetch < w->concurrency)
        w->prefetch = w->concurrency;
    if (w->db_url == NULL || w->amqp_url == NULL)
        return warren_error_set(err, WARREN_EINVAL, "worker: no database or broker URL");
    if ((w->slots = calloc((size_t)w->concurrency, sizeof(slot))) == NULL ||
        (w->free_idx = calloc((size_t)w->concurrency, sizeof(int))) == NULL ||
        (w->pfds = calloc(2 * (size_t)w->concurrency + 2, sizeof(*w->pfds))) == NULL) {
        free(w->slots);
        w->slots = NULL;
        free(w->free_idx);
        w->free_idx = NULL;
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < w->concurrency; i++) {
        warren__exec_init(&w->slots[i].ex); /* no pipe yet: calloc's 0 is stdin */
        warren__slot_reset(&w->slots[i]);
        w->free_idx[i] = w->concurrency - 1 - i; /* slot 0 first */
    }
    w->nfree = w->concurrency;
    {
        warren_error e = {0};
        if ((w->hp = warren__handlers_new(w->wake[1], w->concurrency, w->cfg->worker.sql_batch,
                                          &w->se, &e)) == NULL) {
            rc = warren_error_set(err, e.code, "%s", e.message);
            goto out;
        }
    }
    if ((rc = warren_store_open(w->db_url, w->lg, &w->st, err)) != 0)
        goto out;
    /* warren.run_states / refuse (sql/functions/deliveries.sql): without
     * them every delivery a claim gives no row for would fail to settle. */
    if ((rc = warren_store_has_function(w->st, "warren.run_states(text[])", err)) < 0)
        goto out;
    if (rc == 0) {
        rc = warren_error_set(err, WARREN_ECONFIG,
                              "the database lacks warren.run_states, which this worker needs: run "
                              "`warren migrate` first (it installs this version's SQL functions)");
        goto out;
    }
    w->db_timeout_ms = db_timeout(w);
    /* the server's answer (a refusal for a timeout included) within twice that */
    if ((rc = warren_store_set_timeouts(w->st, w->db_timeout_ms, w->db_timeout_ms,
                                        2 * w->db_timeout_ms, err)) != 0)
        goto out;
    {
        /* this connection's claims compiled before the first run's */
        warren_error e = {0};
        if (warren_store_warm_up(w->st, &e) != 0)
            warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s (going on: the first claims pay it)",
                       w->id, e.message);
    }
    {
        /* The sql handlers' connections before the first run (not during a
         * burst): enough for every slot's run in batches of sql_batch, at
         * most 16 (a statement not measured yet shares its batch with at
         * most 15 others: worker_pool.c), and one spare. A failure here is not
         * fatal: they are opened on demand. */
        int sql_jobs = 0;
        for (size_t i = 0; i < w->cfg->njobs; i++)
            sql_jobs += w->cfg->jobs[i].sql != NULL;
        int batch = w->cfg->worker.sql_batch > 0 ? w->cfg->worker.sql_batch : 1;
        if (batch > 16)
            batch = 16;
        warren_error e = {0};
        if (sql_jobs > 0 && warren__sql_prefill(w->se, w->db_url,
                                                (w->concurrency + batch - 1) / batch + 1, &e) != 0)
            warren_log(
                w->lg, WARREN_LOG_WARN,
                "worker %s: could not open or warm up the sql handlers' connections ahead: %s",
                w->id, e.message);
    }
    if ((rc = warren__broker_setup(w, err)) != 0)
        goto out;
    {
        char list[512] = "";
        for (size_t i = 0; i < w->nqueues; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
                     w->queues[i]);
        warren_log(w->lg, WARREN_LOG_INFO, "worker %s: consuming %s with %d slots", w->id, list,
                   w->concurrency);
    }
    for (;;) {
        int64_t now = warren__mono_ms();
        if (!stopping && stop != NULL && __atomic_load_n(stop, __ATOMIC_RELAXED)) {
            stopping = 1;
            w->stopping = 1;
            stop_deadline = now + w->cfg->worker.shutdown_grace_ms;
            hard_deadline = stop_deadline + warren__kill_grace(w) + 5000;
            warren__stop_consuming(w);
            warren_log(w->lg, WARREN_LOG_INFO,
                       "worker %s: stopping: %d running handler(s) get %lld ms to finish", w->id,
                       running_count(w), (long long)w->cfg->worker.shutdown_grace_ms);
        }
        if (stopping) {
            if (running_count(w) == 0)
                break;
            if (now >= stop_deadline)
                for (int i = 0; i < w->concurrency; i++)
                    warren__slot_stop(w, &w->slots[i], STOP_SHUTDOWN, now);
            if (now >= hard_deadline) {
                /* Handlers that ignore should_stop, or completions PostgreSQL
                 * cannot take: leave them. Their messages return to the queue
                 * when the connection closes and their runs come back when
                 * their leases expire (the reconciler). */
                warren_log(w->lg, WARREN_LOG_WARN,
                           "worker %s: %d run(s) still unfinished %lld ms after the stop; leaving "
                           "them to their leases",
                           w->id, running_count(w), (long long)(now - stop_deadline));
                break;
            }
        }
        loop_wait(w, stop, stopping, stopping ? stop_deadline : 0, hard_deadline);
        if (w->b != NULL)
            warren__receive(w, 0, stopping); /* also keeps the connection serviced */
        else if (!stopping)
            /* Not while stopping: it would consume again, and
             * acknowledgements for deliveries of the lost connection cannot
             * be sent anyway. */
            warren__broker_try_reconnect(w);
        if (!stopping)
            warren__claim_pending(w);
        now = warren__mono_ms();
        warren__slots_relaunch_sql(w, now);
        /* Heartbeat before the lease deadline check: after a pause (SIGSTOP,
         * a stall) the overdue heartbeat tells whether the run is still ours;
         * the deadline then stops what could not be confirmed. */
        warren__heartbeat_due(w, now);
        now = warren__mono_ms();
        for (int i = 0; i < w->concurrency; i++)
            warren__slot_poll(w, &w->slots[i], now);
        warren__complete_done(w, now);
        warren__ack_flush(w, 0);
    }
    warren__ack_flush(w, 1);
    rc = 0;
out:
    if (w->slots != NULL) {
        for (int i = 0; i < w->concurrency; i++) {
            slot *s = &w->slots[i];
            /* done = 2 hands a still running handler's context to its pool
             * thread, which frees it when (if ever) the handler returns. */
            if (s->ctx != NULL &&
                atomic_exchange_explicit(&s->ctx->done, 2, memory_order_acq_rel) == 1) {
                warren__exec_abandoned(s->ctx); /* a started exec handler no slot took */
                warren__ctx_free(s->ctx);
            }
            s->ctx = NULL;
            warren__slot_reset(s);
        }
        free(w->slots);
        w->slots = NULL;
    }
    free(w->free_idx);
    w->free_idx = NULL;
    free(w->pfds);
    w->pfds = NULL;
    w->nfree = 0;
    if (warren__hpool_free(w->hp, 1000) > 0)
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: left handler thread(s) running that ignored should_stop", w->id);
    w->hp = NULL;
    w->se = NULL; /* freed with the pool */
    warren__pq_clear(&w->q);
    free(w->q.items);
    w->q.items = NULL;
    w->q.cap = 0;
    warren_broker_free(w->b);
    w->b = NULL;
    warren_store_free(w->st);
    w->st = NULL;
    warren_log(w->lg, WARREN_LOG_INFO,
               "worker %s: stopped (received %llu, started %llu, taken %llu, succeeded %llu, "
               "retried %llu, failed %llu, duplicates %llu, dead-lettered %llu, given back %llu)",
               w->id, (unsigned long long)w->stats.received, (unsigned long long)w->stats.started,
               (unsigned long long)w->stats.taken, (unsigned long long)w->stats.succeeded,
               (unsigned long long)w->stats.retried, (unsigned long long)w->stats.failed,
               (unsigned long long)w->stats.duplicates, (unsigned long long)w->stats.dead_lettered,
               (unsigned long long)w->stats.given_back);
    return rc;
}
