/* worker_conn.c: the C worker's connections (docs/design.md §6.2): the
 * broker connection (consume, reconnect with backoff, the acknowledgement
 * queue, dead letters, giving deliveries back) and the loop's PostgreSQL
 * connection's backoff. Uses only the pending FIFO below it (a lost broker
 * connection empties it: the broker redelivers). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/backoff.h>
#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/store.h>

#include "internal.h"
#include "worker_int.h"

#define DEADLETTER_CONFIRM_MS 5000
#define DEADLETTER_OWN_HEADERS 4      /* error, dead-lettered-by, source queue, headers-dropped */
#define DEADLETTER_HEADER_BYTES 65536 /* of the original's headers kept (frames are 128 KiB) */
#define ACK_HOLD_SLOTS 256            /* worker.ack_hold unset: no hold up to this many slots */
#define ACK_HOLD_LARGE_MS 50          /* ... and this hold above */

int warren__broker_setup(warren_worker *w, warren_error *err)
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
    warren__pq_clear(&w->q); /* their tags died with the connection; the broker redelivers them */
    w->broker_backoff = warren_backoff_next(w->broker_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    w->broker_retry_at = warren__mono_ms() + w->broker_backoff;
}

void warren__broker_try_reconnect(warren_worker *w)
{
    warren_error e = {0};
    if (w->b != NULL || warren__mono_ms() < w->broker_retry_at)
        return;
    if (warren__broker_setup(w, &e) != 0) {
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
    int64_t hold = warren__ack_hold_ms(w);
    if (w->b != NULL &&
        warren_broker_ack_flush_held(w->b, all ? 0 : hold, &e) == WARREN_EBROKERCONN)
        warren__worker_broker_lost(w, &e);
}

int64_t warren__ack_hold_ms(const warren_worker *w)
{
    /* Unset (0) on a worker of more than ACK_HOLD_SLOTS slots: 50 ms. Its
     * turns settle thousands of runs out of order, and sent one by one
     * those acknowledgements kept the loop (and the broker) so busy that
     * runs lost their leases (a 50,000-run burst, 2 x 4,096 slots, load 16:
     * all done after 317 s instead of 88 s). */
    int64_t hold = w->cfg->worker.ack_hold_ms;
    if (hold == 0 && w->concurrency > ACK_HOLD_SLOTS)
        hold = ACK_HOLD_LARGE_MS;
    return hold;
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
    for (size_t i = 0; i < w->q.len; i++)
        warren__give_back(w, warren__pq_at(&w->q, i));
    warren__pq_clear(&w->q);
}
