/* check_roles.c: who may execute what in schema warren after `warren migrate`
 * (sql/functions/grants.sql): every function of the schema, found in pg_proc,
 * against a table of the roles expected to hold EXECUTE; SECURITY DEFINER
 * functions pin search_path; a warren_worker login runs the protocol but can
 * neither read nor change a table; a warren_producer login runs the
 * application API (enqueue) and nothing else, and a worker cannot enqueue. */
#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <warren/store.h>

#include "store_work.h"

#include "testenv.h"

#define SQL_DIR WARREN_SOURCE_DIR "/sql"

/* Every function of schema warren and the roles other than its owner that
 * hold EXECUTE on it, by direct grant ("PUBLIC" for everyone), sorted and
 * comma-separated; "" = the owner only. A function missing here fails the
 * test: classify a new one before it ships. */
static const struct {
    const char *function, *grantees;
} expected[] = {
    /* The worker protocol (docs/worker-protocol.md). */
    {"warren.claim(text,text)", "warren_worker"},
    {"warren.claim_many(text[],text)", "warren_worker"},
    {"warren.complete(text,integer,text,text)", "warren_worker"},
    {"warren.complete_many(text[],integer[])", "warren_worker"},
    {"warren.finish_many(text[],text,timestamp with time zone)", "warren_worker"},
    {"warren.heartbeat(text,integer)", "warren_worker"},
    {"warren.reclaim_many(text[],text,integer)", "warren_worker"},
    {"warren.refuse(text,text,text)", "warren_worker"},
    {"warren.run_states(text[])", "warren_worker"},
    {"warren.take_many(text[],text)", "warren_worker"},
    /* The application API (README, "Jobs from application code"). */
    {"warren.enqueue(text,text,timestamp with time zone,jsonb,text)", "warren_producer"},
    {"warren.enqueue_many(jsonb)", "warren_producer"},
    /* API jobs (docs/api-jobs.md): the application's, through warren_producer. */
    {"warren.delete_job(text)", "warren_producer"},
    {"warren.pause_job(text)", "warren_producer"},
    {"warren.resume_job(text)", "warren_producer"},
    {"warren.upsert_job(text,text,jsonb)", "warren_producer"},
    {"warren.upsert_jobs(jsonb)", "warren_producer"},
    /* What an application can see (docs/api-jobs.md): producers only. */
    {"warren.job_status(text)", "warren_producer"},
    {"warren.job_statuses(text[])", "warren_producer"},
    {"warren.run_status(text,text)", "warren_producer"},
    {"warren.run_statuses(text[])", "warren_producer"},
    /* The planner's and the operator's: their own connection (the owner). */
    {"warren.jobs_mark_replan()", ""},
    {"warren.worker_grants_make_slots()", ""},
    {"warren.plan_note(text,text)", ""},
    {"warren.plan_utc(timestamp with time zone)", ""},
    {"warren.reap_expired_leases(integer)", ""},
    {"warren.replay(text,text)", ""},
    {"warren.grant_producer(text,text[],text[],text)", ""},
    {"warren.revoke_producer(text,text[],text[])", ""},
    {"warren.set_tenant_cap(text,integer)", ""},
    {"warren.wp_tenant_cap(integer,text)", ""},
    {"warren.run_key(text,timestamp with time zone)", ""},
    {"warren.runs_fill_key()", ""},
    /* Internal helpers of the SECURITY DEFINER functions. */
    {"warren.wp_after_failure(text,text,text,text,text)", ""},
    {"warren.wp_api_job(text,text,boolean)", ""},
    {"warren.wp_api_job_error(jsonb)", ""},
    {"warren.wp_api_job_ok(jsonb)", ""},
    {"warren.wp_at_error(text)", ""},
    {"warren.wp_cron_error(text)", ""},
    {"warren.wp_duration_ms(text)", ""},
    {"warren.wp_job_note(text,text)", ""},
    {"warren.wp_job_partition(text,integer)", ""},
    {"warren.wp_sched_text(text,text,text)", ""},
    {"warren.wp_upsert_jobs(jsonb,text,boolean)", ""},
    {"warren.wp_zone_known(text)", ""},
    {"warren.wp_zones_unknown(text[])", ""},
    {"warren.wp_api_job_max_len(text)", ""},
    {"warren.wp_api_job_refusal(text,text)", ""},
    {"warren.wp_echo(text)", ""},
    {"warren.wp_upsert_label(boolean,bigint,text)", ""},
    {"warren.wp_upsert_max_batch()", ""},
    {"warren.wp_enqueue_retry(text,text)", ""},
    {"warren.wp_enqueue_run_at_problem(text,timestamp with time zone)", ""},
    {"warren.wp_enqueue_show(text)", ""},
    {"warren.wp_job_state(warren.jobs)", ""},
    {"warren.wp_job_statuses(text,text,text[])", ""},
    {"warren.wp_run_statuses(text,text,text[])", ""},
    {"warren.wp_status_check(text,text,text[])", ""},
    {"warren.wp_backoff_ms(bigint,bigint,integer)", ""},
    {"warren.wp_cap_admit(warren.runs,text,text,integer,integer,integer)", ""},
    {"warren.wp_cap_label(text)", ""},
    {"warren.wp_cap_lock(text,text,integer,integer,boolean)", ""},
    {"warren.wp_capped(integer,integer)", ""},
    {"warren.wp_claim_locks(text,text,integer,integer,text,text,boolean)", ""},
    {"warren.wp_claimable(text)", ""},
    {"warren.wp_holds_slot(text,timestamp with time zone)", ""},
    {"warren.wp_lock_row(text,boolean,boolean)", ""},
    {"warren.wp_make_lock_row(text)", ""},
    {"warren.wp_overlap_lock(text,boolean)", ""},
    {"warren.wp_overlap_of(text,text)", ""},
    {"warren.wp_overlap_verdict(warren.runs,text,text,text,timestamp with time zone,text)", ""},
    {"warren.wp_policy(text,text,text,integer,integer,text,boolean)", ""},
    {"warren.wp_cap_release(text,text,boolean)", ""},
    {"warren.wp_cap_release_all(integer)", ""},
    {"warren.wp_check_batch(text,text[])", ""},
    {"warren.wp_check_worker(text,text)", ""},
    {"warren.wp_claim(text,text,boolean)", ""},
    {"warren.wp_dead_letter(warren.runs,warren.jobs,text)", ""},
    {"warren.wp_enqueue_at(timestamp with time zone,timestamp with time zone)", ""},
    {"warren.wp_enqueue_bad_run_at(jsonb)", ""},
    {"warren.wp_enqueue_fail(text,text)", ""},
    {"warren.wp_enqueue_job_problem(text,boolean,boolean)", ""},
    {"warren.wp_enqueue_key_problem(text,text)", ""},
    {"warren.wp_enqueue_max_batch()", ""},
    {"warren.wp_enqueue_payload_problem(jsonb)", ""},
    {"warren.wp_enqueue_payload_problem(jsonb,boolean)", ""},
    {"warren.wp_enqueue_tenant_problem(text)", ""},
    {"warren.wp_event(warren.runs,text,text,text)", ""},
    {"warren.wp_event_body(text,text,text,timestamp with time zone,timestamp with time zone,"
     "integer,text,text,text)",
     ""},
    {"warren.wp_event_headers(text,timestamp with time zone,integer,text,text)", ""},
    {"warren.wp_max_batch()", ""},
    {"warren.wp_max_wait()", ""},
    {"warren.wp_max_waiting()", ""},
    {"warren.wp_max_worker_name()", ""},
    {"warren.wp_privileged()", ""},
    {"warren.wp_payload_problem(jsonb)", ""},
    {"warren.wp_instant_problem(timestamp with time zone)", ""},
    {"warren.wp_producer_grant_key(text)", ""},
    {"warren.wp_producer_job_ok(warren.jobs)", ""},
    {"warren.wp_producer_refusal(text,text)", ""},
    {"warren.wp_producer_require(text)", ""},
    {"warren.wp_producer_template_ok(text)", ""},
    {"warren.wp_producer_tenant_ok(text)", ""},
    {"warren.wp_require_queue(text,text,text)", ""},
    {"warren.wp_ungranted(text,text[])", ""},
    {"warren.wp_utc_ms(timestamp with time zone)", ""},
    {"warren.wp_utc_run(timestamp with time zone)", ""},
    {"warren.wp_start_attempt(text,text,bigint,timestamp with time zone,text,text)", ""},
    {"warren.wp_wait_slot(text)", ""},
    {"warren.wp_wait_until(timestamp with time zone)", ""},
};
#define NEXPECTED (sizeof(expected) / sizeof(expected[0]))

static char *migrated_db(void)
{
    char *url = testenv_db();
    warren_store *st = NULL;
    warren_error err = {0};

    ck_assert_msg(warren_store_open(url, NULL, &st, &err) == 0, "%s", err.message);
    ck_assert_msg(warren_store_migrate(st, SQL_DIR, NULL, &err) == 0, "%s", err.message);
    warren_store_free(st);
    return url;
}

static PGresult *query(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    return res;
}

/* Every function and its grantees (as in expected[]); ORDER BY name. */
static const char FUNCTION_GRANTEES_SQL[] =
    "SELECT p.oid::regprocedure::text,"
    "  coalesce((SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'"
    "                                       ELSE pg_get_userbyid(a.grantee) END, ','"
    "                              ORDER BY CASE WHEN a.grantee = 0 THEN 'PUBLIC'"
    "                                       ELSE pg_get_userbyid(a.grantee) END)"
    "             FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
    "            WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '')"
    " FROM pg_proc p WHERE p.pronamespace = 'warren'::regnamespace ORDER BY 1";

START_TEST(test_roles_every_function_has_exactly_its_expected_grantees)
{
    char *url = migrated_db();
    PGconn *c = PQconnectdb(url);
    PGresult *res;
    int seen[NEXPECTED] = {0};
    char failures[8192] = "";

    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    res = query(c, FUNCTION_GRANTEES_SQL);
    ck_assert_int_ge(PQntuples(res), 1);
    for (int i = 0; i < PQntuples(res); i++) {
        const char *fn = PQgetvalue(res, i, 0), *got = PQgetvalue(res, i, 1);
        size_t k = 0;
        while (k < NEXPECTED && strcmp(expected[k].function, fn) != 0)
            k++;
        if (k == NEXPECTED) {
            snprintf(failures + strlen(failures), sizeof(failures) - strlen(failures),
                     "\n  %s (EXECUTE: \"%s\") is not in expected[]: classify it", fn, got);
            continue;
        }
        seen[k] = 1;
        if (strcmp(expected[k].grantees, got) != 0)
            snprintf(failures + strlen(failures), sizeof(failures) - strlen(failures),
                     "\n  %s: EXECUTE held by \"%s\", expected \"%s\"", fn, got,
                     expected[k].grantees);
    }
    for (size_t k = 0; k < NEXPECTED; k++)
        if (!seen[k])
            snprintf(failures + strlen(failures), sizeof(failures) - strlen(failures),
                     "\n  %s is in expected[] but not in schema warren", expected[k].function);
    ck_assert_msg(failures[0] == '\0', "grants differ:%s", failures);
    PQclear(res);
    PQfinish(c);
    free(url);
}
END_TEST

START_TEST(test_roles_public_and_warren_roles_execute_only_what_is_granted)
{
    /* Through has_function_privilege, which also counts PUBLIC and role
     * membership: PUBLIC executes nothing in schema warren, and every
     * warren_* role executes exactly what expected[] grants it. */
    char *url = migrated_db();
    PGconn *c = PQconnectdb(url);
    PGresult *roles, *res;

    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    res = query(c, "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'warren'::regnamespace"
                   " AND has_function_privilege('public', p.oid, 'EXECUTE')");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "0");
    PQclear(res);
    roles = query(c, "SELECT rolname FROM pg_roles WHERE rolname LIKE 'warren\\_%' AND NOT "
                     "rolcanlogin ORDER BY 1");
    ck_assert_int_ge(PQntuples(roles), 1);
    for (int r = 0; r < PQntuples(roles); r++) {
        const char *role = PQgetvalue(roles, r, 0);
        const char *params[1] = {role};
        res = PQexecParams(c,
                           "SELECT p.oid::regprocedure::text FROM pg_proc p"
                           " WHERE p.pronamespace = 'warren'::regnamespace"
                           "   AND has_function_privilege($1, p.oid, 'EXECUTE') ORDER BY 1",
                           1, NULL, params, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
        for (size_t k = 0; k < NEXPECTED; k++) {
            int want = strstr(expected[k].grantees, role) != NULL, got = 0;
            for (int i = 0; i < PQntuples(res); i++)
                got |= strcmp(PQgetvalue(res, i, 0), expected[k].function) == 0;
            ck_assert_msg(want == got, "%s %s EXECUTE %s", role, got ? "has" : "lacks",
                          expected[k].function);
        }
        PQclear(res);
    }
    PQclear(roles);
    /* The schema: USAGE for warren_worker, nothing for PUBLIC. */
    res = query(c, "SELECT has_schema_privilege('public', 'warren', 'USAGE'),"
                   " has_schema_privilege('warren_worker', 'warren', 'USAGE'),"
                   " has_schema_privilege('warren_worker', 'warren', 'CREATE')");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "f");
    ck_assert_str_eq(PQgetvalue(res, 0, 1), "t");
    ck_assert_str_eq(PQgetvalue(res, 0, 2), "f");
    PQclear(res);
    PQfinish(c);
    free(url);
}
END_TEST

START_TEST(test_roles_security_definer_functions_pin_search_path)
{
    char *url = migrated_db();
    PGconn *c = PQconnectdb(url);
    PGresult *res;
    int ndefiner = 0;

    ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
    res = query(c, "SELECT p.oid::regprocedure::text, p.prosecdef,"
                   " coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)"
                   " FROM pg_proc p WHERE p.pronamespace = 'warren'::regnamespace ORDER BY 1");
    for (int i = 0; i < PQntuples(res); i++) {
        if (strcmp(PQgetvalue(res, i, 1), "t") != 0)
            continue;
        ndefiner++;
        ck_assert_msg(strcmp(PQgetvalue(res, i, 2), "t") == 0,
                      "SECURITY DEFINER %s does not SET search_path = pg_catalog, pg_temp",
                      PQgetvalue(res, i, 0));
    }
    /* Every function granted to a role (the worker protocol, the
     * application API), and the owner's reap_expired_leases and replay. */
    {
        int want = 2;
        for (size_t k = 0; k < NEXPECTED; k++)
            want += expected[k].grantees[0] != '\0';
        ck_assert_int_eq(ndefiner, want);
    }
    PQclear(res);
    PQfinish(c);
    free(url);
}
END_TEST

/* Runs sql on c; returns the SQLSTATE of its failure, "" if it succeeded. */
static const char *try_sql(PGconn *c, const char *sql, char *state, size_t len)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(res);
    const char *e = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    snprintf(state, len, "%s", s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? "" : e ? e : "?");
    PQclear(res);
    return state;
}

#define RK "job1@2026-01-01T00:00:00Z"

/* Drops a login made by a test (its grants are rows, not dependencies). */
static void drop_login(PGconn *admin, const char *login)
{
    char state[8], *sql = testenv_fmt("DROP ROLE %s", login);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
}

START_TEST(test_roles_worker_login_runs_the_protocol_but_cannot_touch_tables)
{
    char *url = migrated_db();
    char *login = testenv_unique_name("warren_login");
    PGconn *admin = PQconnectdb(url), *w;
    PGresult *res;
    char state[8], *sql, *wurl;
    const char *at = strstr(url, "://"), *userend;

    ck_assert_int_eq(PQstatus(admin), CONNECTION_OK);
    sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_worker", login);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
    ck_assert_str_eq(try_sql(admin,
                             "INSERT INTO warren.jobs (name, schedule_kind, expression, queue)"
                             " VALUES ('job1', 'every', '1h', 'q');"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at, state)"
                             " VALUES ('job1', '2026-01-01T00:00:00Z', now(), 'published')",
                             state, sizeof(state)),
                     "");
    /* A login works on the queues granted to it (sql/functions/access.sql). */
    sql = testenv_fmt("INSERT INTO warren.worker_grants (login, queue) VALUES ('%s', 'q')", login);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
    /* The same URL with the login as its user. */
    ck_assert_ptr_nonnull(at);
    userend = strchr(at + 3, '@');
    ck_assert_ptr_nonnull(userend);
    wurl = testenv_fmt("%.*s%s%s", (int)(at + 3 - url), url, login, userend);
    w = PQconnectdb(wurl);
    ck_assert_msg(PQstatus(w) == CONNECTION_OK, "%s: %s", wurl, PQerrorMessage(w));

    /* The protocol works. */
    res = query(w, "SELECT attempt FROM warren.claim('" RK "', 'w1')");
    ck_assert_int_eq(PQntuples(res), 1);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "1");
    PQclear(res);
    res =
        query(w, "SELECT warren.heartbeat('" RK "', 1), warren.complete('" RK "', 1, 'succeeded')");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "t");
    ck_assert_str_eq(PQgetvalue(res, 0, 1), "t");
    PQclear(res);
    res = query(w, "SELECT (SELECT count(*) FROM warren.claim_many(ARRAY['" RK "'], 'w2')),"
                   " (SELECT count(*) FROM warren.reclaim_many(ARRAY['" RK "'], 'w2', 1000)),"
                   " (SELECT count(*) FROM warren.complete_many(ARRAY['" RK "'], ARRAY[1]))");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "0");
    ck_assert_str_eq(PQgetvalue(res, 0, 1), "0");
    ck_assert_str_eq(PQgetvalue(res, 0, 2), "1");
    PQclear(res);
    /* The take (an effect in the claim's transaction): a run of an allow job
     * of its queue is taken and finished; one of a queue not granted is not
     * taken (no row), and finishing it fails. */
    ck_assert_str_eq(try_sql(admin,
                             "INSERT INTO warren.jobs (name, schedule_kind, expression, queue,"
                             " overlap) VALUES ('job2', 'every', '1h', 'q', 'allow'),"
                             " ('job3', 'every', '1h', 'other', 'allow');"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at, state) VALUES"
                             " ('job2', '2026-01-01T00:00:00Z', now(), 'published'),"
                             " ('job3', '2026-01-01T00:00:00Z', now(), 'published')",
                             state, sizeof(state)),
                     "");
    ck_assert_str_eq(try_sql(w, "BEGIN", state, sizeof(state)), "");
    res = query(w, "SELECT string_agg(run_key, ','), min(taken_at)::text FROM warren.take_many("
                   "ARRAY['job2@2026-01-01T00:00:00Z', 'job3@2026-01-01T00:00:00Z'], 'w3')");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "job2@2026-01-01T00:00:00Z");
    sql = testenv_fmt("SELECT warren.finish_many(ARRAY['job2@2026-01-01T00:00:00Z'], 'w3', '%s')",
                      PQgetvalue(res, 0, 1));
    PQclear(res);
    res = query(w, sql);
    free(sql);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "1");
    PQclear(res);
    ck_assert_str_eq(try_sql(w, "COMMIT", state, sizeof(state)), "");
    ck_assert_str_eq(try_sql(w,
                             "SELECT warren.finish_many(ARRAY['job3@2026-01-01T00:00:00Z'], 'w3',"
                             " now())",
                             state, sizeof(state)),
                     "42501");
    res = query(admin, "SELECT string_agg(job || ':' || state || ':' || lease_login, ',' ORDER BY"
                       " job) FROM warren.runs WHERE job IN ('job2', 'job3')");
    sql = testenv_fmt("job2:succeeded:%s", login);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), sql); /* job3's lease_login is NULL: left out */
    free(sql);
    PQclear(res);

    /* Every table of the schema, walked: no SELECT, INSERT, UPDATE, DELETE. */
    res = query(admin, "SELECT c.oid::regclass::text, (SELECT a.attname FROM pg_attribute a"
                       "  WHERE a.attrelid = c.oid AND a.attnum = 1)"
                       " FROM pg_class c WHERE c.relnamespace = 'warren'::regnamespace"
                       "   AND c.relkind IN ('r', 'p') ORDER BY 1");
    ck_assert_int_ge(PQntuples(res), 7);
    for (int i = 0; i < PQntuples(res); i++) {
        const char *t = PQgetvalue(res, i, 0), *col = PQgetvalue(res, i, 1);
        char *stmts[4] = {
            testenv_fmt("SELECT * FROM %s", t), testenv_fmt("INSERT INTO %s DEFAULT VALUES", t),
            testenv_fmt("UPDATE %s SET %s = %s", t, col, col), testenv_fmt("DELETE FROM %s", t)};
        for (int s = 0; s < 4; s++) {
            ck_assert_msg(strcmp(try_sql(w, stmts[s], state, sizeof(state)), "42501") == 0,
                          "%s as a warren_worker login: SQLSTATE \"%s\", want 42501", stmts[s],
                          state);
            free(stmts[s]);
        }
    }
    PQclear(res);
    /* Nor the functions kept for the owner. */
    const char *denied[] = {
        "SELECT warren.reap_expired_leases(10)",
        "SELECT warren.replay('" RK "')",
        "SELECT warren.run_key('a', now())",
        "SELECT warren.plan_note('a', 'b')",
        "SELECT warren.plan_utc(now())",
        "SELECT warren.wp_claimable('planned')",
        "SELECT * FROM warren.wp_claim('" RK "', 'w', true)",
        "SELECT warren.wp_wait_until(now())",
        "SELECT warren.wp_privileged()",
        "SELECT warren.wp_require_queue('a', 'b', 'q')",
        "SELECT warren.wp_wait_slot('a')",
        "SELECT * FROM warren.enqueue('job1', 'k')",
    };
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
        ck_assert_msg(strcmp(try_sql(w, denied[i], state, sizeof(state)), "42501") == 0,
                      "%s as a warren_worker login: SQLSTATE \"%s\", want 42501", denied[i], state);
    PQfinish(w);
    res = query(admin, "SELECT state FROM warren.runs");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "succeeded");
    PQclear(res);
    drop_login(admin, login);
    PQfinish(admin);
    free(wurl);
    free(login);
    free(url);
}
END_TEST

/* Asserts that login holds EXECUTE (through its roles, PUBLIC included) on
 * exactly the functions whose expected grantees name role, walking every
 * function of the schema. */
static void assert_login_executes_exactly(PGconn *admin, const char *login, const char *role)
{
    const char *params[1] = {login};
    PGresult *res = PQexecParams(admin,
                                 "SELECT p.oid::regprocedure::text,"
                                 " has_function_privilege($1, p.oid, 'EXECUTE')"
                                 " FROM pg_proc p WHERE p.pronamespace = 'warren'::regnamespace"
                                 " ORDER BY 1",
                                 1, NULL, params, NULL, NULL, 0);
    ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
    ck_assert_int_ge(PQntuples(res), (int)NEXPECTED);
    for (int i = 0; i < PQntuples(res); i++) {
        const char *fn = PQgetvalue(res, i, 0);
        int got = strcmp(PQgetvalue(res, i, 1), "t") == 0, want = 0;
        for (size_t k = 0; k < NEXPECTED; k++)
            if (strcmp(expected[k].function, fn) == 0)
                want = strstr(expected[k].grantees, role) != NULL;
        ck_assert_msg(want == got, "login %s (%s) %s EXECUTE on %s", login, role,
                      got ? "has" : "lacks", fn);
    }
    PQclear(res);
}

/* A warren_producer login: the application API and nothing else (no worker
 * protocol, no table); a warren_worker login cannot enqueue. */
START_TEST(test_roles_producer_login_runs_the_application_api_only)
{
    char *url = migrated_db();
    char *plogin = testenv_unique_name("warren_prod");
    char *wlogin = testenv_unique_name("warren_work");
    PGconn *admin = PQconnectdb(url), *p, *w;
    PGresult *res;
    char state[8], *sql, *purl, *wurl;

    ck_assert_int_eq(PQstatus(admin), CONNECTION_OK);
    sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_producer;"
                      "CREATE ROLE %s LOGIN IN ROLE warren_worker;"
                      "INSERT INTO warren.worker_grants (login, queue) VALUES ('%s', 'q')",
                      plogin, wlogin, wlogin);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
    ck_assert_str_eq(try_sql(admin,
                             "INSERT INTO warren.jobs (name, schedule_kind, expression, queue)"
                             " VALUES ('job1', 'every', '1h', 'q');"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at, state)"
                             " VALUES ('job1', '2026-01-01T00:00:00Z', now(), 'published')",
                             state, sizeof(state)),
                     "");
    assert_login_executes_exactly(admin, plogin, "warren_producer");
    assert_login_executes_exactly(admin, wlogin, "warren_worker");

    purl = testenv_url_as(url, plogin);
    wurl = testenv_url_as(url, wlogin);
    p = PQconnectdb(purl);
    w = PQconnectdb(wurl);
    ck_assert_msg(PQstatus(p) == CONNECTION_OK, "%s: %s", purl, PQerrorMessage(p));
    ck_assert_msg(PQstatus(w) == CONNECTION_OK, "%s: %s", wurl, PQerrorMessage(w));

    /* Without producer grants in this database it can do nothing; granted
     * the config job (`warren grant-producer LOGIN --job job1`), it enqueues. */
    ck_assert_str_eq(try_sql(p, "SELECT * FROM warren.enqueue('job1', 'k0')", state, sizeof(state)),
                     "42501");
    sql = testenv_fmt("SELECT warren.grant_producer('%s', NULL, ARRAY['job1'], NULL)", plogin);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
    res = query(p, "SELECT run_key, created FROM warren.enqueue('job1', 'welcome:user-42')");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "job1@welcome:user-42");
    ck_assert_str_eq(PQgetvalue(res, 0, 1), "t");
    PQclear(res);
    res = query(p, "SELECT count(*) FROM warren.enqueue_many('[{\"job\": \"job1\", \"key\": "
                   "\"a\"}, {\"job\": \"job1\", \"key\": \"b\"}]') WHERE created");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "2");
    PQclear(res);
    /* It cannot claim, heartbeat, complete or settle runs, nor call helpers. */
    const char *denied_p[] = {
        "SELECT * FROM warren.claim('" RK "', 'p1')",
        "SELECT * FROM warren.claim_many(ARRAY['" RK "'], 'p1')",
        "SELECT * FROM warren.reclaim_many(ARRAY['" RK "'], 'p1', 1000)",
        "SELECT warren.heartbeat('" RK "', 1)",
        "SELECT warren.complete('" RK "', 1, 'succeeded')",
        "SELECT * FROM warren.complete_many(ARRAY['" RK "'], ARRAY[1])",
        "SELECT * FROM warren.take_many(ARRAY['" RK "'], 'p1')",
        "SELECT warren.finish_many(ARRAY['" RK "'], 'p1', now())",
        "SELECT * FROM warren.run_states(ARRAY['" RK "'])",
        "SELECT warren.refuse('" RK "', 'p1', 'no')",
        "SELECT warren.replay('" RK "')",
        "SELECT warren.reap_expired_leases(10)",
        "SELECT warren.wp_enqueue_fail('a', 'b')",
        "SELECT warren.wp_enqueue_key_problem('a', 'b')",
        "SELECT warren.grant_producer(current_user, ARRAY['t'], NULL, NULL)",
        "SELECT warren.revoke_producer(current_user, NULL, NULL)",
        "SELECT warren.wp_producer_require('x')",
    };
    for (size_t i = 0; i < sizeof(denied_p) / sizeof(denied_p[0]); i++)
        ck_assert_msg(strcmp(try_sql(p, denied_p[i], state, sizeof(state)), "42501") == 0,
                      "%s as a warren_producer login: SQLSTATE \"%s\", want 42501", denied_p[i],
                      state);
    /* Nor read or change a table. */
    res = query(admin, "SELECT c.oid::regclass::text, (SELECT a.attname FROM pg_attribute a"
                       "  WHERE a.attrelid = c.oid AND a.attnum = 1)"
                       " FROM pg_class c WHERE c.relnamespace = 'warren'::regnamespace"
                       "   AND c.relkind IN ('r', 'p') ORDER BY 1");
    for (int i = 0; i < PQntuples(res); i++) {
        const char *t = PQgetvalue(res, i, 0), *col = PQgetvalue(res, i, 1);
        char *stmts[4] = {
            testenv_fmt("SELECT * FROM %s", t), testenv_fmt("INSERT INTO %s DEFAULT VALUES", t),
            testenv_fmt("UPDATE %s SET %s = %s", t, col, col), testenv_fmt("DELETE FROM %s", t)};
        for (int k = 0; k < 4; k++) {
            ck_assert_msg(strcmp(try_sql(p, stmts[k], state, sizeof(state)), "42501") == 0,
                          "%s as a warren_producer login: SQLSTATE \"%s\", want 42501", stmts[k],
                          state);
            free(stmts[k]);
        }
    }
    PQclear(res);
    /* A worker cannot enqueue. */
    const char *denied_w[] = {
        "SELECT * FROM warren.enqueue('job1', 'k')",
        "SELECT * FROM warren.enqueue_many('[{\"job\": \"job1\", \"key\": \"k\"}]')",
    };
    for (size_t i = 0; i < sizeof(denied_w) / sizeof(denied_w[0]); i++)
        ck_assert_msg(strcmp(try_sql(w, denied_w[i], state, sizeof(state)), "42501") == 0,
                      "%s as a warren_worker login: SQLSTATE \"%s\", want 42501", denied_w[i],
                      state);
    PQfinish(p);
    PQfinish(w);
    /* What the producer did, and nothing else: three runs; the worker's run untouched. */
    res = query(admin, "SELECT string_agg(run_key || '=' || state, ',' ORDER BY run_key) FROM "
                       "warren.runs");
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "job1@2026-01-01T00:00:00Z=published,job1@a=planned,"
                                            "job1@b=planned,job1@welcome:user-42=planned");
    PQclear(res);
    sql =
        testenv_fmt("DELETE FROM warren.worker_grants; DROP ROLE %s; DROP ROLE %s", plogin, wlogin);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
    PQfinish(admin);
    free(purl);
    free(wurl);
    free(plogin);
    free(wlogin);
    free(url);
}
END_TEST

/* The worker's warm-up of a fresh connection (warren_store_warm_up, run on
 * every connection a worker opens ahead) works for a worker login, calls
 * each protocol function its runs need, and writes nothing: a due run of
 * a granted queue stays as it was. */
START_TEST(test_roles_worker_login_warms_a_connection_up_writing_nothing)
{
    char *url = migrated_db();
    char *login = testenv_unique_name("warren_login");
    PGconn *admin = PQconnectdb(url);
    PGresult *res;
    char state[8], *sql, *wurl;
    warren_store *st = NULL;
    warren_error err = {0};

    ck_assert_int_eq(PQstatus(admin), CONNECTION_OK);
    sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_worker;"
                      "INSERT INTO warren.worker_grants (login, queue) VALUES ('%s', 'q')",
                      login, login);
    ck_assert_str_eq(try_sql(admin, sql, state, sizeof(state)), "");
    free(sql);
    /* function statistics for the sessions opened from now on */
    ck_assert_str_eq(try_sql(admin,
                             "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions "
                             "= ''pl''', current_database()); END $$;"
                             "INSERT INTO warren.jobs (name, schedule_kind, expression, queue,"
                             " overlap) VALUES ('job1', 'every', '1h', 'q', 'allow');"
                             "INSERT INTO warren.runs (job, scheduled_at, due_at, state)"
                             " VALUES ('job1', '2026-01-01T00:00:00Z', now(), 'published')",
                             state, sizeof(state)),
                     "");
    wurl = testenv_url_as(url, login);
    ck_assert_msg(warren_store_open(wurl, NULL, &st, &err) == 0, "%s", err.message);
    ck_assert_msg(warren_store_warm_up(st, &err) == 0, "%s", err.message);
    /* nothing left open: the connection serves the next call */
    ck_assert_msg(warren_store_warm_up(st, &err) == 0, "%s", err.message);
    warren_store_free(st); /* the backend reports its statistics as it exits */

    res = query(admin, "SELECT state || ' ' || attempt || ' ' || coalesce(lease_owner, '-') "
                       "|| ' ' || (SELECT count(*) FROM warren.attempts) "
                       "|| ' ' || (SELECT count(*) FROM warren.outbox) FROM warren.runs");
    ck_assert_int_eq(PQntuples(res), 1);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "published 0 - 0 0");
    PQclear(res);
    /* each function its runs call was called (twice) in that backend; the
     * exited backend's statistics arrive a moment later (up to 10 s here) */
    const char *want = "claim_many=2 complete_many=2 finish_many=2 take_many=2";
    char *got = NULL;
    for (int i = 0; i < 200; i++) {
        free(got);
        got = testenv_sql1(url, "SELECT string_agg(funcname || '=' || calls, ' ' ORDER BY "
                                "funcname) FROM pg_stat_user_functions WHERE schemaname = "
                                "'warren' AND funcname IN ('claim_many', 'take_many', "
                                "'finish_many', 'complete_many')");
        if (got != NULL && strcmp(got, want) == 0)
            break;
        usleep(50 * 1000);
    }
    ck_assert_msg(got != NULL && strcmp(got, want) == 0, "function calls: \"%s\", want \"%s\"",
                  got ? got : "(null)", want);
    free(got);
    drop_login(admin, login);
    PQfinish(admin);
    free(wurl);
    free(login);
    free(url);
}
END_TEST

static Suite *roles_suite(void)
{
    Suite *s = suite_create("roles");
    TCase *tc = tcase_create("grants");
    tcase_add_test(tc, test_roles_every_function_has_exactly_its_expected_grantees);
    tcase_add_test(tc, test_roles_public_and_warren_roles_execute_only_what_is_granted);
    tcase_add_test(tc, test_roles_security_definer_functions_pin_search_path);
    suite_add_tcase(s, tc);
    tc = tcase_create("login");
    tcase_add_test(tc, test_roles_worker_login_runs_the_protocol_but_cannot_touch_tables);
    tcase_add_test(tc, test_roles_producer_login_runs_the_application_api_only);
    tcase_add_test(tc, test_roles_worker_login_warms_a_connection_up_writing_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    /* Fail, never skip, without servers (testenv exits 1 when unset). */
    testenv_pg_admin_url();
    sr = srunner_create(roles_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
