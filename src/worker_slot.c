/* worker_slot.c: the C worker's slot table and the run's state machine
 * (docs/design.md §6.2). A slot goes FREE -> RUNNING -> DONE -> FREE:
 * started from a claim (or a take), polled every loop turn (lease deadline,
 * timeout, kill grace, finished?), stopped for a reason (lost lease, timeout,
 * shutdown). The handler kinds start here: exec processes are spawned and c
 * and sql handlers run on the handler pool's threads (worker_pool.c), exec
 * processes are watched here (worker_exec.c). Uses the connections and the
 * pending FIFO below it; never the intake, claim or settle phases above. */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <warren/codec.h>
#include <warren/store.h>

#include "store_work.h"
#include "internal.h"
#include "worker_int.h"

#define KILL_GRACE_MAX_MS 5000 /* SIGTERM -> SIGKILL */

const handler_reg *warren__worker_find_reg(const warren_worker *w, const char *name)
{
    for (size_t i = 0; name != NULL && i < w->nregs; i++)
        if (strcmp(w->regs[i].name, name) == 0)
            return &w->regs[i];
    return NULL;
}

/* Whether config job j can be run by this worker for a delivery from
 * queue q (NULL: any): JUDGED_OK, or JUDGED_BAD / JUDGED_FOREIGN with why. */
int warren__job_usable(warren_worker *w, const warren_job *j, const char *q, char *why, size_t len)
{
    /* The consumer's queue is warren.ready.<job queue>: a run of another
     * queue was routed here by hand, or this worker's config differs from the
     * one synced (the job moved queues): foreign, like an unknown job. */
    if (q != NULL && (strncmp(q, WARREN_READY_PREFIX, strlen(WARREN_READY_PREFIX)) != 0 ||
                      strcmp(q + strlen(WARREN_READY_PREFIX), j->queue) != 0)) {
        snprintf(why, len, "job \"%s\" belongs to queue \"%s\" in this worker's config, not to %s",
                 j->name, j->queue, q);
        return JUDGED_FOREIGN;
    }
    switch (j->handler) {
    case WARREN_HANDLER_EXEC:
        if (j->exec_argv == NULL || j->exec_argv[0] == NULL) {
            snprintf(why, len, "job \"%s\" has an empty exec handler", j->name);
            return JUDGED_BAD;
        }
        break;
    case WARREN_HANDLER_SQL:
        if (j->sql == NULL || j->sql[0] == '\0') {
            snprintf(why, len, "job \"%s\" has an empty sql handler", j->name);
            return JUDGED_BAD;
        }
        break;
    case WARREN_HANDLER_C:
        if (warren__worker_find_reg(w, j->c_handler) == NULL) {
            snprintf(why, len,
                     "job \"%s\": in-process handler \"%s\" is not registered in this worker",
                     j->name, j->c_handler ? j->c_handler : "");
            return JUDGED_FOREIGN;
        }
        break;
    default:
        snprintf(why, len, "job \"%s\" has no handler in this worker's config", j->name);
        return JUDGED_BAD;
    }
    return JUDGED_OK;
}

const warren_job *warren__claimed_job(warren_worker *w, const pend *p, const warren_claim *cl,
                                      char *why, size_t len)
{
    if (p->job != NULL && strcmp(cl->handler, p->job->name) == 0)
        return p->job; /* what the message said, judged already */
    const warren_job *j = warren_config_job(w->cfg, cl->handler);
    if (j == NULL) {
        snprintf(why, len,
                 "run %s of job \"%s\" is handled by \"%s\" (the database's answer), which is not "
                 "in this worker's config (%s); its message named \"%s\"",
                 p->msg.run_key, cl->job, cl->handler, w->cfg->path ? w->cfg->path : "config",
                 p->job != NULL ? p->job->name : "");
        return NULL;
    }
    if (warren__job_usable(w, j, p->d.queue, why, len) != JUDGED_OK)
        return NULL;
    warren_log(w->lg, WARREN_LOG_WARN,
               "worker %s: run %s: its message named \"%s\", the database says \"%s\": running "
               "the handler of \"%s\"",
               w->id, p->msg.run_key, p->job != NULL ? p->job->name : "", cl->handler, j->name);
    return j;
}

void warren__slot_reset(slot *s)
{
    warren__pend_free(s->back);
    warren_claim_clear(&s->claim);
    free(s->error);
    warren__exec_close(&s->ex);
    memset(s, 0, sizeof(*s));
    warren__exec_init(&s->ex);
    s->state = SLOT_FREE;
}

/* A used slot becomes free again. */
void warren__slot_release(warren_worker *w, slot *s)
{
    assert(s->state != SLOT_FREE && s->ctx == NULL && w->nfree < w->concurrency);
    warren__slot_reset(s);
    w->free_idx[w->nfree++] = (int)(s - w->slots);
}

slot *warren__slot_alloc(warren_worker *w)
{
    slot *s = w->nfree > 0 ? &w->slots[w->free_idx[--w->nfree]] : NULL;
    assert(s == NULL || (s->state == SLOT_FREE && s->ctx == NULL && s->back == NULL));
    return s;
}

int64_t warren__kill_grace(const warren_worker *w)
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
    warren__exec_init(&s->ex);
}

/* A copy of the NULL-terminated list v (NULL: NULL); *ok = 0 when out of memory. */
static char **strv_dup(char *const *v, int *ok)
{
    size_t n = 0;
    char **d;
    if (v == NULL)
        return NULL;
    while (v[n] != NULL)
        n++;
    if ((d = calloc(n + 1, sizeof(*d))) == NULL) {
        *ok = 0;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if ((d[i] = strdup(v[i])) == NULL)
            *ok = 0;
    return d;
}

/* Queues slot s's context c for a pool thread; s->ctx from then on. On
 * failure c is freed. */
static int submit_for(warren_worker *w, slot *s, warren_handler_ctx *c, warren_error *err)
{
    int prc;
    if ((prc = warren__hpool_submit(w->hp, c, err)) != 0) {
        warren__ctx_free(c);
        return prc;
    }
    s->has_thread = 1;
    s->ctx = c;
    return 0;
}

int warren__start_thread(warren_worker *w, slot *s, warren_error *err)
{
    warren_handler_ctx *c = calloc(1, sizeof(*c));
    char key[WARREN_RUN_KEY_MAX];

    if (c == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    warren__exec_init(&c->ex); /* none: out_fd -1 */
    c->kind = s->kind;
    snprintf(key, sizeof(key), "%s", s->run_key);
    c->run_key = strdup(key);
    c->job = strdup(s->claim.job);
    c->payload = strdup(s->claim.payload_json ? s->claim.payload_json : "{}");
    c->scheduled_at = s->claim.scheduled_at;
    c->attempt = s->claim.attempt;
    c->timeout_ms = s->job->timeout_ms;
    c->se = w->se;
    c->kind = s->kind;
    atomic_init(&c->stop, 0);
    atomic_init(&c->done, 0);
    atomic_init(&c->lost, 0);
    if (s->kind == KIND_SQL) {
        /* A name no other session has: the loop cancels the statement by it
         * (warren_store_cancel_tagged) if another worker takes the run. */
        uint64_t r = 0;
        if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
            r = (uint64_t)warren__mono_ms() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() ^
                (uint64_t)(uintptr_t)c;
        snprintf(c->sql_tag, sizeof(c->sql_tag), "warren sql %016llx", (unsigned long long)r);
        c->sql = strdup(s->job->sql);
        c->sql_hash = warren__sql_hash(s->job->sql);
        c->db_url = strdup(w->db_url ? w->db_url : "");
        c->take = s->take;
        if (s->take &&
            ((c->worker = strdup(w->id)) == NULL || (c->handler = strdup(s->job->name)) == NULL)) {
            warren__ctx_free(c);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
    } else {
        const handler_reg *r = warren__worker_find_reg(w, s->job->c_handler);
        c->fn = r->fn;
        c->ud = r->ud;
    }
    if (c->run_key == NULL || c->job == NULL || c->payload == NULL ||
        (s->kind == KIND_SQL && (c->sql == NULL || c->db_url == NULL))) {
        warren__ctx_free(c);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    return submit_for(w, s, c, err);
}

int warren__start_spawn(warren_worker *w, slot *s, warren_us due_at, warren_error *err)
{
    warren_handler_ctx *c = calloc(1, sizeof(*c));
    int ok = 1;

    if (c == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    warren__exec_init(&c->ex);
    c->run_key = strdup(s->run_key);
    c->job = strdup(s->claim.job);
    c->payload = s->claim.payload_json ? strdup(s->claim.payload_json) : NULL;
    c->scheduled_at = s->claim.scheduled_at;
    c->attempt = s->claim.attempt;
    c->due_at = due_at;
    c->se = w->se;
    c->kind = KIND_EXEC;
    c->shell = s->job->exec_shell;
    c->argv = strv_dup(s->job->exec_argv, &ok);
    c->pass_env = strv_dup(w->cfg->worker.exec_env, &ok);
    atomic_init(&c->stop, 0);
    atomic_init(&c->done, 0);
    atomic_init(&c->lost, 0);
    if (!ok || c->run_key == NULL || c->job == NULL || c->argv == NULL ||
        (s->claim.payload_json != NULL && c->payload == NULL)) {
        warren__ctx_free(c);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory starting a handler");
    }
    return submit_for(w, s, c, err);
}

/* ------------------------------------------------------------ handler kinds */

static void cancel_lost_sql(warren_worker *w, slot *s, int64_t now);
static void exec_not_started(warren_worker *w, slot *s);

/* exec: SIGTERM to its process group (a start still with a pool thread is
 * not made, or killed once made); SIGKILL, or given up, after the grace. */
static void stop_exec(warren_worker *w, slot *s, int64_t now)
{
    if (s->ex.pid > 0)
        warren__exec_kill(&s->ex, SIGTERM);
    else if (s->ctx != NULL)
        atomic_store_explicit(&s->ctx->stop, 1, memory_order_release);
    else
        return;
    s->kill_at = now + warren__kill_grace(w); /* then killed, or given up: poll_exec */
}

/* c: should_stop; after a timeout's grace the thread is left behind (poll_c). */
static void stop_c(warren_worker *w, slot *s, int64_t now)
{
    if (s->ctx == NULL)
        return;
    atomic_store_explicit(&s->ctx->stop, 1, memory_order_release);
    if (s->stop_reason == STOP_TIMEOUT)
        s->kill_at = now + warren__kill_grace(w);
}

/* sql: its timeout is the statement_timeout; a lost lease marks the
 * transaction lost (warren__sql_lost) and cancels the statement
 * (cancel_lost_sql). */
static void stop_sql(warren_worker *w, slot *s, int64_t now)
{
    (void)w;
    (void)now;
    if (s->ctx != NULL)
        atomic_store_explicit(&s->ctx->stop, 1, memory_order_release);
}

/* exec: takes the started process from its pool thread, reads its output,
 * kills it after a stop's grace, and once it exited maps its exit to the
 * outcome. */
static void poll_exec(warren_worker *w, slot *s, int64_t now)
{
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
                !atomic_compare_exchange_strong_explicit(&c->done, &expect, 2, memory_order_acq_rel,
                                                         memory_order_acquire))
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
            warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: %s: %s", w->id, s->run_key, c->error);
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
            s->kill_at = now + warren__kill_grace(w);
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
}

/* c: the handler's verdict once its thread is done; a handler that ignores
 * should_stop after its timeout is left behind. */
static void poll_c(warren_worker *w, slot *s, int64_t now)
{
    if (s->stop_reason == STOP_TIMEOUT && s->kill_at != 0 && now >= s->kill_at && s->ctx != NULL &&
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
                              (long long)s->job->timeout_ms, (long long)warren__kill_grace(w));
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

/* sql: done once its thread committed or rolled back; the context is
 * consumed by finish_sql (worker_settle.c). */
static void poll_sql(warren_worker *w, slot *s, int64_t now)
{
    cancel_lost_sql(w, s, now);
    if (s->ctx == NULL || !atomic_load_explicit(&s->ctx->done, memory_order_acquire))
        return;
    s->has_thread = 0;
    s->state = SLOT_DONE;
}

static int start_exec(warren_worker *w, slot *s, warren_us due_at, warren_error *err)
{
    return warren__start_spawn(w, s, due_at, err); /* started by a pool thread */
}

static int start_on_thread(warren_worker *w, slot *s, warren_us due_at, warren_error *err)
{
    (void)due_at;
    return warren__start_thread(w, s, err);
}

/* The handler kinds behind one interface (docs/design.md §6.3): start a
 * claimed run in its slot, stop it (its stop_reason set), and poll it:
 * collect what finished into the slot (state DONE, outcome, error). */
typedef struct kind_ops {
    int (*start)(warren_worker *w, slot *s, warren_us due_at, warren_error *err);
    void (*stop)(warren_worker *w, slot *s, int64_t now);
    void (*poll)(warren_worker *w, slot *s, int64_t now);
} kind_ops;

static const kind_ops kinds[] = {
    [KIND_EXEC] = {start_exec, stop_exec, poll_exec},
    [KIND_SQL] = {start_on_thread, stop_sql, poll_sql},
    [KIND_C] = {start_on_thread, stop_c, poll_c},
};

/* Starts a claimed run in slot s. On failure the run is completed as retry. */
void warren__slot_start(warren_worker *w, slot *s, pend *p, warren_claim *cl, int64_t claimed_mono)
{
    warren_error e = {0};
    char why[WARREN_ERROR_MSG_MAX];
    int rc;
    /* The handler the database's answer names, never the message's. */
    const warren_job *hj = warren__claimed_job(w, p, cl, why, sizeof(why));

    assert(s != NULL && s->state == SLOT_FREE && cl->claimed);

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
    } else {
        s->kind = s->job->handler == WARREN_HANDLER_EXEC  ? KIND_EXEC
                  : s->job->handler == WARREN_HANDLER_SQL ? KIND_SQL
                                                          : KIND_C;
        rc = kinds[s->kind].start(w, s, p->msg.due_at, &e);
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

    assert(s != NULL && s->state == SLOT_FREE);
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
     * (warren__slot_poll, hb_due skip it); the statement_timeout bounds it. */
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

void warren__slot_stop(warren_worker *w, slot *s, enum stop_reason reason, int64_t now)
{
    assert(reason == STOP_LOST || reason == STOP_TIMEOUT || reason == STOP_SHUTDOWN);
    if (s->stop_reason != STOP_NONE || s->state != SLOT_RUNNING)
        return;
    if (reason == STOP_LOST)
        warren__sql_lost(s);
    s->stop_reason = reason;
    if (reason == STOP_LOST)
        w->stats.lease_lost++;
    else if (reason == STOP_TIMEOUT)
        w->stats.timeouts++;
    kinds[s->kind].stop(w, s, now);
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
void warren__slot_poll(warren_worker *w, slot *s, int64_t now)
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
    kinds[s->kind].poll(w, s, now);
}

void warren__slots_relaunch_sql(warren_worker *w, int64_t now)
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

static int64_t earlier(int64_t a, int64_t b)
{
    return b < a ? b : a;
}

int64_t warren__slot_deadline(const slot *s, int64_t *store_at)
{
    int64_t d = INT64_MAX;
    *store_at = INT64_MAX;
    if (s->state == SLOT_FREE)
        return d;
    if (s->state == SLOT_DONE) {
        /* a lost lease is only acknowledged, a finished sql thread collected:
         * neither needs the store; a completion does */
        if (s->stop_reason == STOP_LOST || (s->kind == KIND_SQL && s->ctx != NULL))
            return 0;
        *store_at = s->complete_after; /* 0: at once */
        return d;
    }
    assert(s->state == SLOT_RUNNING);
    if (s->complete_sql_retry)
        d = s->stop_reason == STOP_LOST ? 0 : s->retry_at; /* warren__slots_relaunch_sql */
    if (!s->take && s->stop_reason != STOP_LOST) {
        if (!warren__sql_finished(s))
            *store_at = s->next_hb;
        d = earlier(d, s->last_hb_ok + s->lease_ms - s->hb_margin_ms);
    }
    if (s->kind != KIND_SQL && s->stop_reason == STOP_NONE)
        d = earlier(d, s->timeout_at);
    if (s->kill_at != 0)
        d = earlier(d, s->kill_at);
    if (s->kind == KIND_SQL && s->stop_reason == STOP_LOST && s->ctx != NULL &&
        !warren__sql_finished(s))
        *store_at = earlier(*store_at, s->next_cancel);
    if (s->kind == KIND_EXEC && s->ctx == NULL && s->ex.pid > 0 && s->ex.pidfd < 0)
        d = earlier(d, warren__mono_ms() + WARREN__EXEC_POLL_MS); /* no pidfd: look again */
    return d;
}
