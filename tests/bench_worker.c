/* bench_worker.c: worker benchmarks against the real servers (JSON lines on
 * stdout), through one real planner (relay, delay queues) running in this
 * process and W worker processes.
 *
 * The default is the configuration users run (issue 17): 2 `warren worker`
 * processes (the real binary) x concurrency 50, the `sql` handler
 *   INSERT INTO starts(run_key, start_ms) VALUES ($1, <clock_timestamp() in ms>)
 * into a log table WITHOUT a unique key, PostgreSQL and RabbitMQ at their
 * defaults, planner.release_lead 3 s (the default). Workloads:
 *   burst:  N runs (default 10,000) due at one instant, 20 s ahead;
 *   steady: R runs/s (default 200) for S seconds (default 60): R runs due on
 *           each whole second (--spread: due times 1/R s apart instead);
 *   cron:   --cron J jobs `* * * * *` (sql handler), observed over
 *           --minutes M minute boundaries (run it alone: --burst 0 --seconds 0).
 * Each line: the settings (variant, handler, workers, concurrency, release
 * lead, planner tick), start lateness percentiles, when all had started and
 * completed, runs/s, and the log check: every run started exactly once
 * (log_rows = log_distinct = runs). Start lateness: for the sql handler the
 * start its statement recorded (clock_timestamp(), the database's clock)
 * minus runs.due_at (start_*); for every kind also the claim
 * (runs.started_at) minus runs.due_at (*_start_lateness_ms: the fields of
 * the earlier versions of this benchmark). c and exec handlers log their run
 * key to a file (O_APPEND) for the exactly-once check.
 *
 * The earlier headline variant stays as an option, labelled in its output:
 * --noop-4096 = in-process no-op C handler ("variant":"inproc_noop_4096"),
 * 4,096 slots per worker, workers forked from this process.
 *
 * The burst line also has cpu_s: CPU seconds from 100 ms before the release
 * (the due time minus planner.release_lead) until all succeeded, of every
 * postgres process on the machine (with the backends that exited meanwhile),
 * every beam.smp (RabbitMQ), the worker processes and this one (the planner:
 * relay and outbox); and events_out_after_due_s: when the last run.succeeded
 * event had left the outbox (planner.event_defer holds them back during a
 * burst; polled every 0.5 s).
 *
 *   eval "$(tests/servers.sh start)"
 *   build/tests/bench_worker [--burst N] [--rate R] [--seconds S] [--spread]
 *                            [--cron J --minutes M]
 *                            [--handler sql|c|exec] [--concurrency C] [--workers W]
 *                            [--noop-4096] [--lead DURATION] [--warren PATH]
 *                            [--label TEXT] [--idle S]
 *
 * --warren runs that `warren` binary as the worker processes (sql and exec
 * handlers; default: the one built with this benchmark), e.g. a build of an
 * older commit for before/after rounds; --label is copied into each line.
 * --idle S (first, before any workload): the worker processes' CPU seconds
 * over S seconds with nothing to run ("bench":"worker_idle"). The steady
 * line has cpu_s as the burst's, from the insert until all succeeded.
 * --lead sets planner.release_lead (default 3s; "0s": released at the due
 * time). min_start_lateness_ms < 0 would mean a run started before its due
 * time (it must not).
 *
 * BENCH_RING=N (with BENCH_RING_TYPE=classic, the default here, or quorum)
 * sets planner.delay_ring = N (at least 152 for the default 2m30s horizon).
 * BENCH_TIMELINE=1 prints the runs started and finished per 500 ms on stderr
 * (BENCH_TIMELINE=MS: per MS milliseconds).
 * BENCH_POLICY=JSON puts a policy with that definition on the ready queue.
 * BENCH_EXTRA_SQL=FILE applies FILE to the benchmark database after the
 * migrations (A/B experiments, e.g. an older definition of a function of
 * sql/functions/ in the same session as the current one).
 * BENCH_WORKER_CFG=TEXT is added inside the config's worker group (e.g.
 * "sql_batch = 1;" for A/B runs of a worker setting).
 * BENCH_HORIZON=DURATION sets planner.horizon (default "2m30s", the planner's).
 * BENCH_KEEP_DB=1 keeps the benchmark database (for a look at warren.runs).
 * BENCH_CRON_OVERLAP=POLICY sets the --cron jobs' overlap (default: unset,
 * the config default `skip`), e.g. `allow` for A/B runs of the policy. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include <libpq-fe.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>
#include <warren/worker.h>

#include "testenv.h"

/* The in-process handlers. noop: nothing (--noop-4096). logkey: appends its
 * run key to the log file (one write to an O_APPEND descriptor: lines are
 * not interleaved), for the exactly-once check. */
static int log_fd = -1;

static warren_outcome noop(warren_handler_ctx *ctx, void *ud)
{
    (void)ctx;
    (void)ud;
    return WARREN_OUTCOME_SUCCEEDED;
}

static warren_outcome logkey(warren_handler_ctx *ctx, void *ud)
{
    char line[WARREN_RUN_KEY_MAX + 2];
    (void)ud;
    int n = snprintf(line, sizeof(line), "%s\n", warren_handler_run_key(ctx));
    if (n <= 0 || n >= (int)sizeof(line) || write(log_fd, line, (size_t)n) != n) {
        warren_handler_set_error(ctx, "cannot write the bench log");
        return WARREN_OUTCOME_RETRY;
    }
    return WARREN_OUTCOME_SUCCEEDED;
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

/* From /proc/PID/stat: the command name, the parent, the CPU seconds (user +
 * system) of the process and of its reaped children (a postmaster's: the
 * backends that exited). -1 if unreadable. */
static int proc_stat(long pid, char *comm, size_t comm_len, long *ppid, double *own, double *reaped)
{
    char path[64], line[1024];
    unsigned long long ut = 0, st = 0;
    long long cut = 0, cst = 0;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    char *open = strchr(line, '('), *close = strrchr(line, ')');
    if (open == NULL || close == NULL)
        return -1;
    snprintf(comm, comm_len, "%.*s", (int)(close - open - 1), open + 1);
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime */
    if (sscanf(close + 2, "%*c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", ppid,
               &ut, &st, &cut, &cst) != 5)
        return -1;
    *own = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    *reaped = (double)(cut + cst) / (double)sysconf(_SC_CLK_TCK);
    return 0;
}

static double proc_cpu_s(long pid)
{
    char comm[64];
    long ppid;
    double own, reaped;
    return proc_stat(pid, comm, sizeof(comm), &ppid, &own, &reaped) == 0 ? own : 0;
}

/* CPU seconds used so far by the servers on this machine (every process
 * named postgres, plus the backends the postmaster reaped; every beam.smp),
 * by this process (planner and relay) and by the worker processes. */
typedef struct cpu_snap {
    double pg, rabbit, self, workers;
} cpu_snap;

static void cpu_snapshot(cpu_snap *c, const pid_t *w, int nw)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    memset(c, 0, sizeof(*c));
    while (d != NULL && (e = readdir(d)) != NULL) {
        char comm[64], pcomm[64];
        long ppid, pp;
        double own, reaped, o2, r2;
        if (e->d_name[0] < '0' || e->d_name[0] > '9' ||
            proc_stat(strtol(e->d_name, NULL, 10), comm, sizeof(comm), &ppid, &own, &reaped) != 0)
            continue;
        if (strcmp(comm, "postgres") == 0) {
            c->pg += own;
            /* the postmaster: a postgres whose parent is not one */
            if (proc_stat(ppid, pcomm, sizeof(pcomm), &pp, &o2, &r2) != 0 ||
                strcmp(pcomm, "postgres") != 0)
                c->pg += reaped;
        } else if (strcmp(comm, "beam.smp") == 0) {
            c->rabbit += own;
        }
    }
    if (d != NULL)
        closedir(d);
    c->self = proc_cpu_s((long)getpid());
    for (int i = 0; i < nw; i++)
        c->workers += proc_cpu_s((long)w[i]);
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

/* The benchmark's settings, copied into every JSON line. */
typedef struct bench_opts {
    const char *handler; /* sql, c, exec */
    const char *variant; /* realistic (2 x 50, sql), inproc_noop_4096, custom */
    const char *label;
    int workers, concurrency, noop;
    int64_t lead_ms, tick_ms;
    char log_path[256]; /* c and exec handlers: one run key a line */
} bench_opts;

/* Waits until every run matching where (a condition on warren.runs) succeeded
 * (or timeout_s). Polls once a second on one connection: a psql per poll
 * twice a second (a process, a backend and a scan of the runs each time) cost
 * CPU the benchmark is measuring; the report takes the times from the rows,
 * not from this loop. */
static int wait_all(const char *db, const char *where, long n, int timeout_s)
{
    char q[512];
    int done = 0;
    PGconn *c = PQconnectdb(db);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "bench_worker: %s", PQerrorMessage(c));
        PQfinish(c);
        return 0;
    }
    snprintf(q, sizeof(q), "SELECT count(*) FROM warren.runs WHERE state = 'succeeded' AND %s",
             where);
    for (int i = 0; i < timeout_s && !done; i++) {
        PGresult *r = PQexec(c, q);
        done = PQresultStatus(r) == PGRES_TUPLES_OK && strtol(PQgetvalue(r, 0, 0), NULL, 10) >= n;
        PQclear(r);
        if (!done)
            testenv_sleep_ms(1000);
    }
    PQfinish(c);
    return done;
}

/* c and exec handlers: loads the log file into the table starts (start_ms
 * NULL: these handlers have no database clock), so that one query checks
 * every kind. */
static void load_file_log(const char *db, const bench_opts *o)
{
    FILE *f = fopen(o->log_path, "r");
    char line[512];
    PGconn *c = PQconnectdb(db);
    if (f == NULL || PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "bench_worker: cannot load the log %s\n", o->log_path);
        if (f != NULL)
            fclose(f);
        PQfinish(c);
        return;
    }
    PQclear(PQexec(c, "TRUNCATE starts"));
    PGresult *r = PQexec(c, "COPY starts (run_key) FROM STDIN");
    if (PQresultStatus(r) == PGRES_COPY_IN) {
        while (fgets(line, sizeof(line), f) != NULL)
            PQputCopyData(c, line, (int)strlen(line));
        PQputCopyEnd(c, NULL);
        PQclear(PQgetResult(c));
    }
    PQclear(r);
    fclose(f);
    PQfinish(c);
}

static void report(const char *db, const char *bench, const char *where, long n, pid_t *w,
                   const bench_opts *o, double extra_rate, int ok, const cpu_snap *c0,
                   const cpu_snap *c1, const char *events_s)
{
    char la[128];
    if (strcmp(o->handler, "sql") != 0 && !o->noop)
        load_file_log(db, o);
    /* start lateness from the claim (runs.started_at); for the sql handler
     * also from the start its statement recorded; the log check counts the
     * log's rows for these runs (no unique key: a second execution would be
     * a second row) */
    char *v = testenv_sql1f(
        db,
        "WITH r AS (SELECT run_key, extract(epoch FROM started_at - due_at) * 1000 AS l, "
        "started_at, finished_at, due_at FROM warren.runs WHERE %s AND state = 'succeeded'), "
        "g AS (SELECT s.run_key, count(*) AS k, min(s.start_ms) AS t FROM starts s JOIN r USING "
        "(run_key) GROUP BY 1), "
        "h AS (SELECT g.t - extract(epoch FROM r.due_at) * 1000 AS l, "
        "g.t - extract(epoch FROM r.started_at) * 1000 AS c2h FROM g JOIN r USING (run_key) "
        "WHERE g.t IS NOT NULL) "
        "SELECT format('\"min_start_lateness_ms\":%%s,"
        "\"p50_start_lateness_ms\":%%s,\"p90_start_lateness_ms\":%%s,"
        "\"p99_start_lateness_ms\":%%s,\"max_start_lateness_ms\":%%s,"
        "\"all_started_after_due_s\":%%s,"
        "\"all_completed_after_due_s\":%%s,\"completions_per_s\":%%s,\"succeeded\":%%s,"
        "\"handler_start_ms\":%%s,\"claim_to_handler_ms\":%%s,\"log_rows\":%%s,\"log_distinct\":%%"
        "s', "
        " round(min(l)::numeric, 1),"
        " round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::numeric, 1),"
        " round(percentile_cont(0.9) WITHIN GROUP (ORDER BY l)::numeric, 1),"
        " round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l)::numeric, 1),"
        " round(max(l)::numeric, 1),"
        " round(extract(epoch FROM max(started_at) - min(due_at))::numeric, 3),"
        " round(extract(epoch FROM max(finished_at) - min(due_at))::numeric, 3),"
        " round((count(*) / greatest(extract(epoch FROM max(finished_at) - min(started_at)), "
        "0.001))::numeric, 0), count(*), "
        " (SELECT CASE WHEN count(*) = 0 THEN 'null' ELSE "
        "format('{\"min\":%%s,\"p50\":%%s,\"p99\":%%s,\"max\":%%s}', "
        "round(min(l)::numeric, 1), "
        "round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::numeric, 1), "
        "round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l)::numeric, 1), "
        "round(max(l)::numeric, 1)) END FROM h), "
        /* the claim (runs.started_at) -> the statement's start */
        " (SELECT CASE WHEN count(*) = 0 THEN 'null' ELSE format('{\"p50\":%%s,\"p99\":%%s}', "
        "round(percentile_cont(0.5) WITHIN GROUP (ORDER BY c2h)::numeric, 1), "
        "round(percentile_cont(0.99) WITHIN GROUP (ORDER BY c2h)::numeric, 1)) END FROM h), "
        " (SELECT coalesce(sum(k), 0) FROM g), (SELECT count(*) FROM g)) FROM r",
        where);
    long rows = -1, distinct = -1;
    const char *p;
    if (v != NULL && (p = strstr(v, "\"log_rows\":")) != NULL)
        rows = strtol(p + 11, NULL, 10);
    if (v != NULL && (p = strstr(v, "\"log_distinct\":")) != NULL)
        distinct = strtol(p + 15, NULL, 10);
    if (getenv("BENCH_TIMELINE") != NULL) {
        /* runs started and finished per bucket (BENCH_TIMELINE ms; 1 means
         * 500) after the first due time, on stderr */
        long ms = atol(getenv("BENCH_TIMELINE"));
        if (ms <= 1)
            ms = 500;
        for (int f = 0; f < 2; f++) {
            const char *col = f == 0 ? "started_at" : "finished_at";
            char *t =
                testenv_sql1f(db,
                              "SELECT string_agg(format('%%s:%%s', b, n), ' ' ORDER BY b) FROM "
                              "(SELECT round((floor(extract(epoch FROM %s - (SELECT min(due_at) "
                              "FROM warren.runs WHERE %s)) * 1000 / %ld) * %ld / 1000.0)::numeric, "
                              "2) AS b, count(*) AS n FROM warren.runs WHERE %s GROUP BY 1) s",
                              col, where, ms, ms, where);
            fprintf(stderr, "%s %s per %ld ms after the first due time: %s\n", bench,
                    f == 0 ? "started" : "finished", ms, t ? t : "?");
            free(t);
        }
    }
    loadavg(la, sizeof(la));
    printf("{\"bench\":\"%s\",\"variant\":\"%s\",\"label\":\"%s\",\"handler\":\"%s\","
           "\"runs\":%ld,\"workers\":%d,\"concurrency\":%d,\"release_lead_ms\":%lld,"
           "\"planner_tick_ms\":%lld,%s",
           bench, o->variant, o->label, o->noop ? "c-noop" : o->handler, n, o->workers,
           o->concurrency, (long long)o->lead_ms, (long long)o->tick_ms,
           v ? v : "\"error\":\"no result\"");
    if (!o->noop)
        printf(",\"exactly_once\":%s", rows == n && distinct == n ? "true" : "false");
    if (extra_rate > 0)
        printf(",\"rate_per_s\":%.0f", extra_rate);
    printf(",\"worker_peak_rss_kb\":[");
    for (int i = 0; i < o->workers; i++)
        printf("%s%ld", i ? "," : "", peak_rss_kb(w[i]));
    printf("]");
    if (c0 != NULL && c1 != NULL)
        printf(",\"cpu_s\":{\"postgres\":%.2f,\"rabbitmq\":%.2f,\"workers\":%.2f,"
               "\"planner\":%.2f}",
               c1->pg - c0->pg, c1->rabbit - c0->rabbit, c1->workers - c0->workers,
               c1->self - c0->self);
    if (events_s != NULL)
        printf(",\"events_out_after_due_s\":%s", events_s);
    printf(",\"loadavg\":\"%s\",\"complete\":%s}\n", la, ok ? "true" : "false");
    fflush(stdout);
    free(v);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_worker [--burst N] [--rate R] [--seconds S] [--spread] "
                    "[--warmup W] [--cron J --minutes M] [--handler sql|c|exec] [--concurrency C] "
                    "[--workers W] [--noop-4096] [--lead DURATION] [--warren PATH] "
                    "[--label TEXT] [--idle S]\n");
    exit(2);
}

/* Milliseconds until the database's clock reaches epoch_ms. */
static long ms_until(const char *db, double epoch_ms)
{
    char *v = testenv_sql1f(db, "SELECT round(%.0f - extract(epoch FROM clock_timestamp()) * 1000)",
                            epoch_ms);
    long ms = v ? strtol(v, NULL, 10) : 0;
    free(v);
    return ms;
}

int main(int argc, char **argv)
{
    long burst = 10000;
    int rate = 200, seconds = 60, spread = 0, cron_jobs = 0, minutes = 3, warmup = 0, idle = 0;
    const char *lead = NULL; /* planner.release_lead; NULL: the default */
    const char *warren_bin = WARREN_BINARY;
    bench_opts o = {.handler = "sql", .label = "", .workers = 2, .concurrency = 50};
    warren_error err = {0};
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_broker *b = NULL;
    char tmpl[] = "/tmp/warren-bench-worker-XXXXXX";
    int conc_set = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--burst") == 0 && i + 1 < argc)
            burst = atol(argv[++i]);
        else if (strcmp(argv[i], "--idle") == 0 && i + 1 < argc)
            idle = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--spread") == 0)
            spread = 1;
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cron") == 0 && i + 1 < argc)
            cron_jobs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--minutes") == 0 && i + 1 < argc)
            minutes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc)
            o.concurrency = atoi(argv[++i]), conc_set = 1;
        else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
            o.workers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--handler") == 0 && i + 1 < argc)
            o.handler = argv[++i];
        else if (strcmp(argv[i], "--noop-4096") == 0)
            o.noop = 1;
        else if (strcmp(argv[i], "--lead") == 0 && i + 1 < argc)
            lead = argv[++i];
        else if (strcmp(argv[i], "--warren") == 0 && i + 1 < argc)
            warren_bin = argv[++i];
        else if (strcmp(argv[i], "--label") == 0 && i + 1 < argc)
            o.label = argv[++i];
        else
            usage();
    }
    if (o.noop) {
        o.handler = "c";
        if (!conc_set)
            o.concurrency = 4096;
    }
    if ((strcmp(o.handler, "sql") != 0 && strcmp(o.handler, "c") != 0 &&
         strcmp(o.handler, "exec") != 0) ||
        o.workers < 1 || o.workers > 8 || o.concurrency < 1 || o.concurrency > 4096 ||
        cron_jobs < 0 || minutes < 1 || warmup < 0 || (seconds > 0 && warmup >= seconds))
        usage();
    if (cron_jobs > 0 && (burst > 0 || (rate > 0 && seconds > 0))) {
        fprintf(stderr, "bench_worker: run --cron alone (--burst 0 --seconds 0): its jobs would "
                        "fire during the other workloads\n");
        return 2;
    }
    o.variant = o.noop && o.concurrency == 4096 ? "inproc_noop_4096"
                : strcmp(o.handler, "sql") == 0 && o.workers == 2 && o.concurrency == 50
                    ? "realistic"
                    : "custom";
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    char *db = testenv_db_migrated();
    char *amqp = testenv_vhost();
    /* the handlers' log: no unique key, so a second execution is a second row */
    if (testenv_psql(db, "CREATE TABLE starts (run_key text NOT NULL, start_ms double precision)",
                     NULL) < 0)
        testenv_die("create the log table", NULL);
    /* BENCH_POLICY=JSON: a policy (pattern ^warren\.ready\.) on the
     * benchmark's vhost, for A/B runs of broker settings. */
    const char *policy = getenv("BENCH_POLICY");
    if (policy != NULL && policy[0] != '\0') {
        char *vh = testenv_vhost_path(amqp), *resp = NULL;
        char *path = testenv_fmt("/api/policies/%s/bench", vh);
        char *body = testenv_fmt("{\"pattern\":\"^warren\\\\.ready\\\\.\",\"apply-to\":"
                                 "\"queues\",\"priority\":1,\"definition\":%s}",
                                 policy);
        int hs = testenv_http("PUT", path, body, &resp);
        if (hs != 201 && hs != 204) {
            fprintf(stderr, "bench_worker: BENCH_POLICY: HTTP %d %s\n", hs, resp ? resp : "");
            return 2;
        }
        free(resp);
        free(body);
        free(path);
        free(vh);
    }
    const char *extra = getenv("BENCH_EXTRA_SQL");
    if (extra != NULL && extra[0] != '\0') {
        FILE *xf = fopen(extra, "r");
        char *text = NULL;
        long len = -1;
        if (xf != NULL && fseek(xf, 0, SEEK_END) == 0 && (len = ftell(xf)) >= 0 &&
            fseek(xf, 0, SEEK_SET) == 0 && (text = calloc(1, (size_t)len + 1)) != NULL &&
            fread(text, 1, (size_t)len, xf) == (size_t)len) {
            if (testenv_psql(db, text, NULL) < 0)
                testenv_die("BENCH_EXTRA_SQL failed", NULL);
        } else {
            fprintf(stderr, "bench_worker: cannot read BENCH_EXTRA_SQL %s\n", extra);
            return 2;
        }
        if (xf != NULL)
            fclose(xf);
        free(text);
    }
    /* BENCH_RING=N [BENCH_RING_TYPE=classic|quorum]: the delay ring instead of
     * one delay queue per second (N >= 152 for the default 2m30s horizon). */
    char ring_opt[256] = "";
    if (getenv("BENCH_RING") != NULL && atoi(getenv("BENCH_RING")) > 0)
        snprintf(ring_opt, sizeof(ring_opt), " delay_ring = %d; delay_ring_type = \"%s\";",
                 atoi(getenv("BENCH_RING")),
                 getenv("BENCH_RING_TYPE") ? getenv("BENCH_RING_TYPE") : "classic");
    if (lead != NULL)
        snprintf(ring_opt + strlen(ring_opt), sizeof(ring_opt) - strlen(ring_opt),
                 " release_lead = \"%s\";", lead);
    if (mkdtemp(tmpl) == NULL)
        testenv_die("mkdtemp", NULL);
    snprintf(o.log_path, sizeof(o.log_path), "%s/starts.log", tmpl);
    char handler[1024];
    if (o.noop)
        snprintf(handler, sizeof(handler), "c = \"noop\";");
    else if (strcmp(o.handler, "c") == 0)
        snprintf(handler, sizeof(handler), "c = \"logkey\";");
    else if (strcmp(o.handler, "exec") == 0)
        /* a process per run that appends its run key (a short line to an
         * O_APPEND file: not interleaved) */
        snprintf(handler, sizeof(handler),
                 "exec = \"echo \\\"$WARREN_RUN_KEY\\\" >> %s\"; shell = true;", o.log_path);
    else
        snprintf(handler, sizeof(handler),
                 "sql = \"INSERT INTO starts(run_key, start_ms) VALUES ($1, extract(epoch FROM "
                 "clock_timestamp()) * 1000)\";");
    char cfg_path[256];
    snprintf(cfg_path, sizeof(cfg_path), "%s/bench.cfg", tmpl);
    FILE *f = fopen(cfg_path, "w");
    const char *wextra = getenv("BENCH_WORKER_CFG");
    fprintf(f,
            "database = { url = \"%s\"; };\nbroker = { url = \"%s\"; };\n"
            "planner = { tick = \"100ms\"; horizon = \"%s\"; publish_batch = 500;%s };\n"
            "worker = { concurrency = %d; %s };\n"
            "jobs = ( { name = \"bench\"; at = \"2099-01-01T00:00:00Z\"; queue = \"bench\";"
            " overlap = \"allow\"; handler = { %s }; }",
            db, amqp, getenv("BENCH_HORIZON") ? getenv("BENCH_HORIZON") : "2m30s", ring_opt,
            o.concurrency, wextra ? wextra : "", handler);
    const char *cov = getenv("BENCH_CRON_OVERLAP");
    char covl[64] = "";
    if (cov != NULL && cov[0] != '\0')
        snprintf(covl, sizeof(covl), " overlap = \"%s\";", cov);
    for (int j = 0; j < cron_jobs; j++)
        fprintf(f,
                ",\n { name = \"cron-%d\"; cron = \"* * * * *\"; queue = \"bench\";%s "
                "payload = { bench = \"cron\"; }; handler = { %s }; }",
                j, covl, handler);
    fprintf(f, " );\n");
    fclose(f);
    if (warren_config_load(cfg_path, &cfg, NULL, &err) != 0)
        testenv_die("config", err.message);
    o.lead_ms = cfg->planner.release_lead_ms;
    o.tick_ms = cfg->planner.tick_ms;
    if (warren_store_open(db, NULL, &st, &err) != 0 || warren_store_sync(st, cfg, NULL, &err) != 0)
        testenv_die("sync", err.message);
    const char *queues[] = {"bench"};
    if (warren_broker_open(amqp, NULL, &b, &err) != 0 ||
        warren_broker_topology(b, queues, 1, cfg->delivery_limit, &err) != 0)
        testenv_die("topology", err.message);
    for (int s = 0; s < cfg->planner.delay_ring; s++) {
        /* the ring exists before the planner starts, as after `warren topology` */
        char name[128];
        if (warren_broker_delay_ring_queue_typed(b, s, cfg->planner.delay_ring,
                                                 cfg->planner.delay_ring_type, name, sizeof(name),
                                                 &err) != 0)
            testenv_die("delay ring", err.message);
    }
    warren_broker_free(b);

    /* Workers first (fork before this process starts threads): the real
     * `warren worker` for sql and exec handlers, this program's handlers in
     * a forked worker for c. */
    pid_t w[8];
    for (int i = 0; i < o.workers; i++) {
        char id[32];
        snprintf(id, sizeof(id), "bench-w%d", i);
        w[i] = fork();
        if (w[i] == 0 && strcmp(o.handler, "c") != 0) {
            char conc[16];
            snprintf(conc, sizeof(conc), "%d", o.concurrency);
            if (getenv("BENCH_LOG_INFO") == NULL) {
                /* warnings and errors only, as the c workers below */
                setenv("WARREN_LOG", "warn", 1);
            }
            execl(warren_bin, warren_bin, "worker", "-c", cfg_path, "--concurrency", conc, "--id",
                  id, (char *)NULL);
            fprintf(stderr, "bench_worker: exec %s: %s\n", warren_bin, strerror(errno));
            _exit(127);
        }
        if (w[i] == 0) {
            warren_worker *wk = NULL;
            warren_logger lg = {warren_log_stderr, stderr,
                                getenv("BENCH_LOG_INFO") ? WARREN_LOG_INFO : WARREN_LOG_WARN};
            testenv_catch_term();
            log_fd = open(o.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
            if (log_fd < 0 || warren_worker_new(cfg, &lg, &wk, &err) != 0 ||
                warren_worker_register(wk, "noop", noop, NULL) != 0 ||
                warren_worker_register(wk, "logkey", logkey, NULL) != 0 ||
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
    warren_logger plg = {warren_log_stderr, stderr,
                         getenv("BENCH_LOG_INFO") ? WARREN_LOG_INFO : WARREN_LOG_WARN};
    testenv_planner_start(&pl, cfg, db, amqp, &plg);
    testenv_sleep_ms(1500);

    if (idle > 0) {
        cpu_snap c0, c1;
        cpu_snapshot(&c0, w, o.workers);
        testenv_sleep_ms(idle * 1000L);
        cpu_snapshot(&c1, w, o.workers);
        printf("{\"bench\":\"worker_idle\",\"label\":\"%s\",\"handler\":\"%s\","
               "\"workers\":%d,\"concurrency\":%d,\"seconds\":%d,\"workers_cpu_s\":%.3f,"
               "\"planner_cpu_s\":%.3f}\n",
               o.label, o.handler, o.workers, o.concurrency, idle, c1.workers - c0.workers,
               c1.self - c0.self);
        fflush(stdout);
    }
    /* Burst: every run due at the same instant, 20 s ahead (the relay has time
     * to put them all into that second's delay queue). Runs are tagged through
     * their payload; scheduled_at values are distinct fake seconds. */
    const char *burst_where = "origin = 'backfill' AND payload->>'bench' = 'burst'";
    if (burst > 0) {
        char *v =
            testenv_sql1f(db,
                          "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload) "
                          "SELECT 'bench', date_trunc('second', now()) - make_interval(secs => g), "
                          "date_trunc('second', now()) + interval '20 seconds', 'backfill', "
                          "'{\"bench\": \"burst\"}' "
                          "FROM generate_series(1, %ld) g; NOTIFY warren_jobs; "
                          "SELECT extract(epoch FROM date_trunc('second', now()) + interval '20 "
                          "seconds') * 1000 - extract(epoch FROM clock_timestamp()) * 1000",
                          burst);
        /* cpu_s covers the burst only: from 100 ms before the release (the
         * due time minus planner.release_lead; the relay has published
         * everything by then) until all succeeded. */
        long until_rel = (v ? strtol(v, NULL, 10) : 0) - (long)cfg->planner.release_lead_ms;
        free(v);
        cpu_snap c0, c1;
        if (until_rel > 100)
            testenv_sleep_ms(until_rel - 100);
        cpu_snapshot(&c0, w, o.workers);
        int ok = wait_all(db, burst_where, burst, 120 + (int)(burst / 200));
        cpu_snapshot(&c1, w, o.workers);
        /* The run.succeeded events may be held back during the burst
         * (planner.event_defer): when the last one left the outbox (polled
         * twice a second, so up to 0.5 s late). */
        char *ev = NULL;
        for (int i = 0; ok && i < 240 && ev == NULL; i++) {
            ev = testenv_sql1f(
                db, "SELECT round(extract(epoch FROM clock_timestamp() - (SELECT min(due_at) "
                    "FROM warren.runs WHERE payload->>'bench' = 'burst'))::numeric, 1) "
                    "WHERE NOT EXISTS (SELECT 1 FROM warren.outbox WHERE exchange = "
                    "'warren.events')");
            if (ev != NULL && *ev == '\0') {
                free(ev);
                ev = NULL;
            }
            if (ev == NULL)
                testenv_sleep_ms(500);
        }
        report(db, "worker_burst", burst_where, burst, w, &o, 0, ok, &c0, &c1, ev);
        free(ev);
    }
    /* Steady: rate runs/s for seconds, starting 5 s ahead: rate runs due on
     * each whole second (--spread: due times 1/rate s apart). */
    if (rate > 0 && seconds > 0) {
        long n = (long)rate * seconds;
        char due[160];
        if (spread)
            snprintf(due, sizeof(due),
                     "now() + interval '5 seconds' + make_interval(secs => g / %d.0)", rate);
        else
            snprintf(due, sizeof(due),
                     "date_trunc('second', now()) + interval '6 seconds' + make_interval(secs => g "
                     "/ %d)",
                     rate);
        char *v =
            testenv_sql1f(db,
                          "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload) "
                          "SELECT 'bench', date_trunc('second', now()) - interval '1 day' - "
                          "make_interval(secs => g), %s, 'backfill', '{\"bench\": \"steady\"}' "
                          "FROM generate_series(0, %ld - 1) g; NOTIFY warren_jobs; SELECT 1",
                          due, n);
        free(v);
        const char *all = "origin = 'backfill' AND payload->>'bench' = 'steady'";
        cpu_snap c0, c1;
        cpu_snapshot(&c0, w, o.workers);
        int ok = wait_all(db, all, n, seconds + 60);
        cpu_snapshot(&c1, w, o.workers);
        if (warmup == 0) {
            report(db, spread ? "worker_steady_spread" : "worker_steady", all, n, w, &o, rate, ok,
                   &c0, &c1, NULL);
        } else {
            /* --warmup W: the runs due in the first W seconds on a line of
             * their own (the workers' first runs: cold backends, statements
             * not measured yet), the steady state after them on the usual
             * line */
            char first[512], rest[512];
            for (int part = 0; part < 2; part++)
                snprintf(part ? rest : first, sizeof(first),
                         "%s AND due_at %s (SELECT min(due_at) FROM warren.runs WHERE %s) + "
                         "make_interval(secs => %d)",
                         all, part ? ">=" : "<", all, warmup);
            report(db, spread ? "worker_steady_spread_warmup" : "worker_steady_warmup", first,
                   (long)rate * warmup, w, &o, rate, ok, NULL, NULL, NULL);
            report(db, spread ? "worker_steady_spread" : "worker_steady", rest,
                   n - (long)rate * warmup, w, &o, rate, ok, NULL, NULL, NULL);
        }
    }
    /* Cron: the jobs fire at every minute boundary; measured from the first
     * boundary at least 20 s after the sync (their runs are materialised,
     * published and held by then) over minutes boundaries. */
    if (cron_jobs > 0) {
        char *b0 =
            testenv_sql1f(db, "SELECT extract(epoch FROM date_trunc('minute', now() + interval '80 "
                              "seconds')) * 1000");
        double first = b0 ? strtod(b0, NULL) : 0;
        free(b0);
        double last = first + (minutes - 1) * 60000.0;
        char where[512];
        snprintf(where, sizeof(where),
                 "job LIKE 'cron-%%' AND scheduled_at >= to_timestamp(%.0f / 1000.0) AND "
                 "scheduled_at <= to_timestamp(%.0f / 1000.0)",
                 first, last);
        long until = ms_until(db, last);
        if (until > 0)
            testenv_sleep_ms(until);
        int ok = wait_all(db, where, (long)cron_jobs * minutes, 120);
        report(db, "worker_cron", where, (long)cron_jobs * minutes, w, &o, 0, ok, NULL, NULL, NULL);
        /* one line a minute boundary: the first wave is the workers' first
         * sight of these jobs (cold backends, statements not measured yet,
         * so claimed and not taken); the later ones are the steady state */
        char *waves = testenv_sql1f(
            db,
            "WITH r AS (SELECT run_key, scheduled_at, extract(epoch FROM started_at - due_at) * "
            "1000 AS l, due_at FROM warren.runs WHERE %s AND state = 'succeeded'), "
            "h AS (SELECT r.scheduled_at, min(s.start_ms) - extract(epoch FROM r.due_at) * 1000 AS "
            "l FROM starts s JOIN r USING (run_key) GROUP BY r.run_key, r.scheduled_at, r.due_at) "
            "SELECT string_agg(format('{\"bench\":\"worker_cron_wave\",\"label\":\"%s\","
            "\"wave\":%%s,\"scheduled_at\":\"%%s\",\"runs\":%%s,\"p50_start_lateness_ms\":%%s,"
            "\"max_start_lateness_ms\":%%s,\"handler_start_ms\":{\"p50\":%%s,\"max\":%%s}}', "
            "w.n, to_char(w.scheduled_at AT TIME ZONE 'UTC', 'HH24:MI:SS'), w.runs, w.p50, w.mx, "
            "coalesce(h.p50::text, 'null'), coalesce(h.mx::text, 'null')), E'\\n' ORDER BY w.n) "
            "FROM (SELECT scheduled_at, row_number() OVER (ORDER BY scheduled_at) AS n, count(*) "
            "AS runs, round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::numeric, 1) AS p50, "
            "round(max(l)::numeric, 1) AS mx FROM r GROUP BY scheduled_at) w LEFT JOIN "
            "(SELECT scheduled_at, round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::numeric, "
            "1) AS p50, round(max(l)::numeric, 1) AS mx FROM h GROUP BY scheduled_at) h USING "
            "(scheduled_at)",
            where, o.label);
        if (waves != NULL)
            printf("%s\n", waves);
        fflush(stdout);
        free(waves);
    }
    for (int i = 0; i < o.workers; i++)
        kill(w[i], SIGTERM);
    for (int i = 0; i < o.workers; i++)
        waitpid(w[i], NULL, 0);
    testenv_planner_stop(&pl);
    if (getenv("BENCH_FUNC_STATS") != NULL) {
        /* with BENCH_EXTRA_SQL setting track_functions: where PostgreSQL's
         * time went, by function (the sessions have ended: flushed) */
        testenv_sleep_ms(1500);
        char *t = testenv_sql1f(
            db, "SELECT string_agg(format('%%s calls=%%s self_ms=%%s total_ms=%%s', "
                "funcname, calls, round(self_time), round(total_time)), E'\n' ORDER BY "
                "self_time DESC) FROM pg_stat_user_functions");
        fprintf(stderr, "function stats:\n%s\n", t ? t : "?");
        free(t);
    }
    warren_store_free(st);
    warren_config_free(cfg);
    if (getenv("BENCH_KEEP_DB") != NULL) {
        fprintf(stderr, "bench_worker: BENCH_KEEP_DB: kept %s\n", db);
    } else {
        /* Drop the database: autovacuum of 50,000 dead rows left behind
         * would run during the next benchmark and skew it. */
        const char *name = strrchr(db, '/');
        char q[256];
        snprintf(q, sizeof(q), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name ? name + 1 : db);
        if (testenv_psql(testenv_pg_admin_url(), q, NULL) < 0)
            fprintf(stderr, "bench_worker: could not drop %s\n", db);
    }
    unlink(o.log_path);
    unlink(cfg_path);
    rmdir(tmpl);
    free(db);
    free(amqp);
    return 0;
}
