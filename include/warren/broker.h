/* broker.h: warren's RabbitMQ access (all of rabbitmq-c lives in src/broker*.c):
 * connecting, the topology, publishing with pipelined publisher confirms and
 * mandatory returns, per-second delay queues, consuming and acknowledging. */
#ifndef WARREN_BROKER_H
#define WARREN_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include <warren/error.h>
#include <warren/log.h>
#include <warren/timefmt.h>

/* Fixed names (docs/design.md §4.1). */
/* warren.ready is a HEADERS exchange: each ready queue is bound with
 * {x-match: all-with-x, x-warren-queue: <job queue>}. Every run message
 * carries the header x-warren-queue, so it routes the same whether published
 * straight to warren.ready or dead-lettered there from a delay queue (whose
 * routing key is the delay queue's name). all-with-x (RabbitMQ >= 3.10), not
 * all: plain all/any ignore every binding argument starting with "x-", so
 * such a binding would match every message (measured: each ready queue got
 * every run). */
#define WARREN_READY_EXCHANGE "warren.ready"
#define WARREN_QUEUE_HEADER "x-warren-queue"
#define WARREN_READY_PREFIX "warren.ready."           /* + job queue: quorum ready queue */
#define WARREN_DELAY_PREFIX "warren.delay."           /* + epoch second: classic delay queue */
#define WARREN_DELAY_RING_PREFIX "warren.delay.ring." /* + slot: optional ring */
/* delay ring types (planner.delay_ring_type; the same definitions as in config.h) */
#define WARREN_DELAY_RING_QUORUM 0
#define WARREN_DELAY_RING_CLASSIC 1
#define WARREN_DEAD_EXCHANGE "warren.dead"     /* fanout */
#define WARREN_DEAD_QUEUE "warren.dead"        /* quorum */
#define WARREN_EVENTS_EXCHANGE "warren.events" /* topic; run.<outcome>.<job> */

typedef struct warren_broker warren_broker;

/* Connects (5 s connect and handshake timeouts, 10 s RPC timeout, AMQP
 * heartbeat 30 s) and opens channel 1 (publishes, confirms, consumers) and
 * channel 2 (declarations: their 404/406 failures close only that channel).
 * *out is new; free with warren_broker_free (NULL ok). Errors:
 * WARREN_EINVAL (not an AMQP URL; amqps:// unsupported), WARREN_EBROKERCONN
 * "cannot connect to RabbitMQ at HOST:PORT: REASON; is the server running?
 * check broker.url or WARREN_AMQP_URL" (also for a refused login or an
 * unknown vhost).
 *
 * Threads: one broker per thread. Any call that fails with
 * WARREN_EBROKERCONN leaves the object dead (warren_broker_connected() == 0):
 * free it and open a new one. rabbitmq-c sends heartbeats only while a call
 * is inside the library: an idle holder should call warren_broker_poll at
 * least every 15 s.
 *
 * Timeouts: every wait is bounded (connect, login, RPCs, confirm_wait, next,
 * poll, the socket taking a publish, and each content frame the broker sends
 * after a delivery or return: 10 s, then the connection is declared dead). */
int warren_broker_open(const char *url, const warren_logger *lg, warren_broker **out,
                       warren_error *err);
void warren_broker_free(warren_broker *b);
/* 1 while the connection is usable, 0 after a connection error (or NULL). */
int warren_broker_connected(const warren_broker *b);
/* "HOST:PORT" of the server, for messages (borrowed, valid until free). */
const char *warren_broker_where(const warren_broker *b);

/* Declares, idempotently, everything docs/design.md §4.1 names for these job queues:
 * exchanges warren.ready (headers), warren.dead (fanout), warren.events
 * (topic), all durable; quorum queue warren.dead bound to warren.dead; per
 * job queue Q the quorum queue warren.ready.Q (x-delivery-limit, DLX
 * warren.dead, x-dead-letter-strategy at-least-once, x-overflow
 * reject-publish) bound to warren.ready with {x-match: all-with-x, x-warren-queue: Q}.
 * A re-declare whose arguments differ fails with WARREN_ECONFLICT naming the
 * queue (or exchange), the argument, both values and the fix; the broker
 * object stays usable. Errors: WARREN_EINVAL (a queue name that is not
 * [A-Za-z0-9][A-Za-z0-9._-]{0,62}, delivery_limit < 0). */
int warren_broker_topology(warren_broker *b, const char *const *queues, size_t nqueues,
                           int delivery_limit, warren_error *err);
/* Writes "warren.ready.<queue>" into name; WARREN_EINVAL for a bad queue name
 * or a short buffer. */
int warren_broker_ready_queue_name(const char *queue, char *name, size_t len, warren_error *err);

/* One message. Strings are borrowed for the call. */
typedef struct warren_header {
    const char *key;
    const char *value;
} warren_header;

typedef struct warren_message {
    const char *exchange;
    const char *routing_key;
    const char *message_id;
    const char *type;
    warren_us timestamp;   /* AMQP timestamp property (seconds are sent) */
    int64_t expiration_ms; /* < 0: none */
    const warren_header *headers;
    size_t nheaders;
    const void *body;
    size_t body_len;
    int mandatory; /* unroutable -> returned -> WARREN_BROKER_RETURNED */
} warren_message;

/* Outcome of one publish, reported by warren_broker_confirm_wait. */
typedef enum {
    WARREN_BROKER_ACKED = 0,
    WARREN_BROKER_NACKED = 1,
    WARREN_BROKER_RETURNED = 2, /* mandatory and unroutable (then acked) */
} warren_publish_status;

typedef void (*warren_confirm_fn)(void *ud, uint64_t seq, warren_publish_status status);

/* Puts channel 1 in confirm mode (once per connection; again is a no-op). */
int warren_broker_confirm_select(warren_broker *b, warren_error *err);
/* Publishes without waiting for the broker (persistent, content type
 * application/json, expiration as decimal ms when expiration_ms >= 0, the
 * headers as strings). In confirm mode *seq (may be NULL) gets the publish's
 * sequence number: 1, 2, 3, ... per broker object (the channel's delivery
 * tag while the channel lives); without confirm mode it gets 0. At most
 * 131072 publishes may await confirms. Waits at most 10 s for the socket to
 * take data (WARREN_ETIMEOUT: a resource alarm blocks publishers). */
int warren_broker_publish(warren_broker *b, const warren_message *m, uint64_t *seq,
                          warren_error *err);
/* Reads confirms until every publish up to and including seq is settled,
 * calling fn (may be NULL) exactly once per publish in seq order; publish
 * several, then wait once (pipelining). basic.ack (also multiple) reports
 * ACKED, basic.nack NACKED. A mandatory publish the broker could not route
 * comes back as basic.return before its ack: the return is matched to the
 * oldest unsettled mandatory publish with the same message_id (returns come
 * in publish order) and its ack then reports RETURNED.
 * On timeout_ms: the settled ones are reported, the rest stay pending for a
 * later wait, WARREN_ETIMEOUT. If the server closes channel 1 (e.g. 404 on
 * a publish to a missing exchange) its unsettled publishes are reported
 * NACKED, the channel is reopened and WARREN_EBROKER names the reason. On
 * connection loss every unsettled publish is reported NACKED and
 * WARREN_EBROKERCONN returned. Deliveries for this object's consumers that
 * arrive meanwhile are kept for warren_broker_next. */
int warren_broker_confirm_wait(warren_broker *b, uint64_t seq, int timeout_ms, warren_confirm_fn fn,
                               void *ud, warren_error *err);
/* Handles whatever the broker sent (confirms, returns, deliveries kept for
 * warren_broker_next, closes) for up to timeout_ms, and keeps heartbeats
 * flowing. Errors: WARREN_EBROKERCONN. */
int warren_broker_poll(warren_broker *b, int timeout_ms, warren_error *err);

/* Declares (cached per connection) the classic delay queue for due second
 * `second`: warren.delay.<second>, x-expires constant (expires_ms),
 * x-dead-letter-exchange warren.ready (routing by the x-warren-queue header). Its name is
 * written into name (>= 64 bytes). Publish to the default exchange "" with
 * routing key = that name and expiration = due - now. */
int warren_broker_delay_queue(warren_broker *b, int64_t second, int64_t expires_ms, char *name,
                              size_t len, warren_error *err);
/* The cache: the last 4096 seconds (direct-mapped by second), each entry
 * trusted for expires_ms / 2 after its declare, since publishing does not
 * renew x-expires but a declare does. A message returned as unroutable with
 * a delay queue's routing key evicts that second, so the next call declares
 * the queue again. expires_ms must stay constant (a different value is
 * WARREN_ECONFLICT) and exceed the relay's horizon plus a margin: a queue
 * that expires loses its messages instead of dead-lettering them.
 * Errors: WARREN_EINVAL (expires_ms outside 1 s .. 2^31-1 ms). */

/* Optional ring mode (planner.delay_ring = N): instead of a classic queue per
 * second, N fixed durable QUORUM delay queues warren.delay.ring.<slot>, slot
 * = due second mod N, each dead-lettering at-least-once to warren.ready.
 * Replicated, and no Erlang atom per second (each quorum queue name costs one
 * forever, so quorum queues must never be created per second). A quorum queue
 * too expires only at its head, so one slot must only ever hold runs due in
 * one second: that holds when N exceeds the relay's horizon in seconds + 1,
 * which warren_broker_delay_ring_check enforces (WARREN_EINVAL explaining
 * it). Declared once per slot per connection; the name goes into name. */
int warren_broker_delay_ring_check(int ring, int64_t horizon_ms, warren_error *err);
int warren_broker_delay_ring_queue(warren_broker *b, int64_t second, int ring, char *name,
                                   size_t len, warren_error *err);
/* The same with the ring's type (planner.delay_ring_type): WARREN_DELAY_RING_QUORUM
 * as above, or WARREN_DELAY_RING_CLASSIC: N durable CLASSIC queues with the same
 * names, x-dead-letter-exchange warren.ready and no x-expires (permanent; a
 * classic queue name costs no atom). Not replicated, but nothing is created
 * or deleted while runs are released (creating a durable queue stalls the
 * broker's releases for tens of ms). The same slot constraint applies
 * (warren_broker_delay_ring_check). The two types share the names, so a ring
 * declared with one type conflicts (WARREN_ECONFLICT naming the queue and the
 * first differing argument) with the other: delete the drained ring queues to
 * switch. Errors: WARREN_EINVAL (ring or type out of range). */
int warren_broker_delay_ring_queue_typed(warren_broker *b, int64_t second, int ring, int type,
                                         char *name, size_t len, warren_error *err);

/* Most headers a published message may carry, and kept of a consumed one. */
#define WARREN_BROKER_MAX_HEADERS 64
/* Longest body published, and the most of a consumed body kept (the default
 * of warren_broker_set_max_body). */
#define WARREN_BROKER_MAX_BODY (16u * 1024 * 1024)

/* A consumed message. All strings and body are owned by the delivery (copied
 * out of rabbitmq-c's buffers); free with warren_delivery_clear. Header
 * values are their string form: strings as is (at most 64 KiB kept),
 * integers and timestamps decimal, booleans true/false; x-death (an array
 * of tables) summarised as "REASON QUEUE COUNT" entries joined by "; ";
 * tables and decimals are left out. At most WARREN_BROKER_MAX_HEADERS headers
 * are kept. A body over the broker's limit (warren_broker_set_max_body) is
 * not kept at all: its size is checked in the content header before anything
 * is allocated, its frames are read and thrown away, and the delivery comes
 * with an empty body and body_dropped = its size. */
typedef struct warren_delivery {
    uint64_t tag; /* opaque: for warren_broker_ack/reject on this broker */
    int redelivered;
    char *queue; /* consumer's queue (from the consumer tag) */
    char *exchange;
    char *routing_key;
    char *message_id;
    char *type;
    warren_us timestamp;
    warren_header *headers; /* owned copies */
    size_t nheaders;
    char *body; /* NUL-terminated copy ("" when dropped) */
    size_t body_len;
    uint64_t body_dropped; /* > 0: a body of this many bytes arrived and was not kept */
} warren_delivery;
void warren_delivery_clear(warren_delivery *d);
/* Value of header key in d, or NULL. */
const char *warren_delivery_header(const warren_delivery *d, const char *key);

/* The most bytes of a consumed body kept (default and at most
 * WARREN_BROKER_MAX_BODY); a longer body is dropped (warren_delivery.body_dropped).
 * The worker sets WARREN_MSG_MAX_BODY: a run message is never longer. A
 * consumer's memory for bodies is then at most prefetch x bytes per consumer.
 * Errors: WARREN_EINVAL (over WARREN_BROKER_MAX_BODY). */
int warren_broker_set_max_body(warren_broker *b, size_t bytes, warren_error *err);
/* Sets basic.qos prefetch for the channel. */
int warren_broker_qos(warren_broker *b, int prefetch, warren_error *err);
/* Starts consuming queue (full name; no-ack off; consumer tag = queue name).
 * WARREN_ENOENT if the queue does not exist. If the server later closes
 * channel 1, it is reopened with prefetch and consumers restored. */
int warren_broker_consume(warren_broker *b, const char *queue, warren_error *err);
/* Waits up to timeout_ms for a delivery: 0 and *got=1 with *d filled, or
 * *got=0 on timeout. Confirms and returns read meanwhile are kept for
 * warren_broker_confirm_wait. Connection loss: WARREN_EBROKERCONN. */
int warren_broker_next(warren_broker *b, int timeout_ms, warren_delivery *d, int *got,
                       warren_error *err);
/* Cancels every consumer of this connection (basic.cancel with nowait: it
 * does not wait for the broker) and forgets them, so a reopened channel does
 * not consume again. Deliveries the broker sent before it processed the
 * cancel still arrive through warren_broker_next; settle them (a stopping
 * worker rejects them with requeue so another consumer gets them at once).
 * WARREN_EBROKERCONN if the connection is gone. */
int warren_broker_cancel_consumers(warren_broker *b, warren_error *err);
/* Acknowledges a delivery. WARREN_ESTALE if channel 1 was reopened since the
 * delivery (the broker requeued it already). */
int warren_broker_ack(warren_broker *b, uint64_t tag, warren_error *err);
/* Marks a delivery acknowledged without sending anything yet; the next
 * warren_broker_ack_flush sends it, as one multiple-ack for every run of
 * consecutive settled deliveries (deliveries still open are never covered).
 * WARREN_ESTALE as warren_broker_ack. */
int warren_broker_ack_later(warren_broker *b, uint64_t tag, warren_error *err);
/* Sends the acknowledgements warren_broker_ack_later collected. */
int warren_broker_ack_flush(warren_broker *b, warren_error *err);
/* As warren_broker_ack_flush, except for acknowledgements behind a delivery
 * still open: those wait until they have waited hold_ms (then go one by one),
 * since the open delivery usually settles soon and one multiple-ack then
 * covers them all (on a quorum queue each basic.ack is a Raft command).
 * Nothing waits once the first open delivery has been open for 20 x hold_ms
 * (a long handler, not a run waiting for its batch). hold_ms <= 0: at once. */
int warren_broker_ack_flush_held(warren_broker *b, int64_t hold_ms, warren_error *err);
/* When (monotonic ms) warren_broker_ack_flush_held(hold_ms) next sends a
 * held acknowledgement; INT64_MAX when none is held. */
int64_t warren_broker_ack_due(const warren_broker *b, int64_t hold_ms);
/* The connection's socket, for a caller's poll (POLLIN: call
 * warren_broker_next or warren_broker_poll); -1 when there is none. */
int warren_broker_fd(const warren_broker *b);
/* 1 when something was read already and waits in memory (a delivery, a
 * frame, buffered bytes): the socket may not poll readable for it, so call
 * warren_broker_next without waiting. */
int warren_broker_readable(const warren_broker *b);
/* basic.reject; requeue 0 dead-letters (quorum ready queues -> warren.dead). */
int warren_broker_reject(warren_broker *b, uint64_t tag, int requeue, warren_error *err);

/* Queue depth via a passive declare: WARREN_ENOENT if it does not exist. */
int warren_broker_queue_count(warren_broker *b, const char *queue, uint32_t *messages,
                              uint32_t *consumers, warren_error *err);
/* Deletes a queue and its messages (tests, operators). WARREN_ENOENT never:
 * deleting a missing queue succeeds. */
int warren_broker_queue_delete(warren_broker *b, const char *queue, warren_error *err);

#endif
