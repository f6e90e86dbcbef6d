/* check_api_jobs: API jobs (docs/api-jobs.md, sql/functions/api_jobs.sql)
 * against real PostgreSQL and RabbitMQ: warren.upsert_job(s) created /
 * changed / unchanged, set-based with a bad element, bad input at every call
 * (clear error, nothing written), the same runs as a config job across DST
 * transitions, schedule change / pause / resume / delete with runs in flight
 * (an execution log without a unique key shows nothing lost or run twice),
 * and `warren sync` with API jobs present: none changed, a removed template
 * pauses them with a note, and its return resumes them. */
#include <check.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/config.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "planner_fixture.h"
#include "testenv.h"

/* ----------------------------------------------------------------- helpers */

/* A config with template "report" (misfire catch_up, so a cursor set in the
 * past plans every fire time since) and the config job "cfg-daily". */
static const char CONFIG[] =
    "planner = { partitions = 4; horizon = \"10s\"; };\n"
    "jobs = (\n"
    "  { name = \"report\"; template = true; queue = \"q\"; misfire = \"catch_up\";\n"
    "    overlap = \"allow\"; payload = { kind = \"usage\"; }; max_running_per_tenant = 2; lease = "
    "\"20s\"; },\n"
    "  { name = \"cfg-daily\"; cron = \"30 2 * * *\"; timezone = \"Europe/Berlin\"; queue = "
    "\"q\";\n"
    "    misfire = \"catch_up\"; },\n"
    "  { name = \"cfg-hourly\"; cron = \"0 * * * *\"; timezone = \"Europe/Berlin\"; queue = "
    "\"q\";\n"
    "    misfire = \"catch_up\"; }%s\n"
    ");\n";

static warren_config *load_config(const char *extra)
{
    char *text = testenv_fmt(CONFIG, extra ? extra : "");
    char *path = testenv_temp_file("check_api_jobs", ".cfg", text);
    warren_config *cfg = testenv_config_load(path);
    unlink(path);
    free(path);
    free(text);
    return cfg;
}

/* warren sync of CONFIG (+ extra jobs; template_line replaces the template). */
static void sync_config(const env *e, const char *extra, const char *replace_template,
                        warren_sync_report *rep)
{
    warren_config *cfg = load_config(extra);
    warren_store *st = NULL;
    warren_error err = {0};
    if (replace_template != NULL) {
        /* drop (or rename) the template: the first job */
        for (size_t i = 0; i < cfg->njobs; i++)
            if (strcmp(cfg->jobs[i].name, "report") == 0) {
                free(cfg->jobs[i].name);
                cfg->jobs[i].name = strdup(replace_template);
            }
    }
    ck_assert_msg(warren_store_open(e->db, NULL, &st, &err) == 0, "%s", err.message);
    ck_assert_msg(warren_store_sync(st, cfg, rep, &err) == 0, "sync: %s", err.message);
    warren_store_free(st);
    warren_config_free(cfg);
}

static env setup(void)
{
    env e = fixture_env_new();
    warren_sync_report rep = {0};
    sync_config(&e, NULL, NULL, &rep);
    warren_sync_report_free(&rep);
    return e;
}

/* Runs sql; returns "" on success or "SQLSTATE: message" (new). */
static char *try_sql(const env *e, const char *sql)
{
    PGconn *c = PQconnectdb(e->db);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, sql);
    char *out;
    if (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK) {
        out = strdup("");
    } else {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        size_t n = strlen(msg ? msg : "") + 16;
        out = malloc(n);
        snprintf(out, n, "%s: %s", state ? state : "?", msg ? msg : "");
    }
    PQclear(r);
    PQfinish(c);
    return out;
}

static void expect_str(const env *e, const char *sql, const char *want)
{
    char *v = testenv_sql1(e->db, sql);
    ck_assert_msg(v != NULL && strcmp(v, want) == 0, "%s\n  gave \"%s\", expected \"%s\"", sql,
                  v ? v : "(null)", want);
    free(v);
}

/* The call fails with SQLSTATE 22023 and a message containing every one of
 * the NULL-terminated substrings. */
static void expect_error(const env *e, const char *sql, ...)
{
    char *got = try_sql(e, sql);
    va_list ap;
    ck_assert_msg(strncmp(got, "22023: ", 7) == 0, "%s\n  should fail with 22023, gave \"%s\"", sql,
                  got);
    va_start(ap, sql);
    for (const char *s = va_arg(ap, const char *); s != NULL; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(got, s) != NULL, "%s\n  error \"%s\" lacks \"%s\"", sql, got, s);
    va_end(ap);
    free(got);
}

/* Everything of the jobs and runs tables but the instants of the writes. */
#define STATE_SQL                                                                                  \
    "SELECT md5(coalesce((SELECT string_agg(row_to_json(j)::text, ',' ORDER BY j.name) FROM "      \
    "warren.jobs j), '') || coalesce((SELECT string_agg(row_to_json(r)::text, ',' ORDER BY "       \
    "r.run_key) FROM warren.runs r), ''))"

static warren_config planner_config(void)
{
    warren_config c;
    memset(&c, 0, sizeof(c));
    c.planner.horizon_ms = 10000;
    c.planner.tick_ms = 200;
    c.planner.misfire_threshold_ms = 60000;
    c.planner.reconcile_grace_ms = 600000;
    c.planner.partitions = 4;
    c.planner.publish_batch = 500;
    c.planner.delay_queue_expires_ms = 600000;
    return c;
}

/* ------------------------------------------------------------------ upsert */

START_TEST(test_upsert_job_says_created_changed_unchanged)
{
    env e = setup();
    expect_str(&e,
               "SELECT warren.upsert_job('report.t-1', 'report', '{\"cron\": \"0 9 * * *\", "
               "\"timezone\": \"Europe/Berlin\", \"tenant\": \"t-1\"}')",
               "created");
    expect_str(&e,
               "SELECT warren.upsert_job('report.t-1', 'report', '{\"cron\": \"0 9 * * *\", "
               "\"timezone\": \"Europe/Berlin\", \"tenant\": \"t-1\"}')",
               "unchanged");
    expect_str(&e,
               "SELECT warren.upsert_job('report.t-1', 'report', '{\"cron\": \"0 9 * * *\", "
               "\"timezone\": \"Europe/Berlin\", \"tenant\": \"t-1\", \"payload\": {\"a\": 1}}')",
               "changed");
    /* the row: where it came from, the template's settings, its own fields */
    expect_str(&e,
               "SELECT concat_ws('|', origin, template, tenant, queue, misfire, lease_ms, payload, "
               "timezone, created_by IS NOT NULL, partition = warren.wp_job_partition(name, 4), "
               "is_template) FROM warren.jobs WHERE name = 'report.t-1'",
               "api|report|t-1|q|catch_up|20000|{\"a\": 1}|Europe/Berlin|t|t|f");
    /* the template's payload is the default */
    expect_str(&e, "SELECT warren.upsert_job('report.t-2', 'report', '{\"every\": \"15m\"}')",
               "created");
    expect_str(&e, "SELECT payload FROM warren.jobs WHERE name = 'report.t-2'",
               "{\"kind\": \"usage\"}");
    /* a 200-character name */
    char sql[600], name[201];
    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(sql, sizeof(sql),
             "SELECT warren.upsert_job('%s', 'report', '{\"at\": \"2030-01-01T00:00:00Z\"}')",
             name);
    expect_str(&e, sql, "created");
    env_free(&e);
}
END_TEST

START_TEST(test_upsert_jobs_is_one_row_per_element_and_all_or_nothing)
{
    env e = setup();
    expect_str(
        &e,
        "SELECT string_agg(name || '=' || result, ',') FROM warren.upsert_jobs('["
        "{\"name\": \"a\", \"template\": \"report\", \"cron\": \"0 9 * * *\"},"
        "{\"name\": \"b\", \"template\": \"report\", \"every\": \"1h\", \"jitter\": \"30s\"},"
        "{\"name\": \"c\", \"template\": \"report\", \"at\": \"2030-01-01T00:00:00Z\"}]')",
        "a=created,b=created,c=created");
    expect_str(&e,
               "SELECT string_agg(name || '=' || result, ',') FROM warren.upsert_jobs('["
               "{\"name\": \"c\", \"template\": \"report\", \"at\": \"2030-01-01T00:00:00Z\"},"
               "{\"name\": \"a\", \"template\": \"report\", \"cron\": \"0 10 * * *\"},"
               "{\"name\": \"d\", \"template\": \"report\", \"every\": \"90s\"}]')",
               "c=unchanged,a=changed,d=created");
    char *before = testenv_sql1(e.db, STATE_SQL);
    /* a bad element anywhere: the error names it, and nothing is written */
    expect_error(&e,
                 "SELECT * FROM warren.upsert_jobs('["
                 "{\"name\": \"e\", \"template\": \"report\", \"every\": \"1m\"},"
                 "{\"name\": \"a\", \"template\": \"report\", \"cron\": \"0 11 * * *\"},"
                 "{\"name\": \"f\", \"template\": \"report\", \"cron\": \"0 9 * *\"}]')",
                 "warren.upsert_jobs", "jobs[2] (\"f\")", "field \"cron\"", "4 fields", NULL);
    expect_error(&e,
                 "SELECT * FROM warren.upsert_jobs('["
                 "{\"name\": \"e\", \"template\": \"report\", \"every\": \"1m\"},"
                 "{\"name\": \"e\", \"template\": \"report\", \"every\": \"2m\"}]')",
                 "jobs[0] and jobs[1]", "\"e\"", NULL);
    expect_error(&e, "SELECT * FROM warren.upsert_jobs('{\"name\": \"e\"}')", "JSON array", NULL);
    char *after = testenv_sql1(e.db, STATE_SQL);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    expect_str(&e, "SELECT count(*) FROM warren.upsert_jobs('[]')", "0");
    env_free(&e);
}
END_TEST

START_TEST(test_bad_input_at_every_call_is_a_clear_error_and_writes_nothing)
{
    env e = setup();
    expect_str(&e, "SELECT warren.upsert_job('ok', 'report', '{\"every\": \"1m\"}')", "created");
    char *before = testenv_sql1(e.db, STATE_SQL);
    /* upsert_job */
    expect_error(&e, "SELECT warren.upsert_job('x', 'nope', '{\"every\": \"1m\"}')",
                 "field \"template\"", "no job \"nope\"", "template = true", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'cfg-daily', '{\"every\": \"1m\"}')",
                 "\"cfg-daily\" is not a template", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{\"cron\": \"0 9 * * * * *\"}')",
                 "field \"cron\"", "7 fields", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{\"cron\": \"0 9 * * MON;\"}')",
                 "field \"cron\"", "\";\"", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{\"cron\": \"@fortnightly\"}')",
                 "unknown macro", NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"cron\": \"0 9 * * *\", "
                 "\"timezone\": \"Mars/Olympus\"}')",
                 "field \"timezone\"", "\"Mars/Olympus\"", "pg_timezone_names", NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"cron\": \"0 9 * * *\", "
                 "\"timezone\": \"../etc/passwd\"}')",
                 "field \"timezone\"", NULL);
    expect_error(&e, "SELECT warren.upsert_job('bad name', 'report', '{\"every\": \"1m\"}')",
                 "field \"name\"", "cannot be a job name", "200 characters", NULL);
    expect_error(&e, "SELECT warren.upsert_job('cfg-daily', 'report', '{\"every\": \"1m\"}')",
                 "\"cfg-daily\" is a config job", NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1m\", \"payload\": [1]}')",
                 "field \"payload\"", "JSON object", NULL);
    expect_error(
        &e, "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1m\", \"tenant\": \"a b\"}')",
        "field \"tenant\"", "cannot be a tenant", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{\"every\": \"90x\"}')",
                 "field \"every\"", "not a duration", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1500ms\"}')",
                 "field \"every\"", "whole seconds", NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"at\": \"2030-02-30T00:00:00Z\"}')",
                 "field \"at\"", "not a real instant", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{\"at\": \"2030-01-01 00:00\"}')",
                 "field \"at\"", "RFC 3339", NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1m\", \"jitter\": 30}')",
                 "field \"jitter\" must be a string", NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1m\", \"tz\": \"UTC\"}')",
                 "unknown field \"tz\"", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '{}')", "needs a schedule", NULL);
    expect_error(
        &e,
        "SELECT warren.upsert_job('x', 'report', '{\"every\": \"1m\", \"cron\": \"* * * * *\"}')",
        "more than one schedule", NULL);
    expect_error(&e, "SELECT warren.upsert_job('x', 'report', '[]')", "spec must be a JSON object",
                 NULL);
    expect_error(&e,
                 "SELECT warren.upsert_job('x', 'report', '{\"name\": \"y\", \"every\": \"1m\"}')",
                 "leave it out of spec", NULL);
    expect_error(&e, "SELECT warren.upsert_job(NULL, 'report', '{\"every\": \"1m\"}')",
                 "name is NULL", NULL);
    /* pause, resume, delete */
    expect_error(&e, "SELECT warren.pause_job('nope')", "warren.pause_job", "no job \"nope\"",
                 NULL);
    expect_error(&e, "SELECT warren.resume_job('cfg-daily')", "warren.resume_job",
                 "is a job from the config file", "warren resume", NULL);
    expect_error(&e, "SELECT warren.delete_job('report')", "warren.delete_job",
                 "is a template from the config file", NULL);
    expect_error(&e, "SELECT warren.delete_job(NULL)", "name is NULL", NULL);
    char *after = testenv_sql1(e.db, STATE_SQL);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    env_free(&e);
}
END_TEST

/* ---------------------------------------------------------------- planning */

/* Runs of job as text: scheduled_at, state, origin and the DST note, in order. */
static char *runs_of(const env *e, const char *job)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT string_agg(warren.plan_utc(scheduled_at) || ' ' || state || ' ' || origin "
             "|| ' ' || (due_at - scheduled_at), E'\\n' ORDER BY "
             "scheduled_at) FROM warren.runs WHERE job = '%s'",
             job);
    return testenv_sql1(e->db, sql);
}

START_TEST(test_api_job_across_dst_plans_exactly_as_a_config_job)
{
    env e = setup();
    /* 02:30 Berlin daily (the gap on 2026-03-29, the overlap on 2026-10-25)
     * and hourly (interval-like: skipped in the gap, twice in the overlap),
     * every fire time since a cursor before the transitions, catch_up. */
    expect_str(&e,
               "SELECT string_agg(result, ',') FROM warren.upsert_jobs('["
               "{\"name\": \"api-daily\", \"template\": \"report\", \"cron\": \"30 2 * * *\", "
               "\"timezone\": \"Europe/Berlin\"},"
               "{\"name\": \"api-hourly\", \"template\": \"report\", \"cron\": \"0 * * * *\", "
               "\"timezone\": \"Europe/Berlin\"}]')",
               "created,created");
    ck_assert_int_eq(testenv_psql(e.db,
                                  "UPDATE warren.jobs SET next_fire_at = CASE WHEN name LIKE "
                                  "'%daily' THEN timestamptz '2026-03-27T00:00:00Z' ELSE "
                                  "timestamptz '2026-10-24T12:00:00Z' END "
                                  "WHERE name IN ('api-daily', 'cfg-daily', 'api-hourly', "
                                  "'cfg-hourly')",
                                  NULL),
                     4);
    warren_config pc = planner_config();
    warren_planner *p = planner_new(&e, &pc);
    long before = -1, now = 0;
    for (int i = 0; i < 50 && now != before; i++) {
        before = now;
        tick(p);
        now = testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs");
    }
    warren_planner_free(p);
    char *a = runs_of(&e, "api-daily"), *c = runs_of(&e, "cfg-daily");
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(a, c);
    /* the gap: at the first instant after it; the overlap: once, the first */
    ck_assert_ptr_nonnull(strstr(a, "\n2026-03-28T01:30:00Z "));
    ck_assert_ptr_nonnull(strstr(a, "\n2026-03-29T01:00:00Z "));
    ck_assert_ptr_nonnull(strstr(a, "\n2026-03-30T00:30:00Z "));
    ck_assert_ptr_nonnull(strstr(a, "\n2026-10-25T00:30:00Z "));
    ck_assert_ptr_null(strstr(a, "\n2026-10-25T01:30:00Z "));
    free(a);
    free(c);
    a = runs_of(&e, "api-hourly");
    c = runs_of(&e, "cfg-hourly");
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(a, c);
    /* interval-like: both 02:00 of the overlap (CEST and CET) */
    ck_assert_ptr_nonnull(strstr(a, "\n2026-10-25T00:00:00Z "));
    ck_assert_ptr_nonnull(strstr(a, "\n2026-10-25T01:00:00Z "));
    ck_assert_ptr_nonnull(strstr(a, "\n2026-10-25T02:00:00Z "));
    free(a);
    free(c);
    env_free(&e);
}
END_TEST

/* ---------------------------------------------- changes with runs in flight */

/* The test's worker: claims every claimable due run of job (through
 * warren.claim, as any worker), logs each claim in the execution log (no
 * unique key) and completes it. Returns how many it ran. */
static long work(const env *e, const char *job)
{
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "INSERT INTO exec_log SELECT run_key, a FROM (SELECT r.run_key, (SELECT attempt "
             "FROM warren.claim(r.run_key, 'w1')) AS a FROM warren.runs r WHERE r.job = '%s' "
             "AND r.state IN ('planned', 'published') AND r.due_at <= now() ORDER BY r.due_at) c "
             "WHERE a IS NOT NULL",
             job);
    long n = testenv_psql(e->db, sql, NULL);
    ck_assert_int_ge(n, 0);
    /* completed in a statement of its own: it must see the claims */
    ck_assert_int_eq(testenv_sql_long(e->db,
                                      "SELECT count(*) FILTER (WHERE warren.complete(l.run_key, "
                                      "l.attempt, 'succeeded', NULL)) FROM exec_log l JOIN "
                                      "warren.runs r USING (run_key) WHERE r.state = 'running' AND "
                                      "r.lease_owner = 'w1'"),
                     n);
    return n;
}

START_TEST(test_change_pause_resume_delete_with_runs_in_flight_lose_nothing_run_nothing_twice)
{
    env e = setup();
    ck_assert_int_ge(
        testenv_psql(e.db, "CREATE TABLE exec_log (run_key text NOT NULL, attempt int)", NULL), 0);
    expect_str(&e, "SELECT warren.upsert_job('tick', 'report', '{\"every\": \"2s\"}')", "created");
    warren_config pc = planner_config();
    warren_planner *p = planner_new(&e, &pc);
    tick(p);
    long planned = testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'tick'");
    ck_assert_int_ge(planned, 4); /* a 10 s horizon of a 2 s grid */
    /* one run in flight: claimed (running) when everything below happens */
    char *inflight = testenv_sql1(e.db, "SELECT run_key FROM warren.runs WHERE job = 'tick' "
                                        "ORDER BY scheduled_at LIMIT 1");
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE warren.runs SET due_at = now() WHERE run_key = '%s'; "
             "INSERT INTO exec_log SELECT '%s', attempt FROM warren.claim('%s', 'w0')",
             inflight, inflight, inflight);
    ck_assert_int_ge(testenv_psql(e.db, sql, NULL), 0);

    /* schedule change: future unclaimed runs replaced, the running one stays */
    expect_str(&e, "SELECT warren.upsert_job('tick', 'report', '{\"every\": \"3s\"}')", "changed");
    snprintf(sql, sizeof(sql), "SELECT state FROM warren.runs WHERE run_key = '%s'", inflight);
    expect_str(&e, sql, "running");
    expect_str(&e,
               "SELECT count(*) FROM warren.runs WHERE job = 'tick' AND state <> 'running' "
               "AND due_at > now()",
               "0");
    tick(p);
    expect_str(&e,
               "SELECT bool_and(extract(epoch FROM scheduled_at)::bigint % 3 = 0) FROM warren.runs "
               "WHERE job = 'tick' AND state IN ('planned', 'published')",
               "t");
    expect_str(&e,
               "SELECT note LIKE '%schedule changed at % every \"2s\" -> every \"3s\"%' FROM "
               "warren.jobs WHERE name = 'tick'",
               "t");

    /* pause: planned runs cancelled (noted), nothing claimable; resume: back */
    expect_str(&e, "SELECT warren.pause_job('tick')", "t");
    expect_str(&e, "SELECT warren.pause_job('tick')", "f");
    expect_str(&e,
               "SELECT count(*) FILTER (WHERE state IN ('planned', 'published')), bool_and(note "
               "LIKE '%cancelled: "
               "job paused at %') FILTER (WHERE state = 'cancelled') FROM warren.runs WHERE job = "
               "'tick'",
               "0");
    tick(p);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'tick' AND "
                                      "state IN ('planned', 'published')"),
                     0);
    long cancelled =
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs WHERE job = 'tick' AND "
                               "state = 'cancelled'");
    ck_assert_int_ge(cancelled, 1);
    expect_str(&e, "SELECT warren.resume_job('tick')", "t");
    tick(p);
    /* the cancelled runs are planned again (the same keys), none is left cancelled */
    ck_assert_int_ge(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'tick' AND "
                                      "state IN ('planned', 'published')"),
                     cancelled);
    ck_assert_int_eq(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'tick' AND "
                                      "state = 'cancelled'"),
                     0);
    /* run what is due for a while (runs become due in real time) */
    for (int i = 0; i < 4; i++) {
        sleep(2);
        tick(p);
        work(&e, "tick");
    }
    /* delete: kept, paused, noted; future runs cancelled; the running one
     * completes once */
    expect_str(&e, "SELECT warren.delete_job('tick')", "t");
    expect_str(&e, "SELECT warren.delete_job('tick')", "f");
    expect_str(&e,
               "SELECT removed AND paused AND note LIKE '%deleted at % (warren.delete_job)%' "
               "FROM warren.jobs WHERE name = 'tick'",
               "t");
    tick(p);
    /* nothing due after the delete is left to run or planned anew (a run
     * already due when it was deleted still runs, as after `warren pause`) */
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r JOIN warren.jobs j ON "
                               "j.name = r.job WHERE r.job = 'tick' AND r.state IN ('planned', "
                               "'published') AND r.due_at > j.paused_at"),
        0);
    work(&e, "tick");
    ck_assert_int_eq(work(&e, "tick"), 0);
    snprintf(sql, sizeof(sql),
             "SELECT warren.complete('%s', (SELECT attempt FROM warren.runs WHERE run_key = '%s'), "
             "'succeeded', NULL)",
             inflight, inflight);
    expect_str(&e, sql, "t");
    warren_planner_free(p);
    /* nothing ran twice, and every run that succeeded is in the log once */
    expect_str(&e,
               "SELECT count(*) FROM (SELECT run_key FROM exec_log GROUP BY run_key "
               "HAVING count(*) > 1) d",
               "0");
    expect_str(&e,
               "SELECT (SELECT count(*) FROM exec_log) = (SELECT count(*) FROM warren.runs WHERE "
               "job = 'tick' AND state = 'succeeded') AND (SELECT count(*) FROM exec_log) >= 3",
               "t");
    /* nothing lost: every run is finished or cancelled with a note */
    expect_str(&e,
               "SELECT count(*) FROM warren.runs WHERE job = 'tick' AND state NOT IN ('succeeded', "
               "'cancelled', 'skipped') OR (state = 'cancelled' AND note IS NULL)",
               "0");
    free(inflight);
    env_free(&e);
}
END_TEST

/* -------------------------------------------------------------------- sync */

START_TEST(test_sync_changes_no_api_job_and_a_removed_template_pauses_them)
{
    env e = setup();
    warren_sync_report rep = {0};
    expect_str(
        &e,
        "SELECT string_agg(result, ',') FROM warren.upsert_jobs('["
        "{\"name\": \"r.t1\", \"template\": \"report\", \"every\": \"5s\", \"tenant\": \"t1\"},"
        "{\"name\": \"r.t2\", \"template\": \"report\", \"every\": \"7s\", \"paused\": true}]')",
        "created,created");
    warren_config pc = planner_config();
    warren_planner *p = planner_new(&e, &pc);
    tick(p);
    char *before = testenv_sql1(e.db, STATE_SQL);
    /* the same config again, and a config with one more job: no API job or
     * run changes */
    sync_config(&e, NULL, NULL, &rep);
    ck_assert_uint_eq(rep.api_updated + rep.api_paused + rep.api_resumed, 0);
    warren_sync_report_free(&rep);
    char *after = testenv_sql1(e.db, STATE_SQL);
    ck_assert_str_eq(before, after);
    free(after);
    sync_config(&e, ",\n  { name = \"extra\"; every = \"1h\"; queue = \"q\"; }", NULL, &rep);
    warren_sync_report_free(&rep);
    free(before);
    before =
        testenv_sql1(e.db, "SELECT md5(string_agg(row_to_json(j)::text, ',' ORDER BY name)) FROM "
                           "warren.jobs j WHERE origin = 'api'");

    /* a config job may not take an API job's name */
    {
        warren_config *cfg =
            load_config(",\n  { name = \"r.t1\"; every = \"1h\"; queue = \"q\"; }");
        warren_store *st = NULL;
        warren_error err = {0};
        ck_assert(warren_store_open(e.db, NULL, &st, &err) == 0);
        ck_assert_int_eq(warren_store_sync(st, cfg, NULL, &err), WARREN_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "\"r.t1\""));
        ck_assert_ptr_nonnull(strstr(err.message, "warren.delete_job"));
        warren_store_free(st);
        warren_config_free(cfg);
    }
    after =
        testenv_sql1(e.db, "SELECT md5(string_agg(row_to_json(j)::text, ',' ORDER BY name)) FROM "
                           "warren.jobs j WHERE origin = 'api'");
    ck_assert_str_eq(before, after);
    free(before);
    free(after);

    /* the template removed: the active API job paused with a note, its
     * future runs cancelled; the one the application paused stays as it is */
    sync_config(&e, NULL, "report-renamed", &rep);
    ck_assert_uint_eq(rep.api_paused, 1);
    warren_sync_report_free(&rep);
    expect_str(&e,
               "SELECT string_agg(name || ':' || paused || ':' || paused_by_template || ':' || "
               "removed || ':' || coalesce(note LIKE '%its template report was removed from the "
               "config%', false), ',' ORDER BY name) FROM warren.jobs WHERE origin = 'api'",
               "r.t1:true:true:false:true,r.t2:true:false:false:false");
    expect_str(&e,
               "SELECT count(*) FROM warren.runs WHERE job = 'r.t1' AND state IN ('planned', "
               "'published') AND "
               "due_at > now()",
               "0");
    expect_error(&e, "SELECT warren.resume_job('r.t1')", "template \"report\" was removed", NULL);
    expect_error(&e, "SELECT warren.upsert_job('r.t3', 'report', '{\"every\": \"1m\"}')",
                 "template \"report\" was removed", NULL);
    tick(p);
    ck_assert_int_eq(
        testenv_sql_long(e.db, "SELECT count(*) FROM warren.runs r JOIN warren.jobs j ON "
                               "j.name = r.job WHERE r.job = 'r.t1' AND r.state IN ('planned', "
                               "'published') AND r.due_at > j.paused_at"),
        0);

    /* the template is back: exactly the job its removal paused resumes */
    sync_config(&e, NULL, NULL, &rep);
    ck_assert_uint_eq(rep.api_resumed, 1);
    warren_sync_report_free(&rep);
    expect_str(&e,
               "SELECT string_agg(name || ':' || paused || ':' || coalesce(note LIKE '%resumed at "
               "% by warren sync: its template report is back%', false), ',' ORDER BY name) FROM "
               "warren.jobs WHERE origin = 'api'",
               "r.t1:false:true,r.t2:true:false");
    tick(p);
    ck_assert_int_ge(testenv_sql_long(e.db,
                                      "SELECT count(*) FROM warren.runs WHERE job = 'r.t1' AND "
                                      "state IN ('planned', 'published')"),
                     1);

    /* a changed template reaches its API jobs at the next sync (only the
     * template's settings; the jobs' own fields stay) */
    {
        warren_config *cfg = load_config(NULL);
        for (size_t i = 0; i < cfg->njobs; i++)
            if (strcmp(cfg->jobs[i].name, "report") == 0)
                cfg->jobs[i].retry_max_attempts = 9;
        warren_store *st = NULL;
        warren_error err = {0};
        ck_assert(warren_store_open(e.db, NULL, &st, &err) == 0);
        ck_assert_msg(warren_store_sync(st, cfg, &rep, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(rep.api_updated, 2);
        warren_sync_report_free(&rep);
        warren_store_free(st);
        warren_config_free(cfg);
    }
    expect_str(&e,
               "SELECT string_agg(name || ':' || retry_max_attempts || ':' || expression || ':' || "
               "coalesce(tenant, '-'), ',' ORDER BY name) FROM warren.jobs WHERE origin = 'api'",
               "r.t1:9:5s:t1,r.t2:9:7s:-");
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

START_TEST(test_expression_the_engine_rejects_marks_the_job_broken_until_fixed)
{
    env e = setup();
    /* the call checks the shape only; the planner's cron engine the meaning */
    expect_str(&e, "SELECT warren.upsert_job('bad-hour', 'report', '{\"cron\": \"0 25 * * *\"}')",
               "created");
    warren_config pc = planner_config();
    warren_planner *p = planner_new(&e, &pc);
    tick(p);
    expect_str(&e, "SELECT broken_reason LIKE '%hour%25%' FROM warren.jobs WHERE name = 'bad-hour'",
               "t");
    expect_str(&e, "SELECT count(*) FROM warren.runs WHERE job = 'bad-hour'", "0");
    expect_str(&e, "SELECT warren.upsert_job('bad-hour', 'report', '{\"every\": \"5s\"}')",
               "changed");
    tick(p);
    expect_str(&e,
               "SELECT broken_reason IS NULL AND (SELECT count(*) > 0 FROM warren.runs WHERE job "
               "= 'bad-hour') FROM warren.jobs WHERE name = 'bad-hour'",
               "t");
    warren_planner_free(p);
    env_free(&e);
}
END_TEST

START_TEST(test_a_write_notifies_the_planners_at_commit_and_unchanged_does_not)
{
    env e = setup();
    PGconn *l = PQconnectdb(e.db), *c = PQconnectdb(e.db);
    ck_assert_int_eq(PQstatus(l), CONNECTION_OK);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    PQclear(PQexec(l, "LISTEN warren_jobs"));
    const char *calls[] = {
        "SELECT warren.upsert_job('n1', 'report', '{\"every\": \"1m\"}')",
        "SELECT warren.upsert_job('n1', 'report', '{\"every\": \"1m\"}')", /* unchanged */
        "SELECT warren.pause_job('n1')", "SELECT warren.resume_job('n1')",
        "SELECT warren.delete_job('n1')"};
    const int want[] = {1, 0, 1, 1, 1};
    for (int i = 0; i < 5; i++) {
        PQclear(PQexec(c, "BEGIN"));
        PGresult *r = PQexec(c, calls[i]);
        ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", calls[i], PQerrorMessage(c));
        PQclear(r);
        /* nothing before the commit */
        PQclear(PQexec(l, "SELECT 1"));
        PQconsumeInput(l);
        PGnotify *n = PQnotifies(l);
        ck_assert_msg(n == NULL, "%s: notified before commit", calls[i]);
        PQclear(PQexec(c, "COMMIT"));
        PQclear(PQexec(l, "SELECT 1"));
        PQconsumeInput(l);
        int got = 0;
        while ((n = PQnotifies(l)) != NULL) {
            got++;
            PQfreemem(n);
        }
        ck_assert_msg((got > 0) == want[i], "%s: %d notifications", calls[i], got);
    }
    PQfinish(l);
    PQfinish(c);
    env_free(&e);
}
END_TEST

START_TEST(test_template_is_never_planned)
{
    env e = setup();
    warren_config pc = planner_config();
    warren_planner *p = planner_new(&e, &pc);
    tick(p);
    tick(p);
    warren_planner_free(p);
    expect_str(&e,
               "SELECT schedule_kind || ' ' || next_fire_at || ' ' || is_template || ' ' || "
               "(SELECT count(*) FROM warren.runs WHERE job = 'report') FROM warren.jobs WHERE "
               "name = 'report'",
               "none infinity true 0");
    env_free(&e);
}
END_TEST

/* --------------------------------------------------------------------- cli */

START_TEST(test_cli_jobs_filters_and_show_says_where_a_job_came_from)
{
    env e = setup();
    char *cfgpath = testenv_temp_file("check_api_jobs_cli", ".cfg", "jobs = ();\n");
    char cmd[1024], out[8192];
    expect_str(&e,
               "SELECT string_agg(result, ',') FROM warren.upsert_jobs('["
               "{\"name\": \"report.t1\", \"template\": \"report\", \"every\": \"1h\", "
               "\"tenant\": \"t1\"},"
               "{\"name\": \"report.t2\", \"template\": \"report\", \"every\": \"1h\", "
               "\"tenant\": \"t2\"}]')",
               "created,created");
    snprintf(cmd, sizeof(cmd),
             "WARREN_DATABASE_URL='%s' %s jobs -c %s --template report --tenant t2 2>&1", e.db,
             WARREN_BINARY, cfgpath);
    ck_assert_int_eq(testenv_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "report.t2") != NULL && strstr(out, "api:report") != NULL &&
                      strstr(out, "report.t1") == NULL && strstr(out, "cfg-daily") == NULL,
                  "%s", out);
    snprintf(cmd, sizeof(cmd), "WARREN_DATABASE_URL='%s' %s jobs -c %s --origin config 2>&1", e.db,
             WARREN_BINARY, cfgpath);
    ck_assert_int_eq(testenv_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "cfg-daily") != NULL && strstr(out, "template") != NULL &&
                      strstr(out, "report.t1") == NULL,
                  "%s", out);
    snprintf(cmd, sizeof(cmd), "WARREN_DATABASE_URL='%s' %s jobs -c %s --origin file 2>&1", e.db,
             WARREN_BINARY, cfgpath);
    ck_assert_int_ne(testenv_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "--origin takes \"config\"") != NULL, "%s", out);
    expect_str(&e, "SELECT warren.pause_job('report.t1')", "t");
    snprintf(cmd, sizeof(cmd), "WARREN_DATABASE_URL='%s' %s show -c %s report.t1 2>&1", e.db,
             WARREN_BINARY, cfgpath);
    ck_assert_int_eq(testenv_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "origin       API job from template report") != NULL &&
                      strstr(out, "tenant       t1") != NULL && strstr(out, "created      ") &&
                      strstr(out, " by ") != NULL && strstr(out, "state        paused") &&
                      strstr(out, "paused at ") != NULL && strstr(out, "(warren.pause_job)"),
                  "%s", out);
    snprintf(cmd, sizeof(cmd), "WARREN_DATABASE_URL='%s' %s show -c %s cfg-daily 2>&1", e.db,
             WARREN_BINARY, cfgpath);
    ck_assert_int_eq(testenv_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "origin       config file") != NULL, "%s", out);
    unlink(cfgpath);
    free(cfgpath);
    env_free(&e);
}
END_TEST

static Suite *api_jobs_suite(void)
{
    Suite *s = suite_create("api_jobs");
    TCase *tc = tcase_create("upsert");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_upsert_job_says_created_changed_unchanged);
    tcase_add_test(tc, test_upsert_jobs_is_one_row_per_element_and_all_or_nothing);
    tcase_add_test(tc, test_bad_input_at_every_call_is_a_clear_error_and_writes_nothing);
    tcase_add_test(tc, test_a_write_notifies_the_planners_at_commit_and_unchanged_does_not);
    suite_add_tcase(s, tc);
    tc = tcase_create("planning");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_api_job_across_dst_plans_exactly_as_a_config_job);
    tcase_add_test(tc, test_template_is_never_planned);
    tcase_add_test(tc, test_expression_the_engine_rejects_marks_the_job_broken_until_fixed);
    tcase_add_test(
        tc, test_change_pause_resume_delete_with_runs_in_flight_lose_nothing_run_nothing_twice);
    suite_add_tcase(s, tc);
    tc = tcase_create("sync");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sync_changes_no_api_job_and_a_removed_template_pauses_them);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cli_jobs_filters_and_show_says_where_a_job_came_from);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(api_jobs_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
