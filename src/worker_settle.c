/* worker_settle.c: the C worker's settle phase (docs/design.md §6.2):
 * heartbeats in batches while handlers run, completions in batches when they
 * finish (warren.complete_many; sql handlers complete in their own
 * transaction), and acknowledgements only after the completion committed.
 * Slots -> heartbeat / complete -> ack: it meets the intake and claim phases
 * only in the slot table and the FIFO. */
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
        if (warren__pq_put_back(&w->q, p) != 0)
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
