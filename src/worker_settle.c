/* worker_settle.c: how the C worker settles its runs (docs/design.md §6.2):
 * heartbeats in batches while handlers run, completions in batches when they
 * finish (warren.complete_many; sql handlers complete in their own
 * transaction), acknowledgements only after the completion committed, dead
 * letters for messages that are not runs it can handle, and giving back what
 * a stopping worker will not start. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/backoff.h>
#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/store.h>

#include "store_work.h"
#include "internal.h"
#include "worker_int.h"

#define DEADLETTER_CONFIRM_MS 5000
#define DEADLETTER_OWN_HEADERS 4      /* error, dead-lettered-by, source queue, headers-dropped */
#define DEADLETTER_HEADER_BYTES 65536 /* of the original's headers kept (frames are 128 KiB) */
#define ACK_HOLD_SLOTS 256            /* worker.ack_hold unset: no hold up to this many slots */
#define ACK_HOLD_LARGE_MS 50          /* ... and this hold above */

/* ------------------------------------------------------------ acks, dead letters */

void warren__ack(warren_worker *w, uint64_t tag, uint64_t gen, const char *key)
{
    warren_error e = {0};
    int rc;
    if (w->b == NULL || gen != w->gen)
        return; /* the connection it came on is gone: the broker redelivers, the claim dedupes */
    rc = warren_broker_ack_later(w->b, tag, &e); /* sent by warren__ack_flush */
    if (rc == WARREN_EBROKERCONN)
        warren__worker_broker_lost(w, &e);
    else if (rc != 0)
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: ack of %s: %s", w->id, key ? key : "?",
                   e.message);
}

/* Sends the acknowledgements warren__ack() collected (multiple-acks where the
 * settled deliveries are consecutive). Those behind a delivery still open
 * wait up to worker.ack_hold (default 0: not at all) for it unless all is
 * set (the end of the run): a held acknowledgement keeps its prefetch slot
 * from the next delivery. */
void warren__ack_flush(warren_worker *w, int all)
{
    warren_error e = {0};
    /* Unset (0) on a worker of more than ACK_HOLD_SLOTS slots: 50 ms. Its
     * turns settle thousands of runs out of order, and sent one by one
     * those acknowledgements kept the loop (and the broker) so busy that
     * runs lost their leases (a 50,000-run burst, 2 x 4,096 slots, load 16:
     * all done after 317 s instead of 88 s). */
    int64_t hold = w->cfg->worker.ack_hold_ms;
    if (hold == 0 && w->concurrency > ACK_HOLD_SLOTS)
        hold = ACK_HOLD_LARGE_MS;
    if (w->b != NULL &&
        warren_broker_ack_flush_held(w->b, all ? 0 : hold, &e) == WARREN_EBROKERCONN)
        warren__worker_broker_lost(w, &e);
}

typedef struct confirm_state {
    int status;
    int seen;
} confirm_state;

static void on_confirm(void *ud, uint64_t seq, warren_publish_status status)
{
    confirm_state *cs = ud;
    (void)seq;
    cs->status = (int)status;
    cs->seen = 1;
}

/* A message that is not a run this worker can handle: publish a copy with the
 * reason in x-warren-error to warren.dead (confirmed), then ack; if that
 * fails, reject without requeue (the ready queue dead-letters it there too). */
void warren__dead_letter(warren_worker *w, warren_delivery *d, const char *reason)
{
    /* The copy adds DEADLETTER_OWN_HEADERS to the original's: those are kept
     * only while they leave room for ours within the broker's header count
     * and DEADLETTER_HEADER_BYTES (a content header must fit in one frame),
     * so the reason always goes out; what is dropped is counted in
     * x-warren-headers-dropped. */
    warren_header hdrs[WARREN_BROKER_MAX_HEADERS];
    char ndropped[24];
    size_t nh = 0, bytes = 0, dropped = 0;
    warren_error e = {0};
    uint64_t seq = 0;
    confirm_state cs = {0, 0};
    int rc;

    w->stats.dead_lettered++;
    warren_log(w->lg, WARREN_LOG_WARN, "worker %s: dead-lettering message %s from %s: %s", w->id,
               d->message_id ? d->message_id : "(no id)", d->queue ? d->queue : "?", reason);
    for (size_t i = 0; i < d->nheaders; i++) {
        size_t len = strlen(d->headers[i].key) + strlen(d->headers[i].value);
        if (strcmp(d->headers[i].key, "x-warren-error") == 0 ||
            strcmp(d->headers[i].key, "x-warren-headers-dropped") == 0 ||
            strncmp(d->headers[i].key, "x-death", 7) == 0 ||
            strncmp(d->headers[i].key, "x-first-death", 13) == 0 ||
            strncmp(d->headers[i].key, "x-last-death", 12) == 0 ||
            strcmp(d->headers[i].key, "x-delivery-count") == 0)
            continue;
        if (nh + DEADLETTER_OWN_HEADERS >= WARREN_BROKER_MAX_HEADERS ||
            bytes + len > DEADLETTER_HEADER_BYTES) {
            dropped++;
            continue;
        }
        bytes += len;
        hdrs[nh++] = d->headers[i];
    }
    hdrs[nh++] = (warren_header){"x-warren-error", reason};
    if (dropped > 0) {
        snprintf(ndropped, sizeof(ndropped), "%zu", dropped);
        hdrs[nh++] = (warren_header){"x-warren-headers-dropped", ndropped};
    }
    hdrs[nh++] = (warren_header){"x-warren-dead-lettered-by", w->id};
    if (d->queue != NULL)
        hdrs[nh++] = (warren_header){"x-warren-source-queue", d->queue};
    warren_message m = {
        .exchange = WARREN_DEAD_EXCHANGE,
        .routing_key = d->routing_key ? d->routing_key : "",
        .message_id = d->message_id,
        .type = d->type,
        .timestamp = d->timestamp,
        .expiration_ms = -1,
        .headers = hdrs,
        .nheaders = nh,
        .body = d->body ? d->body : "",
        .body_len = d->body ? d->body_len : 0,
        .mandatory = 1,
    };
    rc = warren_broker_publish(w->b, &m, &seq, &e);
    if (rc == 0)
        rc = warren_broker_confirm_wait(w->b, seq, DEADLETTER_CONFIRM_MS, on_confirm, &cs, &e);
    if (rc == WARREN_EBROKERCONN) {
        warren__worker_broker_lost(w, &e);
        return; /* redelivered later, judged again */
    }
    if (rc == 0 && cs.seen && cs.status == WARREN_BROKER_ACKED) {
        warren__ack(w, d->tag, w->gen, d->message_id);
        return;
    }
    warren_log(w->lg, WARREN_LOG_WARN,
               "worker %s: could not publish the dead letter (%s); rejecting the message so "
               "its queue dead-letters it",
               w->id, rc != 0 ? e.message : "not confirmed");
    memset(&e, 0, sizeof(e));
    rc = warren_broker_reject(w->b, d->tag, 0, &e);
    if (rc == WARREN_EBROKERCONN)
        warren__worker_broker_lost(w, &e);
}

/* A stopping worker gives a delivery it will not start back to its queue at
 * once (basic.reject with requeue), so another worker takes it now rather
 * than when this one's connection closes. */
void warren__give_back(warren_worker *w, pend *p)
{
    warren_error e = {0};
    int rc;
    if (w->b == NULL || p->gen != w->gen)
        return; /* that connection is gone: the broker has requeued it */
    rc = warren_broker_reject(w->b, p->d.tag, 1, &e);
    if (rc == WARREN_EBROKERCONN)
        warren__worker_broker_lost(w, &e);
    else if (rc == WARREN_ESTALE)
        return; /* its channel was reopened: the broker requeued it then */
    else if (rc != 0)
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: giving back %s: %s", w->id,
                   p->d.message_id ? p->d.message_id : "?", e.message);
    else
        w->stats.given_back++;
}

/* Stops consuming (a stopping worker): cancels the consumers, then gives
 * back what was received and not started. */
void warren__stop_consuming(warren_worker *w)
{
    warren_error e = {0};
    if (w->b != NULL && warren_broker_cancel_consumers(w->b, &e) != 0) {
        if (e.code == WARREN_EBROKERCONN || !warren_broker_connected(w->b))
            warren__worker_broker_lost(w, &e);
        else
            warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s", w->id, e.message);
    }
    /* warren__give_back may lose the connection: warren__worker_broker_lost then empties the queue
     */
    for (size_t i = 0; i < w->pq_len; i++)
        warren__give_back(w, warren__pq_at(w, i));
    warren__pq_clear(w);
}

/* ------------------------------------------------------------ completion */

static const char *outcome_name(warren_outcome o)
{
    return o == WARREN_OUTCOME_SUCCEEDED ? "succeeded"
           : o == WARREN_OUTCOME_FAILED  ? "failed"
                                         : "retry";
}

static void report(warren_worker *w, slot *s)
{
    warren_run_times t;
    warren_error e = {0};
    if (w->report_fn == NULL)
        return;
    if (warren_store_run_times(w->st, s->run_key, &t, &e) != 0)
        memset(&t, 0, sizeof(t));
    warren_run_report r = {
        .run_key = s->run_key,
        .job = s->claim.job,
        .attempt = s->claim.attempt,
        .outcome = outcome_name(s->outcome),
        .state = t.state[0] ? t.state : "?",
        .error = s->error,
        .scheduled_at = s->claim.scheduled_at,
        /* The due time the message was released for: after a retry the
         * row already holds the next attempt's due time. */
        .due_at = s->msg_due_at != 0 ? s->msg_due_at : t.due_at,
        .published_at = t.published_at,
        /* Arrival on the database's clock: the claim's time minus the
         * monotonic time between receiving the delivery and sending the
         * claim (a run released early arrived before its due time). */
        .released_at = t.started_at != 0 && s->received_mono != 0
                           ? t.started_at - (s->started_mono - s->received_mono) * 1000
                           : 0,
        .started_at = t.started_at,
        .finished_at = t.finished_at,
    };
    w->report_fn(w->report_ud, &r);
}

static void count_outcome(warren_worker *w, warren_outcome o)
{
    if (o == WARREN_OUTCOME_SUCCEEDED)
        w->stats.succeeded++;
    else if (o == WARREN_OUTCOME_FAILED)
        w->stats.failed++;
    else
        w->stats.retried++;
}

/* After a completion committed (recorded or stale): ack and free the slot. */
static void slot_finish(warren_worker *w, slot *s, int recorded)
{
    if (recorded) {
        count_outcome(w, s->outcome);
        if (s->outcome == WARREN_OUTCOME_SUCCEEDED)
            warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: %s attempt %d succeeded", w->id,
                       s->run_key, s->claim.attempt);
        else
            warren_log(w->lg, WARREN_LOG_INFO, "worker %s: %s attempt %d: %s: %s", w->id,
                       s->run_key, s->claim.attempt, outcome_name(s->outcome),
                       s->error ? s->error : "");
    } else {
        w->stats.stale++;
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: %s attempt %d: completion rejected (a newer attempt holds the "
                   "run); acknowledging",
                   w->id, s->run_key, s->claim.attempt);
    }
    warren__ack(w, s->tag, s->gen, s->run_key);
    if (recorded)
        report(w, s);
    warren__slot_release(w, s);
}

/* A taken sql run's pool thread is done (slot.take): recorded (ack), its
 * statement failed and it was claimed (completed as retry with the error,
 * as a claimed run's), or back to the FIFO, to be claimed as usual. */
static void finish_take(warren_worker *w, slot *s)
{
    warren_handler_ctx *c = s->ctx;
    s->ctx = NULL;
    s->take = 0;
    if (c->take_fate == WARREN_TAKE_RECORDED || c->take_fate == WARREN_TAKE_FAILED) {
        warren_claim_clear(&s->claim);
        s->claim = c->take_claim; /* takes payload_json */
        memset(&c->take_claim, 0, sizeof(c->take_claim));
        warren__pend_free(s->back);
        s->back = NULL;
        w->stats.started++;
        if (c->take_fate == WARREN_TAKE_RECORDED) {
            w->stats.taken++;
            warren__ctx_free(c);
            s->outcome = WARREN_OUTCOME_SUCCEEDED;
            slot_finish(w, s, 1);
            return;
        }
        s->outcome = WARREN_OUTCOME_RETRY; /* stays SLOT_DONE: completed through the batch path */
        s->error = c->sql_stmt_error;
        c->sql_stmt_error = NULL;
        warren__ctx_free(c);
        return;
    }
    pend *p = s->back;
    s->back = NULL;
    if (c->error[0]) /* once per batch: the take's error (a lost connection, a refusal) */
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: taking %s and the runs of its batch: %s; nothing of it committed "
                   "(or all of it, if only the COMMIT's answer was lost): claiming them instead",
                   w->id, s->run_key, c->error);
    if (p != NULL && (w->b == NULL || p->gen != w->gen || w->stopping)) {
        /* its broker connection is gone (the broker redelivers it), or the
         * worker is stopping: back to its queue for another worker */
        warren__give_back(w, p);
        warren__pend_free(p);
        p = NULL;
    }
    if (p != NULL) {
        p->no_take = 1;
        p->picked = 0;
        if (c->take_back_unknown && !p->answer_lost) {
            p->answer_lost = 1;
            p->answer_lost_mono = s->started_mono;
        }
        if (warren__pq_put_back(w, p) != 0)
            warren_log(w->lg, WARREN_LOG_ERROR,
                       "worker %s: out of memory putting %s back; it is redelivered when the "
                       "broker connection ends",
                       w->id, s->run_key);
        free(p);
    }
    warren__ctx_free(c);
    warren__slot_release(w, s);
}

/* sql handler finished its transaction. */
static void finish_sql(warren_worker *w, slot *s, int64_t now)
{
    warren_handler_ctx *c = s->ctx;
    if (s->take) {
        finish_take(w, s);
        return;
    }
    if (s->stop_reason == STOP_LOST && !c->sql_recorded) {
        /* rolled back (or never committed): warren__complete_done acks it, no completion */
        warren__ctx_free(c);
        s->ctx = NULL;
        return;
    }
    if (c->sql_rc != 0) {
        /* Connection trouble: nothing committed (or, if the commit's answer
         * was lost, the next try finds the run finished and is told stale). */
        warren_error e = {0};
        warren_error_set(&e, c->sql_rc, "%s", c->error);
        w->stats.db_errors++;
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: sql handler of %s: %s; retrying", w->id,
                   s->run_key, c->error);
        warren__ctx_free(c);
        s->ctx = NULL;
        s->state = SLOT_RUNNING;
        s->complete_sql_retry = 1;
        s->sql_backoff = warren_backoff_next(s->sql_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
        s->retry_at = now + s->sql_backoff;
        return;
    }
    if (c->sql_stmt_error != NULL) {
        s->outcome = WARREN_OUTCOME_RETRY;
        s->error = c->sql_stmt_error;
        c->sql_stmt_error = NULL;
        warren__ctx_free(c);
        s->ctx = NULL;
        return; /* stays SLOT_DONE: completed as retry through the batch path */
    }
    s->outcome = WARREN_OUTCOME_SUCCEEDED;
    int recorded = c->sql_recorded;
    warren__ctx_free(c);
    s->ctx = NULL;
    slot_finish(w, s, recorded);
}

static int cmp_slot_key(const void *a, const void *b)
{
    const slot *const *x = a, *const *y = b;
    return strcmp((*x)->run_key, (*y)->run_key);
}

/* Completes every finished slot in one batch; lost-lease slots are only acked. */
void warren__complete_done(warren_worker *w, int64_t now)
{
    size_t n = 0;
    int cap = w->concurrency;
    warren_completion *c = NULL;
    int *rec = NULL;
    slot **which = NULL;
    warren_error e = {0};
    int rc;

    for (int i = 0; i < cap; i++) {
        slot *s = &w->slots[i];
        if (s->state == SLOT_DONE && s->kind == KIND_SQL && s->ctx != NULL)
            finish_sql(w, s, now);
        if (s->state == SLOT_DONE && s->stop_reason == STOP_LOST) {
            /* Not ours any more: no completion. The run is safe in the
             * database (the new holder or the reaper moves it on). */
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: %s attempt %d: handler stopped after the lease was lost; not "
                       "completing",
                       w->id, s->run_key, s->claim.attempt);
            warren__ack(w, s->tag, s->gen, s->run_key);
            warren__slot_release(w, s);
        }
        if (s->state == SLOT_DONE && now >= s->complete_after)
            n++;
    }
    if (n == 0 || !warren__worker_store_ready(w))
        return;
    c = calloc(n, sizeof(*c));
    rec = calloc(n, sizeof(*rec));
    which = calloc(n, sizeof(*which));
    if (c == NULL || rec == NULL || which == NULL)
        goto out;
    n = 0;
    for (int i = 0; i < cap; i++)
        if (w->slots[i].state == SLOT_DONE && now >= w->slots[i].complete_after)
            which[n++] = &w->slots[i];
    /* Key order, as claims: no deadlock with another batch over the same rows. */
    qsort(which, n, sizeof(*which), cmp_slot_key);
    int alone = w->complete_alone;
    if (alone) {
        /* one by one (separate transactions, any order): those whose own
         * completion timed out last, so a locked row does not starve the rest */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (which[i]->complete_after == 0) {
                slot *t = which[i];
                memmove(&which[k + 1], &which[k], (i - k) * sizeof(*which));
                which[k++] = t;
            }
    }
    for (size_t i = 0; i < n; i++) {
        slot *s = which[i];
        if (s->error != NULL)
            warren__utf8_clean(s->error); /* output cut anywhere, or not text at all */
        c[i].run_key = s->run_key;
        c[i].attempt = s->claim.attempt;
        c[i].outcome = outcome_name(s->outcome);
        c[i].error = s->error;
    }
    rc = alone ? WARREN_EDB : warren_store_complete_batch(w->st, c, n, rec, &e);
    if (rc != 0 && !alone && warren_store_timed_out(w->st)) {
        warren__worker_store_failed(w, rc, &e, "complete");
        w->complete_alone = 1;
        goto out; /* nothing acked: one by one from the next turn */
    }
    if (rc != 0 && rc != WARREN_EDBCONN) {
        w->complete_alone = 0;
        /* One bad completion must not hold up the others: one by one. A
         * completion PostgreSQL refuses for its error text is recorded with
         * a note instead, or the slot would be retried forever. A batch that
         * timed out (a row locked) goes one by one from the next turn on
         * (complete_alone), not now: one timed-out call per turn. */
        for (size_t i = 0; i < n; i++) {
            warren_error e1 = {0};
            int r1 = warren_store_complete_batch(w->st, &c[i], 1, &rec[i], &e1);
            if (r1 != 0 && warren_store_timed_out(w->st)) {
                /* its row is locked: again in 500 ms, as it is, after the
                 * others; the rest next turn (one timed-out call per turn:
                 * the loop has heartbeats to send) */
                warren__worker_store_failed(w, r1, &e1, "complete");
                w->complete_alone = 1;
                which[i]->complete_after = now + BACKOFF_MIN_MS * 5;
                for (size_t j = i; j < n; j++)
                    which[j] = NULL;
                break;
            }
            if (r1 != 0 && r1 != WARREN_EDBCONN && c[i].error != NULL) {
                char *note = warren__fmt_error("(the handler's error could not be recorded: %s)",
                                               e1.message);
                if (note != NULL) {
                    warren__utf8_clean(note);
                    free(which[i]->error);
                    which[i]->error = note;
                    c[i].error = note;
                    r1 = warren_store_complete_batch(w->st, &c[i], 1, &rec[i], &e1);
                }
            }
            if (r1 != 0) {
                warren__worker_store_failed(w, r1, &e1, "complete");
                if (r1 == WARREN_EDBCONN) {
                    /* not tried: nothing of these may be acknowledged */
                    for (size_t j = i; j < n; j++)
                        which[j] = NULL;
                    break;
                }
                which[i] = NULL;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (which[i] != NULL && which[i]->state == SLOT_DONE)
                slot_finish(w, which[i], rec[i]);
        goto out;
    }
    if (rc != 0) {
        warren__worker_store_failed(w, rc, &e, "complete");
        goto out; /* nothing acked: retried with backoff */
    }
    warren__worker_store_ok(w);
    for (size_t i = 0; i < n; i++)
        slot_finish(w, which[i], rec[i]);
out:
    free(c);
    free(rec);
    free(which);
}

/* ------------------------------------------------------------ heartbeats */

static int hb_due(const slot *s, int64_t now)
{
    return s->state == SLOT_RUNNING && !s->take && s->stop_reason != STOP_LOST &&
           now >= s->next_hb && !warren__sql_finished(s);
}

/* The result of a heartbeat for s (sent at sent): the lease goes on, or it
 * was lost and the handler is stopped. */
static void heartbeat_result(warren_worker *w, slot *s, int held, int64_t sent, int64_t now)
{
    if (held) {
        s->last_hb_ok = sent;
        s->next_hb = sent + s->hb_every_ms;
        s->hb_alone = 0;
        return;
    }
    warren_log(w->lg, WARREN_LOG_WARN,
               "worker %s: %s attempt %d: heartbeat refused (the lease was lost): stopping the "
               "handler, not completing",
               w->id, s->run_key, s->claim.attempt);
    if (s->stop_reason != STOP_NONE) {
        s->stop_reason = STOP_LOST;
        warren__sql_lost(s);
    } else {
        warren__slot_stop(w, s, STOP_LOST, now);
    }
}

/* Heartbeats which[0..n) (slots whose heartbeat timed out in a batch: one of
 * them is locked, by an operator's transaction or the relay's FOR UPDATE)
 * one statement each, so that one locked run does not take the others' leases
 * with it: those whose own heartbeat timed out before go last, and the pass
 * stops at the second timeout (a turn spends at most two timed-out calls,
 * 2 x w->db_timeout_ms = half the shortest margin). Those not tried are due
 * still and go next turn; one that timed out waits BACKOFF_MIN_MS * 5. */
static void heartbeat_alone(warren_worker *w, slot **which, size_t n, int64_t now)
{
    int timeouts = 0, failed = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            slot *s = which[i];
            warren_error e = {0};
            int held = 0, rc;
            if (s->hb_alone != pass + 1 || !hb_due(s, now))
                continue;
            int64_t sent = warren__mono_ms();
            rc = warren_store_heartbeat(w->st, s->run_key, s->claim.attempt, &held, &e);
            if (rc == 0) {
                heartbeat_result(w, s, held, sent, now);
                continue;
            }
            failed = 1;
            s->next_hb = now + BACKOFF_MIN_MS * 5; /* try again soon; the deadline rules */
            warren__worker_store_failed(w, rc, &e, "heartbeat");
            if (!warren_store_timed_out(w->st) || ++timeouts == 2)
                return;
            s->hb_alone = 2; /* timed out on its own: it is the locked one */
        }
    if (!failed)
        warren__worker_store_ok(w);
}

/* Heartbeats, in one batch, the running slots whose heartbeat is due; those
 * whose heartbeat timed out in a batch before go on their own. */
void warren__heartbeat_due(warren_worker *w, int64_t now)
{
    size_t n = 0, nb = 0, na = 0;
    const char **keys = NULL;
    int *att = NULL, *held = NULL;
    slot **which = NULL, **alone = NULL;
    warren_error e = {0};
    int rc;

    for (int i = 0; i < w->concurrency; i++)
        n += hb_due(&w->slots[i], now);
    if (n == 0 || !warren__worker_store_ready(w))
        return;
    keys = calloc(n, sizeof(*keys));
    att = calloc(n, sizeof(*att));
    held = calloc(n, sizeof(*held));
    which = calloc(n, sizeof(*which));
    alone = calloc(n, sizeof(*alone));
    if (keys == NULL || att == NULL || held == NULL || which == NULL || alone == NULL)
        goto out;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (!hb_due(s, now))
            continue;
        if (s->hb_alone)
            alone[na++] = s;
        else
            which[nb++] = s;
    }
    qsort(which, nb, sizeof(*which), cmp_slot_key); /* key order, as claims */
    for (size_t i = 0; i < nb; i++) {
        keys[i] = which[i]->run_key;
        att[i] = which[i]->claim.attempt;
    }
    int64_t sent = warren__mono_ms();
    rc = nb > 0 ? warren_store_heartbeat_batch(w->st, keys, att, nb, held, &e) : 0;
    if (rc != 0) {
        int timed_out = warren_store_timed_out(w->st);
        warren__worker_store_failed(w, rc, &e, "heartbeat");
        for (size_t i = 0; i < nb; i++) {
            if (timed_out)
                which[i]->hb_alone = 1; /* a lock on one of them: alone, from the next turn */
            else
                which[i]->next_hb = now + BACKOFF_MIN_MS * 5; /* soon; the deadline rules */
        }
        goto out;
    }
    if (nb > 0)
        warren__worker_store_ok(w);
    for (size_t i = 0; i < nb; i++)
        heartbeat_result(w, which[i], held[i], sent, now);
    if (na > 0)
        heartbeat_alone(w, alone, na, now);
out:
    free(keys);
    free(att);
    free(held);
    free(which);
    free(alone);
}
