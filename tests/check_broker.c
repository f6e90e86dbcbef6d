/* check_broker: src/broker.c against the real RabbitMQ (tests/servers.sh):
 * topology, publisher confirms and returns, delay queues, consuming,
 * dead-lettering, delivery limits, error translation. Each test gets a
 * fresh vhost from fresh_vhost(). */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/codec.h>

#include "testenv.h"

static int64_t wall_s(void)
{
    return (int64_t)time(NULL);
}

/* Vhosts of the running test (Check forks one process per test). A test that
 * passes deletes them in its teardown, so RabbitMQ does not recover hundreds
 * of them at every restart; a failing test keeps its vhost to look at. */
static char *vhosts[16];
static int nvhosts;

static char *fresh_vhost(void)
{
    char *url = testenv_vhost();
    if (nvhosts < 16)
        vhosts[nvhosts++] = strdup(url);
    return url;
}

static void delete_vhosts(void)
{
    for (int i = 0; i < nvhosts; i++) {
        char *vpath = testenv_vhost_path(vhosts[i]), *resp = NULL, path[512];
        snprintf(path, sizeof(path), "/api/vhosts/%s", vpath);
        testenv_http("DELETE", path, NULL, &resp);
        free(resp);
        free(vpath);
        free(vhosts[i]);
    }
    nvhosts = 0;
}

static void no_setup(void) {}

/* A fresh vhost with the topology for queue "default" (and "other"). */
static warren_broker *open_fresh(char **url_out, int delivery_limit)
{
    static const char *const queues[] = {"default", "other"};
    warren_error err = {0};
    warren_broker *b = NULL;
    char *url = fresh_vhost();

    ck_assert_msg(warren_broker_open(url, NULL, &b, &err) == 0, "open: %s", err.message);
    ck_assert_msg(warren_broker_topology(b, queues, 2, delivery_limit, &err) == 0, "topology: %s",
                  err.message);
    if (url_out != NULL)
        *url_out = url;
    else
        free(url);
    return b;
}

typedef struct confirms {
    uint64_t last_seq; /* seqs must come in order, each once */
    int acked, nacked, returned;
    warren_publish_status by_seq[2048];
} confirms;

static void on_confirm(void *ud, uint64_t seq, warren_publish_status st)
{
    confirms *c = ud;
    ck_assert_msg(seq == c->last_seq + 1, "confirm for seq %" PRIu64 " after %" PRIu64, seq,
                  c->last_seq);
    c->last_seq = seq;
    if (seq < 2048)
        c->by_seq[seq] = st;
    if (st == WARREN_BROKER_ACKED)
        c->acked++;
    else if (st == WARREN_BROKER_NACKED)
        c->nacked++;
    else
        c->returned++;
}

/* A run-like message for job queue q. */
static uint64_t publish_run(warren_broker *b, const char *exchange, const char *rkey,
                            const char *queue, const char *id, int64_t expiration_ms, int mandatory)
{
    warren_header h[3] = {
        {WARREN_QUEUE_HEADER, queue}, {"x-warren-job", "report"}, {"x-warren-attempt", "0"}};
    warren_message m = {0};
    warren_error err = {0};
    uint64_t seq = 0;
    char body[128];

    snprintf(body, sizeof(body), "{\"run_key\":\"%s\"}", id);
    m.exchange = exchange;
    m.routing_key = rkey;
    m.message_id = id;
    m.type = "report";
    m.timestamp = (warren_us)1764424800 * WARREN_US_PER_S;
    m.expiration_ms = expiration_ms;
    m.headers = h;
    m.nheaders = 3;
    m.body = body;
    m.body_len = strlen(body);
    m.mandatory = mandatory;
    ck_assert_msg(warren_broker_publish(b, &m, &seq, &err) == 0, "publish: %s", err.message);
    return seq;
}

static uint32_t depth(warren_broker *b, const char *queue)
{
    warren_error err = {0};
    uint32_t n = 0;
    ck_assert_msg(warren_broker_queue_count(b, queue, &n, NULL, &err) == 0, "count %s: %s", queue,
                  err.message);
    return n;
}

/* depth() once it reaches want, polled for up to 5 s: a quorum queue
 * dead-letters asynchronously, after the reject or return that caused it. */
static uint32_t depth_reaching(warren_broker *b, const char *queue, uint32_t want)
{
    uint32_t n = depth(b, queue);
    for (int i = 0; i < 50 && n != want; i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
        n = depth(b, queue);
    }
    return n;
}

/* Waits up to ms for one delivery. */
static void next_or_fail(warren_broker *b, int ms, warren_delivery *d)
{
    warren_error err = {0};
    int got = 0;
    ck_assert_msg(warren_broker_next(b, ms, d, &got, &err) == 0, "next: %s", err.message);
    ck_assert_msg(got, "no delivery within %d ms", ms);
}

static void wait_all(warren_broker *b, uint64_t seq, confirms *c)
{
    warren_error err = {0};
    ck_assert_msg(warren_broker_confirm_wait(b, seq, 10000, on_confirm, c, &err) == 0,
                  "confirm_wait: %s", err.message);
    /* by_seq starts zeroed, which reads as ACKED: the callback must have
     * reached seq (on_confirm checks they come in order, each once). */
    ck_assert_msg(c->last_seq == seq, "confirms reported up to %" PRIu64 ", waited for %" PRIu64,
                  c->last_seq, seq);
}

/* ---- topology --------------------------------------------------------------- */

START_TEST(test_topology_twice_is_idempotent)
{
    static const char *const queues[] = {"default", "other"};
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    uint32_t consumers = 9;

    ck_assert_msg(warren_broker_topology(b, queues, 2, 5, &err) == 0, "again: %s", err.message);
    ck_assert_uint_eq(depth(b, "warren.ready.default"), 0);
    ck_assert_uint_eq(depth(b, "warren.ready.other"), 0);
    ck_assert_uint_eq(depth(b, WARREN_DEAD_QUEUE), 0);
    ck_assert_int_eq(warren_broker_queue_count(b, "warren.ready.default", NULL, &consumers, &err),
                     0);
    ck_assert_uint_eq(consumers, 0);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_topology_conflict_names_queue_and_argument)
{
    static const char *const queues[] = {"default"};
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    confirms c = {0};
    uint64_t seq;

    ck_assert_int_eq(warren_broker_topology(b, queues, 1, 3, &err), WARREN_ECONFLICT);
    ck_assert_msg(strstr(err.message, "\"warren.ready.default\"") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "\"x-delivery-limit\"") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "'3'") != NULL && strstr(err.message, "'5'") != NULL,
                  "both values: %s", err.message);
    ck_assert_msg(strstr(err.message, "delete the queue") != NULL, "the fix: %s", err.message);
    /* the broker object is still usable: declares, counts and publishes */
    ck_assert(warren_broker_connected(b));
    warren_error_clear(&err);
    ck_assert_msg(warren_broker_topology(b, queues, 1, 5, &err) == 0, "%s", err.message);
    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "after-conflict", -1, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 1);
    ck_assert_uint_eq(depth(b, "warren.ready.default"), 1);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_topology_conflicts_on_exchange_type_and_queue_type)
{
    static const char *const queues[] = {"default"};
    char *url = fresh_vhost(), *vpath = testenv_vhost_path(url), *resp = NULL;
    warren_error err = {0};
    warren_broker *b = NULL;
    char path[512];

    snprintf(path, sizeof(path), "/api/exchanges/%s/warren.events", vpath);
    ck_assert_int_lt(testenv_http("PUT", path, "{\"type\":\"direct\",\"durable\":true}", &resp),
                     300);
    free(resp);
    snprintf(path, sizeof(path), "/api/queues/%s/warren.ready.default", vpath);
    ck_assert_int_lt(testenv_http("PUT", path, "{\"durable\":true}", &resp), 300);
    free(resp);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), 0);
    ck_assert_int_eq(warren_broker_topology(b, queues, 1, 5, &err), WARREN_ECONFLICT);
    ck_assert_msg(strstr(err.message, "exchange \"warren.events\"") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "\"type\"") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "delete the exchange") != NULL, "%s", err.message);
    snprintf(path, sizeof(path), "/api/exchanges/%s/warren.events", vpath);
    ck_assert_int_lt(testenv_http("DELETE", path, NULL, &resp), 300);
    free(resp);
    warren_error_clear(&err);
    /* a classic queue where a quorum one belongs */
    ck_assert_int_eq(warren_broker_topology(b, queues, 1, 5, &err), WARREN_ECONFLICT);
    ck_assert_msg(strstr(err.message, "queue \"warren.ready.default\"") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "\"x-queue-type\"") != NULL ||
                      strstr(err.message, "\"x-delivery-limit\"") != NULL ||
                      strstr(err.message, "\"x-dead-letter-exchange\"") != NULL,
                  "%s", err.message);
    ck_assert(warren_broker_connected(b));
    warren_broker_free(b);
    free(vpath);
    free(url);
}
END_TEST

START_TEST(test_topology_rejects_bad_queue_name)
{
    static const char *const queues[] = {"bad name"};
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);

    ck_assert_int_eq(warren_broker_topology(b, queues, 1, 5, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "bad name") != NULL, "%s", err.message);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_definitions_file_imports_and_matches_topology)
{
    static const char *const queues[] = {"default"};
    warren_error err = {0};
    warren_broker *b = NULL;
    char *url = fresh_vhost(), *vpath = testenv_vhost_path(url), *defs, *resp = NULL;
    char path[512];
    confirms c = {0};
    uint64_t seq;
    FILE *f = fopen(WARREN_SOURCE_DIR "/broker/definitions.json", "r");
    long n;

    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    defs = calloc(1, (size_t)n + 1);
    ck_assert_int_eq(fread(defs, 1, (size_t)n, f), n);
    fclose(f);
    snprintf(path, sizeof(path), "/api/definitions/%s", vpath);
    ck_assert_int_lt(testenv_http("POST", path, defs, &resp), 300);
    free(resp);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), 0);
    /* what the UI imported is what warren declares: no conflict */
    ck_assert_msg(warren_broker_topology(b, queues, 1, 5, &err) == 0, "%s", err.message);
    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "imported", -1, 1);
    publish_run(b, WARREN_READY_EXCHANGE, "x", "elsewhere", "unroutable", -1, 1);
    wait_all(b, seq + 1, &c);
    ck_assert_int_eq(c.acked, 1);
    ck_assert_int_eq(c.returned, 1);
    ck_assert_uint_eq(depth(b, "warren.ready.default"), 1);
    ck_assert_int_eq(warren_broker_topology(b, queues, 1, 4, &err), WARREN_ECONFLICT);
    warren_broker_free(b);
    free(defs);
    free(vpath);
    free(url);
}
END_TEST

/* Runs `warren topology -c cfg` with WARREN_AMQP_URL=url; returns the exit
 * status and the combined output in out. */
static int run_topology_cli(const char *url, int limit, const char *planner, char *out, size_t len)
{
    char *text = testenv_fmt(
        "database = { url = \"postgresql://postgres@127.0.0.1:1/none\"; };\n"
        "broker = { url = \"amqp://guest:guest@127.0.0.1:1/%%2f\"; delivery_limit = %d; };\n"
        "jobs = ( { name = \"a\"; every = \"10s\"; queue = \"default\"; },\n"
        "         { name = \"b\"; every = \"10s\"; queue = \"slow\"; } );\n"
        "planner = { %s };\n",
        limit, planner ? planner : "");
    char *cfg = testenv_temp_file("warren_check_broker", "", text);
    char *cmd =
        testenv_fmt("WARREN_AMQP_URL='%s' '%s' topology -c '%s' 2>&1", url, WARREN_BINARY, cfg);
    int status = testenv_run(cmd, out, len);
    unlink(cfg);
    free(cmd);
    free(cfg);
    free(text);
    return status;
}

START_TEST(test_topology_command_declares_and_reports)
{
    char *url = fresh_vhost(), out[8192];
    warren_error err = {0};
    warren_broker *b = NULL;

    ck_assert_msg(run_topology_cli(url, 4, NULL, out, sizeof(out)) == 0, "%s", out);
    ck_assert_msg(strstr(out, "warren.ready.default") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "warren.ready.slow") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "x-delivery-limit 4") != NULL, "%s", out);
    ck_assert_msg(run_topology_cli(url, 4, NULL, out, sizeof(out)) == 0, "again: %s", out);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), 0);
    ck_assert_uint_eq(depth(b, "warren.ready.slow"), 0);
    ck_assert_uint_eq(depth(b, WARREN_DEAD_QUEUE), 0);
    warren_broker_free(b);
    /* a changed delivery limit: exit 1, the queue and argument named */
    ck_assert_int_eq(run_topology_cli(url, 6, NULL, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "\"warren.ready.default\"") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"x-delivery-limit\"") != NULL, "%s", out);
    /* unreachable: exit 69 naming host and port */
    ck_assert_int_eq(
        run_topology_cli("amqp://guest:guest@127.0.0.1:1/%2f", 4, NULL, out, sizeof(out)), 69);
    ck_assert_msg(strstr(out, "127.0.0.1:1") != NULL, "%s", out);
    free(url);
}
END_TEST

START_TEST(test_topology_command_declares_the_delay_ring)
{
    char *url = fresh_vhost(), out[8192];
    warren_error err = {0};
    warren_broker *b = NULL;

    /* a ring no larger than the horizon would block: refused, exit 2 */
    ck_assert_int_eq(
        run_topology_cli(url, 5, "horizon = \"10s\"; delay_ring = 8;", out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "delay_ring") != NULL && strstr(out, "12") != NULL, "%s", out);
    ck_assert_msg(
        run_topology_cli(url, 5, "horizon = \"10s\"; delay_ring = 12;", out, sizeof(out)) == 0,
        "%s", out);
    ck_assert_msg(strstr(out, "warren.delay.ring.11") != NULL, "%s", out);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), 0);
    ck_assert_uint_eq(depth(b, "warren.delay.ring.0"), 0);
    ck_assert_uint_eq(depth(b, "warren.delay.ring.11"), 0);
    ck_assert_int_eq(warren_broker_queue_count(b, "warren.delay.ring.12", NULL, NULL, &err),
                     WARREN_ENOENT);
    warren_broker_free(b);
    free(url);
}
END_TEST

/* ---- publishing ------------------------------------------------------------- */

START_TEST(test_publish_1000_pipelined_all_acked)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    confirms c = {0};
    uint64_t seq = 0;
    char id[32];

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    for (int i = 0; i < 1000; i++) {
        snprintf(id, sizeof(id), "run-%d", i);
        seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", id, -1, 1);
        ck_assert_uint_eq(seq, (uint64_t)i + 1);
    }
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 1000);
    ck_assert_int_eq(c.nacked + c.returned, 0);
    ck_assert_uint_eq(c.last_seq, 1000);
    ck_assert_uint_eq(depth(b, "warren.ready.default"), 1000);
    ck_assert_uint_eq(depth(b, "warren.ready.other"), 0);
    /* nothing left to report: a second wait calls nothing */
    ck_assert_int_eq(warren_broker_confirm_wait(b, seq, 1000, on_confirm, &c, &err), 0);
    ck_assert_int_eq(c.acked, 1000);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_mandatory_unroutable_is_returned)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    confirms c = {0};
    uint64_t s1, s2, s3, s4;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    s1 = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "a", -1, 1);
    s2 = publish_run(b, WARREN_READY_EXCHANGE, "nosuch", "nosuch", "b", -1, 1);
    s3 = publish_run(b, "", "warren.delay.0", "default", "c", 1000, 1); /* no such queue */
    s4 = publish_run(b, WARREN_READY_EXCHANGE, "other", "other", "d", -1, 1);
    wait_all(b, s4, &c);
    ck_assert_int_eq(c.by_seq[s1], WARREN_BROKER_ACKED);
    ck_assert_int_eq(c.by_seq[s2], WARREN_BROKER_RETURNED);
    ck_assert_int_eq(c.by_seq[s3], WARREN_BROKER_RETURNED);
    ck_assert_int_eq(c.by_seq[s4], WARREN_BROKER_ACKED);
    ck_assert_int_eq(c.returned, 2);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_publish_to_missing_exchange_nacks_and_recovers)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    confirms c = {0};
    uint64_t s1, s2;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    s1 = publish_run(b, "no.such.exchange", "x", "default", "lost", -1, 0);
    ck_assert_int_eq(warren_broker_confirm_wait(b, s1, 5000, on_confirm, &c, &err), WARREN_EBROKER);
    ck_assert_msg(strstr(err.message, "no.such.exchange") != NULL, "%s", err.message);
    ck_assert_int_eq(c.nacked, 1);
    ck_assert(warren_broker_connected(b));
    /* the channel was reopened in confirm mode */
    s2 = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "ok", -1, 1);
    ck_assert_uint_eq(s2, s1 + 1);
    wait_all(b, s2, &c);
    ck_assert_int_eq(c.acked, 1);
    ck_assert_uint_eq(depth(b, "warren.ready.default"), 1);
    warren_broker_free(b);
}
END_TEST

/* ---- delay queues ----------------------------------------------------------- */

START_TEST(test_delay_message_arrives_no_earlier_than_ttl_with_id_and_headers)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    char name[64];
    int64_t t0, waited;
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_msg(warren_broker_delay_queue(b, wall_s() + 2, 600000, name, sizeof(name), &err) == 0,
                  "%s", err.message);
    ck_assert_msg(strncmp(name, "warren.delay.", 13) == 0, "%s", name);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    t0 = testenv_mono_ms();
    seq = publish_run(b, "", name, "default", "report@2026-11-29T14:00:00Z", 1500, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 1);
    /* never before its TTL; how late is bench_broker's number
     * (broker_delay_release lateness_ms) */
    next_or_fail(b, 30000, &d);
    waited = testenv_mono_ms() - t0;
    ck_assert_msg(waited >= 1500, "released after %" PRId64 " ms, before its TTL", waited);
    fprintf(stderr, "released %" PRId64 " ms after its TTL\n", waited - 1500);
    ck_assert_str_eq(d.queue, "warren.ready.default");
    ck_assert_str_eq(d.message_id, "report@2026-11-29T14:00:00Z");
    ck_assert_str_eq(d.type, "report");
    ck_assert_int_eq(d.timestamp, (warren_us)1764424800 * WARREN_US_PER_S);
    ck_assert_str_eq(warren_delivery_header(&d, WARREN_QUEUE_HEADER), "default");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), "report");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-attempt"), "0");
    ck_assert_ptr_nonnull(warren_delivery_header(&d, "x-death"));
    ck_assert_msg(strstr(warren_delivery_header(&d, "x-death"), "expired") != NULL, "%s",
                  warren_delivery_header(&d, "x-death"));
    ck_assert_str_eq(d.body, "{\"run_key\":\"report@2026-11-29T14:00:00Z\"}");
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_delay_seconds_published_out_of_order_release_in_due_order)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    char late[64], soon[64];
    int64_t t0, s = wall_s(), first_at;
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_delay_queue(b, s + 4, 600000, late, sizeof(late), &err), 0);
    ck_assert_int_eq(warren_broker_delay_queue(b, s + 1, 600000, soon, sizeof(soon), &err), 0);
    /* cached: declaring again is free and gives the same name */
    ck_assert_int_eq(warren_broker_delay_queue(b, s + 1, 600000, soon, sizeof(soon), &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    t0 = testenv_mono_ms();
    publish_run(b, "", late, "default", "late", 3000, 1);
    seq = publish_run(b, "", soon, "default", "soon", 800, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 2);
    next_or_fail(b, 30000, &d);
    first_at = testenv_mono_ms() - t0;
    /* not held behind the 3 s message: the one due first comes first, and
     * never before its TTL */
    ck_assert_str_eq(d.message_id, "soon");
    ck_assert_msg(first_at >= 800, "soon released after %" PRId64 " ms", first_at);
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "late");
    ck_assert_msg(testenv_mono_ms() - t0 >= 3000, "late released early");
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_vanished_delay_queue_is_returned_then_declared_again)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    confirms c = {0};
    char name[64];
    int64_t s = wall_s() + 60;
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_delay_queue(b, s, 600000, name, sizeof(name), &err), 0);
    ck_assert_int_eq(warren_broker_queue_delete(b, name, &err), 0);
    /* still cached as declared: the publish is returned, not lost silently */
    ck_assert_int_eq(warren_broker_delay_queue(b, s, 600000, name, sizeof(name), &err), 0);
    seq = publish_run(b, "", name, "default", "r1", 50000, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.by_seq[seq], WARREN_BROKER_RETURNED);
    /* the return evicted the cache entry: declared again, then routed */
    ck_assert_int_eq(warren_broker_delay_queue(b, s, 600000, name, sizeof(name), &err), 0);
    seq = publish_run(b, "", name, "default", "r2", 50000, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.by_seq[seq], WARREN_BROKER_ACKED);
    ck_assert_uint_eq(depth(b, name), 1);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_delay_queue_expires_must_stay_constant)
{
    warren_error err = {0};
    warren_broker *b, *b2 = NULL;
    char *url = NULL;
    char name[64];
    int64_t s = wall_s() + 30;

    b = open_fresh(&url, 5);
    ck_assert_int_eq(warren_broker_delay_queue(b, s, 600000, name, sizeof(name), &err), 0);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b2, &err), 0);
    ck_assert_int_eq(warren_broker_delay_queue(b2, s, 300000, name, sizeof(name), &err),
                     WARREN_ECONFLICT);
    ck_assert_msg(strstr(err.message, "x-expires") != NULL, "%s", err.message);
    ck_assert(warren_broker_connected(b2));
    warren_error_clear(&err);
    ck_assert_int_eq(warren_broker_delay_queue(b, s, 0, name, sizeof(name), &err), WARREN_EINVAL);
    warren_broker_free(b2);
    warren_broker_free(b);
    free(url);
}
END_TEST

START_TEST(test_delay_ring_slot_releases_into_ready_queue)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    char name[64];
    int64_t t0;
    uint64_t seq;

    ck_assert_int_eq(warren_broker_delay_ring_check(60, 120000, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "122") != NULL, "%s", err.message);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_broker_delay_ring_check(122, 120000, &err), 0);
    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_msg(
        warren_broker_delay_ring_queue(b, 1000 * 122 + 7, 122, name, sizeof(name), &err) == 0, "%s",
        err.message);
    ck_assert_str_eq(name, "warren.delay.ring.7");
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.other", &err), 0);
    t0 = testenv_mono_ms();
    seq = publish_run(b, "", name, "other", "ringed", 700, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 1);
    next_or_fail(b, 5000, &d);
    ck_assert_msg(testenv_mono_ms() - t0 >= 700, "released early");
    ck_assert_str_eq(d.message_id, "ringed");
    ck_assert_str_eq(d.queue, "warren.ready.other");
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

/* ---- consuming, dead letters -------------------------------------------------- */

START_TEST(test_reject_without_requeue_lands_in_dead_queue)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "good", -1, 1);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "poison", -1, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(warren_broker_qos(b, 10, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "good");
    ck_assert_int_eq(d.redelivered, 0);
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "poison");
    ck_assert_int_eq(warren_broker_reject(b, d.tag, 0, &err), 0);
    warren_delivery_clear(&d);
    ck_assert_int_eq(warren_broker_consume(b, WARREN_DEAD_QUEUE, &err), 0);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.queue, WARREN_DEAD_QUEUE);
    ck_assert_str_eq(d.message_id, "poison");
    ck_assert_str_eq(warren_delivery_header(&d, "x-warren-job"), "report");
    ck_assert_str_eq(warren_delivery_header(&d, "x-first-death-reason"), "rejected");
    ck_assert_msg(strstr(warren_delivery_header(&d, "x-death"), "rejected warren.ready.default") !=
                      NULL,
                  "%s", warren_delivery_header(&d, "x-death"));
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    ck_assert_uint_eq(depth(b, "warren.ready.default"), 0);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_delivery_limit_dead_letters_after_limit_plus_one_deliveries)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 2);
    warren_delivery d = {0};
    confirms c = {0};
    uint64_t seq;
    int deliveries = 0, got = 0;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "crashy", -1, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    for (;;) {
        ck_assert_int_eq(warren_broker_next(b, 2000, &d, &got, &err), 0);
        if (!got)
            break;
        deliveries++;
        ck_assert_str_eq(d.message_id, "crashy");
        ck_assert_int_eq(warren_broker_reject(b, d.tag, 1, &err), 0);
        warren_delivery_clear(&d);
        ck_assert_int_le(deliveries, 10);
    }
    ck_assert_int_eq(deliveries, 3); /* x-delivery-limit 2: delivered 3 times */
    ck_assert_uint_eq(depth_reaching(b, WARREN_DEAD_QUEUE, 1), 1);
    ck_assert_int_eq(warren_broker_consume(b, WARREN_DEAD_QUEUE, &err), 0);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "crashy");
    ck_assert_str_eq(warren_delivery_header(&d, "x-first-death-reason"), "delivery_limit");
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

/* Publishes m0..m(npub-1) to the default ready queue (confirmed), consumes
 * it with prefetch 20 and takes the first n deliveries, in order, into d. */
static void publish_and_take(warren_broker *b, int npub, int n, warren_delivery *d)
{
    warren_error err = {0};
    confirms c = {0};
    uint64_t seq = 0;
    char id[32];

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    for (int i = 0; i < npub; i++) {
        snprintf(id, sizeof(id), "m%d", i);
        seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", id, -1, 1);
    }
    wait_all(b, seq, &c);
    ck_assert_int_eq(warren_broker_qos(b, 20, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    for (int i = 0; i < n; i++) {
        next_or_fail(b, 5000, &d[i]);
        snprintf(id, sizeof(id), "m%d", i);
        ck_assert_str_eq(d[i].message_id, id);
    }
}

/* After a test's connection closed: reopens url, waits until back messages
 * are ready again in warren.ready.default and takes the first ones, which
 * must be ids[0..k) in that order, each marked redelivered. Returns the
 * connection (consuming; the caller frees it). */
static warren_broker *reopen_expect(const char *url, uint32_t back, const char *const *ids,
                                    size_t k)
{
    warren_error err = {0};
    warren_broker *b = NULL;
    warren_delivery d;
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), 0);
    ck_assert_uint_eq(depth_reaching(b, "warren.ready.default", back), back);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    for (size_t i = 0; i < k; i++) {
        next_or_fail(b, 5000, &d);
        ck_assert_str_eq(d.message_id, ids[i]);
        ck_assert_int_eq(d.redelivered, 1);
        warren_delivery_clear(&d);
    }
    return b;
}

/* ack_later + ack_flush: a multiple-ack never covers a delivery still open
 * (nor one rejected meanwhile); what was left open returns to the queue when
 * the connection closes, and nothing acknowledged does. */
START_TEST(test_ack_later_flush_never_covers_an_open_delivery)
{
    warren_error err = {0};
    char *url = NULL;
    warren_broker *b = open_fresh(&url, 5);
    warren_delivery d[12];

    publish_and_take(b, 12, 12, d);
    /* m0..m2 later, m3 open, m4 rejected (dead-lettered), m5..m7 later,
     * m8 acked at once, m9 open, m10 later, m11 open */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(warren_broker_ack_later(b, d[i].tag, &err), 0);
    ck_assert_int_eq(warren_broker_reject(b, d[4].tag, 0, &err), 0);
    for (int i = 5; i < 8; i++)
        ck_assert_int_eq(warren_broker_ack_later(b, d[i].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack(b, d[8].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_later(b, d[10].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_flush(b, &err), 0);
    /* flushing again sends nothing new and fails nothing */
    ck_assert_int_eq(warren_broker_ack_flush(b, &err), 0);
    /* m3 settled late: the prefix m3..m8 is then settled by a multiple-ack up to m3 */
    ck_assert_int_eq(warren_broker_ack_later(b, d[3].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_flush(b, &err), 0);
    for (int i = 0; i < 12; i++)
        warren_delivery_clear(&d[i]);
    warren_broker_free(b); /* m9 and m11 were never acknowledged */

    static const char *const back[] = {"m9", "m11"};
    b = reopen_expect(url, 2, back, 2);
    ck_assert_uint_eq(depth_reaching(b, WARREN_DEAD_QUEUE, 1), 1);
    warren_broker_free(b);
    free(url);
}
END_TEST

/* ack_flush_held: an acknowledgement behind an open delivery waits (up to
 * hold_ms) for that delivery, so that one multiple-ack covers both; once it
 * has waited hold_ms it goes on its own. */
START_TEST(test_ack_flush_held_waits_for_the_open_delivery_ahead)
{
    warren_error err = {0};
    char *url = NULL;
    warren_broker *b = open_fresh(&url, 5);
    warren_delivery d[5];
    struct timespec ts = {0, 150 * 1000000L};

    publish_and_take(b, 5, 5, d);
    /* m1 behind open m0: held; then m0 settles and one multiple-ack covers both */
    ck_assert_int_eq(warren_broker_ack_later(b, d[1].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_flush_held(b, 60000, &err), 0);
    ck_assert_int_eq(warren_broker_ack_later(b, d[0].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_flush_held(b, 60000, &err), 0);
    /* m3 behind open m2, waited longer than the hold: sent on its own */
    ck_assert_int_eq(warren_broker_ack_later(b, d[3].tag, &err), 0);
    nanosleep(&ts, NULL);
    ck_assert_int_eq(warren_broker_ack_flush_held(b, 100, &err), 0);
    /* m4 behind open m2, within the hold: not sent */
    ck_assert_int_eq(warren_broker_ack_later(b, d[4].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_flush_held(b, 60000, &err), 0);
    for (int i = 0; i < 5; i++)
        warren_delivery_clear(&d[i]);
    warren_broker_free(b); /* m2 open, m4's acknowledgement still held */

    static const char *const back[] = {"m2", "m4"};
    warren_broker_free(reopen_expect(url, 2, back, 2));
    free(url);
}
END_TEST

/* Held acknowledgements survive the compaction of settled entries behind a
 * long-open delivery, and nothing is held once the first open delivery has
 * been open for 20 x the hold (a long handler). */
START_TEST(test_ack_flush_held_keeps_held_acks_and_skips_a_long_open_one)
{
    warren_error err = {0};
    char *url = NULL;
    warren_broker *b = open_fresh(&url, 5);
    warren_delivery d[2], x;
    struct timespec ts = {0, 150 * 1000000L};

    publish_and_take(b, 302, 2, d);
    /* m1 held behind open m0; then 280 more acknowledged one by one, so
     * that settled entries pile up behind m0 and get compacted */
    ck_assert_int_eq(warren_broker_ack_later(b, d[1].tag, &err), 0);
    ck_assert_int_eq(warren_broker_ack_flush_held(b, 600000, &err), 0);
    for (int i = 2; i < 282; i++) {
        next_or_fail(b, 5000, &x);
        ck_assert_int_eq(warren_broker_ack(b, x.tag, &err), 0);
        warren_delivery_clear(&x);
        ck_assert_int_eq(warren_broker_ack_flush_held(b, 600000, &err), 0);
    }
    /* m0 has been open for longer than 20 x a 5 ms hold: nothing waits, so m1
     * (kept through the compaction) and m282 (settled just now) go at once */
    nanosleep(&ts, NULL);
    next_or_fail(b, 5000, &x);
    ck_assert_str_eq(x.message_id, "m282");
    ck_assert_int_eq(warren_broker_ack_later(b, x.tag, &err), 0);
    warren_delivery_clear(&x);
    ck_assert_int_eq(warren_broker_ack_flush_held(b, 5, &err), 0);
    warren_delivery_clear(&d[0]);
    warren_delivery_clear(&d[1]);
    warren_broker_free(b); /* 282 acknowledged; m0 and m283..m301 return */

    static const char *const back[] = {"m0"};
    warren_broker_free(reopen_expect(url, 20, back, 1));
    free(url);
}
END_TEST

START_TEST(test_consumer_and_publisher_share_one_connection)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    uint64_t seq = 0;
    int seen = 0, got;
    char id[32];

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    for (int i = 0; i < 50; i++) {
        snprintf(id, sizeof(id), "m%d", i);
        seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", id, -1, 1);
    }
    /* deliveries arriving while we read confirms are kept, not lost */
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 50);
    for (;;) {
        ck_assert_int_eq(warren_broker_next(b, 1000, &d, &got, &err), 0);
        if (!got)
            break;
        snprintf(id, sizeof(id), "m%d", seen);
        ck_assert_str_eq(d.message_id, id);
        ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
        warren_delivery_clear(&d);
        seen++;
    }
    ck_assert_int_eq(seen, 50);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_poll_reads_confirms_and_keeps_deliveries)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "polled", -1, 1);
    ck_assert_int_eq(warren_broker_poll(b, 1000, &err), 0);
    /* the confirm was read by poll: a wait that may not wait at all has it */
    ck_assert_int_eq(warren_broker_confirm_wait(b, seq, 0, on_confirm, &c, &err), 0);
    ck_assert_int_eq(c.acked, 1);
    /* and the delivery it read is handed out by next */
    next_or_fail(b, 0, &d);
    ck_assert_str_eq(d.message_id, "polled");
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

/* Another producer's message with an absurd AMQP timestamp is delivered
 * (timestamp dropped), not an overflow that takes the consumer down. */
START_TEST(test_delivery_with_out_of_range_timestamp_is_kept)
{
    warren_error err = {0};
    char *url = NULL;
    warren_broker *b = open_fresh(&url, 5);
    warren_delivery d = {0};
    char *vpath = testenv_vhost_path(url), *resp = NULL, path[512];
    const char *body = "{\"routing_key\":\"warren.ready.default\",\"payload\":\"{}\","
                       "\"payload_encoding\":\"string\",\"properties\":{\"message_id\":"
                       "\"far\",\"timestamp\":18446744073709551615}}";

    snprintf(path, sizeof(path), "/api/exchanges/%s/amq.default/publish", vpath);
    ck_assert_int_eq(testenv_http("POST", path, body, &resp), 200);
    ck_assert_msg(strstr(resp, "\"routed\":true") != NULL, "%s", resp);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "far");
    ck_assert_int_eq(d.timestamp, 0);
    warren_delivery_clear(&d);
    free(resp);
    free(vpath);
    free(url);
    warren_broker_free(b);
}
END_TEST

/* A body over the consumer's limit is checked in the content header and
 * never kept: the delivery comes with an empty body and its size, the
 * connection stays in step (the next messages arrive whole). */
START_TEST(test_body_over_the_limit_is_dropped_before_it_is_kept)
{
    warren_error err = {0};
    char *url = NULL;
    warren_broker *b = open_fresh(&url, 5);
    warren_delivery d = {0};
    size_t big = 2u * 1024 * 1024;
    char *body = malloc(big);
    warren_header h[1] = {{WARREN_QUEUE_HEADER, "default"}};
    warren_message m = {.exchange = WARREN_READY_EXCHANGE,
                        .routing_key = "default",
                        .message_id = "big",
                        .expiration_ms = -1,
                        .headers = h,
                        .nheaders = 1,
                        .body = body,
                        .body_len = big};
    uint64_t seq = 0;
    confirms c = {0};

    ck_assert_ptr_nonnull(body);
    memset(body, 'x', big);
    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_publish(b, &m, &seq, &err), 0);
    publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "small", -1, 0);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "after", -1, 0);
    wait_all(b, seq, &c);
    ck_assert_int_eq(warren_broker_set_max_body(b, WARREN_BROKER_MAX_BODY + 1, &err),
                     WARREN_EINVAL);
    ck_assert_int_eq(warren_broker_set_max_body(b, WARREN_MSG_MAX_BODY, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    next_or_fail(b, 10000, &d);
    ck_assert_str_eq(d.message_id, "big");
    ck_assert_uint_eq(d.body_dropped, big);
    ck_assert_uint_eq(d.body_len, 0);
    ck_assert_ptr_nonnull(d.body);
    ck_assert_str_eq(d.body, "");
    ck_assert_str_eq(warren_delivery_header(&d, WARREN_QUEUE_HEADER), "default");
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "small");
    ck_assert_uint_eq(d.body_dropped, 0);
    ck_assert_str_eq(d.body, "{\"run_key\":\"small\"}");
    warren_delivery_clear(&d);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "after");
    warren_delivery_clear(&d);
    free(body);
    free(url);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_queue_count_missing_queue_is_enoent_and_consumers_survive)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0};
    confirms c = {0};
    uint32_t n = 7;
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    ck_assert_int_eq(warren_broker_queue_count(b, "warren.ready.nope", &n, NULL, &err),
                     WARREN_ENOENT);
    ck_assert_msg(strstr(err.message, "warren.ready.nope") != NULL, "%s", err.message);
    ck_assert_uint_eq(n, 7);
    warren_error_clear(&err);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "still", -1, 1);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.nope", &err), WARREN_ENOENT);
    warren_error_clear(&err);
    /* the publishing channel was not closed: the publish is acked, not
     * nacked; the first consumer still gets messages */
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.acked, 1);
    ck_assert_int_eq(c.nacked, 0);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "still");
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), 0);
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_channel_close_restores_consumer_and_refuses_stale_tags)
{
    warren_error err = {0};
    warren_broker *b = open_fresh(NULL, 5);
    warren_delivery d = {0}, d2 = {0};
    confirms c = {0};
    uint64_t seq;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_qos(b, 5, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.default", &err), 0);
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "held", -1, 1);
    wait_all(b, seq, &c);
    next_or_fail(b, 5000, &d); /* not acked yet */
    ck_assert_str_eq(d.message_id, "held");
    /* the server closes channel 1 (404): warren reopens it */
    seq = publish_run(b, "no.such.exchange", "x", "default", "boom", -1, 0);
    ck_assert_int_eq(warren_broker_confirm_wait(b, seq, 5000, on_confirm, &c, &err),
                     WARREN_EBROKER);
    warren_error_clear(&err);
    /* the unacked delivery was requeued and comes again on the new channel */
    next_or_fail(b, 5000, &d2);
    ck_assert_str_eq(d2.message_id, "held");
    ck_assert_int_eq(d2.redelivered, 1);
    ck_assert_int_eq(warren_broker_ack(b, d.tag, &err), WARREN_ESTALE);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_broker_ack(b, d2.tag, &err), 0);
    /* and the channel is in confirm mode again */
    seq = publish_run(b, WARREN_READY_EXCHANGE, "default", "default", "after", -1, 1);
    wait_all(b, seq, &c);
    ck_assert_int_eq(c.by_seq[seq], WARREN_BROKER_ACKED);
    warren_delivery_clear(&d);
    warren_delivery_clear(&d2);
    next_or_fail(b, 5000, &d);
    ck_assert_str_eq(d.message_id, "after");
    warren_delivery_clear(&d);
    warren_broker_free(b);
}
END_TEST

START_TEST(test_nack_from_full_queue_is_reported)
{
    warren_error err = {0};
    char *url = fresh_vhost(), *vpath = testenv_vhost_path(url), *resp = NULL;
    warren_broker *b = NULL;
    confirms c = {0};
    char path[512];
    uint64_t s1, s2, s3;

    /* a queue that refuses publishes beyond one message: the broker nacks */
    snprintf(path, sizeof(path), "/api/queues/%s/tiny", vpath);
    ck_assert_int_lt(testenv_http("PUT", path,
                                  "{\"durable\":true,\"arguments\":{\"x-queue-type\":\"classic\","
                                  "\"x-max-length\":1,\"x-overflow\":\"reject-publish\"}}",
                                  &resp),
                     300);
    free(resp);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), 0);
    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    s1 = publish_run(b, "", "tiny", "default", "first", -1, 1);
    wait_all(b, s1, &c); /* the queue must hold it before the next one comes */
    s2 = publish_run(b, "", "tiny", "default", "second", -1, 1);
    s3 = publish_run(b, "", "tiny", "default", "third", -1, 1);
    wait_all(b, s3, &c);
    ck_assert_int_eq(c.by_seq[s1], WARREN_BROKER_ACKED);
    ck_assert_int_eq(c.by_seq[s2], WARREN_BROKER_NACKED);
    ck_assert_int_eq(c.by_seq[s3], WARREN_BROKER_NACKED);
    ck_assert_uint_eq(depth(b, "tiny"), 1);
    warren_broker_free(b);
    free(vpath);
    free(url);
}
END_TEST

/* Percent-encodes s for a management API path segment. */
static void pct(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s != '\0' && o + 4 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '.' || ch == '_' || ch == '-')
            out[o++] = (char)ch;
        else
            o += (size_t)snprintf(out + o, len - o, "%%%02X", ch);
    }
    out[o] = '\0';
}

/* Closes every connection of the vhost through the management API (what an
 * operator or a node shutdown does). Waits until the API lists one. */
static void force_close_connections(const char *url)
{
    char *vpath = testenv_vhost_path(url), *resp = NULL;
    char path[1400], name[400], enc[1200];
    int closed = 0;

    for (int tries = 0; tries < 100 && !closed; tries++) {
        const char *p, *q;
        snprintf(path, sizeof(path), "/api/vhosts/%s/connections?columns=name", vpath);
        ck_assert_int_eq(testenv_http("GET", path, NULL, &resp), 200);
        p = strstr(resp, "\"name\":\"");
        if (p != NULL) {
            p += 8;
            q = strchr(p, '"');
            snprintf(name, sizeof(name), "%.*s", (int)(q - p), p);
            pct(name, enc, sizeof(enc));
            snprintf(path, sizeof(path), "/api/connections/%s", enc);
            free(resp);
            resp = NULL;
            ck_assert_int_lt(testenv_http("DELETE", path, NULL, &resp), 300);
            closed = 1;
        } else {
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        free(resp);
        resp = NULL;
    }
    ck_assert_msg(closed, "the management API never listed the connection");
    free(vpath);
}

START_TEST(test_server_closing_the_connection_is_ebrokerconn)
{
    warren_error err = {0};
    char *url = NULL;
    warren_broker *b = open_fresh(&url, 5);
    warren_delivery d = {0};
    confirms c = {0};
    int got = 1, rc = 0;
    int64_t t0;

    ck_assert_int_eq(warren_broker_confirm_select(b, &err), 0);
    ck_assert_int_eq(warren_broker_consume(b, "warren.ready.other", &err), 0);
    force_close_connections(url);
    t0 = testenv_mono_ms();
    while (rc == 0 && testenv_mono_ms() - t0 < 10000)
        rc = warren_broker_next(b, 500, &d, &got, &err);
    ck_assert_int_eq(rc, WARREN_EBROKERCONN);
    ck_assert_int_eq(got, 0);
    ck_assert(!warren_broker_connected(b));
    ck_assert_msg(strstr(err.message, "127.0.0.1:") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "CONNECTION_FORCED") != NULL, "%s", err.message);
    /* later calls fail at once with the same kind of error; publishes
     * awaiting confirms on a dead connection are reported nacked */
    warren_error_clear(&err);
    ck_assert_int_eq(warren_broker_ack(b, 1, &err), WARREN_EBROKERCONN);
    ck_assert_int_eq(warren_broker_confirm_wait(b, 1, 100, on_confirm, &c, &err),
                     WARREN_EBROKERCONN);
    warren_broker_free(b);
    free(url);
}
END_TEST

/* ---- connection errors ---------------------------------------------------------- */

START_TEST(test_unreachable_port_is_ebrokerconn_naming_host_and_port)
{
    warren_error err = {0};
    warren_broker *b = (warren_broker *)&err; /* must be reset to NULL */

    ck_assert_int_eq(warren_broker_open("amqp://guest:guest@127.0.0.1:1/", NULL, &b, &err),
                     WARREN_EBROKERCONN);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(err.message, "127.0.0.1:1") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "is the server running?") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "Connection refused") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "guest:guest") == NULL, "password leaked: %s", err.message);
}
END_TEST

START_TEST(test_unknown_vhost_and_bad_url_are_reported)
{
    warren_error err = {0};
    warren_broker *b = NULL;
    char url[512];
    const char *base = testenv_amqp_url();
    const char *slash = strrchr(base, '/');

    snprintf(url, sizeof(url), "%.*s/warren_no_such_vhost", (int)(slash - base), base);
    ck_assert_int_eq(warren_broker_open(url, NULL, &b, &err), WARREN_EBROKERCONN);
    ck_assert_msg(strstr(err.message, "warren_no_such_vhost") != NULL, "%s", err.message);
    ck_assert_ptr_null(b);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_broker_open("http://x", NULL, &b, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "WARREN_AMQP_URL") != NULL, "%s", err.message);
}
END_TEST

static Suite *broker_suite(void)
{
    Suite *s = suite_create("broker");
    TCase *tc;

    tc = tcase_create("topology");
    tcase_add_checked_fixture(tc, no_setup, delete_vhosts);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_topology_twice_is_idempotent);
    tcase_add_test(tc, test_topology_conflict_names_queue_and_argument);
    tcase_add_test(tc, test_topology_conflicts_on_exchange_type_and_queue_type);
    tcase_add_test(tc, test_topology_rejects_bad_queue_name);
    tcase_add_test(tc, test_definitions_file_imports_and_matches_topology);
    tcase_add_test(tc, test_topology_command_declares_and_reports);
    tcase_add_test(tc, test_topology_command_declares_the_delay_ring);
    suite_add_tcase(s, tc);

    tc = tcase_create("publish");
    tcase_add_checked_fixture(tc, no_setup, delete_vhosts);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_publish_1000_pipelined_all_acked);
    tcase_add_test(tc, test_mandatory_unroutable_is_returned);
    tcase_add_test(tc, test_publish_to_missing_exchange_nacks_and_recovers);
    tcase_add_test(tc, test_nack_from_full_queue_is_reported);
    tcase_add_test(tc, test_channel_close_restores_consumer_and_refuses_stale_tags);
    suite_add_tcase(s, tc);

    tc = tcase_create("delay");
    tcase_add_checked_fixture(tc, no_setup, delete_vhosts);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_delay_message_arrives_no_earlier_than_ttl_with_id_and_headers);
    tcase_add_test(tc, test_delay_seconds_published_out_of_order_release_in_due_order);
    tcase_add_test(tc, test_vanished_delay_queue_is_returned_then_declared_again);
    tcase_add_test(tc, test_delay_queue_expires_must_stay_constant);
    tcase_add_test(tc, test_delay_ring_slot_releases_into_ready_queue);
    suite_add_tcase(s, tc);

    tc = tcase_create("consume");
    tcase_add_checked_fixture(tc, no_setup, delete_vhosts);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reject_without_requeue_lands_in_dead_queue);
    tcase_add_test(tc, test_delivery_limit_dead_letters_after_limit_plus_one_deliveries);
    tcase_add_test(tc, test_ack_later_flush_never_covers_an_open_delivery);
    tcase_add_test(tc, test_ack_flush_held_waits_for_the_open_delivery_ahead);
    tcase_add_test(tc, test_ack_flush_held_keeps_held_acks_and_skips_a_long_open_one);
    tcase_add_test(tc, test_consumer_and_publisher_share_one_connection);
    tcase_add_test(tc, test_queue_count_missing_queue_is_enoent_and_consumers_survive);
    tcase_add_test(tc, test_poll_reads_confirms_and_keeps_deliveries);
    tcase_add_test(tc, test_delivery_with_out_of_range_timestamp_is_kept);
    tcase_add_test(tc, test_body_over_the_limit_is_dropped_before_it_is_kept);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, no_setup, delete_vhosts);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_unreachable_port_is_ebrokerconn_naming_host_and_port);
    tcase_add_test(tc, test_unknown_vhost_and_bad_url_are_reported);
    tcase_add_test(tc, test_server_closing_the_connection_is_ebrokerconn);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(broker_suite());
    int failed;

    testenv_amqp_url(); /* fails the run at once when the servers are not set up */
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
