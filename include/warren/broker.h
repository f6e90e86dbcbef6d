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

/* Fixed names (DESIGN §4). */
/* warren.ready is a HEADERS exchange: each ready queue is bound with
 * {x-match: all, x-warren-queue: <job queue>}. Every run message carries the
 * header x-warren-queue, so it routes the same whether published straight
 * to warren.ready or dead-lettered there from a delay queue (whose routing
 * key is the delay queue's name). */
#define WARREN_READY_EXCHANGE "warren.ready"
#define WARREN_QUEUE_HEADER "x-warren-queue"
#define WARREN_READY_PREFIX "warren.ready."    /* + job queue: quorum ready queue */
#define WARREN_DELAY_PREFIX "warren.delay."    /* + epoch second: classic delay queue */
#define WARREN_DEAD_EXCHANGE "warren.dead"     /* fanout */
#define WARREN_DEAD_QUEUE "warren.dead"        /* quorum */
#define WARREN_EVENTS_EXCHANGE "warren.events" /* topic; run.<outcome>.<job> */

typedef struct warren_broker warren_broker;

/* Connects (socket and RPC timeouts; AMQP heartbeat 30 s), opens channel 1.
 * *out is new; free with warren_broker_free (NULL ok). Errors:
 * WARREN_EBROKERCONN naming host and port. */
int warren_broker_open(const char *url, const warren_logger *lg, warren_broker **out,
                       warren_error *err);
void warren_broker_free(warren_broker *b);
int warren_broker_connected(const warren_broker *b);

/* Declares, idempotently, everything DESIGN §4 names for these job queues.
 * A re-declare whose arguments differ fails with WARREN_ECONFLICT naming the
 * queue and the argument (the channel is reopened, not left closed). */
int warren_broker_topology(warren_broker *b, const char *const *queues, size_t nqueues,
                           int delivery_limit, warren_error *err);

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

/* Puts the channel in confirm mode (once per connection). */
int warren_broker_confirm_select(warren_broker *b, warren_error *err);
/* Publishes without waiting; *seq gets the delivery tag of the publish. */
int warren_broker_publish(warren_broker *b, const warren_message *m, uint64_t *seq,
                          warren_error *err);
/* Waits until every publish up to and including seq is confirmed (or
 * timeout_ms passes: WARREN_ETIMEOUT), calling fn once per publish. */
int warren_broker_confirm_wait(warren_broker *b, uint64_t seq, int timeout_ms, warren_confirm_fn fn,
                               void *ud, warren_error *err);

/* Declares (cached per connection) the classic delay queue for due second
 * `second`: warren.delay.<second>, x-expires constant (expires_ms),
 * x-dead-letter-exchange warren.ready (routing by the x-warren-queue header). Its name is
 * written into name (>= 64 bytes). Publish to the default exchange "" with
 * routing key = that name and expiration = due - now. */
int warren_broker_delay_queue(warren_broker *b, int64_t second, int64_t expires_ms, char *name,
                              size_t len, warren_error *err);

/* A consumed message. All strings and body are owned by the delivery (copied
 * out of rabbitmq-c's buffers); free with warren_delivery_clear. Header
 * values are their string form (numbers as decimal). */
typedef struct warren_delivery {
    uint64_t tag;
    int redelivered;
    char *queue; /* consumer's queue (from the consumer tag) */
    char *exchange;
    char *routing_key;
    char *message_id;
    char *type;
    warren_us timestamp;
    warren_header *headers; /* owned copies */
    size_t nheaders;
    char *body; /* NUL-terminated copy */
    size_t body_len;
} warren_delivery;
void warren_delivery_clear(warren_delivery *d);
/* Value of header key in d, or NULL. */
const char *warren_delivery_header(const warren_delivery *d, const char *key);

/* Sets basic.qos prefetch for the channel. */
int warren_broker_qos(warren_broker *b, int prefetch, warren_error *err);
/* Starts consuming queue (full name). */
int warren_broker_consume(warren_broker *b, const char *queue, warren_error *err);
/* Waits up to timeout_ms for a delivery: 0 and *got=1 with *d filled, or
 * *got=0 on timeout. Connection loss: WARREN_EBROKERCONN. */
int warren_broker_next(warren_broker *b, int timeout_ms, warren_delivery *d, int *got,
                       warren_error *err);
int warren_broker_ack(warren_broker *b, uint64_t tag, warren_error *err);
/* basic.reject; requeue 0 dead-letters (quorum ready queues -> warren.dead). */
int warren_broker_reject(warren_broker *b, uint64_t tag, int requeue, warren_error *err);

/* Queue depth via a passive declare: WARREN_ENOENT if it does not exist. */
int warren_broker_queue_count(warren_broker *b, const char *queue, uint32_t *messages,
                              uint32_t *consumers, warren_error *err);

#endif
