/* broker.c: all of warren's rabbitmq-c use: connecting, the topology, publishing
 * with pipelined publisher confirms and mandatory returns, delay queues,
 * consuming. amqp_rpc_reply_t is translated in exactly one place (reply_reason). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netdb.h>
#include <sys/socket.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include <warren/broker.h>
#include <warren/codec.h>

#include "internal.h"

/* Channel 1 carries publishes (confirm mode) and consumers; channel 2 carries
 * declarations and passive declares, whose failures (404, 406) close their
 * channel: keeping them apart means a failed declare never cancels consumers
 * or loses publisher confirms. */
#define CH_MAIN 1
#define CH_ADMIN 2

#define CONNECT_TIMEOUT_MS 5000
#define RPC_TIMEOUT_MS 10000
#define PUBLISH_TIMEOUT_MS 10000 /* the socket must accept a frame within this */
#define CLOSE_TIMEOUT_MS 2000
#define HEARTBEAT_S 30
#define SHORTSTR_MAX 255 /* AMQP short strings: names, ids, header keys */
#define FRAME_MAX 131072

#define MAX_UNCONFIRMED (1u << 17)            /* publishes in flight without confirm_wait */
#define MAX_HEADERS WARREN_BROKER_MAX_HEADERS /* per published or consumed message */
#define MAX_HEADER_VALUE 65536                /* bytes kept of a consumed header value */
#define MAX_BODY WARREN_BROKER_MAX_BODY       /* published, or kept of a consumed body */
#define MAX_BUFFERED 65536                    /* deliveries read while waiting for confirms */
#define DELAY_CACHE 4096                      /* delay seconds remembered as declared */
#define MAX_RING 86400
#define MAX_CONSUMERS 64

/* The delivery tag handed to callers carries the generation of channel 1 in
 * its top bits, so an ack for a delivery of a channel that was since closed
 * is refused here instead of closing the new channel (406 unknown tag). */
#define TAG_BITS 40
#define TAG_MASK ((UINT64_C(1) << TAG_BITS) - 1)

enum { ST_PENDING = 0, ST_ACKED, ST_NACKED, ST_RETURNED };

typedef struct pending {
    uint8_t status;
    uint8_t returned; /* a basic.return named this publish; its ack reports RETURNED */
    uint8_t reported;
    uint8_t mandatory;
    char *message_id; /* mandatory publishes only: matched against returns */
} pending;

typedef struct delay_slot {
    int64_t second;     /* INT64_MIN: empty */
    int64_t expires_ms; /* x-expires it was declared with */
    int64_t at_ms;      /* monotonic time of the declare */
} delay_slot;

struct warren_broker {
    amqp_connection_state_t conn;
    const warren_logger *lg;
    char where[300]; /* "host:port" for messages */
    int dead;
    char dead_reason[512];

    uint64_t gen; /* channel 1 generation */
    int confirming;
    int prefetch;
    char *consumers[MAX_CONSUMERS]; /* queue names; consumer tag = queue name */
    size_t nconsumers;

    /* Publisher confirms. seq numbers are global for the object; the delivery
     * tag on channel 1 is seq - ch_base (channel reopen moves ch_base). */
    uint64_t next_seq;
    uint64_t ch_base;
    uint64_t base;   /* lowest seq still tracked */
    uint64_t floor;  /* every seq <= floor is resolved (acked, nacked or returned) */
    int setting_up;  /* inside main_channel_setup: a close there restarts it */
    pending *pend;   /* circular, index seq & (cap - 1) */
    size_t pend_cap; /* power of two */
    int pend_error;  /* a channel close that nacked publishes: reported once */
    char pend_reason[512];

    amqp_table_entry_t hdrs[MAX_HEADERS + 1];
    size_t max_body; /* bytes of a consumed body kept (warren_broker_set_max_body) */

    delay_slot *delay; /* DELAY_CACHE slots, direct-mapped by second */
    int64_t *ring_at;  /* ring mode: declare time per slot (0 = not yet) */
    int ring_size;
    int ring_type; /* WARREN_DELAY_RING_QUORUM or _CLASSIC: the type ring_at caches */

    /* deliveries read while waiting for something else (FIFO) */
    warren_delivery *dq;
    size_t dq_head, dq_len, dq_cap;

    /* Unsettled deliveries on channel 1 in delivery-tag order (for
     * warren_broker_ack_later/_flush): one multiple-ack settles the longest
     * settled prefix instead of one basic.ack per message. */
    struct unsettled *uq; /* circular, uq_cap a power of two */
    size_t uq_head, uq_len, uq_cap, uq_open;
};

enum { UQ_OPEN = 0, UQ_LATER, UQ_SETTLED };
#define ACK_LONG_OPEN 20 /* warren_broker_ack_flush_held: see there */

typedef struct unsettled {
    uint64_t tag; /* on the wire (without the generation) */
    int state;
    int64_t open_ms;  /* received (monotonic ms) */
    int64_t later_ms; /* UQ_LATER: since when (monotonic ms) */
} unsettled;

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv;
    if (ms < 0)
        ms = 0;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

static char *bytes_dup(amqp_bytes_t b, size_t cap)
{
    size_t n = b.len < cap ? b.len : cap;
    char *s = malloc(n + 1);
    if (s == NULL)
        return NULL;
    if (n > 0)
        memcpy(s, b.bytes, n);
    s[n] = '\0';
    return s;
}

static void bytes_str(amqp_bytes_t b, char *buf, size_t len)
{
    size_t n = b.len < len - 1 ? b.len : len - 1;
    if (n > 0)
        memcpy(buf, b.bytes, n);
    buf[n] = '\0';
}

/* ---- connection and channel state ---------------------------------------- */

static int lost(warren_broker *b, const char *reason)
{
    if (!b->dead) {
        b->dead = 1;
        snprintf(b->dead_reason, sizeof(b->dead_reason), "%s", reason);
        warren_log(b->lg, WARREN_LOG_WARN, "connection to RabbitMQ at %s lost: %s", b->where,
                   reason);
    }
    return WARREN_EBROKERCONN;
}

static int dead_error(warren_broker *b, warren_error *err)
{
    return warren_error_set(err, WARREN_EBROKERCONN,
                            "connection to RabbitMQ at %s lost: %s; reconnect (is the server "
                            "running? check broker.url or WARREN_AMQP_URL)",
                            b->where, b->dead_reason);
}

static pending *pend_at(warren_broker *b, uint64_t seq)
{
    return &b->pend[seq & (b->pend_cap - 1)];
}

/* Every publish of channel 1 not yet confirmed is now unknowable: report it
 * as nacked (the caller republishes; consumers dedupe on message_id). */
static size_t nack_all_pending(warren_broker *b)
{
    size_t n = 0;
    for (uint64_t s = b->base; s < b->next_seq; s++) {
        pending *p = pend_at(b, s);
        if (p->status == ST_PENDING) {
            p->status = ST_NACKED;
            n++;
        }
    }
    return n;
}

static int main_channel_setup(warren_broker *b, char *reason, size_t len);

/* Sends channel.close-ok for a server-initiated close and reopens the
 * channel. Returns 0 or WARREN_EBROKERCONN (connection unusable). */
static int reopen_channel(warren_broker *b, amqp_channel_t ch, const char *why)
{
    amqp_channel_close_ok_t ok = {0};
    amqp_rpc_reply_t r;
    char reason[256];

    if (amqp_send_method(b->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) != AMQP_STATUS_OK)
        return lost(b, "cannot acknowledge a channel close");
    amqp_channel_open(b->conn, ch);
    r = amqp_get_rpc_reply(b->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return lost(b, "cannot reopen a channel after the server closed it");
    if (ch == CH_MAIN) {
        if (nack_all_pending(b) > 0) {
            b->pend_error = 1;
            snprintf(b->pend_reason, sizeof(b->pend_reason), "%s", why);
        }
        b->gen++;
        b->uq_len = b->uq_open = 0; /* the server requeued them all */
        b->ch_base = b->next_seq - 1;
        /* during setup, the setup loop itself starts over */
        if (!b->setting_up && main_channel_setup(b, reason, sizeof(reason)) == WARREN_EBROKERCONN)
            return WARREN_EBROKERCONN;
    }
    return 0;
}

/* A server close method, as "CODE TEXT". Handles the protocol side: a
 * channel close is acknowledged and the channel reopened; a connection close
 * is acknowledged and the object marked dead. Returns the warren code. */
static int server_close(warren_broker *b, amqp_channel_t ch, amqp_method_t m, char *reason,
                        size_t len)
{
    char text[400];

    if (m.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *c = m.decoded;
        int code = c->reply_code;
        bytes_str(c->reply_text, text, sizeof(text));
        snprintf(reason, len, "%s", text);
        if (reopen_channel(b, ch, text) != 0)
            return WARREN_EBROKERCONN;
        switch (code) {
        case AMQP_NOT_FOUND:
            return WARREN_ENOENT;
        case AMQP_PRECONDITION_FAILED:
            return strstr(text, "inequivalent arg") != NULL ? WARREN_ECONFLICT : WARREN_EBROKER;
        default:
            return WARREN_EBROKER;
        }
    }
    if (m.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *c = m.decoded;
        amqp_connection_close_ok_t ok = {0};
        bytes_str(c->reply_text, text, sizeof(text));
        snprintf(reason, len, "the server closed the connection: %s", text);
        amqp_send_method(b->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return lost(b, reason);
    }
    snprintf(reason, len, "unexpected method 0x%08x from the server", (unsigned)m.id);
    return WARREN_EBROKER;
}

/* THE translation of amqp_rpc_reply_t: 0 for a normal reply, else a warren
 * code with a reason in reason[]. Library failures (socket errors, RPC
 * timeouts, which leave rabbitmq-c's state undefined) mark the connection
 * dead: WARREN_EBROKERCONN. */
static int reply_reason(warren_broker *b, amqp_channel_t ch, amqp_rpc_reply_t r, char *reason,
                        size_t len)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return 0;
    case AMQP_RESPONSE_NONE:
        snprintf(reason, len, "no reply from the server");
        return lost(b, reason);
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        if (r.library_error == AMQP_STATUS_TIMEOUT)
            snprintf(reason, len, "no reply within %d ms", RPC_TIMEOUT_MS);
        else
            snprintf(reason, len, "%s", amqp_error_string2(r.library_error));
        return lost(b, reason);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        return server_close(b, ch, r.reply, reason, len);
    }
    snprintf(reason, len, "unknown reply type %d", (int)r.reply_type);
    return lost(b, reason);
}

/* Extracts the pieces of RabbitMQ's "inequivalent arg 'ARG' for KIND 'NAME'
 * in vhost 'V': received X but current is Y". Returns 1 if it matched. */
static int parse_inequivalent(const char *text, char *arg, size_t arglen, char *kind,
                              size_t kindlen, char *detail, size_t detlen)
{
    const char *p = strstr(text, "inequivalent arg '"), *q, *k;

    if (p == NULL)
        return 0;
    p += strlen("inequivalent arg '");
    q = strchr(p, '\'');
    if (q == NULL)
        return 0;
    snprintf(arg, arglen, "%.*s", (int)(q - p), p);
    k = strstr(q, " for ");
    if (k != NULL) {
        k += 5;
        q = strchr(k, ' ');
        snprintf(kind, kindlen, "%.*s", q ? (int)(q - k) : 0, k);
    } else {
        snprintf(kind, kindlen, "object");
    }
    q = strstr(p, "received ");
    snprintf(detail, detlen, "%s", q ? q : "");
    return 1;
}

/* Formats a failure of an operation on `what` (e.g. `queue "warren.ready.x"`)
 * given the code and reason from reply_reason. */
static int fail(warren_broker *b, int rc, const char *op, const char *what, const char *reason,
                warren_error *err)
{
    char arg[128], kind[32], detail[300];

    if (rc == WARREN_EBROKERCONN)
        return warren_error_set(err, rc,
                                "%s %s: connection to RabbitMQ at %s lost: %s; reconnect (is "
                                "the server running? check broker.url or WARREN_AMQP_URL)",
                                op, what, b->where, reason);
    if (rc == WARREN_ECONFLICT &&
        parse_inequivalent(reason, arg, sizeof(arg), kind, sizeof(kind), detail, sizeof(detail)))
        return warren_error_set(
            err, rc,
            "%s \"%s\" already exists on RabbitMQ at %s with a different \"%s\" (%s); "
            "either restore the old value%s, or delete the %s (drain it first; e.g. in the "
            "management UI) so it is declared again with the new one",
            strcmp(kind, "exchange") == 0 ? "exchange" : "queue", what, b->where, arg, detail,
            strcmp(arg, "x-delivery-limit") == 0 ? " (broker.delivery_limit)" : "",
            strcmp(kind, "exchange") == 0 ? "exchange" : "queue");
    if (rc == WARREN_ENOENT)
        return warren_error_set(err, rc, "%s \"%s\": not found on RabbitMQ at %s (%s)", op, what,
                                b->where, reason);
    return warren_error_set(err, rc, "%s \"%s\" on RabbitMQ at %s failed: %s", op, what, b->where,
                            reason);
}

/* Puts channel 1 back the way the caller set it up: confirm mode, prefetch,
 * consumers. A consumer whose queue is gone is dropped (logged). */
static int main_channel_setup(warren_broker *b, char *reason, size_t len)
{
    amqp_rpc_reply_t r;
    int rc = 0;

    b->setting_up = 1;
restart:
    if (b->confirming) {
        amqp_confirm_select(b->conn, CH_MAIN);
        r = amqp_get_rpc_reply(b->conn);
        if ((rc = reply_reason(b, CH_MAIN, r, reason, len)) != 0)
            goto out;
    }
    if (b->prefetch > 0) {
        amqp_basic_qos(b->conn, CH_MAIN, 0, (uint16_t)b->prefetch, 0);
        r = amqp_get_rpc_reply(b->conn);
        if ((rc = reply_reason(b, CH_MAIN, r, reason, len)) != 0)
            goto out;
    }
    for (size_t i = 0; i < b->nconsumers; i++) {
        amqp_bytes_t q = amqp_cstring_bytes(b->consumers[i]);
        amqp_basic_consume(b->conn, CH_MAIN, q, q, 0, 0, 0, amqp_empty_table);
        r = amqp_get_rpc_reply(b->conn);
        if ((rc = reply_reason(b, CH_MAIN, r, reason, len)) != 0) {
            if (rc == WARREN_EBROKERCONN)
                goto out;
            warren_log(b->lg, WARREN_LOG_WARN, "stopped consuming %s: %s", b->consumers[i], reason);
            free(b->consumers[i]);
            b->consumers[i] = b->consumers[--b->nconsumers];
            goto restart; /* the failure closed (and reopened) the channel */
        }
    }
out:
    b->setting_up = 0;
    return rc;
}

/* ---- open / free ---------------------------------------------------------- */

static int open_channel(warren_broker *b, amqp_channel_t ch, warren_error *err)
{
    char reason[512];
    int rc;

    amqp_channel_open(b->conn, ch);
    rc = reply_reason(b, ch, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return warren_error_set(err, WARREN_EBROKERCONN,
                                "cannot connect to RabbitMQ at %s: opening channel %d: %s",
                                b->where, (int)ch, reason);
    return 0;
}

/* rabbitmq-c 0.11 reports a failed connect as "a socket error occurred"
 * and keeps the errno to itself: on that failure path only, connect once
 * more to learn why (connection refused, no route to host, ...). */
static int probe_errno(const char *host, int port)
{
    struct addrinfo hints, *res = NULL;
    char service[16];
    int e = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0)
        return 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct pollfd pfd;
        socklen_t elen = sizeof(e);
        if (fd < 0)
            continue;
        e = 0;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            e = errno;
            if (e == EINPROGRESS) {
                pfd.fd = fd;
                pfd.events = POLLOUT;
                e = poll(&pfd, 1, CONNECT_TIMEOUT_MS) == 1 &&
                            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) == 0
                        ? e
                        : ETIMEDOUT;
            }
        }
        close(fd);
        if (e == 0)
            break;
    }
    freeaddrinfo(res);
    return e;
}

static const char *socket_reason(int status, const char *host, int port, char *buf, size_t len)
{
    int e;

    if (status == AMQP_STATUS_TIMEOUT) {
        snprintf(buf, len, "no answer within %d ms", CONNECT_TIMEOUT_MS);
        return buf;
    }
    if (status == AMQP_STATUS_SOCKET_ERROR && (e = probe_errno(host, port)) != 0) {
        snprintf(buf, len, "%s", strerror(e));
        return buf;
    }
    snprintf(buf, len, "%s", amqp_error_string2(status));
    return buf;
}

int warren_broker_open(const char *url, const warren_logger *lg, warren_broker **out,
                       warren_error *err)
{
    struct amqp_connection_info ci;
    warren_broker *b = NULL;
    amqp_socket_t *sock;
    char *copy = NULL, reason[512];
    struct timeval tv;
    int status, rc;

    if (out == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_open: out is NULL");
    *out = NULL;
    if (url == NULL || url[0] == '\0')
        return warren_error_set(err, WARREN_EINVAL,
                                "no RabbitMQ URL: set broker.url or WARREN_AMQP_URL "
                                "(amqp://USER:PASS@HOST:PORT/VHOST)");
    copy = strdup(url);
    b = calloc(1, sizeof(*b));
    if (copy == NULL || b == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory opening the broker");
        goto fail;
    }
    b->lg = lg;
    b->max_body = MAX_BODY;
    b->next_seq = 1;
    b->base = 1;
    b->dead = 1; /* until logged in: failures here are reported, not logged as losses */
    amqp_default_connection_info(&ci);
    if (amqp_parse_url(copy, &ci) != AMQP_STATUS_OK) {
        rc = warren_error_set(err, WARREN_EINVAL,
                              "broker URL is not a valid AMQP URL (expected "
                              "amqp://USER:PASS@HOST:PORT/VHOST); check broker.url or "
                              "WARREN_AMQP_URL");
        goto fail;
    }
    snprintf(b->where, sizeof(b->where), "%s:%d", ci.host, ci.port);
    if (ci.ssl) {
        rc = warren_error_set(err, WARREN_EINVAL,
                              "cannot connect to RabbitMQ at %s: amqps:// is not supported yet; "
                              "use amqp://",
                              b->where);
        goto fail;
    }
    if (ci.vhost == NULL || ci.vhost[0] == '\0')
        ci.vhost = "/"; /* "amqp://host:port/" means the default vhost, as in pika */
    b->conn = amqp_new_connection();
    if (b->conn == NULL || (sock = amqp_tcp_socket_new(b->conn)) == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory opening the broker");
        goto fail;
    }
    tv = ms_tv(CONNECT_TIMEOUT_MS);
    status = amqp_socket_open_noblock(sock, ci.host, ci.port, &tv);
    if (status != AMQP_STATUS_OK) {
        rc = warren_error_set(err, WARREN_EBROKERCONN,
                              "cannot connect to RabbitMQ at %s: %s; is the server running? "
                              "check broker.url or WARREN_AMQP_URL",
                              b->where,
                              socket_reason(status, ci.host, ci.port, reason, sizeof(reason)));
        goto fail;
    }
    tv = ms_tv(CONNECT_TIMEOUT_MS);
    amqp_set_handshake_timeout(b->conn, &tv);
    tv = ms_tv(RPC_TIMEOUT_MS);
    amqp_set_rpc_timeout(b->conn, &tv);
    rc = reply_reason(b, 0,
                      amqp_login(b->conn, ci.vhost, 0, FRAME_MAX, HEARTBEAT_S,
                                 AMQP_SASL_METHOD_PLAIN, ci.user, ci.password),
                      reason, sizeof(reason));
    if (rc != 0) {
        rc = warren_error_set(err, WARREN_EBROKERCONN,
                              "cannot connect to RabbitMQ at %s: login as \"%s\" to vhost \"%s\" "
                              "failed: %s; check the user, password and "
                              "vhost in broker.url or WARREN_AMQP_URL",
                              b->where, ci.user, ci.vhost, reason);
        goto fail;
    }
    b->dead = 0;
    if ((rc = open_channel(b, CH_MAIN, err)) != 0 || (rc = open_channel(b, CH_ADMIN, err)) != 0)
        goto fail;
    free(copy);
    warren_log(lg, WARREN_LOG_DEBUG, "connected to RabbitMQ at %s", b->where);
    *out = b;
    return 0;
fail:
    if (b != NULL && b->conn != NULL) {
        b->dead = 1; /* no polite close on a half-open connection */
        warren_broker_free(b);
    } else {
        free(b);
    }
    free(copy);
    return rc;
}

static void dq_clear_all(warren_broker *b);

void warren_broker_free(warren_broker *b)
{
    if (b == NULL)
        return;
    if (b->conn != NULL) {
        if (!b->dead) {
            /* connection.close closes the channels too; don't hang on a dying server */
            struct timeval tv = ms_tv(CLOSE_TIMEOUT_MS);
            amqp_set_rpc_timeout(b->conn, &tv);
            amqp_connection_close(b->conn, AMQP_REPLY_SUCCESS);
        }
        amqp_destroy_connection(b->conn);
    }
    if (b->pend != NULL)
        for (uint64_t s = b->base; s < b->next_seq; s++)
            free(pend_at(b, s)->message_id);
    free(b->pend);
    for (size_t i = 0; i < b->nconsumers; i++)
        free(b->consumers[i]);
    dq_clear_all(b);
    free(b->dq);
    free(b->uq);
    free(b->delay);
    free(b->ring_at);
    free(b);
}

int warren_broker_connected(const warren_broker *b)
{
    return b != NULL && !b->dead;
}

const char *warren_broker_where(const warren_broker *b)
{
    return b != NULL ? b->where : "";
}

/* ---- declarations ---------------------------------------------------------- */

static void entry_str(amqp_table_entry_t *e, const char *key, const char *value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(value);
}

static void entry_i64(amqp_table_entry_t *e, const char *key, int64_t value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = value;
}

static int declare_exchange(warren_broker *b, const char *name, const char *type, warren_error *err)
{
    char reason[512];
    int rc;

    amqp_exchange_declare(b->conn, CH_ADMIN, amqp_cstring_bytes(name), amqp_cstring_bytes(type), 0,
                          1, 0, 0, amqp_empty_table);
    rc = reply_reason(b, CH_ADMIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, "declaring exchange", name, reason, err);
    return 0;
}

static int declare_queue(warren_broker *b, const char *name, amqp_table_entry_t *args, int nargs,
                         warren_error *err)
{
    amqp_table_t t = {nargs, args};
    char reason[512];
    int rc;

    amqp_queue_declare(b->conn, CH_ADMIN, amqp_cstring_bytes(name), 0, 1, 0, 0, t);
    rc = reply_reason(b, CH_ADMIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, "declaring queue", name, reason, err);
    return 0;
}

static int bind_queue(warren_broker *b, const char *queue, const char *exchange, const char *key,
                      amqp_table_entry_t *args, int nargs, warren_error *err)
{
    amqp_table_t t = {nargs, args};
    char reason[512], what[600];
    int rc;

    amqp_queue_bind(b->conn, CH_ADMIN, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange),
                    amqp_cstring_bytes(key), t);
    rc = reply_reason(b, CH_ADMIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0) {
        snprintf(what, sizeof(what), "%s to exchange %s", queue, exchange);
        return fail(b, rc, "binding queue", what, reason, err);
    }
    return 0;
}

/* Arguments of a quorum queue that dead-letters at-least-once to dlx: without
 * x-overflow=reject-publish RabbitMQ 3.10 silently falls back to at-most-once. */
static int quorum_dlx_args(amqp_table_entry_t *a, const char *dlx)
{
    entry_str(&a[0], "x-queue-type", "quorum");
    entry_str(&a[1], "x-dead-letter-exchange", dlx);
    entry_str(&a[2], "x-dead-letter-strategy", "at-least-once");
    entry_str(&a[3], "x-overflow", "reject-publish");
    return 4;
}

int warren_broker_ready_queue_name(const char *queue, char *name, size_t len, warren_error *err)
{
    if (!warren_name_valid(queue))
        return warren_error_set(err, WARREN_EINVAL,
                                "\"%.80s\" cannot be a queue name (allowed: "
                                "[A-Za-z0-9][A-Za-z0-9._-]{0,62})",
                                queue ? queue : "(null)");
    if ((size_t)snprintf(name, len, "%s%s", WARREN_READY_PREFIX, queue) >= len)
        return warren_error_set(err, WARREN_EINVAL, "queue name buffer too small");
    return 0;
}

int warren_broker_topology(warren_broker *b, const char *const *queues, size_t nqueues,
                           int delivery_limit, warren_error *err)
{
    amqp_table_entry_t a[8];
    char name[128];
    int n, rc;

    if (b == NULL || (queues == NULL && nqueues > 0))
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_topology: bad arguments");
    if (delivery_limit < 0)
        return warren_error_set(err, WARREN_EINVAL, "broker.delivery_limit must be >= 0 (got %d)",
                                delivery_limit);
    if (b->dead)
        return dead_error(b, err);
    for (size_t i = 0; i < nqueues; i++)
        if ((rc = warren_broker_ready_queue_name(queues[i], name, sizeof(name), err)) != 0)
            return rc;
    if ((rc = declare_exchange(b, WARREN_READY_EXCHANGE, "headers", err)) != 0 ||
        (rc = declare_exchange(b, WARREN_DEAD_EXCHANGE, "fanout", err)) != 0 ||
        (rc = declare_exchange(b, WARREN_EVENTS_EXCHANGE, "topic", err)) != 0)
        return rc;
    entry_str(&a[0], "x-queue-type", "quorum");
    if ((rc = declare_queue(b, WARREN_DEAD_QUEUE, a, 1, err)) != 0 ||
        (rc = bind_queue(b, WARREN_DEAD_QUEUE, WARREN_DEAD_EXCHANGE, "", NULL, 0, err)) != 0)
        return rc;
    for (size_t i = 0; i < nqueues; i++) {
        warren_broker_ready_queue_name(queues[i], name, sizeof(name), NULL);
        n = quorum_dlx_args(a, WARREN_DEAD_EXCHANGE);
        entry_i64(&a[n++], "x-delivery-limit", delivery_limit);
        if ((rc = declare_queue(b, name, a, n, err)) != 0)
            return rc;
        entry_str(&a[0], "x-match", "all-with-x");
        entry_str(&a[1], WARREN_QUEUE_HEADER, queues[i]);
        if ((rc = bind_queue(b, name, WARREN_READY_EXCHANGE, queues[i], a, 2, err)) != 0)
            return rc;
        warren_log(b->lg, WARREN_LOG_DEBUG, "declared %s (x-delivery-limit %d)", name,
                   delivery_limit);
    }
    return 0;
}

static int delay_queue_name(int64_t second, char *name, size_t len, warren_error *err)
{
    if (name == NULL ||
        (size_t)snprintf(name, len, "%s%" PRId64, WARREN_DELAY_PREFIX, second) >= len)
        return warren_error_set(err, WARREN_EINVAL, "delay queue name buffer too small");
    return 0;
}

int warren_broker_delay_queue(warren_broker *b, int64_t second, int64_t expires_ms, char *name,
                              size_t len, warren_error *err)
{
    amqp_table_entry_t a[3];
    delay_slot *slot;
    int64_t now;
    int rc;

    if (b == NULL || expires_ms < 1000 || expires_ms > INT32_MAX)
        return warren_error_set(err, WARREN_EINVAL,
                                "delay queue x-expires must be between 1 s and 24 days "
                                "(planner.delay_queue_expires)");
    if ((rc = delay_queue_name(second, name, len, err)) != 0)
        return rc;
    if (b->dead)
        return dead_error(b, err);
    if (b->delay == NULL) {
        b->delay = malloc(DELAY_CACHE * sizeof(*b->delay));
        if (b->delay == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        for (size_t i = 0; i < DELAY_CACHE; i++)
            b->delay[i].second = INT64_MIN;
    }
    slot = &b->delay[(uint64_t)second % DELAY_CACHE];
    now = warren__mono_ms();
    /* Publishing does not renew x-expires, a declare does: trust the cache for
     * half the expiry only, so a queue is never used near its deletion. */
    if (slot->second == second && slot->expires_ms == expires_ms &&
        now - slot->at_ms < expires_ms / 2)
        return 0;
    entry_i64(&a[0], "x-expires", expires_ms);
    entry_str(&a[1], "x-dead-letter-exchange", WARREN_READY_EXCHANGE);
    /* explicit: a vhost whose default queue type is quorum (RabbitMQ >= 3.11)
     * must not turn these into quorum queues, one Erlang atom each */
    entry_str(&a[2], "x-queue-type", "classic");
    if ((rc = declare_queue(b, name, a, 3, err)) != 0)
        return rc;
    slot->second = second;
    slot->expires_ms = expires_ms;
    slot->at_ms = now;
    return 0;
}

int warren_broker_delay_ring_check(int ring, int64_t horizon_ms, warren_error *err)
{
    int64_t need = (horizon_ms + 999) / 1000 + 2;

    if (ring <= 0 || ring > MAX_RING || ring < need)
        return warren_error_set(err, WARREN_EINVAL,
                                "planner.delay_ring = %d: a ring of delay queues needs "
                                "more slots than seconds in the horizon (at least %" PRId64
                                " for a horizon of %" PRId64 " ms, at most %d), or a slot would "
                                "hold runs due in different seconds and block them: raise "
                                "delay_ring to %" PRId64 " or set a shorter planner.horizon",
                                ring, need, horizon_ms, MAX_RING, need);
    return 0;
}

int warren_broker_delay_ring_queue(warren_broker *b, int64_t second, int ring, char *name,
                                   size_t len, warren_error *err)
{
    return warren_broker_delay_ring_queue_typed(b, second, ring, WARREN_DELAY_RING_QUORUM, name,
                                                len, err);
}

int warren_broker_delay_ring_queue_typed(warren_broker *b, int64_t second, int ring, int type,
                                         char *name, size_t len, warren_error *err)
{
    amqp_table_entry_t a[4];
    int64_t slot, now;
    int n, rc;

    if (b == NULL || ring <= 0 || ring > MAX_RING)
        return warren_error_set(err, WARREN_EINVAL, "delay ring size %d out of range 1-%d", ring,
                                MAX_RING);
    if (type != WARREN_DELAY_RING_QUORUM && type != WARREN_DELAY_RING_CLASSIC)
        return warren_error_set(err, WARREN_EINVAL,
                                "delay ring type %d is neither quorum nor "
                                "classic",
                                type);
    slot = second % ring;
    if (slot < 0)
        slot += ring;
    if (name == NULL ||
        (size_t)snprintf(name, len, "%sring.%" PRId64, WARREN_DELAY_PREFIX, slot) >= len)
        return warren_error_set(err, WARREN_EINVAL, "delay queue name buffer too small");
    if (b->dead)
        return dead_error(b, err);
    if (b->ring_size != ring || b->ring_type != type) {
        free(b->ring_at);
        b->ring_at = calloc((size_t)ring, sizeof(*b->ring_at));
        b->ring_size = b->ring_at ? ring : 0;
        b->ring_type = type;
        if (b->ring_at == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    now = warren__mono_ms();
    if (b->ring_at[slot] != 0)
        return 0;
    if (type == WARREN_DELAY_RING_CLASSIC) {
        /* permanent (no x-expires: nothing is created or deleted in steady
         * state, and classic queue names cost no Erlang atom); explicit type
         * for vhosts whose default queue type is quorum */
        entry_str(&a[0], "x-queue-type", "classic");
        entry_str(&a[1], "x-dead-letter-exchange", WARREN_READY_EXCHANGE);
        n = 2;
    } else {
        n = quorum_dlx_args(a, WARREN_READY_EXCHANGE);
    }
    rc = declare_queue(b, name, a, n, err);
    if (rc != 0)
        return rc;
    b->ring_at[slot] = now > 0 ? now : 1;
    return 0;
}

/* A passive declare on the declaration channel (a 404 closes only that one). */
static int passive_declare(warren_broker *b, const char *queue, const char *op, uint32_t *messages,
                           uint32_t *consumers, warren_error *err)
{
    amqp_queue_declare_ok_t *ok;
    char reason[512];
    int rc;

    if (b == NULL || queue == NULL || queue[0] == '\0' || strlen(queue) > SHORTSTR_MAX)
        return warren_error_set(err, WARREN_EINVAL, "%s: bad queue name", op);
    if (b->dead)
        return dead_error(b, err);
    ok = amqp_queue_declare(b->conn, CH_ADMIN, amqp_cstring_bytes(queue), 1, 0, 0, 0,
                            amqp_empty_table);
    rc = reply_reason(b, CH_ADMIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, op, queue, reason, err);
    if (messages != NULL)
        *messages = ok->message_count;
    if (consumers != NULL)
        *consumers = ok->consumer_count;
    return 0;
}

int warren_broker_queue_count(warren_broker *b, const char *queue, uint32_t *messages,
                              uint32_t *consumers, warren_error *err)
{
    return passive_declare(b, queue, "counting queue", messages, consumers, err);
}

int warren_broker_queue_delete(warren_broker *b, const char *queue, warren_error *err)
{
    char reason[512];
    int rc;

    if (b == NULL || queue == NULL || strlen(queue) > SHORTSTR_MAX)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_queue_delete: bad arguments");
    if (b->dead)
        return dead_error(b, err);
    amqp_queue_delete(b->conn, CH_ADMIN, amqp_cstring_bytes(queue), 0, 0);
    rc = reply_reason(b, CH_ADMIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, "deleting queue", queue, reason, err);
    return 0;
}

/* ---- publishing and confirms ---------------------------------------------- */

int warren_broker_confirm_select(warren_broker *b, warren_error *err)
{
    char reason[512];
    int rc;

    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_confirm_select: NULL broker");
    if (b->dead)
        return dead_error(b, err);
    if (b->confirming)
        return 0;
    amqp_confirm_select(b->conn, CH_MAIN);
    rc = reply_reason(b, CH_MAIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, "enabling publisher confirms on", "channel 1", reason, err);
    b->confirming = 1;
    b->ch_base = b->next_seq - 1;
    return 0;
}

static int pend_reserve(warren_broker *b, warren_error *err)
{
    uint64_t inflight = b->next_seq - b->base;
    size_t ncap;
    pending *np;

    if (inflight < b->pend_cap)
        return 0;
    if (inflight >= MAX_UNCONFIRMED)
        return warren_error_set(err, WARREN_EBROKER,
                                "%" PRIu64 " publishes await confirms; call "
                                "warren_broker_confirm_wait before publishing more",
                                inflight);
    ncap = b->pend_cap ? b->pend_cap * 2 : 256;
    np = calloc(ncap, sizeof(*np));
    if (np == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory tracking confirms");
    for (uint64_t s = b->base; s < b->next_seq; s++)
        np[s & (ncap - 1)] = *pend_at(b, s);
    free(b->pend);
    b->pend = np;
    b->pend_cap = ncap;
    return 0;
}

/* Waits until the socket can take a frame: rabbitmq-c writes without a
 * deadline, and a broker under a memory or disk alarm stops reading. */
static int wait_writable(warren_broker *b, warren_error *err)
{
    struct pollfd pfd;
    int rc;

    pfd.fd = amqp_get_sockfd(b->conn);
    pfd.events = POLLOUT;
    pfd.revents = 0;
    do {
        rc = poll(&pfd, 1, PUBLISH_TIMEOUT_MS);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return warren_error_set(err, WARREN_ETIMEOUT,
                                "RabbitMQ at %s accepted no data for %d ms (a memory or disk "
                                "alarm blocks publishers?)",
                                b->where, PUBLISH_TIMEOUT_MS);
    if (rc < 0 || (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
        lost(b, "socket error");
        return dead_error(b, err);
    }
    return 0;
}

int warren_broker_publish(warren_broker *b, const warren_message *m, uint64_t *seq,
                          warren_error *err)
{
    amqp_basic_properties_t props;
    char expiration[32];
    int status, rc;

    if (seq != NULL)
        *seq = 0;
    if (b == NULL || m == NULL || m->exchange == NULL || m->routing_key == NULL ||
        (m->body == NULL && m->body_len > 0) || (m->headers == NULL && m->nheaders > 0))
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_publish: bad arguments");
    if (m->nheaders > MAX_HEADERS)
        return warren_error_set(err, WARREN_EINVAL, "a message may carry at most %d headers",
                                MAX_HEADERS);
    /* rabbitmq-c fails to encode an over-long short string only after it has
     * started the frame, which would cost the connection: check first */
    if (strlen(m->exchange) > SHORTSTR_MAX || strlen(m->routing_key) > SHORTSTR_MAX ||
        (m->message_id != NULL && strlen(m->message_id) > SHORTSTR_MAX) ||
        (m->type != NULL && strlen(m->type) > SHORTSTR_MAX))
        return warren_error_set(err, WARREN_EINVAL,
                                "exchange, routing key, message_id and type are limited to %d "
                                "bytes",
                                SHORTSTR_MAX);
    if (m->body_len > MAX_BODY)
        return warren_error_set(err, WARREN_EINVAL, "message body of %zu bytes exceeds %u",
                                m->body_len, MAX_BODY);
    if (b->dead)
        return dead_error(b, err);
    if (b->confirming && (rc = pend_reserve(b, err)) != 0)
        return rc;
    if ((rc = wait_writable(b, err)) != 0)
        return rc;

    memset(&props, 0, sizeof(props));
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    props.content_type = amqp_cstring_bytes("application/json");
    props.delivery_mode = 2;
    if (m->message_id != NULL) {
        props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        props.message_id = amqp_cstring_bytes(m->message_id);
    }
    if (m->type != NULL) {
        props._flags |= AMQP_BASIC_TYPE_FLAG;
        props.type = amqp_cstring_bytes(m->type);
    }
    if (m->timestamp != 0) {
        props._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
        props.timestamp = (uint64_t)warren_us_to_s(m->timestamp);
    }
    if (m->expiration_ms >= 0) {
        snprintf(expiration, sizeof(expiration), "%" PRId64, m->expiration_ms);
        props._flags |= AMQP_BASIC_EXPIRATION_FLAG;
        props.expiration = amqp_cstring_bytes(expiration);
    }
    if (m->nheaders > 0) {
        for (size_t i = 0; i < m->nheaders; i++) {
            if (m->headers[i].key == NULL || m->headers[i].value == NULL ||
                strlen(m->headers[i].key) > SHORTSTR_MAX)
                return warren_error_set(err, WARREN_EINVAL,
                                        "header %zu has no key or value, or a key over %d bytes", i,
                                        SHORTSTR_MAX);
            entry_str(&b->hdrs[i], m->headers[i].key, m->headers[i].value);
        }
        props._flags |= AMQP_BASIC_HEADERS_FLAG;
        props.headers.num_entries = (int)m->nheaders;
        props.headers.entries = b->hdrs;
    }
    status = amqp_basic_publish(b->conn, CH_MAIN, amqp_cstring_bytes(m->exchange),
                                amqp_cstring_bytes(m->routing_key), m->mandatory ? 1 : 0, 0, &props,
                                (amqp_bytes_t){m->body_len, (void *)m->body});
    if (status != AMQP_STATUS_OK) {
        lost(b, amqp_error_string2(status));
        return dead_error(b, err);
    }
    if (b->confirming) {
        pending *p = pend_at(b, b->next_seq);
        memset(p, 0, sizeof(*p));
        p->mandatory = m->mandatory ? 1 : 0;
        if (m->mandatory && m->message_id != NULL)
            p->message_id = strdup(m->message_id); /* NULL on ENOMEM: matched by order */
        if (seq != NULL)
            *seq = b->next_seq;
        b->next_seq++;
    }
    return 0;
}

static void advance_floor(warren_broker *b)
{
    if (b->floor + 1 < b->base)
        b->floor = b->base - 1;
    while (b->floor + 1 < b->next_seq && pend_at(b, b->floor + 1)->status != ST_PENDING)
        b->floor++;
}

static void resolve(warren_broker *b, uint64_t tag, int multiple, int nack)
{
    uint64_t last = b->ch_base + tag, first = multiple ? b->base : last;

    if (tag == 0 && multiple)
        last = b->next_seq - 1; /* "all so far" */
    if (last >= b->next_seq)
        last = b->next_seq - 1;
    if (first <= b->floor)
        first = b->floor + 1;
    if (first < b->base)
        first = b->base;
    if (first <= b->ch_base)
        first = b->ch_base + 1;
    for (uint64_t s = first; s <= last; s++) {
        pending *p = pend_at(b, s);
        if (p->status != ST_PENDING)
            continue;
        p->status = nack ? ST_NACKED : p->returned ? ST_RETURNED : ST_ACKED;
    }
    advance_floor(b);
}

/* A basic.return precedes the ack of its publish. Returns come back in
 * publish order, so the returned publish is the first pending mandatory one
 * not yet marked, with the same message_id when the message has one. */
static void mark_returned(warren_broker *b, const char *message_id)
{
    pending *fallback = NULL;

    advance_floor(b);
    for (uint64_t s = b->floor + 1; s < b->next_seq; s++) {
        pending *p = pend_at(b, s);
        if (p->status != ST_PENDING || !p->mandatory || p->returned)
            continue;
        if (fallback == NULL)
            fallback = p;
        if (message_id == NULL ||
            (p->message_id != NULL && strcmp(p->message_id, message_id) == 0)) {
            p->returned = 1;
            return;
        }
    }
    if (fallback != NULL)
        fallback->returned = 1;
}

/* ---- deliveries ------------------------------------------------------------- */

static char *field_string(const amqp_field_value_t *v);

/* x-death is an array of tables; keep "reason queue count" of each entry. */
static char *death_summary(const amqp_array_t *arr)
{
    char buf[1024];
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < arr->num_entries && used < sizeof(buf) - 1; i++) {
        const amqp_field_value_t *e = &arr->entries[i];
        char reason[64] = "", queue[256] = "";
        int64_t count = 0;
        if (e->kind != AMQP_FIELD_KIND_TABLE)
            continue;
        for (int j = 0; j < e->value.table.num_entries; j++) {
            const amqp_table_entry_t *t = &e->value.table.entries[j];
            char *s;
            if (t->key.len == 6 && memcmp(t->key.bytes, "reason", 6) == 0 &&
                (t->value.kind == AMQP_FIELD_KIND_UTF8 || t->value.kind == AMQP_FIELD_KIND_BYTES))
                bytes_str(t->value.value.bytes, reason, sizeof(reason));
            else if (t->key.len == 5 && memcmp(t->key.bytes, "queue", 5) == 0 &&
                     (t->value.kind == AMQP_FIELD_KIND_UTF8 ||
                      t->value.kind == AMQP_FIELD_KIND_BYTES))
                bytes_str(t->value.value.bytes, queue, sizeof(queue));
            else if (t->key.len == 5 && memcmp(t->key.bytes, "count", 5) == 0 &&
                     (s = field_string(&t->value)) != NULL) {
                count = strtoll(s, NULL, 10);
                free(s);
            }
        }
        int w = snprintf(buf + used, sizeof(buf) - used, "%s%s %s %" PRId64, used ? "; " : "",
                         reason, queue, count);
        if (w < 0)
            break;
        used += (size_t)w;
        if (used >= sizeof(buf))
            used = sizeof(buf) - 1;
    }
    return strdup(buf);
}

static char *fmt_dup(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_dup(const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* A header value's string form (new), or NULL for kinds without one
 * (tables, decimals) and on ENOMEM. */
static char *field_string(const amqp_field_value_t *v)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return bytes_dup(v->value.bytes, MAX_HEADER_VALUE);
    case AMQP_FIELD_KIND_BOOLEAN:
        return strdup(v->value.boolean ? "true" : "false");
    case AMQP_FIELD_KIND_I8:
        return fmt_dup("%d", (int)v->value.i8);
    case AMQP_FIELD_KIND_U8:
        return fmt_dup("%u", (unsigned)v->value.u8);
    case AMQP_FIELD_KIND_I16:
        return fmt_dup("%d", (int)v->value.i16);
    case AMQP_FIELD_KIND_U16:
        return fmt_dup("%u", (unsigned)v->value.u16);
    case AMQP_FIELD_KIND_I32:
        return fmt_dup("%" PRId32, v->value.i32);
    case AMQP_FIELD_KIND_U32:
        return fmt_dup("%" PRIu32, v->value.u32);
    case AMQP_FIELD_KIND_I64:
        return fmt_dup("%" PRId64, v->value.i64);
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        return fmt_dup("%" PRIu64, v->value.u64);
    case AMQP_FIELD_KIND_F32:
        return fmt_dup("%.9g", (double)v->value.f32);
    case AMQP_FIELD_KIND_F64:
        return fmt_dup("%.17g", v->value.f64);
    case AMQP_FIELD_KIND_VOID:
        return strdup("");
    case AMQP_FIELD_KIND_ARRAY:
        return death_summary(&v->value.array);
    default:
        return NULL;
    }
}

void warren_delivery_clear(warren_delivery *d)
{
    if (d == NULL)
        return;
    free(d->queue);
    free(d->exchange);
    free(d->routing_key);
    free(d->message_id);
    free(d->type);
    for (size_t i = 0; i < d->nheaders; i++) {
        free((char *)d->headers[i].key);
        free((char *)d->headers[i].value);
    }
    free(d->headers);
    free(d->body);
    memset(d, 0, sizeof(*d));
}

const char *warren_delivery_header(const warren_delivery *d, const char *key)
{
    if (d == NULL || key == NULL)
        return NULL;
    for (size_t i = 0; i < d->nheaders; i++)
        if (strcmp(d->headers[i].key, key) == 0)
            return d->headers[i].value;
    return NULL;
}

/* ------------------------------------------------------------ unsettled deliveries */

static unsettled *uq_at(warren_broker *b, size_t i)
{
    return &b->uq[(b->uq_head + i) & (b->uq_cap - 1)];
}

static int uq_push(warren_broker *b, uint64_t tag)
{
    if (b->uq_len == b->uq_cap) {
        size_t ncap = b->uq_cap ? b->uq_cap * 2 : 256;
        unsettled *n = malloc(ncap * sizeof(*n));
        if (n == NULL)
            return -1;
        for (size_t i = 0; i < b->uq_len; i++)
            n[i] = *uq_at(b, i);
        free(b->uq);
        b->uq = n;
        b->uq_cap = ncap;
        b->uq_head = 0;
    }
    unsettled *u = uq_at(b, b->uq_len);
    u->tag = tag;
    u->state = UQ_OPEN;
    u->open_ms = warren__mono_ms();
    u->later_ms = 0;
    b->uq_len++;
    b->uq_open++;
    return 0;
}

/* The entry for wire tag t, or NULL (tags are increasing: binary search). */
static unsettled *uq_find(warren_broker *b, uint64_t t)
{
    size_t lo = 0, hi = b->uq_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        unsettled *u = uq_at(b, mid);
        if (u->tag == t)
            return u;
        if (u->tag < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Moves the entry for wire tag t on; a settled one stays settled (it was
 * acknowledged or rejected already: a second acknowledgement of its tag
 * would close the channel). */
static void uq_mark(warren_broker *b, uint64_t t, int state)
{
    unsettled *u = uq_find(b, t);
    if (u == NULL || u->state == state || u->state == UQ_SETTLED)
        return;
    if (u->state == UQ_OPEN) {
        b->uq_open--;
        u->later_ms = warren__mono_ms();
    }
    u->state = state;
}

/* What read_content hands its caller once the header frame is in: the
 * properties and the body's size (dropping: over the cap, not kept). They
 * point into rabbitmq-c's channel pool, which read_content releases after
 * every body frame: copy what is needed here. */
typedef int (*content_header_fn)(void *arg, const amqp_basic_properties_t *props, uint64_t size,
                                 int dropping, warren_error *err);

/* Reads the content (header and body frames) that follows a basic.deliver or
 * basic.return on channel ch, checking the body's size in the header frame
 * before anything is allocated: a body over cap is read and thrown away frame
 * by frame (*body NULL, *dropped its size). on_header(arg, ...) runs once the
 * header frame is in (the method frame's strings and the properties are still
 * valid then); after it the channel's buffers are released after every body
 * frame (rabbitmq-c allocates each incoming frame from the channel's pool),
 * so what a producer sends costs at most a frame or two of memory beyond cap.
 * *body is new (NUL terminated; free()). Every frame must come within
 * RPC_TIMEOUT_MS. An error of on_header is returned after the content was
 * read to its end (the stream stays in step). */
static int read_content(warren_broker *b, amqp_channel_t ch, size_t cap,
                        content_header_fn on_header, void *arg, char **body, size_t *len,
                        uint64_t *dropped, warren_error *err)
{
    amqp_frame_t f;
    uint64_t size = 0, got = 0;
    int status, hrc = 0;

    *body = NULL;
    *len = 0;
    *dropped = 0;
    for (int header = 1;;) {
        struct timeval tv = ms_tv(RPC_TIMEOUT_MS);
        status = amqp_simple_wait_frame_noblock(b->conn, &f, &tv);
        if (status != AMQP_STATUS_OK) {
            free(*body);
            *body = NULL;
            lost(b, status == AMQP_STATUS_TIMEOUT ? "a message's content did not arrive"
                                                  : amqp_error_string2(status));
            return dead_error(b, err);
        }
        if (f.frame_type == AMQP_FRAME_HEARTBEAT)
            continue;
        if (f.channel != ch || f.frame_type != (header ? AMQP_FRAME_HEADER : AMQP_FRAME_BODY)) {
            free(*body);
            *body = NULL;
            lost(b, "unexpected frame inside a message's content");
            return dead_error(b, err);
        }
        if (header) {
            header = 0;
            size = f.payload.properties.body_size;
            if (size > cap) {
                *dropped = size;
            } else if ((*body = malloc((size_t)size + 1)) == NULL) {
                *dropped = size; /* out of memory: as if too large, the stream stays in step */
            }
            hrc = on_header(arg, (const amqp_basic_properties_t *)f.payload.properties.decoded,
                            size, *dropped != 0, err);
        } else {
            size_t n = f.payload.body_fragment.len;
            if (n > size - got) {
                free(*body);
                *body = NULL;
                lost(b, "a message's body frames exceed its declared size");
                return dead_error(b, err);
            }
            if (*body != NULL)
                memcpy(*body + got, f.payload.body_fragment.bytes, n);
            got += n;
        }
        /* Nothing of this channel's pool is needed any more: a large body
         * must not pile up there frame by frame. */
        amqp_maybe_release_buffers_on_channel(b->conn, ch);
        if (!header && got == size)
            break;
    }
    if (*body != NULL) {
        (*body)[size] = '\0';
        *len = (size_t)size;
    }
    if (hrc != 0) {
        free(*body);
        *body = NULL;
        *len = 0;
    }
    return hrc;
}

/* Copies everything out of rabbitmq-c's buffers into d; steals body. */
static int make_delivery(warren_broker *b, uint64_t tag, int redelivered, amqp_bytes_t consumer,
                         amqp_bytes_t exchange, amqp_bytes_t routing_key,
                         const amqp_basic_properties_t *p, char *body, size_t body_len,
                         uint64_t dropped, warren_delivery *d, warren_error *err)
{
    memset(d, 0, sizeof(*d));
    d->body = body;
    d->body_len = body_len;
    d->body_dropped = dropped;
    d->tag = (b->gen << TAG_BITS) | (tag & TAG_MASK);
    if (uq_push(b, tag & TAG_MASK) != 0) {
        free(body);
        d->body = NULL;
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    d->redelivered = redelivered;
    d->queue = bytes_dup(consumer, 1024);
    d->exchange = bytes_dup(exchange, 1024);
    d->routing_key = bytes_dup(routing_key, 1024);
    if (d->queue == NULL || d->exchange == NULL || d->routing_key == NULL)
        goto nomem;
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) &&
        (d->message_id = bytes_dup(p->message_id, 1024)) == NULL)
        goto nomem;
    if ((p->_flags & AMQP_BASIC_TYPE_FLAG) && (d->type = bytes_dup(p->type, 1024)) == NULL)
        goto nomem;
    /* Any producer may set it: past year 292277 it would overflow or go negative (0 = none). */
    if ((p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) &&
        p->timestamp <= (uint64_t)(INT64_MAX / WARREN_US_PER_S))
        d->timestamp = (warren_us)p->timestamp * WARREN_US_PER_S;
    if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0) {
        size_t n = (size_t)p->headers.num_entries;
        if (n > MAX_HEADERS)
            n = MAX_HEADERS;
        d->headers = calloc(n, sizeof(*d->headers));
        if (d->headers == NULL)
            goto nomem;
        for (size_t i = 0; i < n; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            char *v = field_string(&e->value), *k;
            if (v == NULL)
                continue; /* tables and decimals have no string form */
            k = bytes_dup(e->key, 256);
            if (k == NULL) {
                free(v);
                goto nomem;
            }
            d->headers[d->nheaders].key = k;
            d->headers[d->nheaders].value = v;
            d->nheaders++;
        }
    }
    if (dropped > 0)
        warren_log(b->lg, WARREN_LOG_WARN,
                   "message %s: body of %llu bytes over the %zu-byte limit; not kept",
                   d->message_id ? d->message_id : "(no id)", (unsigned long long)dropped,
                   b->max_body);
    if (d->body == NULL && (d->body = strdup("")) == NULL)
        goto nomem;
    return 0;
nomem:
    warren_delivery_clear(d);
    return warren_error_set(err, WARREN_ENOMEM, "out of memory copying a delivery");
}

static void dq_clear_all(warren_broker *b)
{
    while (b->dq_len > 0) {
        warren_delivery_clear(&b->dq[b->dq_head]);
        b->dq_head = (b->dq_head + 1) % b->dq_cap;
        b->dq_len--;
    }
}

static int dq_push(warren_broker *b, warren_delivery *d, warren_error *err)
{
    if (b->dq_len == b->dq_cap) {
        size_t ncap = b->dq_cap ? b->dq_cap * 2 : 64;
        warren_delivery *nq;
        if (ncap > MAX_BUFFERED) {
            warren_delivery_clear(d);
            return warren_error_set(err, WARREN_EBROKER,
                                    "more than %d deliveries arrived while waiting for "
                                    "confirms; set a prefetch (warren_broker_qos)",
                                    MAX_BUFFERED);
        }
        nq = malloc(ncap * sizeof(*nq));
        if (nq == NULL) {
            warren_delivery_clear(d);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory buffering a delivery");
        }
        for (size_t i = 0; i < b->dq_len; i++)
            nq[i] = b->dq[(b->dq_head + i) % b->dq_cap];
        free(b->dq);
        b->dq = nq;
        b->dq_cap = ncap;
        b->dq_head = 0;
    }
    b->dq[(b->dq_head + b->dq_len) % b->dq_cap] = *d;
    b->dq_len++;
    return 0;
}

/* ---- the frame dispatcher ------------------------------------------------- */

/* read_content's header callback for a basic.return: its message_id (into
 * the char[256] arg; "" when it has none). */
static int returned_header(void *arg, const amqp_basic_properties_t *props, uint64_t size,
                           int dropping, warren_error *err)
{
    char *mid = arg;
    (void)size;
    (void)dropping;
    (void)err;
    if (props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        bytes_str(props->message_id, mid, 256);
    return 0;
}

/* read_content's header callback for a basic.deliver: the delivery, made
 * from the method frame (dv) and the properties while both are valid, with
 * an empty body that the caller replaces once the body frames are in. */
typedef struct delivered_ctx {
    warren_broker *b;
    amqp_basic_deliver_t dv;
    warren_delivery d;
} delivered_ctx;

static int delivered_header(void *arg, const amqp_basic_properties_t *props, uint64_t size,
                            int dropping, warren_error *err)
{
    delivered_ctx *c = arg;
    return make_delivery(c->b, c->dv.delivery_tag, c->dv.redelivered, c->dv.consumer_tag,
                         c->dv.exchange, c->dv.routing_key, props, NULL, 0, dropping ? size : 0,
                         &c->d, err);
}

/* Handles one frame that is not the answer to an RPC: confirms, returns,
 * deliveries read while waiting for confirms, server closes. Returns 0, or
 * an error code with err set (the connection may be dead). */
static int dispatch(warren_broker *b, const amqp_frame_t *f, warren_error *err)
{
    char reason[512];
    int rc;

    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0; /* stray header/body frames: nothing to do */
    switch (f->payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = f->payload.method.decoded;
        if (f->channel == CH_MAIN)
            resolve(b, a->delivery_tag, a->multiple, 0);
        return 0;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *a = f->payload.method.decoded;
        if (f->channel == CH_MAIN)
            resolve(b, a->delivery_tag, a->multiple, 1);
        return 0;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        amqp_basic_return_t *r = f->payload.method.decoded;
        char text[256], rkey[256], mid[256] = "", *body;
        size_t body_len;
        uint64_t dropped;
        int has_mid;
        bytes_str(r->reply_text, text, sizeof(text));
        bytes_str(r->routing_key, rkey, sizeof(rkey));
        /* the content header and body frames follow: read them, keeping no body */
        if ((rc = read_content(b, f->channel, 0, returned_header, mid, &body, &body_len, &dropped,
                               err)) != 0)
            return rc;
        free(body);
        has_mid = mid[0] != '\0';
        warren_log(b->lg, WARREN_LOG_DEBUG, "message %s returned: %s (routing key %s)",
                   has_mid ? mid : "(no id)", text, rkey);
        if (f->channel == CH_MAIN)
            mark_returned(b, has_mid ? mid : NULL);
        /* a delay queue that vanished must be declared again */
        if (b->delay != NULL &&
            strncmp(rkey, WARREN_DELAY_PREFIX, strlen(WARREN_DELAY_PREFIX)) == 0) {
            char *end;
            long long s = strtoll(rkey + strlen(WARREN_DELAY_PREFIX), &end, 10);
            if (*end == '\0')
                b->delay[(uint64_t)s % DELAY_CACHE].second = INT64_MIN;
        }
        if (b->ring_at != NULL &&
            strncmp(rkey, WARREN_DELAY_PREFIX "ring.", strlen(WARREN_DELAY_PREFIX "ring.")) == 0) {
            char *end;
            long long s = strtoll(rkey + strlen(WARREN_DELAY_PREFIX "ring."), &end, 10);
            if (*end == '\0' && s >= 0 && s < b->ring_size)
                b->ring_at[s] = 0;
        }
        return 0;
    }
    case AMQP_BASIC_DELIVER_METHOD: {
        delivered_ctx c = {.b = b, .dv = *(amqp_basic_deliver_t *)f->payload.method.decoded};
        char *body;
        size_t body_len;
        uint64_t dropped;
        /* the delivery is made from dv and the properties at the header frame
         * (delivered_header), before the pool they live in is released */
        if ((rc = read_content(b, f->channel, b->max_body, delivered_header, &c, &body, &body_len,
                               &dropped, err)) != 0)
            return rc;
        if (body != NULL) {
            free(c.d.body);
            c.d.body = body;
            c.d.body_len = body_len;
        }
        return dq_push(b, &c.d, err);
    }
    case AMQP_BASIC_CANCEL_METHOD: {
        amqp_basic_cancel_t *c = f->payload.method.decoded;
        char tag[256];
        bytes_str(c->consumer_tag, tag, sizeof(tag));
        warren_log(b->lg, WARREN_LOG_WARN, "RabbitMQ cancelled the consumer of %s", tag);
        for (size_t i = 0; i < b->nconsumers; i++)
            if (strcmp(b->consumers[i], tag) == 0) {
                free(b->consumers[i]);
                b->consumers[i] = b->consumers[--b->nconsumers];
                break;
            }
        return 0;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD:
        warren_log(b->lg, WARREN_LOG_WARN, "RabbitMQ at %s blocks publishers (resource alarm)",
                   b->where);
        return 0;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        warren_log(b->lg, WARREN_LOG_INFO, "RabbitMQ at %s accepts publishes again", b->where);
        return 0;
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD: {
        char what[32];
        snprintf(what, sizeof(what), "channel %d", (int)f->channel);
        rc = server_close(b, f->channel, f->payload.method, reason, sizeof(reason));
        if (rc == WARREN_EBROKERCONN)
            return dead_error(b, err);
        warren_log(b->lg, WARREN_LOG_WARN, "RabbitMQ closed %s: %s (reopened)", what, reason);
        return 0;
    }
    default:
        warren_log(b->lg, WARREN_LOG_DEBUG, "ignoring AMQP method 0x%08x on channel %d",
                   (unsigned)f->payload.method.id, (int)f->channel);
        return 0;
    }
}

/* Reads and dispatches frames for up to timeout_ms. Returns 0 after one
 * frame, WARREN_ETIMEOUT when none came, or an error. */
static int pump(warren_broker *b, int64_t timeout_ms, warren_error *err)
{
    amqp_frame_t f;
    struct timeval tv = ms_tv(timeout_ms);
    int status;

    amqp_maybe_release_buffers(b->conn);
    status = amqp_simple_wait_frame_noblock(b->conn, &f, &tv);
    if (status == AMQP_STATUS_TIMEOUT)
        return WARREN_ETIMEOUT;
    if (status != AMQP_STATUS_OK) {
        lost(b, amqp_error_string2(status));
        return dead_error(b, err);
    }
    return dispatch(b, &f, err);
}

int warren_broker_poll(warren_broker *b, int timeout_ms, warren_error *err)
{
    int64_t deadline;
    int rc;

    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_poll: NULL broker");
    if (b->dead)
        return dead_error(b, err);
    deadline = warren__mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        rc = pump(b, deadline - warren__mono_ms(), err);
        if (rc == WARREN_ETIMEOUT)
            return 0;
        if (rc != 0)
            return rc;
        if (warren__mono_ms() >= deadline && !amqp_frames_enqueued(b->conn) &&
            !amqp_data_in_buffer(b->conn))
            return 0;
    }
}

/* Calls fn for every resolved, unreported publish up to seq (in seq order),
 * then drops the reported prefix. */
static void report(warren_broker *b, uint64_t seq, warren_confirm_fn fn, void *ud)
{
    uint64_t end = seq < b->next_seq ? seq + 1 : b->next_seq;

    for (uint64_t s = b->base; s < end; s++) {
        pending *p = pend_at(b, s);
        if (p->status == ST_PENDING || p->reported)
            continue;
        p->reported = 1;
        if (fn != NULL)
            fn(ud, s,
               p->status == ST_ACKED      ? WARREN_BROKER_ACKED
               : p->status == ST_RETURNED ? WARREN_BROKER_RETURNED
                                          : WARREN_BROKER_NACKED);
    }
    while (b->base < b->next_seq && pend_at(b, b->base)->reported) {
        pending *p = pend_at(b, b->base);
        free(p->message_id);
        p->message_id = NULL;
        b->base++;
    }
}

static int all_resolved(warren_broker *b, uint64_t seq)
{
    advance_floor(b);
    return b->floor >= (seq < b->next_seq ? seq : b->next_seq - 1);
}

int warren_broker_confirm_wait(warren_broker *b, uint64_t seq, int timeout_ms, warren_confirm_fn fn,
                               void *ud, warren_error *err)
{
    int64_t deadline;
    int rc;

    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_confirm_wait: NULL broker");
    if (!b->confirming)
        return warren_error_set(err, WARREN_EINVAL,
                                "warren_broker_confirm_wait: call warren_broker_confirm_select "
                                "first");
    deadline = warren__mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    while (b->dead || !all_resolved(b, seq)) {
        int64_t left;
        if (b->dead) {
            nack_all_pending(b);
            report(b, seq, fn, ud);
            return dead_error(b, err);
        }
        left = deadline - warren__mono_ms();
        if (left <= 0) {
            report(b, seq, fn, ud);
            return warren_error_set(err, WARREN_ETIMEOUT,
                                    "RabbitMQ at %s confirmed not every publish within %d ms",
                                    b->where, timeout_ms);
        }
        rc = pump(b, left, err);
        if (rc == WARREN_ETIMEOUT)
            continue;
        if (rc != 0 && !b->dead) {
            report(b, seq, fn, ud);
            return rc;
        }
    }
    report(b, seq, fn, ud);
    if (b->pend_error) {
        b->pend_error = 0;
        return warren_error_set(err, WARREN_EBROKER,
                                "RabbitMQ at %s closed the publishing channel (%s); its "
                                "unconfirmed publishes were reported as nacked",
                                b->where, b->pend_reason);
    }
    return 0;
}

/* ---- consuming ---------------------------------------------------------------- */

int warren_broker_set_max_body(warren_broker *b, size_t bytes, warren_error *err)
{
    if (b == NULL || bytes > MAX_BODY)
        return warren_error_set(err, WARREN_EINVAL, "a consumed body may be kept up to %u bytes",
                                MAX_BODY);
    b->max_body = bytes;
    return 0;
}

int warren_broker_qos(warren_broker *b, int prefetch, warren_error *err)
{
    char reason[512];
    int rc;

    if (b == NULL || prefetch < 0 || prefetch > 65535)
        return warren_error_set(err, WARREN_EINVAL, "prefetch must be between 0 and 65535");
    if (b->dead)
        return dead_error(b, err);
    amqp_basic_qos(b->conn, CH_MAIN, 0, (uint16_t)prefetch, 0);
    rc = reply_reason(b, CH_MAIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, "setting prefetch on", "channel 1", reason, err);
    b->prefetch = prefetch;
    return 0;
}

int warren_broker_consume(warren_broker *b, const char *queue, warren_error *err)
{
    amqp_bytes_t q;
    char reason[512];
    int rc;

    if (b == NULL || queue == NULL || queue[0] == '\0' || strlen(queue) > 255)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_consume: bad queue name");
    if (b->dead)
        return dead_error(b, err);
    if (b->nconsumers == MAX_CONSUMERS)
        return warren_error_set(err, WARREN_EINVAL, "at most %d consumers per connection",
                                MAX_CONSUMERS);
    for (size_t i = 0; i < b->nconsumers; i++)
        if (strcmp(b->consumers[i], queue) == 0)
            return warren_error_set(err, WARREN_EINVAL, "already consuming %s", queue);
    /* a consume of a missing queue would close channel 1 (and nack its
     * unconfirmed publishes): ask on the declaration channel first */
    if ((rc = passive_declare(b, queue, "consuming queue", NULL, NULL, err)) != 0)
        return rc;
    q = amqp_cstring_bytes(queue);
    amqp_basic_consume(b->conn, CH_MAIN, q, q, 0, 0, 0, amqp_empty_table);
    rc = reply_reason(b, CH_MAIN, amqp_get_rpc_reply(b->conn), reason, sizeof(reason));
    if (rc != 0)
        return fail(b, rc, "consuming queue", queue, reason, err);
    if ((b->consumers[b->nconsumers] = strdup(queue)) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    b->nconsumers++;
    return 0;
}

int warren_broker_cancel_consumers(warren_broker *b, warren_error *err)
{
    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_cancel_consumers: NULL broker");
    while (b->nconsumers > 0) {
        /* Out of the list first: a channel reopened later must not consume
         * it again. No wait for cancel-ok (nowait): a stopping worker's loop
         * must keep heartbeating even if the broker does not answer. */
        char *tag = b->consumers[--b->nconsumers];
        amqp_basic_cancel_t m = {.consumer_tag = amqp_cstring_bytes(tag), .nowait = 1};
        int status = b->dead ? AMQP_STATUS_OK
                             : amqp_send_method(b->conn, CH_MAIN, AMQP_BASIC_CANCEL_METHOD, &m);
        free(tag);
        if (b->dead)
            return dead_error(b, err);
        if (status != AMQP_STATUS_OK) {
            lost(b, amqp_error_string2(status));
            return dead_error(b, err);
        }
    }
    return 0;
}

int warren_broker_next(warren_broker *b, int timeout_ms, warren_delivery *d, int *got,
                       warren_error *err)
{
    int64_t deadline;

    if (got != NULL)
        *got = 0;
    if (b == NULL || d == NULL || got == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_next: bad arguments");
    memset(d, 0, sizeof(*d));
    deadline = warren__mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int64_t left;
        int rc;

        if (b->dq_len > 0) {
            *d = b->dq[b->dq_head];
            b->dq_head = (b->dq_head + 1) % b->dq_cap;
            b->dq_len--;
            *got = 1;
            return 0;
        }
        if (b->dead)
            return dead_error(b, err);
        /* One frame at a time through the dispatcher, deliveries included:
         * read_content checks a body's size before anything is allocated
         * (amqp_consume_message would allocate whatever the header says). */
        left = deadline - warren__mono_ms();
        rc = pump(b, left > 0 ? left : 0, err);
        if (rc == WARREN_ETIMEOUT)
            return 0;
        if (rc != 0)
            return rc;
        if (b->dq_len == 0 && warren__mono_ms() >= deadline)
            return 0;
    }
}

static int stale_tag(uint64_t tag, warren_error *err)
{
    return warren_error_set(err, WARREN_ESTALE,
                            "delivery %" PRIu64 " came on a channel that has since been closed; "
                            "RabbitMQ redelivers the message",
                            tag & TAG_MASK);
}

/* basic.ack of wire tag t (multiple: everything outstanding up to t). */
static int send_ack(warren_broker *b, uint64_t t, int multiple, warren_error *err)
{
    int status = amqp_basic_ack(b->conn, CH_MAIN, t, multiple ? 1 : 0);
    if (status != AMQP_STATUS_OK) {
        lost(b, amqp_error_string2(status));
        return dead_error(b, err);
    }
    return 0;
}

int warren_broker_ack(warren_broker *b, uint64_t tag, warren_error *err)
{
    int rc;

    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_ack: NULL broker");
    if (b->dead)
        return dead_error(b, err);
    if ((tag >> TAG_BITS) != b->gen)
        return stale_tag(tag, err);
    if ((rc = send_ack(b, tag & TAG_MASK, 0, err)) != 0)
        return rc;
    uq_mark(b, tag & TAG_MASK, UQ_SETTLED);
    return 0;
}

int warren_broker_ack_later(warren_broker *b, uint64_t tag, warren_error *err)
{
    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_ack_later: NULL broker");
    if (b->dead)
        return dead_error(b, err);
    if ((tag >> TAG_BITS) != b->gen)
        return stale_tag(tag, err);
    if (uq_find(b, tag & TAG_MASK) == NULL)
        return warren_broker_ack(b, tag, err); /* not tracked: at once */
    uq_mark(b, tag & TAG_MASK, UQ_LATER);
    return 0;
}

int warren_broker_ack_flush(warren_broker *b, warren_error *err)
{
    return warren_broker_ack_flush_held(b, 0, err);
}

int warren_broker_ack_flush_held(warren_broker *b, int64_t hold_ms, warren_error *err)
{
    size_t n = 0;
    uint64_t upto = 0;
    int64_t now;
    int rc;

    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_ack_flush_held: NULL broker");
    if (b->dead)
        return dead_error(b, err);
    /* The longest prefix with nothing open: one multiple-ack up to its last
     * acknowledgement settles all of it (settled ones are no longer
     * outstanding, so the multiple-ack does not touch them). */
    while (n < b->uq_len && uq_at(b, n)->state != UQ_OPEN) {
        if (uq_at(b, n)->state == UQ_LATER)
            upto = uq_at(b, n)->tag;
        n++;
    }
    if (upto != 0 && (rc = send_ack(b, upto, 1, err)) != 0)
        return rc;
    if (n > 0) {
        b->uq_head = (b->uq_head + n) & (b->uq_cap - 1);
        b->uq_len -= n;
    }
    /* Behind an open delivery: one by one once they have waited hold_ms (the
     * open one usually settles within milliseconds, and one multiple-ack then
     * covers them all; waiting longer would hold the prefetch). Not at all
     * once the first open one has been open for ACK_LONG_OPEN x hold_ms (a
     * long handler, not a run waiting for its claim or completion batch):
     * it is unlikely to settle soon, and every held acknowledgement keeps a
     * prefetch slot from the next delivery. */
    now = hold_ms > 0 ? warren__mono_ms() : 0;
    if (hold_ms > 0 && b->uq_len > 0 && now - uq_at(b, 0)->open_ms >= ACK_LONG_OPEN * hold_ms)
        hold_ms = 0;
    for (size_t i = 0; i < b->uq_len; i++) {
        unsettled *u = uq_at(b, i);
        if (u->state != UQ_LATER || (hold_ms > 0 && now - u->later_ms < hold_ms))
            continue;
        if ((rc = send_ack(b, u->tag, 0, err)) != 0)
            return rc;
        u->state = UQ_SETTLED;
    }
    /* Settled entries behind a long-open one: compact now and then (open
     * and held ones stay). */
    if (b->uq_len > 4 * b->uq_open + 256) {
        size_t k = 0;
        for (size_t i = 0; i < b->uq_len; i++)
            if (uq_at(b, i)->state != UQ_SETTLED)
                *uq_at(b, k++) = *uq_at(b, i);
        b->uq_len = k;
    }
    return 0;
}

int64_t warren_broker_ack_due(const warren_broker *b, int64_t hold_ms)
{
    int64_t due = INT64_MAX;
    if (b == NULL || b->dead || hold_ms <= 0)
        return due;
    for (size_t i = 0; i < b->uq_len; i++) {
        const unsettled *u = &b->uq[(b->uq_head + i) & (b->uq_cap - 1)];
        if (u->state == UQ_LATER && u->later_ms + hold_ms < due)
            due = u->later_ms + hold_ms;
    }
    if (due != INT64_MAX && b->uq_len > 0) {
        /* the first open one's long-open mark comes sooner */
        int64_t long_open = b->uq[b->uq_head].open_ms + ACK_LONG_OPEN * hold_ms;
        if (long_open < due)
            due = long_open;
    }
    return due;
}

int warren_broker_fd(const warren_broker *b)
{
    return b != NULL && !b->dead ? amqp_get_sockfd(b->conn) : -1;
}

int warren_broker_readable(const warren_broker *b)
{
    return b != NULL && !b->dead &&
           (b->dq_len > 0 || amqp_frames_enqueued(b->conn) || amqp_data_in_buffer(b->conn));
}

int warren_broker_reject(warren_broker *b, uint64_t tag, int requeue, warren_error *err)
{
    int status;

    if (b == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_broker_reject: NULL broker");
    if (b->dead)
        return dead_error(b, err);
    if ((tag >> TAG_BITS) != b->gen)
        return stale_tag(tag, err);
    status = amqp_basic_reject(b->conn, CH_MAIN, tag & TAG_MASK, requeue ? 1 : 0);
    if (status == AMQP_STATUS_OK)
        uq_mark(b, tag & TAG_MASK, UQ_SETTLED);
    if (status != AMQP_STATUS_OK) {
        lost(b, amqp_error_string2(status));
        return dead_error(b, err);
    }
    return 0;
}
