/* bench_enqueue.c: the application API's enqueue against the real servers
 * (JSON lines on stdout, each with /proc/loadavg):
 *   bulk:      warren.enqueue_many from one client, batches of B runs (default
 *              1,000, 5,000 and 10,000), N runs per batch size (default
 *              100,000), each batch its own transaction: runs/s over the
 *              wall clock of the client (building the JSON text, sending it,
 *              the server's work, the commit); the backend's CPU time per
 *              run (from /proc: a figure the machine's load inflates less
 *              than the wall clock); and the database size per run
 *              (warren.runs with its indexes and TOAST, per planned run);
 *   single:    warren.enqueue inside a caller's transaction (BEGIN; INSERT an
 *              application row; SELECT warren.enqueue(...); COMMIT), K times
 *              (default 5,000): the server time of the enqueue statement,
 *              clock_timestamp() - statement_timestamp() read in the same
 *              statement after warren.enqueue returned (statement_timestamp()
 *              is when the server received it), p50/p99/max; and the client's
 *              round trip of that statement; the backend's CPU time per
 *              transaction (BEGIN, the INSERT, the enqueue, COMMIT);
 *   immediate: R immediate enqueues per second (default 200) for S seconds
 *              (default 30), each in its own transaction, with the real
 *              planner (woken by NOTIFY) and 2 worker processes of 50 slots
 *              each running a sql handler (an INSERT into an execution log):
 *              start latency = runs.started_at (the claim) - runs.scheduled_at
 *              (the database's clock when warren.enqueue ran, before the
 *              COMMIT: so an upper bound of the start after commit), p50/p99/max;
 *              after_commit = runs.started_at - the database's clock read right
 *              after the COMMIT returned (one round trip after the commit:
 *              a lower bound, by at most that round trip);
 *              relay_took = runs.published_at (now() of the relay's transaction
 *              that published it) - scheduled_at: the planner's share;
 *              every run executed once (log rows = distinct = runs).
 *
 *   eval "$(tests/servers.sh start)"
 *   build-rel/tests/bench_enqueue [bulk|single|immediate|all] [--runs N] [--batch B]
 *                                 [--calls K] [--rate R] [--seconds S]
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>
#include <warren/worker.h>

#include "testenv.h"

static void sleep_until(double t)
{
    double d = t - testenv_mono_s();
    if (d <= 0)
        return;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
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
    buf[strcspn(buf, " ")] = '\0'; /* the 1-minute figure */
}

/* CPU seconds (user + system) of a process so far, from /proc (the
 * PostgreSQL backend of a connection runs on this machine); -1 if unknown. */
static double proc_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* after the command name */
    unsigned long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static PGresult *must(PGconn *c, PGresult *r, const char *what)
{
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK)
        testenv_die(what, PQerrorMessage(c));
    return r;
}

static void exec0(PGconn *c, const char *sql)
{
    PQclear(must(c, PQexec(c, sql), sql));
}

static char *val(PGconn *c, const char *sql)
{
    PGresult *r = must(c, PQexec(c, sql), sql);
    char *v = strdup(PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return n ? v[i < n ? i : n - 1] : 0;
}

/* A database with job "bench" (queue bench, a sql handler appending to the
 * execution log); the config text written to path. */
static char *setup(char **amqp, char *cfg_path, size_t len, int concurrency)
{
    char *db = testenv_db_migrated();
    char tmpl[] = "/tmp/warren-bench-enqueue-XXXXXX";
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};

    *amqp = testenv_vhost();
    if (mkdtemp(tmpl) == NULL)
        testenv_die("mkdtemp", NULL);
    snprintf(cfg_path, len, "%s/bench.cfg", tmpl);
    FILE *f = fopen(cfg_path, "w");
    if (f == NULL)
        testenv_die("cannot write", cfg_path);
    fprintf(f,
            "database = { url = \"%s\"; };\nbroker = { url = \"%s\"; };\n"
            "planner = { tick = \"1s\"; horizon = \"2m\"; };\n"
            "worker = { concurrency = %d; };\n"
            "jobs = ( { name = \"bench\"; at = \"2099-01-01T00:00:00Z\"; queue = \"bench\";"
            " overlap = \"allow\"; handler = { sql = \"INSERT INTO " TESTENV_EXECLOG
            " (run_key, attempt, who) VALUES ($1, 0, 'bench')\"; }; } );\n",
            db, *amqp, concurrency);
    fclose(f);
    if (warren_config_load(cfg_path, &cfg, NULL, &err) != 0)
        testenv_die("config", err.message);
    if (warren_store_open(db, NULL, &st, &err) != 0 || warren_store_sync(st, cfg, NULL, &err) != 0)
        testenv_die("sync", err.message);
    warren_store_free(st);
    warren_config_free(cfg);
    testenv_execlog_create(db);
    testenv_psql(db, "CREATE TABLE signups (id bigint PRIMARY KEY, email text)", NULL);
    return db;
}

static void drop_db(const char *db)
{
    const char *name = strrchr(db, '/');
    char q[256];
    snprintf(q, sizeof(q), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name ? name + 1 : db);
    testenv_psql(testenv_pg_admin_url(), q, NULL);
}

/* ------------------------------------------------------------ bulk */

static void bench_bulk(long runs, int only_batch)
{
    static const int batches[] = {1000, 5000, 10000};
    char *amqp, cfg_path[256], load[32];
    char *db = setup(&amqp, cfg_path, sizeof(cfg_path), 4);
    PGconn *c = PQconnectdb(db);
    long key = 0;

    if (PQstatus(c) != CONNECTION_OK)
        testenv_die("connect", PQerrorMessage(c));
    PQclear(must(c,
                 PQprepare(c, "many",
                           "SELECT count(*) FILTER (WHERE created) FROM "
                           "warren.enqueue_many($1::jsonb)",
                           1, NULL),
                 "prepare"));
    exec0(c, "VACUUM ANALYZE warren.runs");
    for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
        int b = batches[bi];
        if (only_batch > 0 && b != only_batch)
            continue;
        long n = runs - runs % b, made = 0;
        char *size0 = val(c, "SELECT pg_total_relation_size('warren.runs')");
        /* what an application sends: a JSON array of objects, as text */
        size_t cap = (size_t)b * 128 + 16;
        char *json = malloc(cap);
        double t0 = testenv_mono_s(), worst = 0, cpu0 = proc_cpu_s(PQbackendPID(c));
        for (long done = 0; done < n; done += b) {
            double tb = testenv_mono_s();
            size_t len = 0;
            json[len++] = '[';
            for (int i = 0; i < b; i++)
                len += (size_t)snprintf(json + len, cap - len,
                                        "%s{\"job\":\"bench\",\"key\":\"bulk:%ld\","
                                        "\"payload\":{\"user\":%ld}}",
                                        i ? "," : "", key, key),
                    key++;
            json[len++] = ']';
            json[len] = '\0';
            const char *p[1] = {json};
            PGresult *r = must(c, PQexecPrepared(c, "many", 1, p, NULL, NULL, 0), "enqueue_many");
            made += atol(PQgetvalue(r, 0, 0));
            PQclear(r);
            if (testenv_mono_s() - tb > worst)
                worst = testenv_mono_s() - tb;
        }
        double el = testenv_mono_s() - t0, cpu = proc_cpu_s(PQbackendPID(c)) - cpu0;
        char *size1 = val(c, "SELECT pg_total_relation_size('warren.runs')");
        loadavg(load, sizeof(load));
        printf("{\"bench\":\"enqueue_bulk\",\"batch\":%d,\"runs\":%ld,\"created\":%ld,"
               "\"seconds\":%.3f,\"runs_per_s\":%.0f,\"slowest_batch_ms\":%.1f,"
               "\"backend_cpu_us_per_run\":%.1f,\"runs_bytes_per_run\":%.0f,"
               "\"loadavg\":\"%s\"}\n",
               b, n, made, el, (double)n / el, worst * 1000, cpu * 1e6 / (double)n,
               (double)(atoll(size1) - atoll(size0)) / (double)n, load);
        fflush(stdout);
        free(size0);
        free(size1);
        free(json);
    }
    PQfinish(c);
    drop_db(db);
    free(db);
    free(amqp);
}

/* ------------------------------------------------------------ single */

static void bench_single(long calls)
{
    char *amqp, cfg_path[256], load[32];
    char *db = setup(&amqp, cfg_path, sizeof(cfg_path), 4);
    PGconn *c = PQconnectdb(db);
    double *srv = calloc((size_t)calls, sizeof(double)),
           *rtt = calloc((size_t)calls, sizeof(double));

    if (PQstatus(c) != CONNECTION_OK)
        testenv_die("connect", PQerrorMessage(c));
    PQclear(must(c, PQprepare(c, "app", "INSERT INTO signups VALUES ($1::bigint, 'x')", 1, NULL),
                 "prepare"));
    PQclear(must(c,
                 PQprepare(c, "enq",
                           "SELECT e.created, extract(epoch FROM clock_timestamp() - "
                           "statement_timestamp()) FROM warren.enqueue('bench', $1, NULL, "
                           "jsonb_build_object('signup', $2::bigint)) e",
                           2, NULL),
                 "prepare"));
    double cpu0 = proc_cpu_s(PQbackendPID(c));
    for (long i = 0; i < calls; i++) {
        char id[24], key[48];
        snprintf(id, sizeof(id), "%ld", i);
        snprintf(key, sizeof(key), "welcome:%ld", i);
        const char *p1[1] = {id};
        const char *p2[2] = {key, id};
        exec0(c, "BEGIN");
        PQclear(must(c, PQexecPrepared(c, "app", 1, p1, NULL, NULL, 0), "app row"));
        double t = testenv_mono_s();
        PGresult *r = must(c, PQexecPrepared(c, "enq", 2, p2, NULL, NULL, 0), "enqueue");
        rtt[i] = (testenv_mono_s() - t) * 1000;
        srv[i] = atof(PQgetvalue(r, 0, 1)) * 1000;
        PQclear(r);
        exec0(c, "COMMIT");
    }
    double cpu = proc_cpu_s(PQbackendPID(c)) - cpu0;
    qsort(srv, (size_t)calls, sizeof(double), cmp_double);
    qsort(rtt, (size_t)calls, sizeof(double), cmp_double);
    loadavg(load, sizeof(load));
    printf("{\"bench\":\"enqueue_single\",\"calls\":%ld,\"server_ms_p50\":%.3f,"
           "\"server_ms_p99\":%.3f,\"server_ms_max\":%.3f,\"roundtrip_ms_p50\":%.3f,"
           "\"roundtrip_ms_p99\":%.3f,\"backend_cpu_us_per_transaction\":%.1f,"
           "\"loadavg\":\"%s\"}\n",
           calls, pct(srv, (size_t)calls, 0.5), pct(srv, (size_t)calls, 0.99),
           pct(srv, (size_t)calls, 1.0), pct(rtt, (size_t)calls, 0.5),
           pct(rtt, (size_t)calls, 0.99), cpu * 1e6 / (double)calls, load);
    fflush(stdout);
    free(srv);
    free(rtt);
    PQfinish(c);
    drop_db(db);
    free(db);
    free(amqp);
}

/* ------------------------------------------------------------ immediate */

static void bench_immediate(int rate, int seconds)
{
    enum { NWORKERS = 2, SLOTS = 50 };
    char *amqp, cfg_path[256], load[32];
    char *db = setup(&amqp, cfg_path, sizeof(cfg_path), SLOTS);
    warren_config *cfg = NULL;
    warren_error err = {0};
    pid_t w[NWORKERS];
    long n = (long)rate * seconds;

    if (warren_config_load(cfg_path, &cfg, NULL, &err) != 0)
        testenv_die("config", err.message);
    const char *queues[] = {"bench"};
    testenv_topology(amqp, queues, 1, cfg->delivery_limit);
    for (int i = 0; i < NWORKERS; i++) { /* fork before any thread */
        w[i] = fork();
        if (w[i] == 0) {
            warren_worker *wk = NULL;
            warren_logger lg = {warren_log_stderr, stderr, WARREN_LOG_WARN};
            char id[32];
            testenv_catch_term();
            snprintf(id, sizeof(id), "bench-w%d", i);
            if (warren_worker_new(cfg, &lg, &wk, &err) != 0 ||
                warren_worker_set_id(wk, id, &err) != 0 ||
                warren_worker_run(wk, &testenv_term, &err) != 0) {
                fprintf(stderr, "worker %d: %s\n", i, err.message);
                _exit(1);
            }
            warren_worker_free(wk);
            _exit(0);
        }
    }
    testenv_planner pl;
    warren_logger plg = {warren_log_stderr, stderr, WARREN_LOG_WARN};
    testenv_planner_start(&pl, cfg, db, amqp, &plg);
    sleep_until(testenv_mono_s() + 2);

    PGconn *c = PQconnectdb(db);
    if (PQstatus(c) != CONNECTION_OK)
        testenv_die("connect", PQerrorMessage(c));
    PQclear(must(c, PQprepare(c, "enq", "SELECT created FROM warren.enqueue('bench', $1)", 1, NULL),
                 "prepare"));
    /* When each COMMIT had returned: the database's clock read right after
     * it (one more round trip, so at most that much after the commit). */
    exec0(c, "CREATE TABLE committed (run_key text PRIMARY KEY, at timestamptz)");
    char **at = calloc((size_t)n, sizeof(char *));
    double t0 = testenv_mono_s();
    for (long i = 0; i < n; i++) {
        char key[48];
        snprintf(key, sizeof(key), "imm:%ld", i);
        const char *p[1] = {key};
        sleep_until(t0 + (double)i / rate);
        exec0(c, "BEGIN");
        PQclear(must(c, PQexecPrepared(c, "enq", 1, p, NULL, NULL, 0), "enqueue"));
        exec0(c, "COMMIT");
        at[i] = val(c, "SELECT clock_timestamp()");
    }
    double sent_s = testenv_mono_s() - t0;
    for (long i = 0; i < n; i++) {
        char key[48];
        snprintf(key, sizeof(key), "bench@imm:%ld", i);
        const char *p[2] = {key, at[i]};
        PQclear(must(c,
                     PQexecParams(c, "INSERT INTO committed VALUES ($1, $2::timestamptz)", 2, NULL,
                                  p, NULL, NULL, 0),
                     "committed"));
        free(at[i]);
    }
    free(at);
    int ok = 0;
    for (int t = 0; t < 600 && !ok; t++) {
        char *v = val(c, "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'");
        ok = atol(v) == n;
        free(v);
        if (!ok)
            sleep_until(testenv_mono_s() + 0.1);
    }
    char *lat = val(c, "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY d)::numeric, 2) "
                       "|| ' ' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY d)::numeric, "
                       "2) || ' ' || round(max(d)::numeric, 2) || ' ' || round(min(d)::numeric, "
                       "2) FROM (SELECT extract(epoch FROM started_at - scheduled_at) * 1000 AS d "
                       "FROM warren.runs WHERE started_at IS NOT NULL) x");
    char *aft = val(c, "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY d)::numeric, 2) "
                       "|| ' ' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY d)::numeric, "
                       "2) || ' ' || round(max(d)::numeric, 2) FROM (SELECT extract(epoch FROM "
                       "r.started_at - k.at) * 1000 AS d FROM warren.runs r JOIN committed k "
                       "USING (run_key) WHERE r.started_at IS NOT NULL) x");
    double a50 = 0, a99 = 0, amx = 0;
    sscanf(aft, "%lf %lf %lf", &a50, &a99, &amx);
    free(aft);
    /* The planner's share: published_at is now() of the relay's transaction
     * (its start, before the select), so this is when the relay took it. */
    char *rel = val(c, "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY d)::numeric, 2) "
                       "|| ' ' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY d)::numeric, "
                       "2) FROM (SELECT extract(epoch FROM published_at - scheduled_at) * 1000 AS "
                       "d FROM warren.runs WHERE published_at IS NOT NULL) x");
    double r50 = 0, r99 = 0;
    sscanf(rel, "%lf %lf", &r50, &r99);
    free(rel);
    char *once = val(c, "SELECT count(*) || ' ' || count(DISTINCT run_key) FROM " TESTENV_EXECLOG);
    char *att = val(c, "SELECT count(*) FROM warren.attempts WHERE attempt > 1");
    double p50 = 0, p99 = 0, mx = 0, mn = 0;
    long logn = 0, logd = 0;
    sscanf(lat, "%lf %lf %lf %lf", &p50, &p99, &mx, &mn);
    sscanf(once, "%ld %ld", &logn, &logd);
    loadavg(load, sizeof(load));
    printf("{\"bench\":\"enqueue_immediate\",\"rate\":%d,\"seconds\":%d,\"runs\":%ld,"
           "\"sent_s\":%.2f,\"all_succeeded\":%s,\"start_ms_p50\":%.2f,\"start_ms_p99\":%.2f,"
           "\"start_ms_max\":%.2f,\"start_ms_min\":%.2f,\"after_commit_ms_p50\":%.2f,"
           "\"after_commit_ms_p99\":%.2f,\"after_commit_ms_max\":%.2f,\"relay_took_ms_p50\":%.2f,"
           "\"relay_took_ms_p99\":%.2f,\"executions\":%ld,"
           "\"distinct_executed\":%ld,\"second_attempts\":%s,\"workers\":%d,\"slots\":%d,"
           "\"handler\":\"sql\",\"loadavg\":\"%s\"}\n",
           rate, seconds, n, sent_s, ok ? "true" : "false", p50, p99, mx, mn, a50, a99, amx, r50,
           r99, logn, logd, att, NWORKERS, SLOTS, load);
    fflush(stdout);
    free(lat);
    free(once);
    free(att);
    PQfinish(c);
    for (int i = 0; i < NWORKERS; i++)
        kill(w[i], SIGTERM);
    for (int i = 0; i < NWORKERS; i++)
        waitpid(w[i], NULL, 0);
    testenv_planner_stop(&pl);
    warren_config_free(cfg);
    drop_db(db);
    free(db);
    free(amqp);
}

int main(int argc, char **argv)
{
    const char *mode = "all";
    long runs = 100000, calls = 5000;
    int batch = 0, rate = 200, seconds = 30;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atol(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc)
            calls = atol(argv[++i]);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else if (argv[i][0] != '-')
            mode = argv[i];
        else {
            fprintf(stderr, "usage: bench_enqueue [bulk|single|immediate|all] [--runs N] "
                            "[--batch B] [--calls K] [--rate R] [--seconds S]\n");
            return 2;
        }
    }
    if (runs < 1 || calls < 1 || rate < 1 || seconds < 1)
        testenv_die("--runs, --calls, --rate and --seconds must be positive", NULL);
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    if (strcmp(mode, "immediate") == 0 || strcmp(mode, "all") == 0)
        bench_immediate(rate, seconds); /* first: it forks workers */
    if (strcmp(mode, "bulk") == 0 || strcmp(mode, "all") == 0)
        bench_bulk(runs, batch);
    if (strcmp(mode, "single") == 0 || strcmp(mode, "all") == 0)
        bench_single(calls);
    return 0;
}
