/* worker.c: the C worker (docs/design.md §6.2): its public API and its loop. One thread
 * owns the AMQP connection and the PostgreSQL connection (neither library is
 * thread-safe per connection) and runs a loop: take deliveries, claim them in
 * batches (worker_claim.c), start handlers in free slots, heartbeat, collect
 * finished handlers, complete them in batches, and only then acknowledge
 * (worker_settle.c). exec handlers are child processes in their own process
 * group, watched with waitpid and a pipe (worker_exec.c); in-process C
 * handlers and sql handlers run on a thread of the handler pool per run (sql
 * handlers with their own PostgreSQL connection from a small pool) and report
 * through atomics (worker_pool.c). */
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

#define MAX_CONCURRENCY 4096   /* as worker.concurrency in the config */
#define DB_TIMEOUT_MIN_MS 100  /* the loop connection's statement/lock timeout at least */
#define KILL_GRACE_MAX_MS 5000 /* SIGTERM -> SIGKILL */

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

const handler_reg *warren__worker_find_reg(const warren_worker *w, const char *name)
{
    for (size_t i = 0; name != NULL && i < w->nregs; i++)
        if (strcmp(w->regs[i].name, name) == 0)
            return &w->regs[i];
    return NULL;
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

static int broker_setup(warren_worker *w, warren_error *err)
{
    int rc;
    char name[128];
    warren_broker *b = NULL;

    if ((rc = warren_broker_open(w->amqp_url, w->lg, &b, err)) != 0)
        return rc;
    if ((rc = warren_broker_confirm_select(b, err)) != 0 ||
        (rc = warren_broker_set_max_body(b, WARREN_MSG_MAX_BODY, err)) != 0 ||
        (rc = warren_broker_qos(b, w->prefetch, err)) != 0)
        goto fail;
    for (size_t i = 0; i < w->nqueues; i++) {
        if ((rc = warren_broker_ready_queue_name(w->queues[i], name, sizeof(name), err)) != 0 ||
            (rc = warren_broker_consume(b, name, err)) != 0)
            goto fail;
    }
    w->b = b;
    w->gen++;
    return 0;
fail:
    warren_broker_free(b);
    return rc;
}

void warren__worker_broker_lost(warren_worker *w, const warren_error *e)
{
    warren_log(w->lg, WARREN_LOG_WARN,
               "worker %s: %s; unacknowledged messages return to their queues, reconnecting", w->id,
               e->message);
    warren_broker_free(w->b);
    w->b = NULL;
    warren__pq_clear(w); /* their tags died with the connection; the broker redelivers them */
    w->broker_backoff = warren_backoff_next(w->broker_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    w->broker_retry_at = warren__mono_ms() + w->broker_backoff;
}

static void broker_try_reconnect(warren_worker *w)
{
    warren_error e = {0};
    if (w->b != NULL || warren__mono_ms() < w->broker_retry_at)
        return;
    if (broker_setup(w, &e) != 0) {
        w->broker_backoff = warren_backoff_next(w->broker_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
        w->broker_retry_at = warren__mono_ms() + w->broker_backoff;
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s (retrying in %lld ms)", w->id, e.message,
                   (long long)w->broker_backoff);
        return;
    }
    w->broker_backoff = 0;
    w->stats.broker_reconnects++;
    warren_log(w->lg, WARREN_LOG_INFO, "worker %s: reconnected to RabbitMQ", w->id);
}

/* A PostgreSQL call failed. Connection errors start the reconnect backoff. */
void warren__worker_store_failed(warren_worker *w, int rc, const warren_error *e, const char *what)
{
    w->stats.db_errors++;
    if (w->store_backoff == 0) {
        warren_log(w->lg, rc == WARREN_EDBCONN ? WARREN_LOG_WARN : WARREN_LOG_ERROR,
                   "worker %s: %s: %s; messages stay unacknowledged, retrying", w->id, what,
                   e->message);
        w->store_backoff = BACKOFF_MIN_MS;
    }
    /* Calls fail in bursts (every slot at once): the backoff grows only when
     * reconnecting fails (warren__worker_store_ready), not once per failed call. */
    w->store_retry_at = warren__mono_ms() + w->store_backoff;
}

/* 1 if the store may be used now (reconnecting when its backoff allows). */
int warren__worker_store_ready(warren_worker *w)
{
    warren_error e = {0};
    int64_t now = warren__mono_ms();

    if (w->store_retry_at != 0 && now < w->store_retry_at)
        return 0;
    if (!warren_store_connected(w->st)) {
        if (warren_store_reconnect(w->st, &e) != 0) {
            w->store_backoff =
                warren_backoff_next(w->store_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
            w->store_retry_at = now + w->store_backoff;
            warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: %s", w->id, e.message);
            return 0;
        }
        warren_log(w->lg, WARREN_LOG_INFO, "worker %s: reconnected to PostgreSQL", w->id);
    }
    return 1;
}

void warren__worker_store_ok(warren_worker *w)
{
    w->store_backoff = 0;
    w->store_retry_at = 0;
}

/* ------------------------------------------------------------ slots */

static void slot_reset(slot *s)
{
    warren__pend_free(s->back);
    warren_claim_clear(&s->claim);
    free(s->error);
    warren__exec_close(&s->ex);
    memset(s, 0, sizeof(*s));
    s->ex.out_fd = -1;
    s->state = SLOT_FREE;
}

/* A used slot becomes free again. */
void warren__slot_release(warren_worker *w, slot *s)
{
    slot_reset(s);
    w->free_idx[w->nfree++] = (int)(s - w->slots);
}

static int64_t kill_grace(const warren_worker *w)
{
    int64_t g = w->cfg->worker.heartbeat_margin_ms / 2;
    if (g < 200)
        g = 200;
    return g > KILL_GRACE_MAX_MS ? KILL_GRACE_MAX_MS : g;
}

/* Slot s's clocks from its start (monotonic ms; hb_every_ms set): the
 * heartbeat schedule, the timeout, the delivery's times for the report. */
static void slot_clocks(slot *s, const pend *p, int64_t start)
{
    s->started_mono = start;
    s->received_mono = p->received_mono;
    s->msg_due_at = p->msg.due_at;
    s->last_hb_ok = start;
    s->next_hb = start + s->hb_every_ms;
    s->timeout_at = start + (s->job->timeout_ms > 0 ? s->job->timeout_ms : INT32_MAX);
    s->ex.out_fd = -1;
}

/* Starts a claimed run in slot s. On failure the run is completed as retry. */
void warren__slot_start(warren_worker *w, slot *s, pend *p, warren_claim *cl, int64_t claimed_mono)
{
    warren_error e = {0};
    char why[WARREN_ERROR_MSG_MAX];
    int rc;
    /* The handler the database's answer names, never the message's. */
    const warren_job *hj = warren__claimed_job(w, p, cl, why, sizeof(why));

    s->state = SLOT_RUNNING;
    s->tag = p->d.tag;
    s->gen = p->gen;
    snprintf(s->run_key, sizeof(s->run_key), "%s", p->msg.run_key);
    s->job = hj != NULL ? hj : p->job;
    s->claim = *cl;
    memset(cl, 0, sizeof(*cl));
    {
        /* Handlers get the payload compact, as in the message body. */
        char *compact = NULL;
        if (s->claim.payload_json != NULL &&
            warren_json_object_check(s->claim.payload_json, &compact, NULL) == 0) {
            free(s->claim.payload_json);
            s->claim.payload_json = compact;
        }
    }
    s->lease_ms = (int64_t)s->claim.lease_seconds * 1000;
    if (s->job->lease_ms > 0 && s->job->lease_ms < s->lease_ms)
        s->lease_ms = s->job->lease_ms;
    s->hb_every_ms = s->lease_ms / 3 > 0 ? s->lease_ms / 3 : 1;
    s->hb_margin_ms = w->cfg->worker.heartbeat_margin_ms;
    if (s->hb_margin_ms > s->lease_ms / 3)
        s->hb_margin_ms = s->lease_ms / 3; /* short leases: keep two heartbeats' worth of room */
    if (s->hb_margin_ms / 4 < w->db_timeout_ms && w->db_timeout_ms > DB_TIMEOUT_MIN_MS) {
        /* The database's lease (a sync shortened it) is shorter than any this
         * worker's config gives: the loop's bound follows, so that one blocked
         * call still cannot outlast this slot's margin. */
        warren_error te = {0};
        int64_t t =
            s->hb_margin_ms / 4 > DB_TIMEOUT_MIN_MS ? s->hb_margin_ms / 4 : DB_TIMEOUT_MIN_MS;
        if (warren_store_set_timeouts(w->st, t, t, 2 * t, &te) == 0) {
            warren_log(w->lg, WARREN_LOG_INFO,
                       "worker %s: %s was claimed with a %lld ms lease: database calls now bounded "
                       "by %lld ms (was %lld)",
                       w->id, s->run_key, (long long)s->lease_ms, (long long)t,
                       (long long)w->db_timeout_ms);
            w->db_timeout_ms = t;
        } else {
            warren__worker_store_failed(w, te.code, &te, "lower the database call bound");
        }
    }
    slot_clocks(s, p, claimed_mono);
    if (hj == NULL) {
        s->kind = KIND_C; /* nothing started: the attempt fails with why */
        rc = warren_error_set(&e, WARREN_EINVAL, "%s", why);
    } else if (s->job->handler == WARREN_HANDLER_EXEC) {
        s->kind = KIND_EXEC;
        rc = warren__start_spawn(w, s, p->msg.due_at, &e); /* started by a pool thread */
    } else {
        s->kind = s->job->handler == WARREN_HANDLER_SQL ? KIND_SQL : KIND_C;
        rc = warren__start_thread(w, s, &e);
    }
    w->stats.started++;
    warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: started %s attempt %d", w->id, s->run_key,
               s->claim.attempt);
    if (rc != 0) {
        warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: %s: %s", w->id, s->run_key, e.message);
        s->state = SLOT_DONE;
        s->outcome = WARREN_OUTCOME_RETRY;
        s->error = strdup(e.message);
    }
}

int warren__slot_take(warren_worker *w, slot *s, pend *p, int64_t now)
{
    warren_error e = {0};
    pend *back = malloc(sizeof(*back));
    int rc;

    if (back == NULL)
        return WARREN_ENOMEM;
    s->state = SLOT_RUNNING;
    s->kind = KIND_SQL;
    s->take = 1;
    s->tag = p->d.tag;
    s->gen = p->gen;
    snprintf(s->run_key, sizeof(s->run_key), "%s", p->msg.run_key);
    s->job = p->job;
    /* No lease until it is claimed: nothing to heartbeat, nothing to lose
     * (poll_slot, hb_due skip it); the statement_timeout bounds it. */
    s->lease_ms = s->job->lease_ms;
    s->hb_every_ms = s->lease_ms / 3 > 0 ? s->lease_ms / 3 : 1;
    slot_clocks(s, p, now);
    if ((rc = warren__start_thread(w, s, &e)) != 0) {
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s: %s (claimed instead)", w->id, s->run_key,
                   e.message);
        free(back);
        warren__slot_release(w, s);
        return rc;
    }
    *back = *p; /* moved: the FIFO's entry is left empty and picked */
    memset(p, 0, sizeof(*p));
    p->picked = 1;
    s->back = back;
    warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: taking %s", w->id, s->run_key);
    return 0;
}

/* An sql handler whose lease was lost (a heartbeat refused, or none
 * succeeded for lease - margin): its transaction must not commit, and
 * cancel_lost_sql cancels its statement (the kill of the other kinds) as soon
 * as this worker's connection works. */
void warren__sql_lost(slot *s)
{
    if (s->kind != KIND_SQL || s->ctx == NULL)
        return;
    atomic_store(&s->ctx->lost, 1);
    s->next_cancel = 0; /* at once */
}

void warren__slot_stop(warren_worker *w, slot *s, int reason, int64_t now)
{
    if (s->stop_reason != STOP_NONE || s->state != SLOT_RUNNING)
        return;
    if (reason == STOP_LOST)
        warren__sql_lost(s);
    s->stop_reason = reason;
    if (reason == STOP_LOST)
        w->stats.lease_lost++;
    else if (reason == STOP_TIMEOUT)
        w->stats.timeouts++;
    if (s->kind == KIND_EXEC && s->ex.pid > 0) {
        warren__exec_kill(&s->ex, SIGTERM);
        s->kill_at = now + kill_grace(w);
    } else if (s->ctx != NULL) {
        /* (an exec handler whose start is still with a pool thread: it is
         * not started, or killed once started; given up after the grace) */
        atomic_store_explicit(&s->ctx->stop, 1, memory_order_release);
        if ((reason == STOP_TIMEOUT && s->kind == KIND_C) || s->kind == KIND_EXEC)
            s->kill_at = now + kill_grace(w); /* then it is left behind: poll_slot */
    }
}

/* An sql handler's thread is done (committed or rolled back): no heartbeat,
 * its run is recorded or not already. */
int warren__sql_finished(const slot *s)
{
    return s->kind == KIND_SQL && s->ctx != NULL &&
           atomic_load_explicit(&s->ctx->done, memory_order_acquire) != 0;
}

/* Cancels the statement of an sql handler whose lease was lost, again every
 * heartbeat interval while it runs (a cancel that arrives between two
 * statements of the transaction is ignored by the server). */
static void cancel_lost_sql(warren_worker *w, slot *s, int64_t now)
{
    warren_error e = {0};
    int sent = 0, rc;
    if (s->kind != KIND_SQL || s->stop_reason != STOP_LOST || s->ctx == NULL ||
        warren__sql_finished(s) || now < s->next_cancel || !warren__worker_store_ready(w))
        return;
    s->next_cancel = now + s->hb_every_ms;
    if ((rc = warren_store_cancel_tagged(w->st, s->ctx->sql_tag, &sent, &e)) != 0) {
        warren__worker_store_failed(w, rc, &e, "cancel an sql handler");
        return;
    }
    warren__worker_store_ok(w);
    if (sent && s->cancels_sent++ == 0)
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: %s attempt %d: cancelled the sql handler's statement (the lease "
                   "was lost); it rolls back",
                   w->id, s->run_key, s->claim.attempt);
}

/* An exec handler stopped before its process started: done, never run (a
 * lost lease is not completed: warren__complete_done). */
static void exec_not_started(warren_worker *w, slot *s)
{
    s->state = SLOT_DONE;
    s->outcome = WARREN_OUTCOME_RETRY;
    s->error = s->stop_reason == STOP_TIMEOUT
                   ? warren__fmt_error("timed out after %lld ms before its process started",
                                       (long long)s->job->timeout_ms)
               : s->stop_reason == STOP_SHUTDOWN
                   ? warren__fmt_error("stopped: worker %s shutting down before the handler "
                                       "started",
                                       w->id)
                   : warren__fmt_error("stopped before its process started");
    warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s attempt %d: %s", w->id, s->run_key,
               s->claim.attempt, s->error);
}

/* Polls one running slot: lease and timeout checks first (a handler whose
 * lease ran out while this process was stopped must not be completed, even
 * if it finished meanwhile), then whether it finished. */
static void poll_slot(warren_worker *w, slot *s, int64_t now)
{
    if (s->state != SLOT_RUNNING)
        return;
    /* Every kind, sql handlers too (their transaction is marked lost: it
     * rolls back and is not completed). The timeout of an sql handler is the
     * statement_timeout PostgreSQL enforces. */
    if (!s->take && now >= s->last_hb_ok + s->lease_ms - s->hb_margin_ms &&
        s->stop_reason != STOP_LOST) {
        if (s->stop_reason == STOP_NONE)
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: %s attempt %d: no successful heartbeat for %lld ms (lease "
                       "%lld ms): stopping the handler, not completing",
                       w->id, s->run_key, s->claim.attempt, (long long)(now - s->last_hb_ok),
                       (long long)s->lease_ms);
        if (s->stop_reason != STOP_NONE) {
            s->stop_reason = STOP_LOST; /* already stopping: now it must not complete */
            warren__sql_lost(s);
        } else {
            warren__slot_stop(w, s, STOP_LOST, now);
        }
    } else if (s->kind != KIND_SQL && now >= s->timeout_at && s->stop_reason == STOP_NONE) {
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s attempt %d: timed out after %lld ms",
                   w->id, s->run_key, s->claim.attempt, (long long)s->job->timeout_ms);
        warren__slot_stop(w, s, STOP_TIMEOUT, now);
    }
    cancel_lost_sql(w, s, now);
    if (s->kind == KIND_EXEC) {
        int status;
        if (s->ctx != NULL) {
            /* its start is with a pool thread (warren__start_spawn) */
            warren_handler_ctx *c = s->ctx;
            int expect = 0;
            if (atomic_load_explicit(&c->done, memory_order_acquire) == 0) {
                /* Stopped, and still no thread took it (every one is busy)
                 * when the grace is over: given up (the pool thread kills
                 * what it may still start, warren__exec_abandoned). */
                if (s->kill_at == 0 || now < s->kill_at ||
                    !atomic_compare_exchange_strong_explicit(
                        &c->done, &expect, 2, memory_order_acq_rel, memory_order_acquire))
                    return;
                s->ctx = NULL;
                s->has_thread = 0;
                s->kill_at = 0;
                exec_not_started(w, s);
                return;
            }
            s->ctx = NULL;
            s->has_thread = 0;
            if (c->exec_skipped) {
                warren__ctx_free(c);
                s->kill_at = 0;
                exec_not_started(w, s);
                return;
            }
            if (c->exec_rc != 0) {
                warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: %s: %s", w->id, s->run_key,
                           c->error);
                s->state = SLOT_DONE;
                s->outcome = WARREN_OUTCOME_RETRY;
                s->error = strdup(c->error);
                warren__ctx_free(c);
                return;
            }
            s->ex = c->ex; /* the process is the slot's from here on */
            warren__exec_init(&c->ex);
            warren__ctx_free(c);
            if (s->stop_reason != STOP_NONE) {
                /* stopped (lease lost, timeout, shutdown) while it started */
                warren__exec_kill(&s->ex, SIGTERM);
                s->kill_at = now + kill_grace(w);
            }
        }
        warren__exec_read(&s->ex);
        if (s->kill_at != 0 && now >= s->kill_at) {
            warren__exec_kill(&s->ex, SIGKILL);
            s->kill_at = 0;
        }
        if (!warren__exec_reap(&s->ex, &status))
            return;
        s->state = SLOT_DONE;
        if (s->stop_reason == STOP_TIMEOUT) {
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error = warren__fmt_error("timed out after %lld ms (process group killed)%s%s",
                                         (long long)s->job->timeout_ms, s->ex.tail_len ? ": " : "",
                                         warren__exec_tail(&s->ex));
        } else if (s->stop_reason == STOP_SHUTDOWN) {
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error = warren__fmt_error("stopped: worker %s shutting down", w->id);
        } else {
            s->outcome = warren__exec_outcome(&s->ex, status, &s->error);
        }
        return;
    }
    /* threads */
    if (s->kind == KIND_C && s->stop_reason == STOP_TIMEOUT && s->kill_at != 0 &&
        now >= s->kill_at && s->ctx != NULL &&
        atomic_exchange_explicit(&s->ctx->done, 2, memory_order_acq_rel) == 0) {
        /* Timed out and ignores should_stop: a thread cannot be killed, so
         * leave it (its pool thread frees the context if the handler ever
         * returns) and complete the run as a retry. Heartbeating it on would
         * hold the run forever. */
        s->ctx = NULL;
        s->kill_at = 0;
        s->has_thread = 0;
        s->state = SLOT_DONE;
        s->outcome = WARREN_OUTCOME_RETRY;
        s->error =
            warren__fmt_error("timed out after %lld ms and did not stop within %lld ms; its thread "
                              "was left behind",
                              (long long)s->job->timeout_ms, (long long)kill_grace(w));
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: %s attempt %d: handler ignores should_stop after its timeout; "
                   "left behind, completing as retry",
                   w->id, s->run_key, s->claim.attempt);
        return;
    }
    if (s->ctx == NULL || !atomic_load_explicit(&s->ctx->done, memory_order_acquire))
        return;
    s->has_thread = 0;
    s->state = SLOT_DONE;
    if (s->kind == KIND_C) {
        s->outcome = s->ctx->outcome;
        if (s->outcome != WARREN_OUTCOME_SUCCEEDED && s->outcome != WARREN_OUTCOME_RETRY &&
            s->outcome != WARREN_OUTCOME_FAILED)
            s->outcome = WARREN_OUTCOME_RETRY;
        if (s->stop_reason == STOP_TIMEOUT) {
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error = warren__fmt_error("timed out after %lld ms", (long long)s->job->timeout_ms);
        } else if (s->stop_reason == STOP_SHUTDOWN && s->outcome == WARREN_OUTCOME_RETRY) {
            /* a verdict the handler gave (succeeded, failed) stands */
            s->error = warren__fmt_error("stopped: worker %s shutting down", w->id);
        } else if (s->outcome != WARREN_OUTCOME_SUCCEEDED) {
            s->error = strdup(s->ctx->has_error ? s->ctx->error : "handler reported failure");
        }
        warren__ctx_free(s->ctx);
        s->ctx = NULL;
    }
    /* sql contexts are consumed by finish_sql (worker_settle.c) */
}

/* ------------------------------------------------------------ the loop */

static int running_count(const warren_worker *w)
{
    return w->concurrency - w->nfree;
}

static void relaunch_sql(warren_worker *w, int64_t now)
{
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        warren_error e = {0};
        if (s->state == SLOT_RUNNING && s->complete_sql_retry && s->stop_reason == STOP_LOST) {
            s->complete_sql_retry = 0; /* not ours any more: acked without completing */
            s->state = SLOT_DONE;
            continue;
        }
        if (s->state != SLOT_RUNNING || !s->complete_sql_retry || now < s->retry_at)
            continue;
        s->complete_sql_retry = 0;
        if (warren__start_thread(w, s, &e) != 0) {
            s->complete_sql_retry = 1;
            s->retry_at = now + BACKOFF_MAX_MS;
            warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: %s", w->id, e.message);
        }
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
        (w->pfds = calloc((size_t)w->concurrency + 1, sizeof(*w->pfds))) == NULL) {
        free(w->slots);
        w->slots = NULL;
        free(w->free_idx);
        w->free_idx = NULL;
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < w->concurrency; i++) {
        warren__exec_init(&w->slots[i].ex); /* no pipe yet: calloc's 0 is stdin */
        slot_reset(&w->slots[i]);
        w->free_idx[i] = w->concurrency - 1 - i; /* slot 0 first */
    }
    w->nfree = w->concurrency;
    {
        warren_error e = {0};
        if ((w->hp = warren__hpool_new(w->wake[1], w->concurrency, w->cfg->worker.sql_batch, &e)) ==
            NULL) {
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
        if (sql_jobs > 0 &&
            warren__hpool_prefill(w->hp, w->db_url, (w->concurrency + batch - 1) / batch + 1, &e) !=
                0)
            warren_log(
                w->lg, WARREN_LOG_WARN,
                "worker %s: could not open or warm up the sql handlers' connections ahead: %s",
                w->id, e.message);
    }
    if ((rc = broker_setup(w, err)) != 0)
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
        if (!stopping && stop != NULL && *stop) {
            stopping = 1;
            w->stopping = 1;
            stop_deadline = now + w->cfg->worker.shutdown_grace_ms;
            hard_deadline = stop_deadline + kill_grace(w) + 5000;
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
        /* Wait for the broker only when there is nothing else to do; with
         * every slot taken nothing can arrive, so wait for a handler instead. */
        int busy = 0, threads = 0;
        for (int i = 0; i < w->concurrency; i++) {
            if (w->slots[i].state == SLOT_DONE)
                busy = 1;
            if (w->slots[i].state == SLOT_RUNNING && w->slots[i].has_thread)
                threads = 1;
        }
        /* due deliveries (or new ones, not looked at yet) and a free slot */
        if (w->pq_len > w->pq_held && free_slots(w) > 0 && w->store_retry_at == 0)
            busy = 1;
        int wait = busy ? 0 : threads ? 1 : IDLE_WAIT_MS;
        if (w->next_due != 0 && wait > 0 && w->clock_at_ms != 0 && w->store_retry_at == 0 &&
            free_slots(w) > 0) {
            /* an early delivery falls due: wake up for it (not while the
             * database is backing off: nothing could be claimed) */
            int64_t until = (w->next_due - CLAIM_AHEAD_US - warren__db_now_cached(w) + 999) / 1000;
            if (until < wait)
                wait = until < 0 ? 0 : (int)until;
        }
        if (w->b != NULL && free_slots(w) == 0 && !busy) {
            warren__receive(w, 0, stopping); /* keep the connection serviced */
            warren__wait_wake(w, IDLE_WAIT_MS);
        } else if (w->b != NULL) {
            warren__receive(w, wait, stopping);
        } else if (stopping) {
            /* No reconnect: it would consume again, and acknowledgements
             * for deliveries of the lost connection cannot be sent anyway. */
            warren__wait_wake(w, IDLE_WAIT_MS);
        } else {
            broker_try_reconnect(w);
            if (w->b == NULL)
                warren__sleep_ms(IDLE_WAIT_MS);
        }
        if (!stopping)
            warren__claim_pending(w);
        now = warren__mono_ms();
        relaunch_sql(w, now);
        /* Heartbeat before the lease deadline check: after a pause (SIGSTOP,
         * a stall) the overdue heartbeat tells whether the run is still ours;
         * the deadline then stops what could not be confirmed. */
        warren__heartbeat_due(w, now);
        now = warren__mono_ms();
        for (int i = 0; i < w->concurrency; i++)
            poll_slot(w, &w->slots[i], now);
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
            slot_reset(s);
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
    warren__pq_clear(w);
    free(w->pq);
    w->pq = NULL;
    w->pq_cap = 0;
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
