/* bench_api_jobs: API jobs at scale (issue 16), one JSON line per figure.
 *
 *   eval "$(tests/servers.sh start)"
 *   build/tests/bench_api_jobs [--jobs N] [--small N] [--batch B] [--planners P]
 *                              [--db URL] [--no-planners]
 *
 * Defaults: 1,000,000 jobs, the small size 10,000, batches of 10,000, 3
 * planners. Phases, each a JSON line (with /proc/loadavg at its end):
 *  - create: N API jobs from one template through warren.upsert_jobs from
 *    one client (one call, autocommitted, per batch), hourly cron
 *    expressions in 10 zones, jitter 5m, a tenant each; the cron minutes
 *    leave a 40-minute gap from 6 minutes before the run in which no job
 *    fires (job_minute), so that nothing is due while the idle ticks run;
 *    jobs per second and the database size per job (warren.jobs with its
 *    indexes), measured after the first `small` jobs and again after all N;
 *  - materialise: one planner (in a child process, so RSS is the
 *    planner's) with horizon 2h plans every job (2 runs each): runs per second of
 *    materialising, peak RSS, database size per run;
 *  - idle tick: a new planner (horizon 10 min) ticking when nothing is due
 *    and nothing is to be published: its first tick (leases taken, the scan
 *    from '-infinity'), one tick after warren_planner_rescan (the
 *    once-a-minute full scan), then 20 ticks from the scan floor: mean and
 *    max, the due-jobs part of them (materialise_mean_ms) and the runs the
 *    relay published meanwhile (0 unless the gap did not hold); at `small`
 *    jobs and at N; at N twice: right after materialising (jobs_due_at still
 *    holds the index entries of every cursor's old value, dead until a
 *    vacuum, which a scan from '-infinity' steps over, and jobs_replan those
 *    of every new job's mark), after a VACUUM of warren.jobs, and after every
 *    cursor was moved 3 h back and forward again (its old entries below the
 *    horizon, dead, as the planner's moves leave them between two
 *    autovacuums in production; no job marked);
 *  - planners: the cursors reset and the runs deleted, P planners (child
 *    processes) plan all N jobs together: the partitions each owned, the
 *    runs each inserted, the time until the horizon was filled (no job left
 *    with a cursor inside it).
 * --db URL reuses a database an earlier run filled (the planning phases only,
 * after TRUNCATE warren.runs and every cursor reset; its jobs' gap is the
 * earlier run's, so its idle ticks may find work); --no-planners leaves
 * out the last phase (for quick A/B rounds of the one planner).
 * The relay stays out of the way (lead = x-expires / 2 = 1 s). */
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "testenv.h"

static const char *const ZONES[] = {"Europe/Berlin",    "America/New_York",  "Asia/Tokyo",
                                    "Australia/Sydney", "Europe/London",     "America/Chicago",
                                    "Asia/Kolkata",     "America/Sao_Paulo", "Africa/Cairo",
                                    "Pacific/Auckland"};

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* CPU seconds (user + system) this process used so far. */
static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static warren_config planner_config(void)
{
    warren_config c;
    memset(&c, 0, sizeof(c));
    c.planner.horizon_ms = 7200000; /* hourly crons: 2 runs a job */
    c.planner.tick_ms = 1000;
    c.planner.misfire_threshold_ms = 60000;
    c.planner.reconcile_grace_ms = 600000;
    c.planner.partitions = 64;
    c.planner.publish_batch = 500;
    c.planner.delay_queue_expires_ms = 2000; /* relay lead 1 s: out of the way */
    return c;
}

/* The template, synced as `warren sync` would. */
static void sync_template(const char *db)
{
    char *path = testenv_temp_file(
        "bench_api_jobs", ".cfg",
        "planner = { partitions = 64; };\n"
        "jobs = ( { name = \"usage-report\"; template = true; queue = \"b\";\n"
        "           payload = { kind = \"usage\"; }; max_running_per_tenant = 2; } );\n");
    warren_config *cfg = testenv_config_load(path);
    unlink(path);
    free(path);
    testenv_config_apply(cfg, db, NULL);
    warren_config_free(cfg);
}

/* The first UTC minute of a 40-minute gap in which no job fires (jitter
 * included): it starts 6 minutes before the run (jitter is under 5 min), so
 * the idle ticks of a run under half an hour find nothing due and the relay
 * nothing to publish. */
static int gap_start;

/* Job k's cron minute: a UTC minute outside the gap, in its zone's local
 * minutes (of the 10 zones only Asia/Kolkata, UTC+5:30, is off the hour). */
static long job_minute(long k)
{
    long utc = (gap_start + 40 + k % 20) % 60;
    return strcmp(ZONES[k % 10], "Asia/Kolkata") == 0 ? (utc + 30) % 60 : utc;
}

/* Jobs [from, to) in batches of batch through warren.upsert_jobs; returns the
 * seconds it took. */
static double create_jobs(PGconn *c, long from, long to, long batch)
{
    size_t cap = (size_t)batch * 200 + 64;
    char *doc = malloc(cap);
    int64_t t0 = mono_us();
    for (long i = from; i < to; i += batch) {
        size_t len = 0;
        long end = i + batch < to ? i + batch : to;
        len += (size_t)snprintf(doc + len, cap - len, "[");
        for (long k = i; k < end; k++)
            len += (size_t)snprintf(doc + len, cap - len,
                                    "%s{\"name\":\"usage-report.tenant-%ld\",\"template\":"
                                    "\"usage-report\",\"cron\":\"%ld * * * *\",\"timezone\":"
                                    "\"%s\",\"jitter\":\"5m\",\"tenant\":\"tenant-%ld\"}",
                                    k > i ? "," : "", k, job_minute(k), ZONES[k % 10], k);
        snprintf(doc + len, cap - len, "]");
        const char *p[1] = {doc};
        int64_t b0 = mono_us();
        PGresult *r = PQexecParams(c, "SELECT count(*) FROM warren.upsert_jobs($1::jsonb)", 1, NULL,
                                   p, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            testenv_die("upsert_jobs", PQerrorMessage(c));
        PQclear(r);
        if (getenv("BENCH_VERBOSE") != NULL)
            fprintf(stderr, "batch %ld-%ld: %.3f s\n", i, end, (mono_us() - b0) / 1e6);
    }
    free(doc);
    return (mono_us() - t0) / 1e6;
}

static void print_create(const char *db, long n, long batch, double s)
{
    char la[64];
    long long bytes = testenv_sql_long(db, "SELECT pg_total_relation_size('warren.jobs')");
    testenv_loadavg(la, sizeof(la));
    printf("{\"bench\": \"api_jobs_create\", \"jobs\": %ld, \"batch\": %ld, \"seconds\": %.2f, "
           "\"jobs_per_s\": %.0f, \"jobs_table_bytes_per_job\": %.0f, \"clients\": 1, "
           "\"zones\": 10, \"loadavg\": %s}\n",
           n, batch, s, n / s, (double)bytes / (double)n, la);
    fflush(stdout);
}

/* In a child: one planner plans until a tick inserts nothing, then ticks
 * idle `idle` times; prints materialise and idle-tick lines. */
static void one_planner(const char *db, const char *amqp, long jobs, int idle, int materialise,
                        int vacuum_too)
{
    pid_t pid = fork();
    if (pid == 0) {
        warren_config c = planner_config();
        warren_planner *p = NULL;
        warren_error err = {0};
        warren_planner_stats s;
        char la[64];
        int64_t t0 = mono_us(), worst = 0, sum = 0;
        double cpu0 = cpu_s();
        if (warren_planner_new(&c, db, amqp, NULL, &p, &err) != 0)
            testenv_die("planner", err.message);
        for (;;) {
            uint64_t before;
            warren_planner_stats_get(p, &s);
            before = s.runs_inserted;
            if (warren_planner_tick(p, &err) != 0)
                testenv_die("tick", err.message);
            warren_planner_stats_get(p, &s);
            /* the backlog is planned: what is left is the steady trickle of
             * fire times coming into the horizon (hourly jobs: jobs/3600 a
             * second), at most jobs/1000 runs a tick */
            if (s.ticks > 1 && s.runs_inserted - before <= (uint64_t)jobs / 1000 + 10)
                break;
        }
        int64_t t1 = mono_us();
        double cpu1 = cpu_s();
        testenv_loadavg(la, sizeof(la));
        if (materialise) {
            long long rb = testenv_sql_long(db, "SELECT pg_total_relation_size('warren.runs')");
            long long nr = testenv_sql_long(db, "SELECT count(*) FROM warren.runs");
            printf("{\"bench\": \"api_jobs_materialise\", \"jobs\": %ld, \"runs\": %llu, "
                   "\"materialise_s\": %.2f, \"runs_per_s\": %.0f, \"wall_s\": %.2f, "
                   "\"planner_cpu_s\": %.2f, \"jobs_on_second_connection\": %llu, "
                   "\"rss_peak_mib\": %.1f, \"runs_table_bytes_per_run\": %.0f, \"horizon\": "
                   "\"2h\", \"partitions\": 64, \"loadavg\": %s}\n",
                   jobs, (unsigned long long)s.runs_inserted, s.materialise_us / 1e6,
                   s.materialise_us ? s.runs_inserted / (s.materialise_us / 1e6) : 0.0,
                   (t1 - t0) / 1e6, cpu1 - cpu0, (unsigned long long)s.helper_jobs,
                   testenv_rss_peak_kib() / 1024.0, nr > 0 ? (double)rb / nr : 0.0, la);
            fflush(stdout);
        }
        /* Nothing due: a planner with a 10 min horizon, while every cursor is
         * at least 2 h minus the materialising time ahead, and no fire time
         * (jitter included) falls in the gap (gap_start). Each round a new
         * planner: its first tick takes the leases and scans from
         * '-infinity'; then one tick after warren_planner_rescan (the
         * once-a-minute full scan), then the idle ticks from the floor. */
        warren_planner_release(p, &err);
        warren_planner_free(p);
        p = NULL;
        c.planner.horizon_ms = 600000;
        static const char *const state[] = {"after_materialise", "vacuumed",
                                            "vacuumed_then_every_cursor_moved"};
        for (int round = 0; round < (vacuum_too ? 3 : 1); round++) {
            int64_t first_us, full_us;
            if (round == 1 && testenv_psql(db, "VACUUM warren.jobs", NULL) < 0)
                testenv_die("vacuum", "");
            if (round == 2) {
                /* Every cursor moved once since the vacuum, its old entry
                 * left below the horizon, as the planner's moves leave them
                 * between two autovacuums in production: each cursor is set
                 * 3 h back and then forward again, two transactions, with
                 * the trigger off (the planner's own moves mark nothing). */
                if (testenv_psql(db,
                                 "SET session_replication_role = replica; UPDATE warren.jobs SET "
                                 "next_fire_at = next_fire_at - interval '3 hours' "
                                 "WHERE origin = 'api'",
                                 NULL) < 0 ||
                    testenv_psql(db,
                                 "SET session_replication_role = replica; UPDATE warren.jobs SET "
                                 "next_fire_at = next_fire_at + interval '3 hours' "
                                 "WHERE origin = 'api'",
                                 NULL) < 0)
                    testenv_die("moving the cursors", "");
            }
            if (warren_planner_new(&c, db, amqp, NULL, &p, &err) != 0)
                testenv_die("planner", err.message);
            first_us = mono_us();
            if (warren_planner_tick(p, &err) != 0) /* leases taken */
                testenv_die("tick", err.message);
            first_us = mono_us() - first_us;
            warren_planner_rescan(p);
            full_us = mono_us();
            if (warren_planner_tick(p, &err) != 0)
                testenv_die("tick", err.message);
            full_us = mono_us() - full_us;
            warren_planner_stats_get(p, &s);
            uint64_t planned_before_idle = s.runs_inserted, mat_before = s.materialise_us,
                     pub_before = s.runs_published, full_before = s.full_scans;
            sum = worst = 0;
            for (int i = 0; i < idle; i++) {
                int64_t a = mono_us();
                if (warren_planner_tick(p, &err) != 0)
                    testenv_die("tick", err.message);
                int64_t d = mono_us() - a;
                sum += d;
                if (d > worst)
                    worst = d;
            }
            warren_planner_stats_get(p, &s);
            testenv_loadavg(la, sizeof(la));
            printf("{\"bench\": \"api_jobs_idle_tick\", \"jobs\": %ld, \"ticks\": %d, \"horizon\": "
                   "\"10m\", \"jobs_vacuumed\": %s, \"state\": \"%s\", ",
                   jobs, idle, round >= 1 ? "true" : "false", state[round]);
            printf("\"tick_mean_ms\": %.2f, \"tick_max_ms\": %.2f, \"runs_inserted_while_idle\": "
                   "%llu, "
                   "\"materialise_mean_ms\": %.3f, \"runs_published_while_idle\": %llu, "
                   "\"full_scans_while_idle\": %llu, \"first_tick_ms\": %.2f, "
                   "\"full_scan_tick_ms\": %.2f, "
                   "\"rss_peak_mib\": %.1f, \"loadavg\": %s}\n",
                   sum / 1000.0 / idle, worst / 1000.0,
                   (unsigned long long)(s.runs_inserted - planned_before_idle),
                   (s.materialise_us - mat_before) / 1000.0 / idle,
                   (unsigned long long)(s.runs_published - pub_before),
                   (unsigned long long)(s.full_scans - full_before), first_us / 1000.0,
                   full_us / 1000.0, testenv_rss_peak_kib() / 1024.0, la);
            fflush(stdout);
            warren_planner_release(p, &err);
            warren_planner_free(p);
        }
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        testenv_die("planner child", "failed");
}

/* Every API job unplanned again (bench databases only). */
static void reset(const char *db)
{
    if (testenv_psql(db,
                     "TRUNCATE warren.runs; UPDATE warren.jobs SET next_fire_at = NULL "
                     "WHERE origin = 'api'; DELETE FROM warren.planner_leases; "
                     "DELETE FROM warren.planners",
                     NULL) < 0 ||
        testenv_psql(db, "VACUUM ANALYZE warren.jobs", NULL) < 0)
        testenv_die("reset", "");
}

/* P planners (children running warren_planner_run) plan all jobs anew; the
 * parent polls until the horizon is filled: at most jobs/1000 jobs left with
 * a cursor inside it (the fire times that keep coming into it, jobs/3600 a
 * second for hourly jobs, wait for the next tick). */
static void many_planners(const char *db, const char *amqp, long jobs, int np)
{
    pid_t pids[16];
    char la[64];
    if (testenv_psql(db,
                     "DELETE FROM warren.runs; UPDATE warren.jobs SET next_fire_at = NULL "
                     "WHERE origin = 'api'; DELETE FROM warren.planner_leases; "
                     "DELETE FROM warren.planners",
                     NULL) < 0)
        testenv_die("reset", "");
    int64_t t0 = mono_us();
    for (int i = 0; i < np; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            warren_config c = planner_config();
            warren_planner *p = NULL;
            warren_error err = {0};
            warren_planner_stats s;
            testenv_catch_term();
            if (warren_planner_new(&c, db, amqp, NULL, &p, &err) != 0)
                testenv_die("planner", err.message);
            char id[64];
            snprintf(id, sizeof(id), "bench-planner-%d", i);
            warren_planner_set_id(p, id, &err);
            warren_planner_run(p, &testenv_term, &err);
            warren_planner_stats_get(p, &s);
            printf("{\"bench\": \"api_jobs_planner\", \"planner\": %d, \"runs_inserted\": %llu, "
                   "\"partitions_owned\": %d, \"ticks\": %llu, \"rss_peak_mib\": %.1f}\n",
                   i, (unsigned long long)s.runs_inserted, s.partitions_owned,
                   (unsigned long long)s.ticks, testenv_rss_peak_kib() / 1024.0);
            fflush(stdout);
            warren_planner_release(p, &err);
            warren_planner_free(p);
            _exit(0);
        }
    }
    long long left = -1, owners = 0;
    int64_t filled = 0;
    for (int i = 0; i < 3600 * 5; i++) {
        usleep(200000);
        left = testenv_sql_long(
            db, "SELECT count(*) FROM warren.jobs WHERE origin = 'api' AND NOT paused "
                "AND (next_fire_at IS NULL OR next_fire_at <= now() + interval '2 "
                "hour')");
        if (left >= 0 && left <= jobs / 1000) {
            filled = mono_us() - t0;
            break;
        }
    }
    owners = testenv_sql_long(db, "SELECT count(DISTINCT owner) FROM warren.planner_leases WHERE "
                                  "lease_until > now()");
    for (int i = 0; i < np; i++)
        kill(pids[i], SIGTERM);
    for (int i = 0; i < np; i++)
        waitpid(pids[i], NULL, 0);
    testenv_loadavg(la, sizeof(la));
    printf("{\"bench\": \"api_jobs_planners\", \"planners\": %d, \"jobs\": %ld, \"runs\": %lld, "
           "\"horizon_filled_s\": %.2f, \"jobs_left_in_horizon\": %lld, \"lease_owners\": %lld, "
           "\"horizon\": \"2h\", "
           "\"loadavg\": %s}\n",
           np, jobs, (long long)testenv_sql_long(db, "SELECT count(*) FROM warren.runs"),
           filled / 1e6, left, owners, la);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    long jobs = 1000000, small = 10000, batch = 10000;
    int planners = 3, no_planners = 0;
    const char *reuse = NULL; /* a database an earlier run filled: planning phases only */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc)
            jobs = atol(argv[++i]);
        else if (strcmp(argv[i], "--small") == 0 && i + 1 < argc)
            small = atol(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = atol(argv[++i]);
        else if (strcmp(argv[i], "--planners") == 0 && i + 1 < argc)
            planners = atoi(argv[++i]);
        else if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            reuse = argv[++i];
        else if (strcmp(argv[i], "--no-planners") == 0)
            no_planners = 1;
        else {
            fprintf(stderr, "usage: bench_api_jobs [--jobs N] [--small N] [--batch B] "
                            "[--planners P] [--db URL-of-an-earlier-run] [--no-planners]\n");
            return 2;
        }
    }
    if (small > jobs)
        small = jobs;
    if (planners < 1 || planners > 16 || batch < 1 || jobs < 1)
        testenv_die("arguments", "planners 1-16, batch and jobs >= 1");
    setvbuf(stdout, NULL, _IOLBF, 0);
    {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        gap_start = (tm.tm_min + 60 - 6) % 60;
    }
    char *db = reuse ? strdup(reuse) : testenv_db_migrated(), *amqp = testenv_vhost();
    {
        static const char *const queues[] = {"b"};
        warren_broker *b = NULL;
        warren_error err = {0};
        if (warren_broker_open(amqp, NULL, &b, &err) != 0 ||
            warren_broker_topology(b, queues, 1, 5, &err) != 0)
            testenv_die("topology", err.message);
        warren_broker_free(b);
    }
    fprintf(stderr, "bench_api_jobs: database %s\n", db);
    if (reuse != NULL) {
        jobs = testenv_sql_long(db, "SELECT count(*) FROM warren.jobs WHERE origin = 'api'");
        reset(db);
        one_planner(db, amqp, jobs, 20, 1, 1);
        if (!no_planners)
            many_planners(db, amqp, jobs, planners);
        free(db);
        free(amqp);
        return 0;
    }
    sync_template(db);
    PGconn *c = PQconnectdb(db);
    if (PQstatus(c) != CONNECTION_OK)
        testenv_die("connect", PQerrorMessage(c));
    double s = create_jobs(c, 0, small, batch);
    print_create(db, small, batch, s);
    testenv_psql(db, "ANALYZE warren.jobs", NULL);
    one_planner(db, amqp, small, 20, 0, 0);
    if (jobs > small) {
        s += create_jobs(c, small, jobs, batch);
        print_create(db, jobs, batch, s);
        testenv_psql(db, "VACUUM ANALYZE warren.jobs", NULL);
        one_planner(db, amqp, jobs, 20, 1, 1);
    }
    PQfinish(c);
    if (!no_planners)
        many_planners(db, amqp, jobs, planners);
    free(db);
    free(amqp);
    return 0;
}
