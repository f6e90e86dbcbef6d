/* bench_broker: publisher-confirm throughput into a quorum ready queue,
 * pipelined (a window of unconfirmed publishes) versus waiting for each
 * confirm. One JSON line per measurement on stdout.
 *
 *   eval "$(tests/servers.sh start)"
 *   build/tests/bench_broker [MESSAGES] [WINDOW]      (default 20000, 256)
 *
 * Then release lateness through per-second delay queues (arrival at a ready
 * queue consumer - due, one clock): 1000 runs due over 5 s, and 500 runs due
 * at one instant.
 *
 * Each run gets a fresh vhost (testenv_vhost) with the topology for queue
 * "bench"; messages are persistent 300-byte run messages with the contract's
 * headers, routed through the warren.ready headers exchange. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <warren/broker.h>

#include "testenv.h"

typedef struct counts {
    long acked, other;
} counts;

static void on_confirm(void *ud, uint64_t seq, warren_publish_status st)
{
    counts *c = ud;
    (void)seq;
    if (st == WARREN_BROKER_ACKED)
        c->acked++;
    else
        c->other++;
}

/* The vhost of the current measurement, deleted when it is done. */
static char *bench_url;

static void drop_vhost(void)
{
    char *vpath = testenv_vhost_path(bench_url), *resp = NULL, path[512];
    snprintf(path, sizeof(path), "/api/vhosts/%s", vpath);
    testenv_http("DELETE", path, NULL, &resp);
    free(resp);
    free(vpath);
    free(bench_url);
    bench_url = NULL;
}

static warren_broker *fresh(void)
{
    static const char *const queues[] = {"bench"};
    warren_error err = {0};
    warren_broker *b = NULL;
    char *url = testenv_vhost();

    if (warren_broker_open(url, NULL, &b, &err) != 0)
        testenv_die("open", err.message);
    if (warren_broker_topology(b, queues, 1, 5, &err) != 0)
        testenv_die("topology", err.message);
    if (warren_broker_confirm_select(b, &err) != 0)
        testenv_die("confirm.select", err.message);
    bench_url = url;
    return b;
}

/* Publishes n messages keeping at most window unconfirmed (window 1 waits for
 * every confirm); prints one JSON line. */
static void run(const char *mode, long n, long window)
{
    warren_header h[5] = {{WARREN_QUEUE_HEADER, "bench"},
                          {"x-warren-job", "bench"},
                          {"x-warren-scheduled-at", "2026-11-29T14:00:00Z"},
                          {"x-warren-due-at", "2026-11-29T14:00:00.000Z"},
                          {"x-warren-attempt", "0"}};
    warren_broker *b = fresh();
    warren_error err = {0};
    warren_message m = {0};
    counts c = {0};
    char body[301], id[64];
    uint64_t seq = 0;
    double t0, dt;
    uint32_t depth = 0;

    memset(body, 'x', 300);
    body[0] = '{';
    body[299] = '}';
    body[300] = '\0';
    m.exchange = WARREN_READY_EXCHANGE;
    m.routing_key = "bench";
    m.type = "bench";
    m.expiration_ms = -1;
    m.headers = h;
    m.nheaders = 5;
    m.body = body;
    m.body_len = 300;
    m.mandatory = 1;
    m.message_id = id;
    t0 = testenv_mono_s();
    for (long i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "bench@%ld", i);
        if (warren_broker_publish(b, &m, &seq, &err) != 0)
            testenv_die("publish", err.message);
        /* a sliding window: at most `window` publishes unconfirmed */
        if ((long)seq >= window && warren_broker_confirm_wait(b, seq - (uint64_t)window + 1, 30000,
                                                              on_confirm, &c, &err) != 0)
            testenv_die("confirm_wait", err.message);
    }
    if (warren_broker_confirm_wait(b, seq, 30000, on_confirm, &c, &err) != 0)
        testenv_die("confirm_wait", err.message);
    dt = testenv_mono_s() - t0;
    if (warren_broker_queue_count(b, "warren.ready.bench", &depth, NULL, &err) != 0)
        testenv_die("queue_count", err.message);
    printf("{\"bench\":\"broker_publish_confirm\",\"mode\":\"%s\",\"queue\":\"quorum\","
           "\"messages\":%ld,\"window\":%ld,\"body_bytes\":300,\"seconds\":%.3f,"
           "\"msg_per_s\":%.0f,\"acked\":%ld,\"not_acked\":%ld,\"queue_depth\":%" PRIu32 "}\n",
           mode, n, window, dt, (double)n / dt, c.acked, c.other, depth);
    fflush(stdout);
    warren_broker_free(b);
    drop_vhost();
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Release lateness through per-second delay queues: n runs due over
 * spread_ms starting 2 s from now (spread 0: all at one instant), published
 * in due order with expiration = due - now, consumed from the ready queue by
 * a second connection (prefetch 500). Lateness = arrival - due, one clock. */
static void run_delay(const char *mode, long n, long spread_ms)
{
    warren_header h[2] = {{WARREN_QUEUE_HEADER, "bench"}, {"x-warren-job", "bench"}};
    warren_broker *b = fresh();
    warren_error err = {0};
    warren_message m = {0};
    warren_delivery d;
    counts c = {0};
    char id[64], qname[64];
    int64_t *due = calloc((size_t)n, sizeof(*due)), *late = calloc((size_t)n, sizeof(*late));
    int64_t start = testenv_wall_ms() + 2000, deadline, publish_ms;
    uint64_t seq = 0;
    long got_n = 0, early = 0;
    int got;

    if (due == NULL || late == NULL)
        exit(1);
    m.exchange = "";
    m.type = "bench";
    m.headers = h;
    m.nheaders = 2;
    m.body = "{}";
    m.body_len = 2;
    m.mandatory = 1;
    m.message_id = id;
    /* consume from the start: nothing is due before publishing ends (2 s) */
    if (warren_broker_qos(b, 500, &err) != 0 ||
        warren_broker_consume(b, "warren.ready.bench", &err) != 0)
        testenv_die("consume", err.message);
    for (long i = 0; i < n; i++) {
        due[i] = start + (n > 1 ? spread_ms * i / (n - 1) : 0);
        snprintf(id, sizeof(id), "%ld", i);
        if (warren_broker_delay_queue(b, due[i] / 1000, 600000, qname, sizeof(qname), &err) != 0)
            testenv_die("delay_queue", err.message);
        m.routing_key = qname;
        m.expiration_ms = due[i] - testenv_wall_ms();
        if (m.expiration_ms < 1)
            m.expiration_ms = 1;
        if (warren_broker_publish(b, &m, &seq, &err) != 0)
            testenv_die("publish", err.message);
        if ((long)seq % 256 == 0 &&
            warren_broker_confirm_wait(b, seq, 30000, on_confirm, &c, &err) != 0)
            testenv_die("confirm_wait", err.message);
    }
    if (warren_broker_confirm_wait(b, seq, 30000, on_confirm, &c, &err) != 0)
        testenv_die("confirm_wait", err.message);
    publish_ms = testenv_wall_ms() - (start - 2000);
    deadline = start + spread_ms + 30000;
    while (got_n < n && testenv_wall_ms() < deadline) {
        if (warren_broker_next(b, 1000, &d, &got, &err) != 0)
            testenv_die("next", err.message);
        if (!got)
            continue;
        {
            int64_t now = testenv_wall_ms();
            long i = atol(d.message_id ? d.message_id : "-1");
            if (i >= 0 && i < n) {
                late[got_n] = now - due[i];
                if (late[got_n] < 0)
                    early++;
                got_n++;
            }
        }
        if (warren_broker_ack(b, d.tag, &err) != 0)
            testenv_die("ack", err.message);
        warren_delivery_clear(&d);
    }
    qsort(late, (size_t)got_n, sizeof(*late), cmp_i64);
    printf("{\"bench\":\"broker_delay_release\",\"mode\":\"%s\",\"runs\":%ld,"
           "\"spread_ms\":%ld,\"publish_ms\":%" PRId64
           ",\"received\":%ld,\"early\":%ld,\"lateness_ms\":{\"min\":%" PRId64 ",\"p50\":%" PRId64
           ",\"p99\":%" PRId64 ",\"max\":%" PRId64 "}}\n",
           mode, n, spread_ms, publish_ms, got_n, early, got_n ? late[0] : -1,
           got_n ? late[got_n / 2] : -1, got_n ? late[(got_n * 99) / 100] : -1,
           got_n ? late[got_n - 1] : -1);
    fflush(stdout);
    free(due);
    free(late);
    warren_broker_free(b);
    drop_vhost();
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    long window = argc > 2 ? atol(argv[2]) : 256;

    if (n <= 0 || window <= 0) {
        fprintf(stderr, "usage: bench_broker [MESSAGES] [WINDOW]\n");
        return 2;
    }
    testenv_amqp_url(); /* exits with a message when the servers are not set up */
    run("pipelined", n, window);
    /* waiting for every confirm is ~25x slower: fewer messages, same rate */
    run("confirm_each", n / 10 > 0 ? n / 10 : 1, 1);
    run_delay("steady", 1000, 5000); /* 200 runs/s, ms-distinct due times */
    run_delay("burst", 500, 0);      /* 500 runs due at one instant */
    return 0;
}
