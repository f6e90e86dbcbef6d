/* bench_delivery: delivery benchmarks from issue 4, one JSON line each.
 *
 *   eval "$(tests/servers.sh start)"
 *   build/tests/bench_delivery [steady|burst500|burst50k|materialise|all] [steady seconds]
 *
 * Release lateness = arrival at a consumer of the ready queue - due_at, both
 * on PostgreSQL's clock (the local clock's offset to clock_timestamp() is
 * calibrated once, over the lowest-latency of several round trips). The
 * planner runs in a child process (warren_planner_run), exactly as
 * `warren planner` does. Every line carries /proc/loadavg at its end. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "testenv.h"

static warren_config bench_config(int64_t horizon_ms, int batch)
{
    warren_config c;
    memset(&c, 0, sizeof(c));
    c.planner.horizon_ms = horizon_ms;
    c.planner.tick_ms = 1000;
    c.planner.misfire_threshold_ms = 60000;
    c.planner.reconcile_grace_ms = 600000;
    c.planner.partitions = 64;
    c.planner.publish_batch = batch;
    c.planner.delay_queue_expires_ms = 600000;
    return c;
}

typedef struct env {
    char *db;
    char *amqp;
} env;

static env env_new(void)
{
    static const char *const queues[] = {"b"};
    env e = {testenv_db_migrated(), testenv_vhost()};
    testenv_topology(e.amqp, queues, 1, 5);
    testenv_exec(e.db,
                 "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, paused) VALUES "
                 "('bench', 'at', '2099-01-01T00:00:00Z', 'b', true)");
    return e;
}

static pid_t spawn_planner(const env *e, const warren_config *c)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        warren_planner *p = NULL;
        warren_error err = {0};
        testenv_catch_term();
        if (warren_planner_new(c, e->db, e->amqp, NULL, &p, &err) != 0)
            testenv_die("planner", err.message);
        warren_planner_run(p, &testenv_term, &err);
        warren_planner_free(p);
        _exit(0);
    }
    return pid;
}

static void stop_planner(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Consumes n run messages from warren.ready.b; lateness[] in µs. Returns how many. */
static size_t consume(const env *e, warren_us offset, int64_t *lateness, size_t n,
                      int64_t timeout_ms, warren_us *last_arrival)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    size_t got_n = 0;
    int64_t end = testenv_mono_ms() + timeout_ms;

    if (warren_broker_open(e->amqp, NULL, &b, &err) != 0 || warren_broker_qos(b, 500, &err) != 0 ||
        warren_broker_consume(b, "warren.ready.b", &err) != 0)
        testenv_die("consumer", err.message);
    FILE *dump = getenv("BENCH_DUMP") ? fopen(getenv("BENCH_DUMP"), "w") : NULL;
    *last_arrival = 0;
    while (got_n < n && testenv_mono_ms() < end) {
        warren_delivery d = {0};
        int got = 0;
        if (warren_broker_next(b, 200, &d, &got, &err) != 0)
            testenv_die("consume", err.message);
        if (!got)
            continue;
        warren_us at = testenv_wall_us() + offset, due = 0;
        const char *dh = warren_delivery_header(&d, "x-warren-due-at");
        if (dh == NULL || warren_time_parse(dh, &due, NULL) != 0)
            testenv_die("message without x-warren-due-at", NULL);
        lateness[got_n++] = at - due;
        if (dump != NULL)
            fprintf(dump, "%lld %lld\n", (long long)(due / 1000), (long long)((at - due) / 1000));
        *last_arrival = at;
        warren_broker_ack(b, d.tag, NULL);
        warren_delivery_clear(&d);
    }
    warren_broker_free(b);
    if (dump != NULL)
        fclose(dump);
    return got_n;
}

static void print_lateness(const char *name, size_t runs, size_t got, int64_t *lat,
                           const char *extra)
{
    char la[64];
    size_t early = 0;
    qsort(lat, got, sizeof(*lat), cmp64);
    for (size_t i = 0; i < got; i++)
        early += lat[i] < 0;
    testenv_loadavg(la, sizeof(la));
    printf("{\"bench\": \"%s\", \"runs\": %zu, \"received\": %zu, \"released_early\": %zu, "
           "\"lateness_ms\": {\"min\": %.1f, \"p50\": %.1f, \"p99\": %.1f, \"max\": %.1f}%s, "
           "\"loadavg\": %s}\n",
           name, runs, got, early, got ? lat[0] / 1000.0 : -1, got ? lat[got / 2] / 1000.0 : -1,
           got ? lat[(size_t)((double)got * 0.99) < got ? (size_t)((double)got * 0.99) : got - 1] /
                     1000.0
               : -1,
           got ? lat[got - 1] / 1000.0 : -1, extra, la);
    fflush(stdout);
}

/* 200 runs/s, due 5 ms apart (ms-distinct), for `seconds` s. */
static void bench_steady(int seconds)
{
    env e = env_new();
    warren_config c =
        bench_config(getenv("BENCH_HORIZON_MS") ? atoll(getenv("BENCH_HORIZON_MS")) : 10000,
                     getenv("BENCH_BATCH") ? atoi(getenv("BENCH_BATCH")) : 200);
    size_t n = (size_t)seconds * 200;
    int64_t *lat = calloc(n, sizeof(*lat));
    warren_us off = testenv_db_clock_offset(e.db, 20), last;
    c.planner.delay_ring = getenv("BENCH_RING") ? atoi(getenv("BENCH_RING")) : 0;
    c.planner.delay_ring_type =
        getenv("BENCH_RING_TYPE") != NULL && strcmp(getenv("BENCH_RING_TYPE"), "classic") == 0
            ? WARREN_DELAY_RING_CLASSIC
            : WARREN_DELAY_RING_QUORUM;
    char q[512], extra[192];
    pid_t pid;
    size_t got;

    snprintf(q, sizeof(q),
             "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) SELECT 'bench', "
             "'2000-01-01T00:00:00Z'::timestamptz + g * interval '1 s', "
             "date_trunc('second', clock_timestamp()) + interval '15 s' + g * interval '5 ms', "
             "'trigger' FROM generate_series(0, %zu) g",
             n - 1);
    testenv_exec(e.db, q);
    if (getenv("BENCH_PREDECLARE") != NULL) {
        /* experiment: every delay queue of the run exists before it starts */
        warren_broker *pb = NULL;
        warren_error perr = {0};
        char name[64];
        long first =
            testenv_sql_long(e.db, "SELECT floor(extract(epoch FROM min(due_at)))::bigint FROM "
                                   "warren.runs");
        if (warren_broker_open(e.amqp, NULL, &pb, &perr) != 0)
            testenv_die("broker", perr.message);
        for (long sec = first; sec <= first + seconds + 1; sec++)
            if (warren_broker_delay_queue(pb, sec, c.planner.delay_queue_expires_ms, name,
                                          sizeof(name), &perr) != 0)
                testenv_die("declare", perr.message);
        warren_broker_free(pb);
    }
    if (c.planner.delay_ring > 0) {
        /* the ring exists before the planner starts, as after `warren topology` */
        warren_broker *pb = NULL;
        warren_error perr = {0};
        char name[64];
        if (warren_broker_open(e.amqp, NULL, &pb, &perr) != 0)
            testenv_die("broker", perr.message);
        for (int s = 0; s < c.planner.delay_ring; s++)
            if (warren_broker_delay_ring_queue_typed(pb, s, c.planner.delay_ring,
                                                     c.planner.delay_ring_type, name, sizeof(name),
                                                     &perr) != 0)
                testenv_die("declare", perr.message);
        warren_broker_free(pb);
    }
    pid = spawn_planner(&e, &c);
    got = consume(&e, off, lat, n, (int64_t)seconds * 1000 + 60000, &last);
    stop_planner(pid);
    snprintf(extra, sizeof(extra),
             ", \"rate_per_s\": 200, \"seconds\": %d, \"horizon_ms\": %lld, \"publish_batch\": %d, "
             "\"delay\": \"%s\"",
             seconds, (long long)c.planner.horizon_ms, c.planner.publish_batch,
             c.planner.delay_ring == 0                                ? "per-second"
             : c.planner.delay_ring_type == WARREN_DELAY_RING_CLASSIC ? "classic-ring"
                                                                      : "quorum-ring");
    print_lateness("steady", n, got, lat, extra);
    free(lat);
}

/* n runs due at one instant, `lead_s` seconds after the insert. */
static void bench_burst(const char *name, size_t n, int lead_s, int batch, int use_consumer)
{
    env e = env_new();
    warren_config c = bench_config((int64_t)lead_s * 2000, batch);
    int64_t *lat = calloc(n, sizeof(*lat));
    warren_us off = testenv_db_clock_offset(e.db, 20), last = 0, due = 0;
    char q[512], extra[256], *v;
    pid_t pid;

    snprintf(q, sizeof(q),
             "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) SELECT 'bench', "
             "'2000-01-01T00:00:00Z'::timestamptz + g * interval '1 s', "
             "date_trunc('second', clock_timestamp()) + interval '%d s', 'trigger' "
             "FROM generate_series(0, %zu) g",
             lead_s, n - 1);
    testenv_exec(e.db, q);
    v = testenv_sql1(e.db, "SELECT (extract(epoch FROM min(due_at)) * 1000000)::bigint FROM "
                           "warren.runs");
    due = v ? atoll(v) : 0;
    free(v);
    pid = spawn_planner(&e, &c);
    if (use_consumer) {
        size_t got = consume(&e, off, lat, n, (int64_t)lead_s * 1000 + 60000, &last);
        stop_planner(pid);
        snprintf(extra, sizeof(extra), ", \"all_released_ms\": %.1f, \"publish_batch\": %d",
                 got == n ? (last - due) / 1000.0 : -1.0, batch);
        print_lateness(name, n, got, lat, extra);
    } else {
        /* Released = in the ready queue; no consumer to slow the broker. */
        warren_us published_at = 0, all_at = 0;
        int64_t end = testenv_mono_ms() + (int64_t)lead_s * 1000 + 60000, next_db = 0;
        warren_broker *qb = NULL;
        warren_error qerr = {0};
        char la[64];
        /* one connection for the polls: a new one per poll would load the broker */
        if (warren_broker_open(e.amqp, NULL, &qb, &qerr) != 0)
            testenv_die("broker", qerr.message);
        while (testenv_mono_ms() < end) {
            uint32_t depth = 0;
            if (published_at == 0 && testenv_mono_ms() >= next_db) {
                if (testenv_sql_long(
                        e.db, "SELECT count(*) FROM warren.runs WHERE state = 'published'") ==
                    (long)n)
                    published_at = testenv_wall_us() + off;
                next_db = testenv_mono_ms() + 250;
            }
            if (warren_broker_queue_count(qb, "warren.ready.b", &depth, NULL, &qerr) != 0)
                testenv_die("queue depth", qerr.message);
            if (depth == (uint32_t)n) {
                all_at = testenv_wall_us() + off;
                break;
            }
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        warren_broker_free(qb);
        stop_planner(pid);
        testenv_loadavg(la, sizeof(la));
        printf("{\"bench\": \"%s\", \"runs\": %zu, \"published_before_due_ms\": %.1f, "
               "\"all_released_ms\": %.1f, \"publish_batch\": %d, \"measured_by\": \"ready queue "
               "depth, polled every 10 ms\", \"loadavg\": %s}\n",
               name, n, published_at ? (due - published_at) / 1000.0 : -1.0,
               all_at ? (all_at - due) / 1000.0 : -1.0, batch, la);
        fflush(stdout);
    }
    free(lat);
}

/* 100,000 cron jobs (hashed seconds and minutes, five zones), horizon 10
 * min: runs materialised per second of materialising, and the peak RSS of
 * the process hosting the planner. Runs in a child so RSS is the planner's. */
static void bench_materialise(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        env e = env_new();
        warren_config c = bench_config(600000, 200);
        warren_planner *p = NULL;
        warren_error err = {0};
        warren_planner_stats s;
        char la[64];
        int64_t t0, t1;
        long rss_before;

        /* relay lead = x-expires / 2 = 1 s: the relay stays out of the way */
        c.planner.delay_queue_expires_ms = 2000;
        testenv_exec(
            e.db, "INSERT INTO warren.jobs (name, schedule_kind, expression, timezone, queue, "
                  "partition) SELECT 'cron-' || g, 'cron', 'H H/5 * * * *', (ARRAY['UTC', "
                  "'Europe/Berlin', 'America/New_York', 'Asia/Tokyo', 'Australia/Sydney'])[1 + g "
                  "% 5], 'b', g % 64 FROM generate_series(1, 100000) g");
        /* as autovacuum would have by then: statistics for 100k jobs */
        testenv_exec(e.db, "ANALYZE warren.jobs");
        if (warren_planner_new(&c, e.db, e.amqp, NULL, &p, &err) != 0)
            testenv_die("planner", err.message);
        rss_before = testenv_rss_peak_kib();
        t0 = testenv_mono_ms();
        for (;;) {
            uint64_t before;
            warren_planner_stats_get(p, &s);
            before = s.runs_inserted;
            if (warren_planner_tick(p, &err) != 0)
                testenv_die("tick", err.message);
            warren_planner_stats_get(p, &s);
            if (s.runs_inserted == before && s.ticks > 1)
                break;
        }
        t1 = testenv_mono_ms();
        testenv_loadavg(la, sizeof(la));
        printf("{\"bench\": \"materialise\", \"jobs\": 100000, \"runs\": %llu, "
               "\"materialise_s\": %.2f, \"runs_per_s\": %.0f, \"wall_s\": %.2f, "
               "\"rss_peak_mib\": %.1f, \"rss_at_start_mib\": %.1f, \"loadavg\": %s}\n",
               (unsigned long long)s.runs_inserted, s.materialise_us / 1e6,
               s.materialise_us ? s.runs_inserted / (s.materialise_us / 1e6) : 0.0,
               (t1 - t0) / 1000.0, testenv_rss_peak_kib() / 1024.0, rss_before / 1024.0, la);
        fflush(stdout);
        warren_planner_free(p);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    int seconds = argc > 2 ? atoi(argv[2]) : 60;
    int all = strcmp(which, "all") == 0;

    if (seconds <= 0)
        seconds = 60;
    if (all || strcmp(which, "steady") == 0)
        bench_steady(seconds);
    if (all || strcmp(which, "burst500") == 0)
        bench_burst("burst500", 500,
                    getenv("BENCH_BURST_LEAD_S") ? atoi(getenv("BENCH_BURST_LEAD_S")) : 8, 200, 1);
    if (all || strcmp(which, "burst50k") == 0)
        bench_burst("burst50k", 50000, 30, 500, 0);
    if (all || strcmp(which, "materialise") == 0)
        bench_materialise();
    return 0;
}
