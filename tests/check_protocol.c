/* check_protocol.c: the worker protocol (the functions in sql/functions/) against
 * a real PostgreSQL: claim / heartbeat / complete, fencing, overlap policies,
 * full-jitter backoff, retries to dead with a dead letter in the outbox,
 * replay, the reaper and the warren_worker role. */
#include <check.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testenv.h"

#define RK "j1@2026-01-01T00:00:00Z"
#define RK2 "j1@2026-01-01T00:01:00Z"

/* Rows returned/affected, or -1 on error. */
static int qn(const char *url, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int qn(const char *url, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = testenv_vfmt(fmt, ap);
    va_end(ap);
    int n = testenv_psql(url, sql, NULL);
    free(sql);
    return n;
}

/* A database with job j1 (overlap, max_attempts, base/cap ms, lease ms) and run RK due now. */
static char *setup(const char *overlap, int max_attempts, int base_ms, int cap_ms, int lease_ms)
{
    char *url = testenv_db_migrated();
    ck_assert_int_eq(qn(url,
                        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, "
                        "retry_max_attempts, retry_base_ms, retry_cap_ms, lease_ms, payload) "
                        "VALUES ('j1', 'every', '60s', 'q1', '%s', %d, %d, %d, %d, '{\"k\": 7}')",
                        overlap, max_attempts, base_ms, cap_ms, lease_ms),
                     1);
    ck_assert_int_eq(qn(url, "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES "
                             "('j1', '2026-01-01T00:00:00Z', now())"),
                     1);
    return url;
}

static void add_run2(const char *url)
{
    ck_assert_int_eq(qn(url, "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES "
                             "('j1', '2026-01-01T00:01:00Z', now())"),
                     1);
}

/* Claims key for worker w: the attempt as text, or NULL when no row came back. */
static char *claim(const char *url, const char *key, const char *w)
{
    return testenv_sql1f(url, "SELECT attempt FROM warren.claim('%s', '%s')", key, w);
}

static void expire_lease(const char *url, const char *key)
{
    ck_assert_int_eq(qn(url,
                        "UPDATE warren.runs SET lease_until = now() - interval '1 second' "
                        "WHERE run_key = '%s'",
                        key),
                     1);
}

/* ------------------------------------------------------------ claim */

START_TEST(test_claim_returns_attempt_payload_and_lease)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    char *row = testenv_sql1f(
        url, "SELECT format('%%s|%%s|%%s|%%s|%%s', attempt, job, scheduled_at, payload, "
             "lease_seconds) FROM warren.claim('" RK "', 'w1')");
    ck_assert_str_eq(row, "1|j1|2026-01-01 00:00:00+00|{\"k\": 7}|30");
    free(row);
    ck_assert_sqlf(url, "running|w1|t",
                   "SELECT format('%%s|%%s|%%s', state, lease_owner, "
                   "lease_until BETWEEN now() + interval '29 s' AND now() + "
                   "interval '31 s') FROM warren.runs WHERE run_key = '" RK "'");
    ck_assert_sqlf(url, "1",
                   "SELECT count(*) FROM warren.attempts WHERE run_key = '" RK
                   "' AND worker = 'w1' "
                   "AND outcome IS NULL");
    free(url);
}
END_TEST

START_TEST(test_claim_of_leased_run_returns_nothing)
{
    char *url = setup("allow", 5, 1000, 60000, 30000);
    char *a = claim(url, RK, "w1");
    ck_assert_str_eq(a, "1");
    free(a);
    ck_assert_ptr_null(claim(url, RK, "w2"));
    ck_assert_sqlf(url, "1|w1", "SELECT attempt || '|' || lease_owner FROM warren.runs");
    free(url);
}
END_TEST

START_TEST(test_claim_of_unknown_or_finished_run_returns_nothing)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    ck_assert_ptr_null(claim(url, "nosuch@2026-01-01T00:00:00Z", "w1"));
    free(claim(url, RK, "w1"));
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_ptr_null(claim(url, RK, "w2"));
    ck_assert_sqlf(url, "succeeded|1", "SELECT state || '|' || attempt FROM warren.runs");
    free(url);
}
END_TEST

START_TEST(test_claim_of_retrying_run_before_its_due_time_returns_nothing)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET state = 'retrying', "
                             "due_at = now() + interval '1 minute'"),
                     1);
    ck_assert_ptr_null(claim(url, RK, "w1"));
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = now()"), 1);
    char *a = claim(url, RK, "w1");
    ck_assert_str_eq(a, "1");
    free(a);
    free(url);
}
END_TEST

/* ------------------------------------------------------------ heartbeat, complete, fencing */

/* A run released early (planner.release_lead) is waited for: the claim
 * returns once the run is due on the database's clock, and the lease, the
 * run's started_at and the attempt's start are timed from then, not from the
 * call (now()). A run due further ahead than 15 s is not claimable. */
START_TEST(test_claim_waits_until_the_run_is_due_and_times_the_lease_from_then)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = clock_timestamp() + interval "
                             "'700 ms'"),
                     1);
    /* clock_timestamp() in the select list is read after the function's rows */
    ck_assert_sqlf(
        url, "1|true",
        "SELECT c.attempt || '|' || (clock_timestamp() >= r.due_at) FROM warren.claim('" RK
        "', 'w1') c, warren.runs r WHERE r.run_key = '" RK "'");
    ck_assert_sqlf(
        url, "running|t|t|t|t",
        "SELECT format('%%s|%%s|%%s|%%s|%%s', r.state, r.started_at >= r.due_at, "
        "r.started_at < r.due_at + interval '10 s', "
        "r.lease_until = r.started_at + interval '30 s', a.started_at = r.started_at) "
        "FROM warren.runs r JOIN warren.attempts a USING (run_key) WHERE r.run_key = '" RK "'");
    /* A minute ahead: no row at once, the run untouched. */
    add_run2(url);
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = now() + interval '1 minute' "
                             "WHERE run_key = '" RK2 "'"),
                     1);
    /* (returned without waiting for it: before it is due) */
    ck_assert_sqlf(
        url, "0|true",
        "SELECT count(*) || '|' || (clock_timestamp() < (SELECT due_at FROM warren.runs WHERE "
        "run_key = '" RK2 "')) FROM warren.claim('" RK2 "', 'w1')");
    ck_assert_sqlf(url, "planned|0",
                   "SELECT state || '|' || attempt FROM warren.runs WHERE run_key = '" RK2 "'");
    /* A retrying run due in 400 ms is waited for as well (once RK is done:
     * the job's overlap policy is skip). */
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET state = 'retrying', due_at = "
                             "clock_timestamp() + interval '400 ms' WHERE run_key = '" RK2 "'"),
                     1);
    ck_assert_sqlf(
        url, "1|true",
        "SELECT c.attempt || '|' || (clock_timestamp() >= r.due_at) FROM warren.claim('" RK2
        "', 'w2') c, warren.runs r WHERE r.run_key = '" RK2 "'");
    free(url);
}
END_TEST

/* claim_many waits until the latest of its runs is due (fast path and full
 * rules alike) when that is at most 1 s away, and leaves out runs due later:
 * here a stale redelivery of a run whose retry is due in 5 s, which must not
 * hold up the batch. */
START_TEST(test_claim_many_waits_until_its_runs_are_due)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    ck_assert_int_eq(qn(url, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, "
                             "overlap) VALUES ('j2', 'every', '60s', 'q1', 'allow');"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT 'j2', "
                             "'2026-01-01'::timestamptz + make_interval(secs => g), "
                             "clock_timestamp() + g * interval '200 ms' "
                             "FROM generate_series(1, 3) g"),
                     3);
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = clock_timestamp() + interval "
                             "'300 ms' WHERE run_key = '" RK "'"),
                     1);
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET state = 'retrying', due_at = "
                             "clock_timestamp() + interval '5 s' WHERE run_key = "
                             "'j2@2026-01-01T00:00:03Z'"),
                     1);
    ck_assert_sqlf(
        url, "j1@2026-01-01T00:00:00Z,j2@2026-01-01T00:00:01Z,j2@2026-01-01T00:00:02Z|true",
        "SELECT string_agg(run_key, ',' ORDER BY run_key) || '|' || (clock_timestamp() < "
        "(SELECT due_at FROM warren.runs WHERE run_key = 'j2@2026-01-01T00:00:03Z')) FROM "
        "warren.claim_many(ARRAY['j2@2026-01-01T00:00:01Z', '" RK "', "
        "'j2@2026-01-01T00:00:02Z', 'j2@2026-01-01T00:00:03Z'], 'w1')");
    /* every one started once the latest of them (400 ms) was due */
    ck_assert_sqlf(
        url, "3|true",
        "SELECT count(*) || '|' || bool_and(started_at >= (SELECT max(due_at) FROM warren.runs "
        "WHERE state = 'running') AND lease_until = started_at + interval '30 s') FROM "
        "warren.runs WHERE state = 'running'");
    ck_assert_sqlf(url, "retrying",
                   "SELECT state FROM warren.runs WHERE run_key = 'j2@2026-01-01T00:00:03Z'");
    free(url);
}
END_TEST

START_TEST(test_heartbeat_extends_by_the_lease_the_attempt_was_claimed_with)
{
    /* Claimed with a 30 s lease (the worker heartbeats every 10 s), then a
     * sync shortens the job's lease to 2 s: the next heartbeat must still
     * extend by 30 s, or the lease lapses before the heartbeat after it. */
    char *url = setup("allow", 5, 1000, 60000, 30000);
    ck_assert_sqlf(url, "1|30",
                   "SELECT attempt || '|' || lease_seconds FROM warren.claim('" RK "', 'w1')");
    ck_assert_int_eq(qn(url, "UPDATE warren.jobs SET lease_ms = 2000"), 1);
    ck_assert_sqlf(url, "t", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "t",
                   "SELECT lease_until BETWEEN now() + interval '29 s' AND now() + interval '31 s' "
                   "FROM warren.runs WHERE run_key = '" RK "'");
    /* A claim after the sync gets the new lease, and keeps it. */
    add_run2(url);
    ck_assert_sqlf(url, "1|2",
                   "SELECT attempt || '|' || lease_seconds FROM warren.claim('" RK2 "', 'w1')");
    ck_assert_int_eq(qn(url, "UPDATE warren.jobs SET lease_ms = 60000"), 1);
    ck_assert_sqlf(url, "t", "SELECT warren.heartbeat('" RK2 "', 1)");
    ck_assert_sqlf(
        url, "t",
        "SELECT lease_until < now() + interval '3 s' FROM warren.runs WHERE run_key = '" RK2 "'");
    free(url);
}
END_TEST

START_TEST(test_reclaim_many_takes_back_a_lost_claim_after_the_jobs_lease_changed)
{
    /* The lost claim's lease is claim time + the lease it was claimed with,
     * not the job's lease after a sync. */
    char *url = setup("allow", 5, 1000, 60000, 30000);
    ck_assert_sqlf(url, "1", "SELECT count(*) FROM warren.claim_many(ARRAY['" RK "'], 'w1')");
    ck_assert_int_eq(qn(url, "UPDATE warren.jobs SET lease_ms = 2000"), 1);
    ck_assert_sqlf(url, "2|2",
                   "SELECT attempt || '|' || lease_seconds FROM warren.reclaim_many(ARRAY['" RK
                   "'], 'w1', "
                   "60000)");
    free(url);
}
END_TEST

START_TEST(test_heartbeat_extends_lease_only_for_the_holder)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET lease_until = now() + interval '2 s'"), 1);
    ck_assert_sqlf(url, "t", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "t", "SELECT lease_until > now() + interval '29 s' FROM warren.runs");
    ck_assert_sqlf(url, "f", "SELECT warren.heartbeat('" RK "', 2)");
    ck_assert_sqlf(url, "f", "SELECT warren.heartbeat('nosuch@2026-01-01T00:00:00Z', 1)");
    free(url);
}
END_TEST

START_TEST(test_complete_succeeded_writes_event_and_rejects_a_second_completion)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(
        url, "succeeded|true|<null>",
        "SELECT state || '|' || (finished_at IS NOT NULL) || '|' || coalesce(lease_until::text, "
        "'<null>') FROM warren.runs");
    ck_assert_sqlf(url, "warren.events|run.succeeded.j1|" RK "|j1|succeeded",
                   "SELECT concat_ws('|', exchange, routing_key, message_id, type, body->>'state') "
                   "FROM warren.outbox");
    ck_assert_sqlf(url, "succeeded", "SELECT outcome FROM warren.attempts");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'retry', 'x')");
    ck_assert_sqlf(url, "1", "SELECT count(*) FROM warren.outbox");
    free(url);
}
END_TEST

START_TEST(test_complete_rejects_unknown_outcome)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    ck_assert_int_eq(qn(url, "SELECT warren.complete('" RK "', 1, 'done')"), -1);
    ck_assert_sqlf(url, "running", "SELECT state FROM warren.runs");
    free(url);
}
END_TEST

START_TEST(test_fencing_rejects_the_stale_attempt_after_takeover)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    /* Before the lease ran out nobody can take over... */
    ck_assert_ptr_null(claim(url, RK, "w2"));
    expire_lease(url, RK);
    /* ...after it, w2 gets attempt 2 and w1's token is stale. */
    char *a = claim(url, RK, "w2");
    ck_assert_str_eq(a, "2");
    free(a);
    ck_assert_sqlf(url, "f", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(url, "running|2|w2",
                   "SELECT concat_ws('|', state, attempt, lease_owner) FROM warren.runs");
    ck_assert_sqlf(url, "lease_lost", "SELECT outcome FROM warren.attempts WHERE attempt = 1");
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 2, 'succeeded')");
    ck_assert_sqlf(url, "succeeded", "SELECT state FROM warren.runs");
    ck_assert_sqlf(
        url, "1|lease_lost,2|succeeded",
        "SELECT string_agg(attempt || '|' || outcome, ',' ORDER BY attempt) FROM warren.attempts");
    free(url);
}
END_TEST

START_TEST(test_expired_lease_without_takeover_still_fences_by_attempt)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    expire_lease(url, RK);
    /* Nobody claimed it since: the attempt still holds, and a heartbeat renews it. */
    ck_assert_sqlf(url, "t", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_ptr_null(claim(url, RK, "w2"));
    free(url);
}
END_TEST

START_TEST(test_takeover_of_an_exhausted_run_makes_it_dead)
{
    char *url = setup("skip", 1, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    expire_lease(url, RK);
    ck_assert_ptr_null(claim(url, RK, "w2"));
    ck_assert_sqlf(url, "dead", "SELECT state FROM warren.runs");
    ck_assert_sqlf(url, "1", "SELECT count(*) FROM warren.outbox WHERE exchange = 'warren.dead'");
    free(url);
}
END_TEST

/* ------------------------------------------------------------ retries, backoff, dead */

START_TEST(test_retry_schedules_full_jitter_backoff_within_bounds)
{
    /* base 1 s, cap 5 s: the bound is min(5 s, 1 s * 2^attempt): 2 s, 4 s, 5 s, 5 s... */
    char *url = setup("skip", 100, 1000, 5000, 30000);
    double maxseen[8] = {0};
    int below_half = 0; /* delays under half their bound */
    for (int round = 0; round < 6; round++) {
        for (int attempt = 1; attempt <= 4; attempt++) {
            int a = round * 4 + attempt;
            char *got = claim(url, RK, "w1");
            ck_assert_ptr_nonnull(got);
            ck_assert_int_eq(atoi(got), a);
            free(got);
            ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', %d, 'retry', 'boom %d')", a,
                           a);
            /* complete's now() is the attempt's finished_at (same transaction). */
            char *d = testenv_sql1f(
                url, "SELECT extract(epoch FROM r.due_at - a.finished_at) * 1000 FROM "
                     "warren.runs r JOIN warren.attempts a ON a.run_key = r.run_key AND "
                     "a.attempt = r.attempt");
            double ms = atof(d);
            free(d);
            double bound = a >= 3 ? 5000.0 : 1000.0 * (double)(1 << a);
            if (bound > 5000.0)
                bound = 5000.0;
            ck_assert_msg(ms >= 0.0 && ms <= bound + 1.0,
                          "attempt %d: delay %.1f ms not in [0, %.0f]", a, ms, bound);
            if (attempt < 8 && ms > maxseen[attempt])
                maxseen[attempt] = ms;
            if (ms < bound / 2.0)
                below_half++;
            char want[64];
            snprintf(want, sizeof want, "retrying|boom %d", a);
            ck_assert_sqlf(url, want, "SELECT state || '|' || last_error FROM warren.runs");
            ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = now()"), 1);
        }
    }
    /* Full jitter spreads over the range rather than sitting at 0 or at the bound. */
    ck_assert_msg(maxseen[4] > 1000.0, "capped delays never exceeded 1 s: %.1f", maxseen[4]);
    /* A delay of exactly the bound (no jitter), or of half the bound plus
     * jitter ("equal jitter"), is never below half the bound; full jitter,
     * random() * bound, is with probability 1/2 per sample. All 24 samples
     * at or above half their bound by chance: 2^-24, about 6e-8 (one false
     * failure in 17 million runs). */
    ck_assert_msg(below_half > 0, "none of the 24 delays was below half its bound: no full jitter");
    free(url);
}
END_TEST

START_TEST(test_retry_until_dead_writes_dead_letter_with_attempts_and_error)
{
    char *url = setup("skip", 3, 0, 0, 30000);
    for (int a = 1; a <= 3; a++) {
        char *got = claim(url, RK, "w1");
        ck_assert_ptr_nonnull(got);
        ck_assert_int_eq(atoi(got), a);
        free(got);
        ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', %d, 'retry', 'error number %d')",
                       a, a);
    }
    ck_assert_sqlf(
        url, "dead|error number 3|t",
        "SELECT concat_ws('|', state, last_error, finished_at IS NOT NULL) FROM warren.runs");
    ck_assert_ptr_null(claim(url, RK, "w1"));
    ck_assert_sqlf(
        url, "q1|" RK "|j1|" RK "|j1|3|3|error number 3|{\"k\": 7}|error number 3",
        "SELECT concat_ws('|', routing_key, message_id, type, body->>'run_key', body->>'job', "
        "body->>'attempt', body->>'attempts', body->>'last_error', body->>'payload', "
        "headers->>'x-warren-error') FROM warren.outbox WHERE exchange = 'warren.dead'");
    ck_assert_sqlf(
        url, "run.retry.j1,run.retry.j1,run.retry.j1,run.dead.j1,warren.dead",
        "SELECT string_agg(CASE WHEN exchange = 'warren.dead' THEN exchange ELSE routing_key END, "
        "',' ORDER BY id) FROM warren.outbox");
    ck_assert_sqlf(url, "3", "SELECT count(*) FROM warren.attempts WHERE outcome = 'retry'");
    free(url);
}
END_TEST

START_TEST(test_failed_outcome_is_dead_at_once)
{
    char *url = setup("skip", 5, 0, 0, 30000);
    free(claim(url, RK, "w1"));
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'failed', 'bad input')");
    ck_assert_sqlf(url, "dead|bad input", "SELECT state || '|' || last_error FROM warren.runs");
    ck_assert_sqlf(url, "run.failed.j1,run.dead.j1,q1",
                   "SELECT string_agg(routing_key, ',' ORDER BY id) FROM warren.outbox");
    free(url);
}
END_TEST

START_TEST(test_replay_sends_a_dead_run_back_to_planned_keeping_history)
{
    char *url = setup("skip", 1, 0, 0, 30000);
    free(claim(url, RK, "w1"));
    ck_assert_sqlf(url, "f", "SELECT warren.replay('" RK "')"); /* running: not dead */
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'retry', 'once')");
    ck_assert_sqlf(url, "dead", "SELECT state FROM warren.runs");
    ck_assert_sqlf(url, "t", "SELECT warren.replay('" RK "', 'tester')");
    ck_assert_sqlf(url, "planned|t|1|1|t",
                   "SELECT concat_ws('|', state, due_at <= now(), attempt, attempt_base, "
                   "note LIKE '%%replayed at %% by tester after 1 attempts%%') FROM warren.runs");
    ck_assert_sqlf(url, "f", "SELECT warren.replay('" RK "')");
    /* A fresh budget, and the fencing token keeps growing. */
    char *a = claim(url, RK, "w2");
    ck_assert_str_eq(a, "2");
    free(a);
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 2, 'succeeded')");
    ck_assert_sqlf(
        url, "1|retry,2|succeeded",
        "SELECT string_agg(attempt || '|' || outcome, ',' ORDER BY attempt) FROM warren.attempts");
    free(url);
}
END_TEST

/* ------------------------------------------------------------ reaper */

START_TEST(test_reaper_moves_expired_leases_to_retrying_or_dead)
{
    char *url = setup("allow", 2, 0, 0, 30000);
    add_run2(url);
    free(claim(url, RK, "w1"));
    free(claim(url, RK2, "w1"));
    ck_assert_sqlf(url, "0", "SELECT warren.reap_expired_leases(10)");
    expire_lease(url, RK);
    expire_lease(url, RK2);
    ck_assert_sqlf(url, "1", "SELECT warren.reap_expired_leases(1)");
    ck_assert_sqlf(url, "1", "SELECT warren.reap_expired_leases(10)");
    ck_assert_sqlf(url, "retrying,retrying", "SELECT string_agg(state, ',') FROM warren.runs");
    ck_assert_sqlf(url, "2", "SELECT count(*) FROM warren.attempts WHERE outcome = 'lease_lost'");
    ck_assert_sqlf(
        url, "2",
        "SELECT count(*) FROM warren.runs WHERE note LIKE '%%lease of attempt 1 (worker w1) "
        "expired at %%; reaped at %%'");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    /* Second loss exhausts the budget of 2: dead with a dead letter. */
    char *a = claim(url, RK, "w2");
    ck_assert_str_eq(a, "2");
    free(a);
    expire_lease(url, RK);
    ck_assert_sqlf(url, "1", "SELECT warren.reap_expired_leases(10)");
    ck_assert_sqlf(url, "dead", "SELECT state FROM warren.runs WHERE run_key = '" RK "'");
    ck_assert_sqlf(url, "1", "SELECT count(*) FROM warren.outbox WHERE exchange = 'warren.dead'");
    ck_assert_sqlf(url, "3",
                   "SELECT count(*) FROM warren.outbox WHERE routing_key = 'run.lease_lost.j1'");
    free(url);
}
END_TEST

/* ------------------------------------------------------------ overlap policies */

START_TEST(test_overlap_skip_skips_the_newer_run_with_a_note)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_run2(url);
    free(claim(url, RK, "w1"));
    ck_assert_ptr_null(claim(url, RK2, "w2"));
    ck_assert_sqlf(
        url, "skipped|t|t",
        "SELECT concat_ws('|', state, finished_at IS NOT NULL, note LIKE '%%skipped by overlap "
        "policy skip at %%: " RK " was still running%%') FROM warren.runs WHERE run_key = '" RK2
        "'");
    ck_assert_sqlf(url, "1",
                   "SELECT count(*) FROM warren.outbox WHERE routing_key = 'run.skipped.j1'");
    ck_assert_sqlf(url, "running", "SELECT state FROM warren.runs WHERE run_key = '" RK "'");
    free(url);
}
END_TEST

/* Enqueued runs (origin 'enqueue') are claimed under `allow`, whatever the
 * job's policy (issue 33 item 18; wp_overlap_of): for each policy, with
 * the job's scheduled run RK running, two enqueued runs are claimed by
 * warren.claim, two more by one claim_many and two more taken by
 * take_many, all running side by side; a scheduled run claimed then is
 * held back by its own policy counting only the scheduled run RK (skip:
 * skipped, queue: retrying, cancel_previous: it is the newer one, so RK is
 * cancelled), and the enqueued runs are left as they were. */
START_TEST(test_overlap_does_not_hold_back_enqueued_runs)
{
    static const char *const pols[] = {"skip", "queue", "cancel_previous"};
    static const char *const want[] = {"skipped", "retrying", "running"};
    for (int p = 0; p < 3; p++) {
        char *url = setup(pols[p], 5, 1000, 60000, 30000);
        ck_assert_int_eq(qn(url, "INSERT INTO warren.runs (run_key, job, scheduled_at, due_at, "
                                 "origin) SELECT 'j1@e' || g, 'j1', '2026-01-01'::timestamptz + "
                                 "make_interval(secs => 100 + g), now(), 'enqueue' FROM "
                                 "generate_series(1, 6) g"),
                         6);
        char *a = claim(url, RK, "w0");
        ck_assert_ptr_nonnull(a);
        free(a);
        for (int i = 1; i <= 2; i++) {
            char *k = testenv_fmt("j1@e%d", i);
            char *got = claim(url, k, "w1");
            ck_assert_msg(got != NULL, "%s: enqueued %s not claimed", pols[p], k);
            free(got);
            free(k);
        }
        ck_assert_sqlf(url, "2",
                       "SELECT count(*) FROM warren.claim_many(ARRAY['j1@e3', 'j1@e4'], 'w2')");
        ck_assert_sqlf(
            url, "2",
            "WITH tk AS MATERIALIZED (SELECT * FROM warren.take_many(ARRAY['j1@e5', "
            "'j1@e6'], 'w3')) SELECT warren.finish_many(ARRAY(SELECT run_key FROM tk), 'w3', "
            "(SELECT min(taken_at) FROM tk))");
        ck_assert_sqlf(
            url, "running:5,succeeded:2",
            "SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM (SELECT state, "
            "count(*) n FROM warren.runs GROUP BY state) x");
        /* a scheduled run: the job's own policy, counting the enqueued ones */
        add_run2(url);
        free(claim(url, RK2, "w4"));
        ck_assert_sqlf(url, want[p], "SELECT state FROM warren.runs WHERE run_key = '" RK2 "'");
        ck_assert_sqlf(url, p == 2 ? "cancelled" : "running",
                       "SELECT state FROM warren.runs WHERE run_key = '" RK "'");
        ck_assert_sqlf(
            url, "running:4,succeeded:2",
            "SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM (SELECT state, "
            "count(*) n FROM warren.runs WHERE origin = 'enqueue' GROUP BY state) x");
        free(url);
    }
}
END_TEST

/* A run whose lease expired does not hold back the job's next run, and the
 * claim that starts the next run reaps it: its holder (paused, not dead) can
 * neither heartbeat nor complete it afterwards, so the two never both count
 * as running or succeeded. */
START_TEST(test_overlap_skip_reaps_a_run_whose_lease_expired)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_run2(url);
    free(claim(url, RK, "w1"));
    expire_lease(url, RK);
    char *a = claim(url, RK2, "w2");
    ck_assert_str_eq(a, "1");
    free(a);
    ck_assert_sqlf(url, "retrying|1",
                   "SELECT state || '|' || (note LIKE '%%reaped at %%by the overlap check of " RK2
                   "%%')::int "
                   "FROM warren.runs WHERE run_key = '" RK "'");
    ck_assert_sqlf(url, "lease_lost",
                   "SELECT outcome FROM warren.attempts WHERE run_key = '" RK "' AND attempt = 1");
    ck_assert_sqlf(url, "f", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(url, "1",
                   "SELECT count(*) FROM warren.outbox WHERE routing_key = 'run.lease_lost.j1'");
    /* its retry, while the newer run holds its lease: skipped */
    ck_assert_sqlf(url, "0",
                   "UPDATE warren.runs SET due_at = now() WHERE run_key = '" RK "'; "
                   "SELECT count(*) FROM warren.claim('" RK "', 'w3')");
    ck_assert_sqlf(url, "skipped", "SELECT state FROM warren.runs WHERE run_key = '" RK "'");
    free(url);
}
END_TEST

START_TEST(test_overlap_allow_runs_both)
{
    char *url = setup("allow", 5, 1000, 60000, 30000);
    add_run2(url);
    free(claim(url, RK, "w1"));
    char *a = claim(url, RK2, "w2");
    ck_assert_str_eq(a, "1");
    free(a);
    ck_assert_sqlf(url, "2", "SELECT count(*) FROM warren.runs WHERE state = 'running'");
    free(url);
}
END_TEST

START_TEST(test_overlap_queue_holds_the_newer_run_until_the_older_finishes)
{
    char *url = setup("queue", 5, 1000, 60000, 30000);
    add_run2(url);
    free(claim(url, RK, "w1"));
    ck_assert_ptr_null(claim(url, RK2, "w2"));
    ck_assert_sqlf(
        url, "retrying|0|t|t",
        "SELECT concat_ws('|', state, attempt, due_at BETWEEN now() + interval '0.9 s' AND now() + "
        "interval '1.1 s', note LIKE '%%held back by overlap policy queue: " RK
        " was still running%%') FROM warren.runs WHERE run_key = '" RK2 "'");
    /* Still blocked a second later (the message comes back): no second note line. */
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = now() WHERE run_key = '" RK2 "'"), 1);
    ck_assert_ptr_null(claim(url, RK2, "w2"));
    ck_assert_sqlf(
        url, "1",
        "SELECT count(*) FROM regexp_matches((SELECT note FROM warren.runs WHERE run_key "
        "= '" RK2 "'), 'held back', 'g')");
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET due_at = now() WHERE run_key = '" RK2 "'"), 1);
    char *a = claim(url, RK2, "w2");
    ck_assert_str_eq(a, "1");
    free(a);
    free(url);
}
END_TEST

START_TEST(test_overlap_cancel_previous_revokes_the_older_lease)
{
    char *url = setup("cancel_previous", 5, 1000, 60000, 30000);
    add_run2(url);
    free(claim(url, RK, "w1"));
    char *a = claim(url, RK2, "w2");
    ck_assert_str_eq(a, "1");
    free(a);
    ck_assert_sqlf(url, "cancelled|true",
                   "SELECT state || '|' || (note LIKE '%%cancelled by overlap policy "
                   "cancel_previous at %%: newer run " RK2
                   " claimed by w2%%') FROM warren.runs WHERE run_key = '" RK "'");
    ck_assert_sqlf(url, "f", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(url, "cancelled",
                   "SELECT outcome FROM warren.attempts WHERE run_key = '" RK "'");
    ck_assert_sqlf(url, "1",
                   "SELECT count(*) FROM warren.outbox WHERE routing_key = 'run.cancelled.j1'");
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK2 "', 1, 'succeeded')");
    free(url);
}
END_TEST

/* a claims RK as wa in an open transaction; b sends b_sql, which must block
 * on the job's overlap lock (still busy 300 ms later); a commits. Returns
 * b's first result (the rest read and dropped); both connections closed. */
static PGresult *claim_then_blocked(const char *url, const char *b_sql)
{
    PGconn *a = PQconnectdb(url), *b = PQconnectdb(url);
    ck_assert_int_eq(PQstatus(a), CONNECTION_OK);
    ck_assert_int_eq(PQstatus(b), CONNECTION_OK);
    PGresult *r = PQexec(a, "BEGIN; SELECT attempt FROM warren.claim('" RK "', 'wa')");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_int_eq(PQntuples(r), 1);
    PQclear(r);
    ck_assert_int_eq(PQsendQuery(b, b_sql), 1);
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(PQconsumeInput(b), 1);
    ck_assert_msg(PQisBusy(b), "b did not wait for a's lock");
    r = PQexec(a, "COMMIT");
    ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PGresult *first = PQgetResult(b);
    while ((r = PQgetResult(b)) != NULL)
        PQclear(r);
    PQfinish(a);
    PQfinish(b);
    return first;
}

/* Two claims of different runs of a skip job in concurrent transactions: the
 * second waits for the first to commit and then sees it (no double start). */
START_TEST(test_overlap_skip_holds_under_concurrent_claims)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_run2(url);
    /* b blocks on the job's lock until a commits, then claims nothing */
    PGresult *r = claim_then_blocked(url, "SELECT attempt FROM warren.claim('" RK2 "', 'wb')");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_int_eq(PQntuples(r), 0);
    PQclear(r);
    ck_assert_sqlf(url, "running,skipped",
                   "SELECT string_agg(state, ',' ORDER BY scheduled_at) FROM warren.runs");
    free(url);
}
END_TEST

/* ------------------------------------------------------------ batch forms */

START_TEST(test_claim_many_claims_fresh_runs_and_applies_the_rules_to_the_rest)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_run2(url);
    ck_assert_int_eq(qn(url, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, "
                             "overlap) VALUES ('j2', 'every', '60s', 'q1', 'allow');"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT 'j2', "
                             "'2026-01-01'::timestamptz + make_interval(secs => g), now() "
                             "FROM generate_series(1, 3) g"),
                     3);
    /* j2 (allow) takes the set-based path, j1 (skip) the full rules: RK claimed, RK2 skipped. */
    ck_assert_sqlf(
        url,
        "j1@2026-01-01T00:00:00Z:1,j2@2026-01-01T00:00:01Z:1,j2@2026-01-01T00:00:02Z:1,"
        "j2@2026-01-01T00:00:03Z:1",
        "SELECT string_agg(run_key || ':' || attempt, ',' ORDER BY run_key) FROM "
        "warren.claim_many(ARRAY['j2@2026-01-01T00:00:03Z', '" RK "', '" RK2 "', "
        "'j2@2026-01-01T00:00:01Z', 'j2@2026-01-01T00:00:02Z', 'nosuch@2026-01-01T00:00:00Z', "
        "'j2@2026-01-01T00:00:01Z'], 'w1')");
    ck_assert_sqlf(url, "skipped", "SELECT state FROM warren.runs WHERE run_key = '" RK2 "'");
    ck_assert_sqlf(url, "4", "SELECT count(*) FROM warren.attempts WHERE worker = 'w1'");
    /* Again: all held now, nothing comes back. */
    ck_assert_sqlf(url, "0",
                   "SELECT count(*) FROM warren.claim_many(ARRAY['" RK "', "
                   "'j2@2026-01-01T00:00:01Z'], 'w2')");
    /* complete_many records current tokens and rejects stale ones. */
    ck_assert_sqlf(
        url,
        "j2@2026-01-01T00:00:01Z:true,j2@2026-01-01T00:00:02Z:false,nosuch@2026-01-01T00:00:00Z:"
        "false",
        "SELECT string_agg(run_key || ':' || recorded, ',' ORDER BY run_key) FROM "
        "warren.complete_many(ARRAY['j2@2026-01-01T00:00:01Z', 'j2@2026-01-01T00:00:02Z', "
        "'nosuch@2026-01-01T00:00:00Z'], ARRAY[1, 7, 1])");
    ck_assert_sqlf(
        url, "succeeded|succeeded|1",
        "SELECT r.state || '|' || a.outcome || '|' || (SELECT count(*) FROM warren.outbox WHERE "
        "routing_key = 'run.succeeded.j2') FROM warren.runs r JOIN warren.attempts a USING "
        "(run_key) WHERE r.run_key = 'j2@2026-01-01T00:00:01Z'");
    ck_assert_sqlf(url, "running",
                   "SELECT state FROM warren.runs WHERE run_key = 'j2@2026-01-01T00:00:02Z'");
    free(url);
}
END_TEST

/* Skip jobs j2 .. jn (n <= 9) beside setup's j1, each with one run due now,
 * scheduled at 2026-01-01T00:00:0<i>Z. */
static void add_skip_jobs(const char *url, int n)
{
    ck_assert_int_eq(
        qn(url,
           "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap) "
           "SELECT 'j' || g, 'every', '60s', 'q1', 'skip' FROM generate_series(2, %d) g",
           n),
        n - 1);
    ck_assert_int_eq(qn(url,
                        "INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT 'j' || g, "
                        "'2026-01-01'::timestamptz + make_interval(secs => g), now() "
                        "FROM generate_series(2, %d) g",
                        n),
                     n - 1);
}

/* A batch of `skip` jobs' runs none of whose jobs has a run running: all
 * claimed, by claim_many's set-based statement (one claim time for all: the
 * per-key claim takes its own clock_timestamp() per run), each left as
 * wp_claim leaves a claimed run of an uncapped overlap job. */
START_TEST(test_claim_many_claims_skip_runs_of_idle_jobs_at_once)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_skip_jobs(url, 4);
    ck_assert_int_eq(qn(url, "UPDATE warren.runs SET tenant = 'acme' WHERE job = 'j3'"), 1);
    ck_assert_sqlf(
        url,
        "j1@2026-01-01T00:00:00Z:1,j2@2026-01-01T00:00:02Z:1,j3@2026-01-01T00:00:03Z:1,"
        "j4@2026-01-01T00:00:04Z:1",
        "SELECT string_agg(run_key || ':' || attempt, ',' ORDER BY run_key) FROM "
        "warren.claim_many(ARRAY['j4@2026-01-01T00:00:04Z', 'j2@2026-01-01T00:00:02Z', '" RK
        "', 'j3@2026-01-01T00:00:03Z'], 'w1')");
    ck_assert_sqlf(
        url, "4|1|4|0|,acme,,",
        "SELECT concat_ws('|', count(*) FILTER (WHERE state = 'running' AND lease_owner = 'w1' "
        "AND lease_until = started_at + interval '30 s'), count(DISTINCT started_at), "
        "count(*) FILTER (WHERE cap_group IS NULL AND cap_released_at IS NULL), "
        "(SELECT count(*) FROM warren.outbox), string_agg(cap_tenant, ',' ORDER BY run_key DESC)) "
        "FROM warren.runs");
    ck_assert_sqlf(
        url, "4",
        "SELECT count(*) FROM warren.attempts a JOIN warren.runs r USING (run_key, attempt) "
        "WHERE a.worker = 'w1' AND a.started_at = r.started_at AND a.outcome IS NULL");
    free(url);
}
END_TEST

/* One of the batch's skip jobs has a run running (j2, claimed before) and
 * another one whose lease ran out (j3): j2's new run gets wp_claim's skip
 * (state, note, event), j3's is claimed after the old run is reaped, and
 * the others are claimed. */
START_TEST(test_claim_many_skips_the_run_of_a_skip_job_with_a_run_running)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_skip_jobs(url, 4);
    ck_assert_int_eq(qn(url, "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES "
                             "('j2', '2026-01-01T00:01:02Z', now()), "
                             "('j3', '2026-01-01T00:01:03Z', now())"),
                     2);
    char *a = claim(url, "j2@2026-01-01T00:00:02Z", "w0");
    ck_assert_str_eq(a, "1");
    free(a);
    a = claim(url, "j3@2026-01-01T00:00:03Z", "w0");
    ck_assert_str_eq(a, "1");
    free(a);
    expire_lease(url, "j3@2026-01-01T00:00:03Z");
    ck_assert_sqlf(url,
                   "j1@2026-01-01T00:00:00Z:1,j3@2026-01-01T00:01:03Z:1,j4@2026-01-01T00:00:04Z:1",
                   "SELECT string_agg(run_key || ':' || attempt, ',' ORDER BY run_key) FROM "
                   "warren.claim_many(ARRAY['j4@2026-01-01T00:00:04Z', 'j2@2026-01-01T00:01:02Z', "
                   "'j3@2026-01-01T00:01:03Z', '" RK "'], 'w1')");
    ck_assert_sqlf(
        url, "skipped|t|t|0",
        "SELECT concat_ws('|', state, finished_at IS NOT NULL, note LIKE 'skipped by overlap "
        "policy skip at %%: j2@2026-01-01T00:00:02Z was still running', "
        "(SELECT count(*) FROM warren.attempts a WHERE a.run_key = r.run_key)) "
        "FROM warren.runs r WHERE run_key = 'j2@2026-01-01T00:01:02Z'");
    ck_assert_sqlf(
        url, "run.skipped.j2:j2@2026-01-01T00:01:02Z,run.lease_lost.j3:j3@2026-01-01T00:00:03Z",
        "SELECT string_agg(routing_key || ':' || (body->>'run_key'), ',' ORDER BY id) "
        "FROM warren.outbox");
    ck_assert_sqlf(
        url, "running|w0|retrying|lease_lost",
        "SELECT concat_ws('|', (SELECT state FROM warren.runs WHERE run_key = "
        "'j2@2026-01-01T00:00:02Z'), (SELECT lease_owner FROM warren.runs WHERE run_key = "
        "'j2@2026-01-01T00:00:02Z'), (SELECT state FROM warren.runs WHERE run_key = "
        "'j3@2026-01-01T00:00:03Z'), (SELECT outcome FROM warren.attempts WHERE run_key = "
        "'j3@2026-01-01T00:00:03Z'))");
    /* j1's and j4's runs: claimed together by the set-based statement */
    ck_assert_sqlf(url, "1",
                   "SELECT count(DISTINCT started_at) FROM warren.runs WHERE run_key IN ('" RK "', "
                   "'j4@2026-01-01T00:00:04Z')");
    free(url);
}
END_TEST

/* Two keys of one skip job in one batch, in either order: the smaller key is
 * claimed and the other skipped, as the per-key claims in key order do
 * (checked on a second database with warren.claim one key at a time). */
START_TEST(test_claim_many_claims_one_of_two_keys_of_a_skip_job_as_the_per_key_claims_do)
{
    const char *outcome =
        "SELECT string_agg(concat_ws(':', run_key, state, attempt, "
        "regexp_replace(coalesce(note, ''), ' at [-0-9T:.]+Z:', ' at T:')), ',' ORDER BY run_key) "
        "FROM warren.runs";
    const char *events = "SELECT string_agg(routing_key || ':' || (body->>'run_key'), ',' ORDER BY "
                         "id) FROM warren.outbox";
    char *per = setup("skip", 5, 1000, 60000, 30000);
    add_run2(per);
    add_skip_jobs(per, 2);
    free(claim(per, RK, "w1"));
    ck_assert_ptr_null(claim(per, RK2, "w1"));
    free(claim(per, "j2@2026-01-01T00:00:02Z", "w1"));
    char *want = testenv_sql1f(per, "%s", outcome);
    char *want_ev = testenv_sql1f(per, "%s", events);
    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(want_ev);
    ck_assert_str_eq(want, "j1@2026-01-01T00:00:00Z:running:1:,"
                           "j1@2026-01-01T00:01:00Z:skipped:0:skipped by overlap policy skip at "
                           "T: j1@2026-01-01T00:00:00Z was still running,"
                           "j2@2026-01-01T00:00:02Z:running:1:");
    for (int order = 0; order < 2; order++) {
        char *url = setup("skip", 5, 1000, 60000, 30000);
        add_run2(url);
        add_skip_jobs(url, 2);
        ck_assert_sqlf(url, "j1@2026-01-01T00:00:00Z:1,j2@2026-01-01T00:00:02Z:1",
                       "SELECT string_agg(run_key || ':' || attempt, ',' ORDER BY run_key) FROM "
                       "warren.claim_many(%s, 'w1')",
                       order == 0 ? "ARRAY['" RK "', '" RK2 "', 'j2@2026-01-01T00:00:02Z']"
                                  : "ARRAY['" RK2 "', 'j2@2026-01-01T00:00:02Z', '" RK "']");
        ck_assert_sqlf(url, want, "%s", outcome);
        ck_assert_sqlf(url, want_ev, "%s", events);
        free(url);
    }
    free(want);
    free(want_ev);
    free(per);
}
END_TEST

/* A batch that waits for a skip job's lock held by a single claim of the
 * job's other run: once that claim commits, the batch's set-based statement
 * sees the run running (its snapshot is taken after the lock), so its key
 * is skipped, not claimed beside it; the other job's run is claimed. */
START_TEST(test_claim_many_skips_behind_a_concurrent_claim_of_the_same_skip_job)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    add_run2(url);
    add_skip_jobs(url, 2);
    /* b blocks on j1's lock until a commits, then claims only j2's run */
    PGresult *r = claim_then_blocked(url, "SELECT string_agg(run_key, ',') FROM warren.claim_many("
                                          "ARRAY['j2@2026-01-01T00:00:02Z', '" RK2 "'], 'wb')");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "j2@2026-01-01T00:00:02Z");
    PQclear(r);
    ck_assert_sqlf(
        url, "running:wa,skipped:,running:wb",
        "SELECT string_agg(state || ':' || coalesce(lease_owner, ''), ',' ORDER BY run_key) "
        "FROM warren.runs");
    ck_assert_sqlf(url, "1",
                   "SELECT count(*) FROM warren.outbox WHERE routing_key = 'run.skipped.j1'");
    free(url);
}
END_TEST

/* Forks a session that holds the row lock_key of warren.claim_locks (a
 * claim lock: sql/functions/locks.sql) for hold_s seconds; returns once it
 * is held (the row made and committed first, so that "not lockable from
 * here" means held). */
static pid_t hold_claim_lock(const char *url, const char *lock_key, double hold_s)
{
    ck_assert_int_ge(
        qn(url, "INSERT INTO warren.claim_locks VALUES ('%s') ON CONFLICT DO NOTHING", lock_key),
        0);
    pid_t holder = fork();
    ck_assert_int_ge(holder, 0);
    if (holder == 0)
        _exit(qn(url,
                 "BEGIN; SELECT warren.wp_lock_row('%s', true, false); SELECT pg_sleep(%g); "
                 "COMMIT",
                 lock_key, hold_s) < 0);
    char *got = NULL;
    for (int i = 0; i < 100; i++) {
        free(got);
        got = testenv_sql1f(url,
                            "SELECT count(*) FROM (SELECT 1 FROM warren.claim_locks WHERE "
                            "lock_key = '%s' FOR UPDATE SKIP LOCKED) s",
                            lock_key);
        if (got != NULL && strcmp(got, "0") == 0)
            break;
        usleep(20000);
    }
    ck_assert_str_eq(got, "0");
    free(got);
    return holder;
}

/* claim_many's per-key path must not see the runs its fast path just
 * claimed: here the batch waits 1.5 s for j1's overlap lock, longer than
 * the 1 s lease of the fast path's j2 runs. Looked up by their old row
 * versions (004), those runs went through the per-key claim again after
 * it, found their own leases expired and were taken over by their own
 * batch (attempt 2, the first lease_lost). And RK, the skip job j1's run
 * its set-based statement claims (1 s lease too): with the lease timed from
 * before the lock wait, the per-key claim of RK2 found it expired, reaped
 * it and claimed RK2 instead. */
START_TEST(test_claim_many_does_not_claim_its_own_runs_twice)
{
    char *url = setup("skip", 5, 1000, 60000, 1000);
    ck_assert_int_eq(qn(url, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, "
                             "overlap, lease_ms) VALUES ('j2', 'every', '60s', 'q1', 'allow', "
                             "1000); INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT "
                             "'j2', '2026-01-01'::timestamptz + make_interval(secs => g), now() "
                             "FROM generate_series(1, 2) g"),
                     2);
    /* the holder has the lock before the batch needs it */
    pid_t holder = hold_claim_lock(url, "o|j1", 1.5);
    /* RK2 (a second key of the skip job j1) keeps the per-key path in the
     * batch: the fast path claims RK, j1's smallest key. */
    add_run2(url);
    ck_assert_sqlf(url,
                   "j1@2026-01-01T00:00:00Z:1,j2@2026-01-01T00:00:01Z:1,j2@2026-01-01T00:00:02Z:1",
                   "SELECT string_agg(run_key || ':' || attempt, ',' ORDER BY run_key) FROM "
                   "warren.claim_many(ARRAY['" RK "', 'j2@2026-01-01T00:00:01Z', "
                   "'j2@2026-01-01T00:00:02Z', '" RK2 "'], 'w1')");
    ck_assert_sqlf(url, "skipped", "SELECT state FROM warren.runs WHERE run_key = '" RK2 "'");
    int status = 0;
    ck_assert_int_eq(waitpid(holder, &status, 0), holder);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_sqlf(url, "0", "SELECT count(*) FROM warren.attempts WHERE outcome = 'lease_lost'");
    ck_assert_sqlf(url, "3", "SELECT count(*) FROM warren.attempts WHERE attempt = 1");
    free(url);
}
END_TEST

static void wait_holder(pid_t holder)
{
    int status = 0;
    ck_assert_int_eq(waitpid(holder, &status, 0), holder);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
}

/* claim_many and complete_many skip their cap/overlap lock pass when no key
 * needs it (a batch of uncapped `allow` runs makes and locks no claim lock), and
 * take it, waiting, before any row lock when one does: here an API job
 * whose cap is on its template (max_running = 2), not on its own row. A
 * batch that skipped the pass would only try the lock in its per-key
 * claim, find it taken by the holder, and give no row for that run; a
 * completion that skipped it would find the lock taken at its release and
 * leave the waiting run waiting. */
START_TEST(test_batch_calls_take_cap_locks_only_for_runs_that_need_them)
{
    char *url = setup("allow", 5, 1000, 60000, 30000);
    ck_assert_int_ge(
        qn(url, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, "
                "is_template, max_running, paused, next_fire_at) VALUES "
                "('tpl', 'none', '', 'q1', 'allow', true, 2, true, 'infinity');"
                "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, origin, "
                "template, next_fire_at) VALUES "
                "('tpl.a', 'every', '3600', 'q1', 'allow', 'api', 'tpl', 'infinity');"
                "INSERT INTO warren.runs (job, scheduled_at, due_at, origin) VALUES "
                "('tpl.a', '2026-01-01T00:00:01Z', now(), 'trigger'),"
                "('tpl.a', '2026-01-01T00:00:02Z', now(), 'trigger'),"
                "('tpl.a', '2026-01-01T00:00:03Z', now(), 'trigger')"),
        0);
    add_run2(url);
    /* Uncapped allow runs: claimed, no claim lock taken (none made: a
     * claim lock's row is made the first time it is taken). */
    ck_assert_sqlf(url, "1|0",
                   "BEGIN; CREATE TEMP TABLE got ON COMMIT DROP AS SELECT * FROM "
                   "warren.claim_many(ARRAY['" RK2
                   "'], 'w1'); SELECT (SELECT count(*) FROM got) || '|' || "
                   "(SELECT count(*) FROM warren.claim_locks WHERE lock_key NOT LIKE 'w|%%')");
    /* The template's lock held elsewhere: the batch waits for it, then claims both. */
    pid_t holder = hold_claim_lock(url, "c|tpl", 1.0);
    ck_assert_sqlf(url, "3",
                   "SELECT count(*) FROM warren.claim_many(ARRAY['" RK
                   "', 'tpl.a@2026-01-01T00:00:01Z', "
                   "'tpl.a@2026-01-01T00:00:02Z'], 'w1')");
    ck_assert_sqlf(
        url, "tpl:1,tpl:1,<none>:1",
        "SELECT string_agg(coalesce(cap_group, '<none>') || ':' || attempt, ',' ORDER BY run_key "
        "DESC) FROM warren.runs WHERE state = 'running'");
    wait_holder(holder);
    /* The third is over the cap and waits. */
    ck_assert_sqlf(url, "0",
                   "SELECT count(*) FROM warren.claim_many(ARRAY['tpl.a@2026-01-01T00:00:03Z'], "
                   "'w1')");
    ck_assert_sqlf(url, "waiting",
                   "SELECT state FROM warren.runs WHERE run_key = 'tpl.a@2026-01-01T00:00:03Z'");
    /* Completing a capped run and an uncapped one while the lock is held
     * elsewhere: both recorded after the wait, and the waiting run released. */
    holder = hold_claim_lock(url, "c|tpl", 1.0);
    ck_assert_sqlf(url, "2",
                   "SELECT count(*) FROM warren.complete_many(ARRAY['" RK "', "
                   "'tpl.a@2026-01-01T00:00:01Z'], ARRAY[1, 1]) WHERE recorded");
    wait_holder(holder);
    ck_assert_sqlf(url, "planned",
                   "SELECT state FROM warren.runs WHERE run_key = 'tpl.a@2026-01-01T00:00:03Z'");
    free(url);
}
END_TEST

/* A claim whose answer was lost: the same worker takes the run again with a
 * new attempt at once; the lost attempt is lease_lost (with its event) and is
 * not counted against max_attempts (here 1: the reaper would have made it
 * dead). Only a run this worker claimed within the window and nobody has
 * heartbeated since. */
/* Runs sql on c and returns its first value (new), failing the test on an error. */
static char *one(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK,
                  "%s: %s", sql, PQerrorMessage(c));
    char *v =
        strdup(PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : "<null>");
    PQclear(res);
    return v;
}

/* The SQLSTATE sql fails with on c ("" if it succeeded). */
static char *fails_with(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    char *v = strdup(st ? st : "");
    PQclear(res);
    return v;
}

#define J2(s) "'j2@2026-01-01T00:00:0" s "Z'"

/* warren.take_many locks, writing nothing, the runs claim_many's fast path
 * would claim (fresh, due, of an uncapped allow job) and leaves out the
 * rest: a queue job's, a capped job's, one not due, an unknown key, one
 * whose row another transaction holds (SKIP LOCKED: no wait). finish_many
 * in the same transaction writes each once, in its final state: attempt 1,
 * started at the take's time, one attempt row, its success event. A key not
 * taken fails the whole call (55000: the caller's pipelined COMMIT must not
 * commit that run's effect; a capped job's too), a row another transaction
 * holds fails at once (55P03, no wait), and so does a taken_at from before
 * the transaction (22023). */
START_TEST(test_take_many_locks_fast_path_runs_and_finish_many_records_them)
{
    char *url = setup("queue", 5, 1000, 60000, 30000); /* j1 (queue): RK due now */
    ck_assert_int_eq(qn(url, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, "
                             "overlap, max_running) VALUES ('j2', 'every', '60s', 'q1', 'allow', "
                             "NULL), ('j3', 'every', '60s', 'q1', 'allow', 5);"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at) SELECT 'j2', "
                             "'2026-01-01'::timestamptz + make_interval(secs => g), "
                             "CASE WHEN g = 4 THEN now() + interval '1 hour' ELSE now() END "
                             "FROM generate_series(1, 4) g UNION ALL SELECT 'j3', "
                             "'2026-01-01T00:00:01Z', now()"),
                     5);
    PGconn *a = PQconnectdb(url), *b = PQconnectdb(url);
    ck_assert_int_eq(PQstatus(a), CONNECTION_OK);
    ck_assert_int_eq(PQstatus(b), CONNECTION_OK);
    free(one(b, "BEGIN"));
    free(one(b, "SELECT 1 FROM warren.runs WHERE run_key = " J2("3") " FOR UPDATE"));
    free(one(a, "BEGIN"));
    char *got = one(a, "SELECT string_agg(run_key || ':' || attempt || ':' || payload::text, ',' "
                       "ORDER BY run_key) || '|' || min(taken_at) FROM warren.take_many(ARRAY['" RK
                       "', " J2("2") ", " J2("1") ", " J2("3") ", " J2(
                           "4") ", "
                                "'j3@2026-01-01T00:00:01Z', 'nosuch@2026-01-01T00:00:00Z'], 'w1')");
    char *bar = strchr(got, '|');
    ck_assert_ptr_nonnull(bar);
    *bar = '\0';
    ck_assert_str_eq(got, "j2@2026-01-01T00:00:01Z:1:{},j2@2026-01-01T00:00:02Z:1:{}");
    /* nothing written: the others see them as they were */
    ck_assert_sqlf(url, "planned|0",
                   "SELECT max(state) || '|' || (SELECT count(*) FROM warren.attempts) "
                   "FROM warren.runs WHERE job = 'j2'");
    free(one(a, "SAVEPOINT s"));
    char *sql = testenv_fmt(
        "SELECT warren.finish_many(ARRAY[" J2("1") ", " J2("4") "], 'w1', '%s')", bar + 1);
    char *st = fails_with(a, sql);
    ck_assert_str_eq(st, "55000");
    free(st);
    free(sql);
    free(one(a, "ROLLBACK TO SAVEPOINT s"));
    st = fails_with(a, "SELECT warren.finish_many(ARRAY[" J2("1") "], 'w1', now() - interval "
                                                                  "'1 second')");
    ck_assert_str_eq(st, "22023");
    free(st);
    free(one(a, "ROLLBACK TO SAVEPOINT s"));
    /* a key take_many would not take (a capped job's), one held elsewhere */
    sql = testenv_fmt("SELECT warren.finish_many(ARRAY['j3@2026-01-01T00:00:01Z'], 'w1', '%s')",
                      bar + 1);
    st = fails_with(a, sql);
    ck_assert_str_eq(st, "55000");
    free(st);
    free(sql);
    free(one(a, "ROLLBACK TO SAVEPOINT s"));
    sql = testenv_fmt("SELECT warren.finish_many(ARRAY[" J2("3") "], 'w1', '%s')", bar + 1);
    st = fails_with(a, sql);
    ck_assert_str_eq(st, "55P03");
    free(st);
    free(sql);
    free(one(a, "ROLLBACK TO SAVEPOINT s"));
    sql = testenv_fmt("SELECT warren.finish_many(ARRAY[" J2("1") ", " J2("2") "], 'w1', '%s')",
                      bar + 1);
    char *n = one(a, sql);
    ck_assert_str_eq(n, "2");
    free(n);
    free(sql);
    free(one(a, "COMMIT"));
    free(one(b, "ROLLBACK"));
    sql = testenv_fmt("SELECT string_agg(r.state || ':' || r.attempt || ':' || a.attempt || ':' "
                      "|| a.outcome || ':' || (r.started_at = '%s' AND a.started_at = "
                      "r.started_at AND a.finished_at = r.finished_at AND r.finished_at >= "
                      "r.started_at AND r.lease_until IS NULL AND r.lease_owner = 'w1' AND "
                      "a.worker = 'w1'), ',' ORDER BY r.run_key) FROM warren.runs r JOIN "
                      "warren.attempts a USING (run_key) WHERE r.job = 'j2'",
                      bar + 1);
    ck_assert_sqlf(url, "succeeded:1:1:succeeded:true,succeeded:1:1:succeeded:true", "%s", sql);
    free(sql);
    ck_assert_sqlf(url, "2",
                   "SELECT count(*) FROM warren.outbox WHERE routing_key = 'run.succeeded.j2' "
                   "AND body->>'worker' = 'w1' AND body->>'attempt' = '1'");
    ck_assert_sqlf(
        url, "planned,planned,planned,planned",
        "SELECT string_agg(state, ',' ORDER BY run_key) FROM warren.runs WHERE run_key IN ('" RK
        "', " J2("3") ", " J2("4") ", 'j3@2026-01-01T00:00:01Z')");
    free(got);
    PQfinish(a);
    PQfinish(b);
    free(url);
}
END_TEST

/* An uncapped skip job's run is taken under the job's overlap lock, held to
 * the commit: only a job's one fresh key in the batch (two of one job both go
 * to the claim, which claims the first and skips the second), only while
 * none of the job's runs is running, only when the lock is free (tried, never
 * waited for). A claim of the job's next run meanwhile waits for the lock,
 * then sees the taken run succeeded and claims its own: never two of the job
 * at once. finish_many checks the same (55000 for two keys of one skip job,
 * a lock held elsewhere, a run running). */
START_TEST(test_take_many_takes_a_skip_jobs_run_under_its_overlap_lock)
{
    char *url = setup("skip", 5, 1000, 60000, 30000); /* j1 (skip): RK due now */
    add_run2(url);                                    /* RK2: j1's next, due now */
    ck_assert_int_eq(
        qn(url, "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap) "
                "SELECT 'j' || g, 'every', '60s', 'q1', 'skip' FROM generate_series(4, 6) g;"
                "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES "
                "('j4', '2026-01-01T00:00:00Z', now()), ('j4', '2026-01-01T00:01:00Z', now()), "
                "('j5', '2026-01-01T00:00:00Z', now()), ('j5', '2026-01-01T00:01:00Z', now()), "
                "('j6', '2026-01-01T00:00:00Z', now())"),
        5);
    /* j5's first run is running (claimed and committed) */
    ck_assert_sqlf(
        url, "1", "SELECT count(*) FROM warren.claim_many(ARRAY['j5@2026-01-01T00:00:00Z'], 'w0')");
    PGconn *a = PQconnectdb(url), *b = PQconnectdb(url), *c = PQconnectdb(url);
    ck_assert_int_eq(PQstatus(a), CONNECTION_OK);
    ck_assert_int_eq(PQstatus(b), CONNECTION_OK);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    /* b holds j6's overlap lock (a claim of j6 under way) */
    free(one(b, "BEGIN"));
    free(one(b, "SELECT warren.wp_overlap_lock('j6', false)"));
    free(one(a, "BEGIN"));
    char *got = one(a, "SELECT string_agg(run_key, ',' ORDER BY run_key) || '|' || min(taken_at) "
                       "FROM warren.take_many(ARRAY['" RK "', 'j4@2026-01-01T00:00:00Z', "
                       "'j4@2026-01-01T00:01:00Z', 'j5@2026-01-01T00:01:00Z', "
                       "'j6@2026-01-01T00:00:00Z'], 'w1')");
    char *bar = strchr(got, '|');
    ck_assert_ptr_nonnull(bar);
    *bar = '\0';
    ck_assert_str_eq(got, RK);
    /* the job's next run: its claim waits for the take's lock */
    ck_assert_int_eq(PQsendQuery(c, "SELECT string_agg(run_key, ',') FROM "
                                    "warren.claim_many(ARRAY['" RK2 "'], 'w2')"),
                     1);
    usleep(300 * 1000);
    ck_assert_int_eq(PQconsumeInput(c), 1);
    ck_assert_int_eq(PQisBusy(c), 1);
    char *sql = testenv_fmt("SELECT warren.finish_many(ARRAY['" RK "'], 'w1', '%s')", bar + 1);
    char *n = one(a, sql);
    ck_assert_str_eq(n, "1");
    free(n);
    free(sql);
    free(one(a, "COMMIT"));
    PGresult *res = PQgetResult(c);
    ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), RK2);
    PQclear(res);
    while ((res = PQgetResult(c)) != NULL)
        PQclear(res);
    ck_assert_sqlf(
        url, "succeeded:1:1:succeeded|running",
        "SELECT r.state || ':' || r.attempt || ':' || a.attempt || ':' || a.outcome || '|' || "
        "(SELECT state FROM warren.runs WHERE run_key = '" RK2 "') FROM warren.runs r JOIN "
        "warren.attempts a USING (run_key) WHERE r.run_key = '" RK "'");
    /* finish_many alone refuses what take_many leaves out */
    free(one(a, "BEGIN"));
    free(one(a, "SAVEPOINT s"));
    PGresult *er = PQexec(a, "SELECT warren.finish_many(ARRAY['j4@2026-01-01T00:00:00Z', "
                             "'j4@2026-01-01T00:01:00Z'], 'w1', clock_timestamp())");
    ck_assert_str_eq(PQresultErrorField(er, PG_DIAG_SQLSTATE), "55000");
    ck_assert_ptr_nonnull(strstr(PQresultErrorMessage(er), "skip job j4"));
    PQclear(er);
    free(one(a, "ROLLBACK TO SAVEPOINT s"));
    char *st;
    st = fails_with(a, "SELECT warren.finish_many(ARRAY['j6@2026-01-01T00:00:00Z'], 'w1', "
                       "clock_timestamp())");
    ck_assert_str_eq(st, "55000");
    free(st);
    free(one(a, "ROLLBACK TO SAVEPOINT s"));
    st = fails_with(a, "SELECT warren.finish_many(ARRAY['j5@2026-01-01T00:01:00Z'], 'w1', "
                       "clock_timestamp())");
    ck_assert_str_eq(st, "55000");
    free(st);
    free(one(a, "ROLLBACK"));
    free(one(b, "ROLLBACK"));
    ck_assert_sqlf(url, "planned,planned,running,planned,planned",
                   "SELECT string_agg(state, ',' ORDER BY run_key) FROM warren.runs "
                   "WHERE job IN ('j4', 'j5', 'j6')");
    free(got);
    PQfinish(a);
    PQfinish(b);
    PQfinish(c);
    free(url);
}
END_TEST

START_TEST(test_reclaim_many_takes_back_a_claim_whose_answer_was_lost)
{
    char *url = setup("skip", 1, 1000, 60000, 30000);
    add_run2(url);
    /* w1 claimed RK; pretend the answer never arrived. */
    ck_assert_sqlf(url, "1", "SELECT count(*) FROM warren.claim_many(ARRAY['" RK "'], 'w1')");
    /* A plain claim cannot tell: the run is leased by a live worker. */
    ck_assert_sqlf(url, "0", "SELECT count(*) FROM warren.claim_many(ARRAY['" RK "'], 'w1')");
    /* Another worker, a run w1 does not hold, a claim older than the window:
     * no row. */
    ck_assert_sqlf(url, "0",
                   "SELECT count(*) FROM warren.reclaim_many(ARRAY['" RK "', '" RK2
                   "'], 'w2', 60000)");
    ck_assert_sqlf(url, "0", "SELECT count(*) FROM warren.reclaim_many(ARRAY['" RK "'], 'w1', 0)");
    ck_assert_sqlf(
        url, RK ":2:30:{\"k\": 7}",
        "SELECT string_agg(run_key || ':' || attempt || ':' || lease_seconds || ':' || payload, "
        "',') FROM warren.reclaim_many(ARRAY['" RK "', '" RK2 "', '" RK "'], 'w1', 60000)");
    ck_assert_sqlf(url, "planned", "SELECT state FROM warren.runs WHERE run_key = '" RK2 "'");
    ck_assert_sqlf(
        url, "1|lease_lost|true,2|<none>|false",
        "SELECT string_agg(attempt || '|' || coalesce(outcome, '<none>') || '|' || "
        "(error LIKE '%%did not reach worker w1%%' AND finished_at IS NOT NULL)::text, ',' "
        "ORDER BY attempt) FROM warren.attempts WHERE run_key = '" RK "'");
    ck_assert_sqlf(
        url, "1|1",
        "SELECT count(*) || '|' || max(body->>'attempt') FROM warren.outbox WHERE routing_key = "
        "'run.lease_lost.j1'");
    ck_assert_sqlf(
        url, "running|w1|true",
        "SELECT state || '|' || lease_owner || '|' || (lease_until > now() + interval '29 "
        "seconds')::text FROM warren.runs WHERE run_key = '" RK "'");
    /* The lost attempt is fenced off; the new one holds the run. */
    ck_assert_sqlf(url, "f", "SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "f", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(url, "t", "SELECT warren.heartbeat('" RK "', 2)");
    /* Heartbeated since: a run being worked on is never taken back. */
    ck_assert_sqlf(url, "0",
                   "SELECT count(*) FROM warren.reclaim_many(ARRAY['" RK "'], 'w1', 60000)");
    /* One attempt of the budget is left: a retryable failure now is final. */
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 2, 'retry', 'boom')");
    ck_assert_sqlf(url, "dead", "SELECT state FROM warren.runs WHERE run_key = '" RK "'");
    ck_assert_sqlf(url, "1",
                   "SELECT body->>'attempts' FROM warren.outbox WHERE exchange = 'warren.dead'");
    free(url);
}
END_TEST

/* ------------------------------------------------------------ role, migration */

START_TEST(test_worker_role_executes_the_protocol_but_cannot_touch_tables)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    ck_assert_sqlf(url, "1",
                   "SET ROLE warren_worker; SELECT attempt FROM warren.claim('" RK "', 'w1')");
    ck_assert_sqlf(url, "t", "SET ROLE warren_worker; SELECT warren.heartbeat('" RK "', 1)");
    ck_assert_sqlf(url, "t",
                   "SET ROLE warren_worker; SELECT warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_sqlf(url, "0",
                   "SET ROLE warren_worker; SELECT count(*) FROM warren.claim_many(ARRAY['" RK
                   "'], 'w2')");
    ck_assert_sqlf(url, "0",
                   "SET ROLE warren_worker; SELECT count(*) FROM warren.reclaim_many(ARRAY['" RK
                   "'], 'w2', "
                   "1000)");
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT * FROM warren.runs"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT * FROM warren.jobs"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT * FROM warren.outbox"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; UPDATE warren.runs SET state = 'planned'"),
                     -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; DELETE FROM warren.attempts"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT warren.reap_expired_leases(10)"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT warren.replay('" RK "')"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT warren.wp_claimable('running')"), -1);
    ck_assert_int_eq(
        qn(url, "SET ROLE warren_worker; SELECT * FROM warren.wp_claim('" RK "', 'w', true)"), -1);
    ck_assert_int_eq(qn(url, "SET ROLE warren_worker; SELECT warren.wp_wait_until(now())"), -1);
    ck_assert_sqlf(url, "succeeded", "SELECT state FROM warren.runs");
    ck_assert_sqlf(url, "f", "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'warren_worker'");
    free(url);
}
END_TEST

START_TEST(test_migration_records_itself_and_is_safe_to_rerun)
{
    char *url = setup("skip", 5, 1000, 60000, 30000);
    free(claim(url, RK, "w1"));
    ck_assert_sqlf(url, "002_worker_protocol",
                   "SELECT name FROM warren.schema_migrations WHERE version = 2");
    char *sql =
        testenv_read_file(WARREN_SOURCE_DIR "/sql/migrations/002_worker_protocol.sql", NULL);
    ck_assert_int_ge(testenv_psql(url, sql, NULL), 0);
    free(sql);
    ck_assert_sqlf(url, "1", "SELECT count(*) FROM warren.schema_migrations WHERE version = 2");
    ck_assert_sqlf(url, "running|1", "SELECT state || '|' || attempt FROM warren.runs");
    ck_assert_sqlf(url, "t", "SELECT warren.complete('" RK "', 1, 'succeeded')");
    free(url);
}
END_TEST

static Suite *protocol_suite(void)
{
    Suite *s = suite_create("protocol");
    TCase *tc = tcase_create("claim");
    tcase_add_test(tc, test_claim_returns_attempt_payload_and_lease);
    tcase_add_test(tc, test_claim_of_leased_run_returns_nothing);
    tcase_add_test(tc, test_claim_of_unknown_or_finished_run_returns_nothing);
    tcase_add_test(tc, test_claim_of_retrying_run_before_its_due_time_returns_nothing);
    tcase_add_test(tc, test_claim_waits_until_the_run_is_due_and_times_the_lease_from_then);
    tcase_add_test(tc, test_claim_many_waits_until_its_runs_are_due);
    suite_add_tcase(s, tc);

    tc = tcase_create("fencing");
    tcase_add_test(tc, test_heartbeat_extends_lease_only_for_the_holder);
    tcase_add_test(tc, test_heartbeat_extends_by_the_lease_the_attempt_was_claimed_with);
    tcase_add_test(tc, test_reclaim_many_takes_back_a_lost_claim_after_the_jobs_lease_changed);
    tcase_add_test(tc, test_complete_succeeded_writes_event_and_rejects_a_second_completion);
    tcase_add_test(tc, test_complete_rejects_unknown_outcome);
    tcase_add_test(tc, test_fencing_rejects_the_stale_attempt_after_takeover);
    tcase_add_test(tc, test_expired_lease_without_takeover_still_fences_by_attempt);
    tcase_add_test(tc, test_takeover_of_an_exhausted_run_makes_it_dead);
    suite_add_tcase(s, tc);

    tc = tcase_create("retry");
    tcase_add_test(tc, test_retry_schedules_full_jitter_backoff_within_bounds);
    tcase_add_test(tc, test_retry_until_dead_writes_dead_letter_with_attempts_and_error);
    tcase_add_test(tc, test_failed_outcome_is_dead_at_once);
    tcase_add_test(tc, test_replay_sends_a_dead_run_back_to_planned_keeping_history);
    tcase_add_test(tc, test_reaper_moves_expired_leases_to_retrying_or_dead);
    suite_add_tcase(s, tc);

    tc = tcase_create("overlap");
    tcase_add_test(tc, test_overlap_skip_skips_the_newer_run_with_a_note);
    tcase_add_test(tc, test_overlap_does_not_hold_back_enqueued_runs);
    tcase_add_test(tc, test_overlap_skip_reaps_a_run_whose_lease_expired);
    tcase_add_test(tc, test_overlap_allow_runs_both);
    tcase_add_test(tc, test_overlap_queue_holds_the_newer_run_until_the_older_finishes);
    tcase_add_test(tc, test_overlap_cancel_previous_revokes_the_older_lease);
    tcase_add_test(tc, test_overlap_skip_holds_under_concurrent_claims);
    suite_add_tcase(s, tc);

    tc = tcase_create("batch");
    tcase_add_test(tc, test_claim_many_claims_fresh_runs_and_applies_the_rules_to_the_rest);
    tcase_add_test(tc, test_reclaim_many_takes_back_a_claim_whose_answer_was_lost);
    tcase_add_test(tc, test_claim_many_does_not_claim_its_own_runs_twice);
    tcase_add_test(tc, test_claim_many_claims_skip_runs_of_idle_jobs_at_once);
    tcase_add_test(tc, test_claim_many_skips_the_run_of_a_skip_job_with_a_run_running);
    tcase_add_test(tc,
                   test_claim_many_claims_one_of_two_keys_of_a_skip_job_as_the_per_key_claims_do);
    tcase_add_test(tc, test_claim_many_skips_behind_a_concurrent_claim_of_the_same_skip_job);
    tcase_add_test(tc, test_batch_calls_take_cap_locks_only_for_runs_that_need_them);
    tcase_add_test(tc, test_take_many_locks_fast_path_runs_and_finish_many_records_them);
    tcase_add_test(tc, test_take_many_takes_a_skip_jobs_run_under_its_overlap_lock);
    suite_add_tcase(s, tc);

    tc = tcase_create("security");
    tcase_add_test(tc, test_worker_role_executes_the_protocol_but_cannot_touch_tables);
    tcase_add_test(tc, test_migration_records_itself_and_is_safe_to_rerun);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Fail, never skip, without servers (testenv exits 1 when unset). */
    testenv_pg_admin_url();
    SRunner *sr = srunner_create(protocol_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
