/* check_ops.c: the operator operations of include/warren/ops.h called as a
 * front end calls them, against a real PostgreSQL: what each returns in its
 * result struct and what it leaves in the database. (check_cli runs the same
 * operations through the `warren` program.) Jobs are inserted by hand; no
 * planner or worker runs, so every run is made by the operation under test or
 * by the SQL worker protocol. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/ops.h>
#include <warren/planner.h>
#include <warren/store.h>
#include <warren/timefmt.h>

#include "testenv.h"

/* ------------------------------------------------------------ harness */

typedef struct env {
    char *db;
    warren_store *st;
} env;

/* A fresh migrated database with its connection open. */
static env env_new(void)
{
    env e = {0};
    warren_error err = {0};
    e.db = testenv_db_migrated();
    ck_assert_msg(warren_store_open(e.db, NULL, &e.st, &err) == 0, "%s", err.message);
    return e;
}

static void env_free(env *e)
{
    warren_store_free(e->st);
    free(e->db);
}

/* A job row: name, kind (cron, every, at), expression; extra columns as
 * "col = value" pairs in SQL for an UPDATE (or NULL). */
static void add_job(const env *e, const char *name, const char *kind, const char *expr,
                    const char *set)
{
    char *q = testenv_sql1f(e->db,
                            "INSERT INTO warren.jobs (name, schedule_kind, expression, queue) "
                            "VALUES ('%s', '%s', '%s', 'q') RETURNING name",
                            name, kind, expr);
    free(q);
    if (set != NULL)
        free(testenv_sql1f(e->db, "UPDATE warren.jobs SET %s WHERE name = '%s' RETURNING name", set,
                           name));
}

static warren_us t_of(const char *rfc3339)
{
    warren_us t = 0;
    warren_error err = {0};
    ck_assert_msg(warren_time_parse(rfc3339, &t, &err) == 0, "%s", err.message);
    return t;
}

/* A run of job at `at`, due now, ended by one attempt of worker w1 with
 * outcome ("failed": dead at once) and the error "boom KEY". */
static void make_dead_run(const env *e, const char *job, const char *at)
{
    char *key = testenv_fmt("%s@%s", job, at);
    ck_assert_sqlf(e->db, key,
                   "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('%s', '%s', now()) "
                   "RETURNING run_key",
                   job, at);
    ck_assert_sqlf(e->db, "1", "SELECT attempt FROM warren.claim('%s', 'w1')", key);
    ck_assert_sqlf(e->db, "t", "SELECT warren.complete('%s', 1, 'failed', 'boom %s')", key, key);
    free(key);
}

/* ------------------------------------------------------------ trigger */

START_TEST(test_trigger_creates_one_run_per_key_and_reports_the_existing_runs_state)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_trigger_result r;
    warren_us at = t_of("2030-01-01T00:00:00Z"), frac = at + 500000;

    add_job(&e, "tj", "every", "10s", NULL);
    ck_assert_msg(warren_ops_trigger(e.st, "tj", &at, "{\"a\":1}", &r, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(r.created, 1);
    ck_assert_str_eq(r.run_key, "tj@2030-01-01T00:00:00Z");
    ck_assert_str_eq(r.state, "");
    ck_assert(r.at == at);
    ck_assert_sqlf(
        e.db, "planned|trigger|{\"a\": 1}|t|t",
        "SELECT concat_ws('|', state, origin, payload, due_at = scheduled_at, "
        "note LIKE 'triggered at %%') FROM warren.runs WHERE run_key = 'tj@2030-01-01T00:00:00Z'");

    /* The same key again: nothing new, and the run's state says why. */
    ck_assert(warren_ops_trigger(e.st, "tj", &at, NULL, &r, &err) == 0);
    ck_assert_int_eq(r.created, 0);
    ck_assert_str_eq(r.run_key, "tj@2030-01-01T00:00:00Z");
    ck_assert_str_eq(r.state, "planned");
    free(testenv_sql1(e.db, "UPDATE warren.runs SET state = 'succeeded', finished_at = now() "
                            "RETURNING run_key"));
    ck_assert(warren_ops_trigger(e.st, "tj", &at, NULL, &r, &err) == 0);
    ck_assert_int_eq(r.created, 0);
    ck_assert_str_eq(r.state, "succeeded");
    ck_assert_sqlf(e.db, "1", "SELECT count(*) FROM warren.runs");

    /* Refused: a fraction of a second (run keys have whole seconds), an
     * unknown job; neither writes anything. */
    ck_assert_int_eq(warren_ops_trigger(e.st, "tj", &frac, NULL, &r, &err), WARREN_EINVAL);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_ops_trigger(e.st, "nosuch", &at, NULL, &r, &err), WARREN_ENOENT);
    ck_assert_ptr_nonnull(strstr(err.message, "\"nosuch\" is not in the database"));
    ck_assert_sqlf(e.db, "1", "SELECT count(*) FROM warren.runs");

    /* No time: now by the database's clock, cut to the second. */
    warren_error_clear(&err);
    ck_assert_msg(warren_ops_trigger(e.st, "tj", NULL, NULL, &r, &err) == 0, "%s", err.message);
    ck_assert_int_eq(r.created, 1);
    ck_assert(r.at % WARREN_US_PER_S == 0);
    ck_assert_sqlf(
        e.db, "t",
        "SELECT scheduled_at = date_trunc('second', scheduled_at) AND scheduled_at <= now() "
        "AND scheduled_at > now() - interval '30 s' FROM warren.runs WHERE run_key = '%s'",
        r.run_key);
    env_free(&e);
}
END_TEST

/* ---------------------------------------------------------- pause, resume */

START_TEST(test_pause_cancels_scheduled_runs_and_resume_replans_them_naming_the_policy)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_pause_result p;
    warren_ops_resume_result r;

    add_job(&e, "pj", "every", "10s",
            "misfire = 'catch_up', next_fire_at = '2030-01-01T00:01:00Z'");
    /* Two scheduled runs ahead, one triggered (an operator's run: kept). */
    free(testenv_sql1(e.db, "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES "
                            "('pj', '2030-01-01T00:00:00Z', '2030-01-01T00:00:00Z', 'schedule'), "
                            "('pj', '2030-01-01T00:00:10Z', '2030-01-01T00:00:10Z', 'schedule'), "
                            "('pj', '2030-01-01T00:00:20Z', '2030-01-01T00:00:20Z', 'trigger') "
                            "RETURNING run_key"));
    ck_assert_msg(warren_ops_pause(e.st, "pj", &p, &err) == 0, "%s", err.message);
    ck_assert_int_eq(p.was_paused, 0);
    ck_assert_int_eq(p.cancelled, 2);
    ck_assert_sqlf(e.db, "cancelled,cancelled,planned",
                   "SELECT string_agg(state, ',' ORDER BY scheduled_at) FROM warren.runs");
    ck_assert_sqlf(e.db, "t", "SELECT paused FROM warren.jobs WHERE name = 'pj'");
    ck_assert(warren_ops_pause(e.st, "pj", &p, &err) == 0);
    ck_assert_int_eq(p.was_paused, 1);
    ck_assert_int_eq(p.cancelled, 0);

    /* Removed from the config meanwhile: resume says so. */
    free(testenv_sql1(e.db, "UPDATE warren.jobs SET removed = true RETURNING name"));
    ck_assert_msg(warren_ops_resume(e.st, "pj", &r, &err) == 0, "%s", err.message);
    ck_assert_int_eq(r.was_paused, 1);
    ck_assert_int_eq(r.replanned, 2);
    ck_assert_str_eq(r.misfire, "catch_up");
    ck_assert_int_eq(r.removed, 1);
    /* The cancelled runs are gone and the cursor is back at the first of them. */
    ck_assert_sqlf(e.db, "planned", "SELECT string_agg(state, ',') FROM warren.runs");
    ck_assert_sqlf(
        e.db, "f|t",
        "SELECT concat_ws('|', paused, next_fire_at = '2030-01-01T00:00:00Z') FROM warren.jobs");

    ck_assert(warren_ops_resume(e.st, "pj", &r, &err) == 0);
    ck_assert_int_eq(r.was_paused, 0);
    ck_assert_int_eq(r.replanned, 0);

    ck_assert_int_eq(warren_ops_pause(e.st, "nosuch", &p, &err), WARREN_ENOENT);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_ops_resume(e.st, "nosuch", &r, &err), WARREN_ENOENT);
    env_free(&e);
}
END_TEST

/* --------------------------------------------------------------- backfill */

START_TEST(test_backfill_dry_run_writes_nothing_and_backfill_leaves_existing_runs_alone)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_backfill_result r;
    warren_us from = t_of("2026-01-01T00:00:00Z"), to = t_of("2026-01-01T00:01:00Z");
    warren_us at = t_of("2026-01-01T00:00:10Z");
    warren_ops_trigger_result tr;

    add_job(&e, "bj", "every", "10s", NULL);
    ck_assert(warren_ops_trigger(e.st, "bj", &at, NULL, &tr, &err) == 0);

    ck_assert_msg(warren_ops_backfill(e.st, "bj", from, to, 1, &r, &err) == 0, "%s", err.message);
    ck_assert_str_eq(r.job, "bj");
    ck_assert_uint_eq(r.n, 7); /* both ends included */
    ck_assert_uint_eq(r.existing, 1);
    ck_assert_int_eq(r.inserted, 0);
    for (size_t i = 0; i < r.n; i++) {
        ck_assert(r.times[i] == from + (warren_us)i * 10 * WARREN_US_PER_S);
        ck_assert_int_eq(r.exists[i], i == 1);
    }
    warren_ops_backfill_result_clear(&r);
    ck_assert_sqlf(e.db, "1", "SELECT count(*) FROM warren.runs");

    ck_assert_msg(warren_ops_backfill(e.st, "bj", from, to, 0, &r, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(r.n, 7);
    ck_assert_uint_eq(r.existing, 1);
    ck_assert_int_eq(r.inserted, 6);
    warren_ops_backfill_result_clear(&r);
    ck_assert_sqlf(e.db, "6",
                   "SELECT count(*) FROM warren.runs WHERE origin = 'backfill' AND state = "
                   "'planned' AND due_at = scheduled_at AND note LIKE 'backfill at %%'");
    ck_assert_sqlf(e.db, "trigger",
                   "SELECT origin FROM warren.runs WHERE run_key = 'bj@2026-01-01T00:00:10Z'");

    /* Again: every fire time has its run. */
    ck_assert(warren_ops_backfill(e.st, "bj", from, to, 0, &r, &err) == 0);
    ck_assert_uint_eq(r.existing, 7);
    ck_assert_int_eq(r.inserted, 0);
    warren_ops_backfill_result_clear(&r);
    ck_assert_sqlf(e.db, "7", "SELECT count(*) FROM warren.runs");
    env_free(&e);
}
END_TEST

START_TEST(test_backfill_applies_the_jobs_jitter_as_the_planner_does)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_backfill_result r;
    int64_t jit = warren_jitter_offset_s("bjj", 30000);

    ck_assert_int_gt(jit, 0); /* else the test could not tell jitter from none */
    add_job(&e, "bjj", "cron", "*/1 * * * *", "jitter_ms = 30000");
    ck_assert_msg(warren_ops_backfill(e.st, "bjj", t_of("2026-01-01T00:00:00Z"),
                                      t_of("2026-01-01T00:02:59Z"), 0, &r, &err) == 0,
                  "%s", err.message);
    ck_assert_uint_eq(r.n, 3);
    ck_assert_int_eq(r.inserted, 3);
    warren_ops_backfill_result_clear(&r);
    ck_assert_sqlf(
        e.db, "3",
        "SELECT count(*) FROM warren.runs WHERE due_at = scheduled_at + %lld * interval '1 s'",
        (long long)jit);
    env_free(&e);
}
END_TEST

START_TEST(test_backfill_refuses_a_reversed_range_an_unknown_job_and_too_many_fire_times)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_backfill_result r;
    warren_us from = t_of("2026-01-01T00:00:00Z");

    add_job(&e, "bs", "every", "1s", NULL);
    add_job(&e, "bo", "at", "2026-06-01T00:00:00Z", NULL);
    ck_assert_int_eq(warren_ops_backfill(e.st, "bs", from, from - 1, 0, &r, &err), WARREN_EINVAL);
    warren_ops_backfill_result_clear(&r);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_ops_backfill(e.st, "nosuch", from, from, 0, &r, &err), WARREN_ENOENT);
    warren_ops_backfill_result_clear(&r);
    warren_error_clear(&err);
    /* Two days of a 1 s schedule: 172,801 fire times, above the cap. */
    ck_assert_int_eq(
        warren_ops_backfill(e.st, "bs", from, from + 2 * 86400 * WARREN_US_PER_S, 0, &r, &err),
        WARREN_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.message, "more than 100000 fire times"));
    warren_ops_backfill_result_clear(&r);
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.runs");

    /* A one-shot job outside the range: nothing to do, not an error. */
    warren_error_clear(&err);
    ck_assert_msg(
        warren_ops_backfill(e.st, "bo", from, t_of("2026-05-31T23:59:59Z"), 0, &r, &err) == 0, "%s",
        err.message);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_int_eq(r.inserted, 0);
    warren_ops_backfill_result_clear(&r);
    env_free(&e);
}
END_TEST

/* ------------------------------------------------------- replay, runs, show */

START_TEST(test_replay_sends_only_dead_runs_back_and_names_who_did)
{
    env e = env_new();
    warren_error err = {0};
    int replayed = -1;
    int64_t count = -1;

    add_job(&e, "rj", "every", "10s", NULL);
    make_dead_run(&e, "rj", "2026-01-01T00:00:00Z");
    make_dead_run(&e, "rj", "2026-01-01T00:00:10Z");
    make_dead_run(&e, "rj", "2026-01-01T00:00:20Z");
    ck_assert_msg(warren_ops_replay(e.st, "rj@2026-01-01T00:00:00Z", "tester", &replayed, &err) ==
                      0,
                  "%s", err.message);
    ck_assert_int_eq(replayed, 1);
    ck_assert_sqlf(
        e.db, "planned|t",
        "SELECT concat_ws('|', state, note LIKE '%%replayed at %% by tester after 1 attempts') "
        "FROM warren.runs WHERE run_key = 'rj@2026-01-01T00:00:00Z'");
    ck_assert(warren_ops_replay(e.st, "rj@2026-01-01T00:00:00Z", "tester", &replayed, &err) == 0);
    ck_assert_int_eq(replayed, 0); /* planned now, not dead */
    ck_assert(warren_ops_replay(e.st, "rj@2030-01-01T00:00:00Z", NULL, &replayed, &err) == 0);
    ck_assert_int_eq(replayed, 0); /* unknown */

    ck_assert_msg(warren_ops_replay_dead(e.st, "rj", "tester", &count, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(count, 2);
    ck_assert(warren_ops_replay_dead(e.st, "rj", "tester", &count, &err) == 0);
    ck_assert_int_eq(count, 0);
    ck_assert_sqlf(e.db, "3", "SELECT count(*) FROM warren.runs WHERE state = 'planned'");
    env_free(&e);
}
END_TEST

START_TEST(test_runs_lists_newest_first_filtered_and_show_gives_the_attempts)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_run *rows = NULL;
    warren_ops_run_detail d;
    size_t n = 0;
    warren_us at = t_of("2026-01-01T00:00:30Z");
    warren_ops_trigger_result tr;

    add_job(&e, "sa", "every", "10s", NULL);
    add_job(&e, "sb", "every", "10s", NULL);
    make_dead_run(&e, "sa", "2026-01-01T00:00:00Z");
    make_dead_run(&e, "sb", "2026-01-01T00:00:10Z");
    make_dead_run(&e, "sa", "2026-01-01T00:00:20Z");
    ck_assert(warren_ops_trigger(e.st, "sa", &at, NULL, &tr, &err) == 0);

    ck_assert_msg(warren_ops_runs(e.st, NULL, NULL, 0, &rows, &n, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(rows[0].run_key, "sa@2026-01-01T00:00:30Z");
    ck_assert_str_eq(rows[0].state, "planned");
    ck_assert_str_eq(rows[0].origin, "trigger");
    ck_assert_str_eq(rows[3].run_key, "sa@2026-01-01T00:00:00Z");
    warren_ops_runs_free(rows, n);

    ck_assert(warren_ops_runs(e.st, "sa", "dead", 1, &rows, &n, &err) == 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(rows[0].run_key, "sa@2026-01-01T00:00:20Z");
    ck_assert_str_eq(rows[0].last_error, "boom sa@2026-01-01T00:00:20Z");
    ck_assert_int_eq(rows[0].attempt, 1);
    ck_assert(rows[0].finished_at != 0);
    warren_ops_runs_free(rows, n);

    ck_assert(warren_ops_runs(e.st, "nosuch", NULL, 10, &rows, &n, &err) == 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(rows);

    ck_assert_msg(warren_ops_show(e.st, "sb@2026-01-01T00:00:10Z", &d, &err) == 0, "%s",
                  err.message);
    ck_assert_str_eq(d.run.job, "sb");
    ck_assert_str_eq(d.run.state, "dead");
    ck_assert(d.run.scheduled_at == t_of("2026-01-01T00:00:10Z"));
    ck_assert_uint_eq(d.nattempts, 1);
    ck_assert_int_eq(d.attempts[0].attempt, 1);
    ck_assert_str_eq(d.attempts[0].worker, "w1");
    ck_assert_str_eq(d.attempts[0].outcome, "failed");
    ck_assert_str_eq(d.attempts[0].error, "boom sb@2026-01-01T00:00:10Z");
    ck_assert(d.attempts[0].finished_at >= d.attempts[0].started_at);
    warren_ops_run_detail_clear(&d);

    ck_assert_int_eq(warren_ops_show(e.st, "sb@2030-01-01T00:00:00Z", &d, &err), WARREN_ENOENT);
    ck_assert_ptr_nonnull(strstr(err.message, "no run sb@2030-01-01T00:00:00Z"));
    env_free(&e);
}
END_TEST

START_TEST(test_state_valid_takes_exactly_the_eight_run_states)
{
    static const char *const ok[] = {"planned",   "published", "running", "retrying",
                                     "succeeded", "dead",      "skipped", "cancelled"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        ck_assert_msg(warren_ops_state_valid(ok[i]), "%s", ok[i]);
    ck_assert(!warren_ops_state_valid(""));
    ck_assert(!warren_ops_state_valid("Dead"));
    ck_assert(!warren_ops_state_valid("failed"));
}
END_TEST

START_TEST(test_jobs_lists_by_name_with_cursor_pause_and_broken_mark_and_show_names_it)
{
    env e = env_new();
    warren_error err = {0};
    warren_ops_job *rows = NULL;
    warren_ops_run_detail d;
    warren_ops_trigger_result tr;
    warren_ops_jobs_query broken = {.broken_only = 1};
    warren_us at = t_of("2030-01-01T00:00:00Z");
    size_t n = 0;

    add_job(&e, "jb", "cron", "0 9 * * *",
            "timezone = 'Europe/Berlin', next_fire_at = '2030-01-01T08:00:00Z', paused = true");
    add_job(&e, "ja", "every", "10s",
            "broken_reason = 'time zone \"X\": not a zone file', broken_since = "
            "'2026-01-01T00:00:00Z', broken_retry_at = '2026-01-01T00:00:05Z'");
    add_job(&e, "jc", "at", "2026-01-01T00:00:00Z", "next_fire_at = 'infinity'");
    ck_assert_msg(warren_ops_jobs(e.st, NULL, &rows, &n, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(rows[0].name, "ja");
    ck_assert_str_eq(rows[0].kind, "every");
    ck_assert_str_eq(rows[0].expression, "10s");
    ck_assert_str_eq(rows[0].broken_reason, "time zone \"X\": not a zone file");
    ck_assert(rows[0].broken_since == t_of("2026-01-01T00:00:00Z"));
    ck_assert(rows[0].broken_retry_at == t_of("2026-01-01T00:00:05Z"));
    ck_assert(rows[0].next_fire_at == 0 && !rows[0].paused && !rows[0].exhausted);
    ck_assert_str_eq(rows[1].name, "jb");
    ck_assert_str_eq(rows[1].timezone, "Europe/Berlin");
    ck_assert_str_eq(rows[1].queue, "q");
    ck_assert(rows[1].next_fire_at == t_of("2030-01-01T08:00:00Z"));
    ck_assert(rows[1].paused && rows[1].broken_reason == NULL && rows[1].broken_since == 0);
    ck_assert(rows[2].exhausted && rows[2].next_fire_at == 0);
    warren_ops_jobs_free(rows, n);

    ck_assert(warren_ops_jobs(e.st, &broken, &rows, &n, &err) == 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(rows[0].name, "ja");
    warren_ops_jobs_free(rows, n);
    broken.broken_only = 0;
    broken.limit = 2;
    ck_assert(warren_ops_jobs(e.st, &broken, &rows, &n, &err) == 0);
    ck_assert_uint_eq(n, 2);
    warren_ops_jobs_free(rows, n);

    /* show names the broken job of a run, and only then */
    ck_assert(warren_ops_trigger(e.st, "ja", &at, NULL, &tr, &err) == 0);
    ck_assert(warren_ops_show(e.st, "ja@2030-01-01T00:00:00Z", &d, &err) == 0);
    ck_assert_str_eq(d.job_broken_reason, "time zone \"X\": not a zone file");
    ck_assert(d.job_broken_since == t_of("2026-01-01T00:00:00Z"));
    warren_ops_run_detail_clear(&d);
    ck_assert(warren_ops_trigger(e.st, "jb", &at, NULL, &tr, &err) == 0);
    ck_assert(warren_ops_show(e.st, "jb@2030-01-01T00:00:00Z", &d, &err) == 0);
    ck_assert_ptr_null(d.job_broken_reason);
    ck_assert(d.job_broken_since == 0);
    warren_ops_run_detail_clear(&d);
    env_free(&e);
}
END_TEST

static Suite *ops_suite(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("trigger");
    tcase_add_test(tc, test_trigger_creates_one_run_per_key_and_reports_the_existing_runs_state);
    suite_add_tcase(s, tc);

    tc = tcase_create("pause_resume");
    tcase_add_test(tc, test_pause_cancels_scheduled_runs_and_resume_replans_them_naming_the_policy);
    suite_add_tcase(s, tc);

    tc = tcase_create("backfill");
    tcase_add_test(tc,
                   test_backfill_dry_run_writes_nothing_and_backfill_leaves_existing_runs_alone);
    tcase_add_test(tc, test_backfill_applies_the_jobs_jitter_as_the_planner_does);
    tcase_add_test(tc,
                   test_backfill_refuses_a_reversed_range_an_unknown_job_and_too_many_fire_times);
    suite_add_tcase(s, tc);

    tc = tcase_create("replay");
    tcase_add_test(tc, test_replay_sends_only_dead_runs_back_and_names_who_did);
    suite_add_tcase(s, tc);

    tc = tcase_create("runs_show");
    tcase_add_test(tc, test_runs_lists_newest_first_filtered_and_show_gives_the_attempts);
    tcase_add_test(tc, test_state_valid_takes_exactly_the_eight_run_states);
    suite_add_tcase(s, tc);

    tc = tcase_create("jobs");
    tcase_add_test(tc, test_jobs_lists_by_name_with_cursor_pause_and_broken_mark_and_show_names_it);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    SRunner *sr = srunner_create(ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
