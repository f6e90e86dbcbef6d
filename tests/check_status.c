/* check_status: what an application can see (sql/functions/status.sql,
 * docs/api-jobs.md "What an application can see"), against the real
 * PostgreSQL (and RabbitMQ for the planner that marks a job broken):
 * warren.job_status(es) and warren.run_status(es). A schedule the planner
 * cannot compute shows broken with its reason; a job's next planned runs and
 * cursor, its last run and that run's outcome; a run by key in every state,
 * a skipped one with the note saying why; the bulk forms answer in the
 * order asked; a producer login sees its own jobs and runs and, for another
 * application's, exactly what it gets for a name that does not exist; the
 * arrays are bounded; and the bulk forms probe indexes, never read a whole
 * table. */
#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/config.h>
#include <warren/planner.h>

#include "planner_fixture.h"
#include "testenv.h"

/* ----------------------------------------------------------------- helpers */

/* Templates and a config job as `warren sync` writes them (schedule_kind
 * 'none' and an 'infinity' cursor for a template), and the partition count
 * a sync records (API jobs are placed by it). */
static const char SYNCED[] =
    "INSERT INTO warren.sync_state (partitions) VALUES (4);"
    "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, is_template, next_fire_at,"
    "                         partition)"
    " VALUES ('mail', 'none', '', 'q', true, 'infinity', 0),"
    "        ('report', 'none', '', 'q', true, 'infinity', 1);"
    "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, partition)"
    " VALUES ('nightly', 'cron', '0 2 * * *', 'q', 2)";

/* The error names the function and the thing, and is 22023. */
static void expect_22023(const char *url, const char *sql, const char *fn, const char *what)
{
    char *got = testenv_try_sql(url, sql);
    ck_assert_msg(strncmp(got, "22023: ", 7) == 0 && strstr(got, fn) != NULL &&
                      strstr(got, what) != NULL,
                  "%s\n  gave: %s\n  want: 22023 naming %s and %s", sql, got, fn, what);
    free(got);
}

static char *synced_db(void)
{
    char *url = testenv_db_migrated();
    ck_assert_sql_eq(url, SYNCED, "");
    return url;
}

/* ------------------------------------------------------------------- jobs */

/* Issue 33 item 16: `61 25 * * *` passes the call's shape check and is
 * marked broken by the planner; the application now reads that, with the
 * planner's reason. (fcce054: no such function, 42883, and a producer could
 * not read warren.jobs at all, 42501.) */
START_TEST(test_status_a_schedule_the_planner_cannot_compute_shows_broken_with_its_reason)
{
    env e = fixture_env_new();
    ck_assert_sql_eq(e.db, SYNCED, "");
    ck_assert_sql_eq(e.db,
                     "SELECT warren.upsert_job('rep.acme', 'report', "
                     "'{\"cron\": \"61 25 * * *\", \"tenant\": \"acme\"}')",
                     "created");
    /* Before the planner has looked at it: active, nothing planned yet. */
    ck_assert_sql_eq(
        e.db,
        "SELECT concat_ws('|', kind, template, tenant, state, schedule, next_runs::text,"
        " next_fire_at IS NULL, last_run_key IS NULL) FROM warren.job_status('rep.acme')",
        "api|report|acme|active|cron \"61 25 * * *\" (UTC)|{}|t|t");

    warren_config pc;
    memset(&pc, 0, sizeof(pc));
    pc.planner.horizon_ms = 10000;
    pc.planner.tick_ms = 200;
    pc.planner.misfire_threshold_ms = 60000;
    pc.planner.reconcile_grace_ms = 600000;
    pc.planner.partitions = 4;
    pc.planner.publish_batch = 500;
    pc.planner.delay_queue_expires_ms = 600000;
    warren_planner *p = planner_new(&e, &pc);
    tick(p);
    warren_planner_free(p);

    /* The reason is the planner's, word for word; since is when it broke. */
    ck_assert_sql_eq(
        e.db,
        "SELECT s.state = 'broken' AND s.reason = j.broken_reason AND s.reason <> ''"
        " AND s.since = j.broken_since AND s.next_fire_at IS NULL AND s.next_runs = '{}'"
        " FROM warren.job_status('rep.acme') s, warren.jobs j WHERE j.name = 'rep.acme'",
        "t");
    ck_assert_sql_eq(e.db, "SELECT reason ~ '61' FROM warren.job_status('rep.acme')", "t");
    /* Paused, it says paused, and that the schedule is broken too. */
    ck_assert_sql_eq(e.db, "SELECT warren.pause_job('rep.acme')::text", "true");
    ck_assert_sql_eq(
        e.db,
        "SELECT state || '|' || (reason LIKE 'paused since %warren.resume_job%; its schedule "
        "is also broken: %61%')::text FROM warren.job_status('rep.acme')",
        "paused|true");
    env_free(&e);
}
END_TEST

/* Next fire times: the unstarted runs the planner made from the schedule,
 * earliest first, at most 5, then the cursor; enqueued and finished runs
 * are not fires. Last run: the latest scheduled at or before now, with its
 * outcome. */
START_TEST(test_status_next_fire_times_last_run_and_its_outcome)
{
    char *url = synced_db();
    ck_assert_sql_eq(
        url,
        "UPDATE warren.jobs SET next_fire_at = '2099-01-09T02:00:00Z' WHERE name = 'nightly';"
        "INSERT INTO warren.runs (job, scheduled_at, due_at, state, origin, attempt,"
        "                         started_at, finished_at, last_error, note) VALUES"
        " ('nightly', '2020-01-01T02:00:00Z', '2020-01-01T02:00:00Z', 'succeeded', 'schedule',"
        "  1, '2020-01-01T02:00:01Z', '2020-01-01T02:00:05Z', NULL, NULL),"
        " ('nightly', '2020-01-02T02:00:00Z', '2020-01-02T02:00:00Z', 'dead', 'schedule',"
        "  5, '2020-01-02T02:09:00Z', '2020-01-02T02:09:30Z', 'exit status 3: disk full', NULL),"
        /* the future: planned, published, waiting (fires), cancelled (not) */
        " ('nightly', '2099-01-03T02:00:00Z', '2099-01-03T02:00:00Z', 'published', 'schedule',"
        "  0, NULL, NULL, NULL, NULL),"
        " ('nightly', '2099-01-04T02:00:00Z', '2099-01-04T02:00:00Z', 'cancelled', 'schedule',"
        "  0, NULL, '2020-01-03T00:00:00Z', NULL, 'cancelled by the operator'),"
        " ('nightly', '2099-01-05T02:00:00Z', '2099-01-05T02:00:00Z', 'waiting', 'schedule',"
        "  0, NULL, NULL, NULL, NULL),"
        " ('nightly', '2099-01-06T02:00:00Z', '2099-01-06T02:00:00Z', 'planned', 'misfire',"
        "  0, NULL, NULL, NULL, NULL),"
        " ('nightly', '2099-01-07T02:00:00Z', '2099-01-07T02:00:00Z', 'planned', 'schedule',"
        "  0, NULL, NULL, NULL, NULL),"
        " ('nightly', '2099-01-08T02:00:00Z', '2099-01-08T02:00:00Z', 'planned', 'schedule',"
        "  0, NULL, NULL, NULL, NULL);"
        /* an enqueued run, earlier than every fire: work, not a fire */
        "SELECT created FROM warren.enqueue('nightly', 'adhoc', '2099-01-01T00:00:00Z')",
        "t");
    ck_assert_sql_eq(
        url,
        "SET TIME ZONE 'UTC'; SELECT concat_ws('|', kind, state, schedule, next_runs::text,"
        " next_fire_at) FROM warren.job_status('nightly')",
        "config|active|cron \"0 2 * * *\" (UTC)|{\"2099-01-03 02:00:00+00\",\"2099-01-05 "
        "02:00:00+00\",\"2099-01-06 02:00:00+00\",\"2099-01-07 02:00:00+00\",\"2099-01-08 "
        "02:00:00+00\"}|2099-01-09 02:00:00+00");
    ck_assert_sql_eq(
        url,
        "SET TIME ZONE 'UTC'; SELECT concat_ws('|', last_run_key, last_run_state,"
        " last_run_scheduled_at, last_run_finished_at, last_error)"
        " FROM warren.job_status('nightly')",
        "nightly@2020-01-02T02:00:00Z|dead|2020-01-02 02:00:00+00|2020-01-02 02:09:30+00|exit "
        "status 3: disk full");
    /* A run due now counts as the last one as soon as its time has come. */
    ck_assert_sql_eq(url,
                     "INSERT INTO warren.runs (job, scheduled_at, due_at, state, origin)"
                     " VALUES ('nightly', date_trunc('second', now()) - interval '1 second', now(),"
                     "         'published', 'schedule');"
                     "SELECT last_run_state || '|' || (last_error IS NULL)::text"
                     " FROM warren.job_status('nightly')",
                     "published|true");
    /* Paused: no cursor (nothing fires there); the reason says so. */
    ck_assert_sql_eq(
        url,
        "UPDATE warren.jobs SET paused = true, paused_at = '2026-01-01T00:00:00Z'"
        " WHERE name = 'nightly';"
        "SELECT concat_ws('|', state, reason, since AT TIME ZONE 'UTC', next_fire_at IS NULL)"
        " FROM warren.job_status('nightly')",
        "paused|paused since 2026-01-01T00:00:00Z (the config or `warren pause`): the "
        "operator resumes it|2026-01-01 00:00:00|t");
    /* Removed from the config: deleted. A template: no schedule, no fires. */
    ck_assert_sql_eq(url,
                     "UPDATE warren.jobs SET removed = true WHERE name = 'nightly';"
                     "SELECT state || '|' || reason FROM warren.job_status('nightly')",
                     "deleted|removed from the config file (warren sync): it takes no new runs");
    ck_assert_sql_eq(url,
                     "SELECT concat_ws('|', kind, state, schedule IS NULL, next_runs::text,"
                     " next_fire_at IS NULL) FROM warren.job_status('mail')",
                     "template|active|t|{}|t");
    /* An API job deleted by its application; its note is the job's history. */
    ck_assert_sql_eq(url,
                     "SELECT warren.upsert_job('rep.t1', 'report', '{\"every\": \"1h\"}');"
                     "SELECT warren.delete_job('rep.t1')::text",
                     "true");
    ck_assert_sql_eq(
        url,
        "SELECT state || '|' || reason || '|' || (note LIKE '%deleted at % (warren.delete_job)%')"
        " FROM warren.job_status('rep.t1')",
        "deleted|deleted (warren.delete_job): it takes no new runs; warren.upsert_job makes it "
        "again|true");
    /* Unknown: one row, state unknown, nothing else. */
    ck_assert_sql_eq(url,
                     "SELECT concat_ws('|', name, state, kind, reason, next_runs, last_run_key)"
                     " FROM warren.job_status('no-such-job')",
                     "no-such-job|unknown");
    free(url);
}
END_TEST

/* ------------------------------------------------------------------- runs */

/* A run by the key given to enqueue, in every state; a scheduled run by its
 * time; a skip made by the claim's overlap rule shows why (issue 33 item
 * 18: a skipped run is visible to the application). */
START_TEST(test_status_a_run_by_key_in_each_state_with_why_it_was_skipped)
{
    char *url = synced_db();
    static const char *const states[] = {"planned", "published", "running", "retrying",
                                         "waiting", "succeeded", "dead",    "cancelled"};
    char *sql;

    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        sql = testenv_fmt("SELECT created FROM warren.enqueue('mail', 'k-%s', NULL, NULL, 'acme')",
                          states[i]);
        ck_assert_sql_eq(url, sql, "t");
        free(sql);
    }
    ck_assert_sql_eq(
        url,
        "UPDATE warren.runs SET state = 'published' WHERE run_key = 'mail@k-published';"
        "UPDATE warren.runs SET state = 'running', attempt = 1, started_at = now()"
        " WHERE run_key = 'mail@k-running';"
        "UPDATE warren.runs SET state = 'retrying', attempt = 2, started_at = now(),"
        "  last_error = 'timeout after 30s', due_at = now() + interval '20 s'"
        " WHERE run_key = 'mail@k-retrying';"
        "UPDATE warren.runs SET state = 'waiting' WHERE run_key = 'mail@k-waiting';"
        "UPDATE warren.runs SET state = 'succeeded', attempt = 1, started_at = now(),"
        "  finished_at = now() WHERE run_key = 'mail@k-succeeded';"
        "UPDATE warren.runs SET state = 'dead', attempt = 5, started_at = now(),"
        "  finished_at = now(), last_error = 'smtp 550: mailbox unavailable'"
        " WHERE run_key = 'mail@k-dead';"
        "UPDATE warren.runs SET state = 'cancelled', finished_at = now(),"
        "  note = 'cancelled by the operator (warren cancel)' WHERE run_key = 'mail@k-cancelled'",
        "");
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        sql = testenv_fmt("SELECT concat_ws('|', run_key, job, state) FROM "
                          "warren.run_status('mail', 'k-%s')",
                          states[i]);
        char *want = testenv_fmt("mail@k-%s|mail|%s", states[i], states[i]);
        ck_assert_sql_eq(url, sql, want);
        free(sql);
        free(want);
    }
    ck_assert_sql_eq(
        url,
        "SELECT concat_ws('|', attempts, last_error, started_at IS NOT NULL, finished_at IS NULL,"
        " due_at > scheduled_at) FROM warren.run_status('mail', 'k-retrying')",
        "2|timeout after 30s|t|t|t");
    ck_assert_sql_eq(url,
                     "SELECT concat_ws('|', attempts, last_error, finished_at IS NOT NULL)"
                     " FROM warren.run_status('mail', 'k-dead')",
                     "5|smtp 550: mailbox unavailable|t");
    ck_assert_sql_eq(url, "SELECT note FROM warren.run_status('mail', 'k-cancelled')",
                     "cancelled by the operator (warren cancel)");

    /* A real skip: two fires of an overlap = skip job, the second claimed
     * while the first runs. Asked for by its time (the documented rule). */
    ck_assert_sql_eq(url,
                     "INSERT INTO warren.runs (job, scheduled_at, due_at, state) VALUES"
                     " ('nightly', '2020-01-01T02:00:00Z', '2020-01-01T02:00:00Z', 'published'),"
                     " ('nightly', '2020-01-02T02:00:00Z', '2020-01-02T02:00:00Z', 'published');"
                     "SELECT count(*) FROM warren.claim('nightly@2020-01-01T02:00:00Z', 'w1')",
                     "1");
    ck_assert_sql_eq(url, "SELECT count(*) FROM warren.claim('nightly@2020-01-02T02:00:00Z', 'w1')",
                     "0");
    ck_assert_sql_eq(
        url,
        "SELECT concat_ws('|', run_key, state, attempts, finished_at IS NOT NULL,"
        " note LIKE 'skipped by overlap policy skip at %: nightly@2020-01-01T02:00:00Z was "
        "still running') FROM warren.run_status('nightly', '2020-01-02T02:00:00Z')",
        "nightly@2020-01-02T02:00:00Z|skipped|0|t|t");
    /* Its job's status shows it as the last run, with the note. */
    ck_assert_sql_eq(url,
                     "SELECT last_run_state || '|' || (last_note LIKE 'skipped by overlap policy%')"
                     " FROM warren.job_status('nightly')",
                     "skipped|true");
    /* Unknown: one row, state unknown, the key as asked, nothing else. */
    ck_assert_sql_eq(
        url,
        "SELECT concat_ws('|', run_key, state, job, attempts, last_error, scheduled_at, due_at,"
        " started_at, finished_at, note) FROM warren.run_status('mail', 'no-such-key')",
        "mail@no-such-key|unknown");
    free(url);
}
END_TEST

/* One row per element, in the order asked, duplicates and unknown ones
 * included, idx from 0. */
START_TEST(test_status_bulk_forms_answer_in_the_order_asked)
{
    char *url = synced_db();
    ck_assert_sql_eq(
        url,
        "SELECT count(*) FROM warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"a\"},"
        " {\"job\": \"mail\", \"key\": \"b\"}, {\"job\": \"nightly\", \"key\": \"c\"}]');"
        "UPDATE warren.runs SET state = 'succeeded', finished_at = now()"
        " WHERE run_key = 'mail@b'",
        "");
    ck_assert_sql_eq(
        url,
        "SELECT string_agg(concat_ws(':', idx, run_key, state), ',')"
        " FROM warren.run_statuses(ARRAY['nightly@c', 'x@y', 'mail@b', 'mail@a', 'mail@b'])",
        "0:nightly@c:planned,1:x@y:unknown,2:mail@b:succeeded,3:mail@a:planned,"
        "4:mail@b:succeeded");
    ck_assert_sql_eq(
        url,
        "SELECT string_agg(concat_ws(':', idx, name, kind, state), ',')"
        " FROM warren.job_statuses(ARRAY['nightly', 'zz', 'mail', 'nightly', 'report'])",
        "0:nightly:config:active,1:zz:unknown,2:mail:template:active,3:nightly:config:active,"
        "4:report:template:active");
    /* The order as the rows arrive (no ORDER BY in the query), over many
     * elements: the reverse of the keys' order. */
    ck_assert_sql_eq(url,
                     "INSERT INTO warren.runs (run_key, job, scheduled_at, due_at, origin)"
                     " SELECT 'mail@n' || i, 'mail', '2020-01-01T00:00:00Z', now(), 'enqueue'"
                     " FROM generate_series(1, 3000) i",
                     "");
    {
        PGconn *c = PQconnectdb(url);
        ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
        PGresult *res = PQexec(c, "SELECT idx, run_key, state FROM warren.run_statuses("
                                  "ARRAY(SELECT 'mail@n' || i FROM generate_series(3000, 1, -1) i"
                                  "      UNION ALL SELECT 'mail@gone'))");
        ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
        ck_assert_int_eq(PQntuples(res), 3001);
        for (int i = 0; i < 3000; i++) {
            char want[32];
            snprintf(want, sizeof(want), "mail@n%d", 3000 - i);
            ck_assert_int_eq(atoi(PQgetvalue(res, i, 0)), i);
            ck_assert_str_eq(PQgetvalue(res, i, 1), want);
            ck_assert_str_eq(PQgetvalue(res, i, 2), "planned");
        }
        ck_assert_str_eq(PQgetvalue(res, 3000, 2), "unknown");
        PQclear(res);
        PQfinish(c);
    }
    free(url);
}
END_TEST

/* ------------------------------------------------------------------ scope */

/* Two applications with different grants: each sees its own jobs and runs;
 * another application's answer exactly as a name or key that does not
 * exist (the state is never leaked, nor that it exists). A login without
 * producer grants is refused; a worker login cannot call them at all. */
START_TEST(test_status_a_producer_sees_its_own_and_nothing_of_another_application)
{
    char *url = synced_db();
    char *app1 = testenv_unique_name("st_app1"), *app2 = testenv_unique_name("st_app2");
    char *none = testenv_unique_name("st_none"), *wrk = testenv_unique_name("st_work");
    char *u1 = testenv_url_as(url, app1), *u2 = testenv_url_as(url, app2);
    char *un = testenv_url_as(url, none), *uw = testenv_url_as(url, wrk);
    char *sql;

    sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_producer;"
                      "CREATE ROLE %s LOGIN IN ROLE warren_producer;"
                      "CREATE ROLE %s LOGIN IN ROLE warren_producer;"
                      "CREATE ROLE %s LOGIN IN ROLE warren_worker;"
                      /* app1: template mail and the config job nightly, any
                       * tenant; app2: templates mail and report, tenants
                       * globex* only */
                      "SELECT warren.grant_producer('%s', ARRAY['mail'], ARRAY['nightly'], NULL);"
                      "SELECT warren.grant_producer('%s', ARRAY['mail', 'report'], NULL, 'globex')",
                      app1, app2, none, wrk, app1, app2);
    ck_assert_sql_eq(url, sql, "");
    free(sql);
    /* Each application's API job (made by it, as upsert_job records) and
     * runs; app2's runs carry its tenant. */
    sql = testenv_fmt(
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, origin, template,"
        "                         tenant, created_by, broken_reason, broken_since)"
        " VALUES ('a1.job', 'cron', '61 25 * * *', 'q', 'api', 'mail', NULL, '%s',"
        "         'minute 61 out of range', now()),"
        "        ('a2.job', 'cron', '0 9 * * *', 'q', 'api', 'mail', 'globex-1', '%s', NULL, NULL);"
        "INSERT INTO warren.runs (run_key, job, scheduled_at, due_at, origin, state, tenant,"
        "                         attempt, last_error)"
        " VALUES ('mail@k1', 'mail', '2020-01-01T00:00:00Z', now(), 'enqueue', 'dead', NULL, 5,"
        "         'app1 secret error'),"
        "        ('a1.job@k1', 'a1.job', '2020-01-01T00:00:00Z', now(), 'enqueue', 'planned',"
        "         NULL, 0, NULL),"
        "        ('nightly@k1', 'nightly', '2020-01-01T00:00:00Z', now(), 'enqueue', 'planned',"
        "         NULL, 0, NULL),"
        "        ('mail@k2', 'mail', '2020-01-01T00:00:00Z', now(), 'enqueue', 'succeeded',"
        "         'globex-1', 1, NULL),"
        "        ('a2.job@k2', 'a2.job', '2020-01-01T00:00:00Z', now(), 'enqueue', 'running',"
        "         'globex-1', 1, NULL),"
        "        ('report@k2', 'report', '2020-01-01T00:00:00Z', now(), 'enqueue', 'planned',"
        "         'globex-2', 0, NULL)",
        app1, app2);
    ck_assert_sql_eq(url, sql, "");
    free(sql);

    /* app1: its API job (broken, with the reason), its template, its
     * granted config job; not app2's job, not a template it lacks. */
    ck_assert_sql_eq(
        u1,
        "SELECT string_agg(concat_ws(':', name, state, reason), ',')"
        " FROM warren.job_statuses(ARRAY['a1.job', 'a2.job', 'mail', 'nightly', 'report'])",
        "a1.job:broken:minute 61 out of range,a2.job:unknown,mail:active,nightly:active,"
        "report:unknown");
    ck_assert_sql_eq(
        u1,
        "SELECT string_agg(concat_ws(':', run_key, state, attempts, last_error), ',')"
        " FROM warren.run_statuses(ARRAY['mail@k1', 'a1.job@k1', 'nightly@k1', 'a2.job@k2',"
        " 'report@k2'])",
        "mail@k1:dead:5:app1 secret error,a1.job@k1:planned:0,nightly@k1:planned:0,"
        "a2.job@k2:unknown,report@k2:unknown");
    /* app2: its own; nothing of app1 (not its job, not the config job, not
     * a run of the shared template outside its tenants). */
    ck_assert_sql_eq(
        u2,
        "SELECT string_agg(concat_ws(':', name, state), ',')"
        " FROM warren.job_statuses(ARRAY['a1.job', 'a2.job', 'mail', 'nightly', 'report'])",
        "a1.job:unknown,a2.job:active,mail:active,nightly:unknown,report:active");
    ck_assert_sql_eq(
        u2,
        "SELECT string_agg(concat_ws(':', run_key, state), ',')"
        " FROM warren.run_statuses(ARRAY['mail@k1', 'a1.job@k1', 'nightly@k1', 'mail@k2',"
        " 'a2.job@k2', 'report@k2'])",
        "mail@k1:unknown,a1.job@k1:unknown,nightly@k1:unknown,mail@k2:succeeded,"
        "a2.job@k2:running,report@k2:planned");
    /* A foreign name or key answers exactly as one that does not exist:
     * every column but the one echoing the question. */
    ck_assert_sql_eq(
        u2,
        "SELECT (SELECT row(kind, template, tenant, schedule, state, reason, since, note,"
        "  next_runs, next_fire_at, last_run_key, last_run_state, last_run_scheduled_at,"
        "  last_run_finished_at, last_error, last_note)::text FROM warren.job_status('a1.job'))"
        " IS NOT DISTINCT FROM (SELECT row(kind, template, tenant, schedule, state, reason,"
        "  since, note, next_runs, next_fire_at, last_run_key, last_run_state,"
        "  last_run_scheduled_at, last_run_finished_at, last_error, last_note)::text"
        "  FROM warren.job_status('no-such-job'))",
        "t");
    ck_assert_sql_eq(
        u2,
        "SELECT (SELECT row(job, state, attempts, last_error, scheduled_at, due_at,"
        "  started_at, finished_at, note)::text FROM warren.run_status('mail', 'k1'))"
        " IS NOT DISTINCT FROM (SELECT row(job, state, attempts, last_error, scheduled_at,"
        "  due_at, started_at, finished_at, note)::text FROM warren.run_status('mail', 'nope'))",
        "t");
    /* Without producer grants in this database: refused, with the fix. */
    sql = testenv_fmt("42501: warren.job_status: login \"%s\" has no producer grants", none);
    ck_assert_sql_prefix(un, "SELECT state FROM warren.job_status('mail')", sql);
    free(sql);
    sql = testenv_fmt("42501: warren.run_statuses: login \"%s\" has no producer grants", none);
    ck_assert_sql_prefix(un, "SELECT count(*) FROM warren.run_statuses(ARRAY['mail@k2'])", sql);
    free(sql);
    /* A worker login has no EXECUTE on them. */
    ck_assert_sql_prefix(uw, "SELECT state FROM warren.job_status('mail')", "42501: ");
    ck_assert_sql_prefix(uw, "SELECT state FROM warren.run_status('mail', 'k2')", "42501: ");

    sql = testenv_fmt("DROP ROLE %s; DROP ROLE %s; DROP ROLE %s; DROP ROLE %s", app1, app2, none,
                      wrk);
    ck_assert_sql_eq(url, sql, "");
    free(sql);
    free(u1);
    free(u2);
    free(un);
    free(uw);
    free(app1);
    free(app2);
    free(none);
    free(wrk);
    free(url);
}
END_TEST

/* ----------------------------------------------------------------- bounds */

START_TEST(test_status_bad_input_is_refused_naming_the_argument)
{
    char *url = synced_db();
    expect_22023(url,
                 "SELECT count(*) FROM warren.job_statuses(array_fill('x'::text, ARRAY[10001]))",
                 "warren.job_statuses", "names has 10001 elements; at most 10000");
    expect_22023(url,
                 "SELECT count(*) FROM warren.run_statuses(array_fill('x@y'::text, ARRAY[10001]))",
                 "warren.run_statuses", "run_keys has 10001 elements; at most 10000");
    ck_assert_sql_eq(
        url, "SELECT count(*) FROM warren.job_statuses(array_fill('x'::text, ARRAY[10000]))",
        "10000");
    ck_assert_sql_eq(
        url,
        "SELECT count(*) FROM warren.run_statuses(array_fill('x@y'::text, ARRAY[10000]))"
        " WHERE state = 'unknown'",
        "10000");
    ck_assert_sql_eq(url, "SELECT count(*) FROM warren.run_statuses('{}')", "0");
    expect_22023(url, "SELECT count(*) FROM warren.job_statuses(NULL)", "warren.job_statuses",
                 "names is NULL");
    expect_22023(url, "SELECT count(*) FROM warren.run_statuses(NULL)", "warren.run_statuses",
                 "run_keys is NULL");
    expect_22023(url, "SELECT count(*) FROM warren.job_statuses(ARRAY['mail', NULL])",
                 "warren.job_statuses", "names[1] is NULL");
    expect_22023(url, "SELECT count(*) FROM warren.run_statuses(ARRAY[NULL, 'mail@a'])",
                 "warren.run_statuses", "run_keys[0] is NULL");
    expect_22023(url, "SELECT count(*) FROM warren.run_statuses(ARRAY[['a@b'], ['c@d']])",
                 "warren.run_statuses", "2 dimensions");
    expect_22023(url, "SELECT state FROM warren.job_status(NULL)", "warren.job_status",
                 "name is NULL");
    expect_22023(url, "SELECT state FROM warren.run_status(NULL, 'k')", "warren.run_status",
                 "job is NULL");
    expect_22023(url, "SELECT state FROM warren.run_status('mail', NULL)", "warren.run_status",
                 "key is NULL");
    free(url);
}
END_TEST

/* --------------------------------------------------------------- indexes */

/* Collects the plans auto_explain sends as LOG messages. */
static void collect_notice(void *arg, const char *message)
{
    char **all = arg;
    char *next = testenv_fmt("%s%s", *all ? *all : "", message);
    free(*all);
    *all = next;
}

/* The bulk forms probe indexes for each element, never read a whole table,
 * even when the array is larger than the table (a hash join over all of
 * warren.runs was the planner's choice for a plain join: 10,000 keys
 * against 100,000 runs). */
START_TEST(test_status_bulk_forms_probe_indexes)
{
    char *url = synced_db();
    char *plans = NULL;
    PGconn *c;
    PGresult *res;

    ck_assert_sql_eq(
        url,
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue)"
        " SELECT 'job' || i, 'every', '1m', 'q' FROM generate_series(1, 2000) i;"
        "INSERT INTO warren.runs (job, scheduled_at, due_at, state, origin)"
        " SELECT 'job' || i, timestamptz '2020-01-01T00:00:00Z' + k * interval '1 minute', now(),"
        "        CASE WHEN k > 45 THEN 'planned' ELSE 'succeeded' END, 'schedule'"
        " FROM generate_series(1, 2000) i, generate_series(1, 50) k;"
        "ANALYZE warren.runs; ANALYZE warren.jobs",
        "");
    c = PQconnectdb(url);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    PQsetNoticeProcessor(c, collect_notice, &plans);
    res = PQexec(c, "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
                    "SET auto_explain.log_nested_statements = on; SET client_min_messages = log");
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(res);
    res = PQexec(c, "SELECT count(*) FROM warren.run_statuses(ARRAY(SELECT run_key FROM "
                    "warren.runs ORDER BY run_key DESC LIMIT 10000))");
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "10000");
    PQclear(res);
    res = PQexec(c, "SELECT count(*) FROM warren.job_statuses(ARRAY(SELECT 'job' || i FROM "
                    "generate_series(1, 10000) i))");
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "10000");
    PQclear(res);
    PQfinish(c);

    ck_assert_ptr_nonnull(plans);
    /* One probe per element (the element is the index condition); the next
     * and last runs through runs_history and runs_job; the only sequential
     * scan of runs is the test's own ORDER BY ... LIMIT, none of jobs. */
    static const char *const wanted[] = {
        "Index Cond: (run_key = n.rk)",
        "Index Cond: (name = n.nm)",
        "Index Scan Backward using runs_job on runs",
        "Index Scan Backward using runs_history on runs",
    };
    int seq_runs = 0, seq_jobs = 0;
    for (const char *p = plans; (p = strstr(p, "Seq Scan on runs")) != NULL; p++)
        seq_runs++;
    for (const char *p = plans; (p = strstr(p, "Seq Scan on jobs")) != NULL; p++)
        seq_jobs++;
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++)
        if (strstr(plans, wanted[i]) == NULL) {
            fprintf(stderr, "%s\n", plans); /* too long for a Check message */
            ck_abort_msg("no \"%s\" in the plans (printed on stderr)", wanted[i]);
        }
    if (seq_runs > 1 || seq_jobs > 0) {
        fprintf(stderr, "%s\n", plans);
        ck_abort_msg("%d sequential scans of runs (1 is the test's), %d of jobs (plans on stderr)",
                     seq_runs, seq_jobs);
    }
    free(plans);
    free(url);
}
END_TEST

static Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("status");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_status_a_schedule_the_planner_cannot_compute_shows_broken_with_its_reason);
    tcase_add_test(tc, test_status_next_fire_times_last_run_and_its_outcome);
    tcase_add_test(tc, test_status_a_run_by_key_in_each_state_with_why_it_was_skipped);
    tcase_add_test(tc, test_status_bulk_forms_answer_in_the_order_asked);
    tcase_add_test(tc, test_status_a_producer_sees_its_own_and_nothing_of_another_application);
    tcase_add_test(tc, test_status_bad_input_is_refused_naming_the_argument);
    tcase_add_test(tc, test_status_bulk_forms_probe_indexes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int failed;
    SRunner *sr = srunner_create(status_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
