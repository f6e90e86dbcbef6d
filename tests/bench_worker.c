/* bench_worker.c: worker benchmarks against the real servers (JSON lines on
 * stdout). Two worker processes with an in-process no-op C handler and one
 * real planner (relay, delay queues):
 *   burst:  N runs (default 50,000) due at one instant -> start lateness
 *           percentiles, time until all completed, completions/s;
 *   steady: R runs/s (default 200) with ms-distinct due times for S seconds
 *           (default 30) -> start lateness percentiles.
 * Start lateness = runs.started_at (the claim, database clock) - runs.due_at.
 * Each line carries the workers' peak RSS and /proc/loadavg. Runs are tagged
 * through their payload ({"bench": "burst"}), which the reconciler leaves alone.
 *
 *   eval "$(tests/servers.sh start)"
 *   build/tests/bench_worker [--burst N] [--rate R] [--seconds S] [--concurrency C]
 *
 * BENCH_RING=N (with BENCH_RING_TYPE=classic, the default here, or quorum)
 * sets planner.delay_ring = N (at least 122 for the 2 min horizon).
 * BENCH_TIMELINE=1 prints the runs started per 500 ms on stderr.
 * BENCH_EXTRA_SQL=FILE applies FILE to the benchmark database after the
 * migrations (A/B experiments, e.g. an older sql/002_worker_protocol.sql in
 * the same session as the current one). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>
#include <warren/worker.h>

#include "testenv.h"

static volatile sig_atomic_t child_stop;

static void on_term(int sig)
{
    (void)sig;
    child_stop = 1;
}

static warren_outcome noop(warren_handler_ctx *ctx, void *ud)
{
    (void)ctx;
    (void)ud;
    return WARREN_OUTCOME_SUCCEEDED;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void die(const char *what, const warren_error *e)
{
    fprintf(stderr, "bench_worker: %s: %s\n", what, e ? e->message : "");
    exit(1);
}

static long peak_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = atol(line + 6);
    fclose(f);
    return kb;
}

static void loadavg(char *buf, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f != NULL) {
        if (fgets(buf, (int)len, f) == NULL)
            buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

static char *sql1(const char *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *sql1(const char *db, const char *fmt, ...)
{
    char q[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof(q), fmt, ap);
    va_end(ap);
    return testenv_sql1(db, q);
}

static long count_state(const char *db, const char *tag, const char *state)
{
    char *v = sql1(
        db,
        "SELECT count(*) FROM warren.runs WHERE origin = 'backfill' AND payload->>'bench' = '%s' "
        "AND state = '%s'",
        tag, state);
    long n = v ? atol(v) : -1;
    free(v);
    return n;
}

/* Waits until every run tagged tag succeeded (or timeout_s). Polls twice a
 * second: the count scans the runs table, and polling it more often cost
 * PostgreSQL CPU the benchmark is measuring (the report takes the times
 * from the rows, not from this loop). */
static int wait_all(const char *db, const char *tag, long n, int timeout_s)
{
    for (int i = 0; i < timeout_s * 2; i++) {
        if (count_state(db, tag, "succeeded") >= n)
            return 1;
        sleep_ms(500);
    }
    return 0;
}

static void report(const char *db, const char *bench, const char *tag, long n, pid_t *w, int nw,
                   int concurrency, double extra_rate, int ok)
{
    char la[128];
    char *v =
        sql1(db,
             "SELECT format('\"p50_start_lateness_ms\":%%s,\"p90_start_lateness_ms\":%%s,"
             "\"p99_start_lateness_ms\":%%s,\"max_start_lateness_ms\":%%s,"
             "\"all_completed_after_due_s\":%%s,\"completions_per_s\":%%s,\"succeeded\":%%s',"
             " round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::numeric, 1),"
             " round(percentile_cont(0.9) WITHIN GROUP (ORDER BY l)::numeric, 1),"
             " round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l)::numeric, 1),"
             " round(max(l)::numeric, 1),"
             " round(extract(epoch FROM max(finished_at) - min(due_at))::numeric, 3),"
             " round((count(*) / greatest(extract(epoch FROM max(finished_at) - min(started_at)), "
             "0.001))::numeric, 0), count(*)) "
             "FROM (SELECT extract(epoch FROM started_at - due_at) * 1000 AS l, started_at, "
             "finished_at, due_at FROM warren.runs WHERE payload->>'bench' = '%s' AND state = "
             "'succeeded') s",
             tag);
    if (getenv("BENCH_TIMELINE") != NULL) {
        /* runs started per 500 ms after the first due time, on stderr */
        char *t = sql1(db,
                       "SELECT string_agg(format('%%s:%%s', b, n), ' ' ORDER BY b) FROM (SELECT "
                       "floor(extract(epoch FROM started_at - (SELECT min(due_at) FROM warren.runs "
                       "WHERE payload->>'bench' = '%s')) * 2) / 2 AS b, count(*) AS n FROM "
                       "warren.runs WHERE payload->>'bench' = '%s' GROUP BY 1) s",
                       tag, tag);
        fprintf(stderr, "%s started per 0.5 s: %s\n", bench, t ? t : "?");
        free(t);
    }
    loadavg(la, sizeof(la));
    printf("{\"bench\":\"%s\",\"runs\":%ld,\"workers\":%d,\"concurrency\":%d,%s", bench, n, nw,
           concurrency, v ? v : "\"error\":\"no result\"");
    if (extra_rate > 0)
        printf(",\"rate_per_s\":%.0f", extra_rate);
    printf(",\"worker_peak_rss_kb\":[");
    for (int i = 0; i < nw; i++)
        printf("%s%ld", i ? "," : "", peak_rss_kb(w[i]));
    printf("],\"loadavg\":\"%s\",\"complete\":%s}\n", la, ok ? "true" : "false");
    fflush(stdout);
    free(v);
}

typedef struct planner_ctx {
    warren_planner *p;
    volatile sig_atomic_t stop;
} planner_ctx;

static void *planner_main(void *arg)
{
    planner_ctx *pc = arg;
    warren_error err = {0};
    if (warren_planner_run(pc->p, &pc->stop, &err) != 0)
        fprintf(stderr, "planner: %s\n", err.message);
    return NULL;
}

int main(int argc, char **argv)
{
    long burst = 50000;
    int rate = 200, seconds = 30, concurrency = 256, nworkers = 2;
    warren_error err = {0};
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_broker *b = NULL;
    char tmpl[] = "/tmp/warren-bench-worker-XXXXXX";

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--burst") == 0 && i + 1 < argc)
            burst = atol(argv[++i]);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc)
            concurrency = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_worker [--burst N] [--rate R] [--seconds S] "
                            "[--concurrency C]\n");
            return 2;
        }
    }
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    char *db = testenv_db_migrated();
    char *amqp = testenv_vhost();
    const char *extra = getenv("BENCH_EXTRA_SQL");
    if (extra != NULL && extra[0] != '\0') {
        FILE *xf = fopen(extra, "r");
        char *text = NULL;
        long len = -1;
        if (xf != NULL && fseek(xf, 0, SEEK_END) == 0 && (len = ftell(xf)) >= 0 &&
            fseek(xf, 0, SEEK_SET) == 0 && (text = calloc(1, (size_t)len + 1)) != NULL &&
            fread(text, 1, (size_t)len, xf) == (size_t)len) {
            if (testenv_psql(db, text, NULL) < 0)
                die("BENCH_EXTRA_SQL failed", NULL);
        } else {
            fprintf(stderr, "bench_worker: cannot read BENCH_EXTRA_SQL %s\n", extra);
            return 2;
        }
        if (xf != NULL)
            fclose(xf);
        free(text);
    }
    /* BENCH_RING=N [BENCH_RING_TYPE=classic|quorum]: the delay ring instead of
     * one delay queue per second (N >= 122 for the 2 min horizon). */
    char ring_opt[128] = "";
    if (getenv("BENCH_RING") != NULL && atoi(getenv("BENCH_RING")) > 0)
        snprintf(ring_opt, sizeof(ring_opt), " delay_ring = %d; delay_ring_type = \"%s\";",
                 atoi(getenv("BENCH_RING")),
                 getenv("BENCH_RING_TYPE") ? getenv("BENCH_RING_TYPE") : "classic");
    if (mkdtemp(tmpl) == NULL)
        die("mkdtemp", NULL);
    char cfg_path[256];
    snprintf(cfg_path, sizeof(cfg_path), "%s/bench.cfg", tmpl);
    FILE *f = fopen(cfg_path, "w");
    fprintf(f,
            "database = { url = \"%s\"; };\nbroker = { url = \"%s\"; };\n"
            "planner = { tick = \"100ms\"; horizon = \"2m\"; publish_batch = 500;%s };\n"
            "worker = { concurrency = %d; };\n"
            "jobs = ( { name = \"bench\"; at = \"2099-01-01T00:00:00Z\"; queue = \"bench\";"
            " overlap = \"allow\"; handler = { c = \"noop\"; }; } );\n",
            db, amqp, ring_opt, concurrency);
    fclose(f);
    if (warren_config_load(cfg_path, &cfg, NULL, &err) != 0)
        die("config", &err);
    if (warren_store_open(db, NULL, &st, &err) != 0 || warren_store_sync(st, cfg, NULL, &err) != 0)
        die("sync", &err);
    const char *queues[] = {"bench"};
    if (warren_broker_open(amqp, NULL, &b, &err) != 0 ||
        warren_broker_topology(b, queues, 1, cfg->delivery_limit, &err) != 0)
        die("topology", &err);
    for (int s = 0; s < cfg->planner.delay_ring; s++) {
        /* the ring exists before the planner starts, as after `warren topology` */
        char name[128];
        if (warren_broker_delay_ring_queue_typed(b, s, cfg->planner.delay_ring,
                                                 cfg->planner.delay_ring_type, name, sizeof(name),
                                                 &err) != 0)
            die("delay ring", &err);
    }
    warren_broker_free(b);

    /* Workers first (fork before this process starts threads). */
    pid_t w[8];
    for (int i = 0; i < nworkers; i++) {
        w[i] = fork();
        if (w[i] == 0) {
            warren_worker *wk = NULL;
            warren_logger lg = {warren_log_stderr, stderr,
                                getenv("BENCH_LOG_INFO") ? WARREN_LOG_INFO : WARREN_LOG_WARN};
            char id[32];
            struct sigaction sa;
            memset(&sa, 0, sizeof(sa));
            sa.sa_handler = on_term;
            sigaction(SIGTERM, &sa, NULL);
            snprintf(id, sizeof(id), "bench-w%d", i);
            if (warren_worker_new(cfg, &lg, &wk, &err) != 0 ||
                warren_worker_register(wk, "noop", noop, NULL) != 0 ||
                warren_worker_set_id(wk, id, &err) != 0 ||
                warren_worker_run(wk, &child_stop, &err) != 0) {
                fprintf(stderr, "worker %d: %s\n", i, err.message);
                _exit(1);
            }
            warren_worker_free(wk);
            _exit(0);
        }
    }
    planner_ctx pc = {0};
    pthread_t th;
    warren_logger plg = {warren_log_stderr, stderr,
                         getenv("BENCH_LOG_INFO") ? WARREN_LOG_INFO : WARREN_LOG_WARN};
    if (warren_planner_new(cfg, db, amqp, &plg, &pc.p, &err) != 0)
        die("planner", &err);
    pthread_create(&th, NULL, planner_main, &pc);
    sleep_ms(1500);

    /* Burst: every run due at the same instant, 20 s ahead (the relay has time
     * to put them all into that second's delay queue). Runs are tagged through
     * their payload; scheduled_at values are distinct fake seconds. */
    if (burst > 0) {
        char *v = sql1(db,
                       "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload) "
                       "SELECT 'bench', date_trunc('second', now()) - make_interval(secs => g), "
                       "date_trunc('second', now()) + interval '20 seconds', 'backfill', "
                       "'{\"bench\": \"burst\"}' "
                       "FROM generate_series(1, %ld) g; NOTIFY warren_jobs; SELECT 1",
                       burst);
        free(v);
        int ok = wait_all(db, "burst", burst, 120);
        report(db, "worker_burst", "burst", burst, w, nworkers, concurrency, 0, ok);
    }
    /* Steady: rate runs/s, due times rate apart in ms, starting 5 s ahead. */
    if (rate > 0 && seconds > 0) {
        long n = (long)rate * seconds;
        char *v = sql1(db,
                       "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload) "
                       "SELECT 'bench', date_trunc('second', now()) - interval '1 day' - "
                       "make_interval(secs => g), now() + interval '5 seconds' + "
                       "make_interval(secs => g / %d.0), 'backfill', '{\"bench\": \"steady\"}' "
                       "FROM generate_series(1, %ld) g; NOTIFY warren_jobs; SELECT 1",
                       rate, n);
        free(v);
        int ok = wait_all(db, "steady", n, seconds + 60);
        report(db, "worker_steady", "steady", n, w, nworkers, concurrency, rate, ok);
    }
    for (int i = 0; i < nworkers; i++)
        kill(w[i], SIGTERM);
    for (int i = 0; i < nworkers; i++)
        waitpid(w[i], NULL, 0);
    pc.stop = 1;
    pthread_join(th, NULL);
    warren_planner_free(pc.p);
    warren_store_free(st);
    warren_config_free(cfg);
    {
        /* Drop the database: autovacuum of 50,000 dead rows left behind
         * would run during the next benchmark and skew it. */
        const char *name = strrchr(db, '/');
        char q[256];
        snprintf(q, sizeof(q), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name ? name + 1 : db);
        if (testenv_psql(testenv_pg_admin_url(), q, NULL) < 0)
            fprintf(stderr, "bench_worker: could not drop %s\n", db);
    }
    free(db);
    free(amqp);
    return 0;
}
