/* ops.c: the operator's operations behind the admin commands: trigger, pause,
 * resume, backfill, replay, runs, show, jobs (contracts in include/warren/ops.h).
 * Its SQL is here as named constants; like the store_*.c files it reaches
 * libpq only through store_int.h's helpers, so libpq errors are still
 * translated in store.c alone. The planner's job read and run insert are
 * shared through store_plan.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/codec.h>
#include <warren/ops.h>
#include <warren/planner.h>
#include <warren/tz.h>

#include "store_int.h"
#include "store_plan.h"

/* Instants come back as integer microseconds (extract(epoch) is exact numeric). */
#define US(x) "(extract(epoch FROM " x ") * 1000000)::bigint"

/* The operator's per-tenant caps (migration 020, warren.set_tenant_cap). */
#define TENANT_CAPS_TABLE "warren.tenant_caps"

/* Runs one backfill writes per INSERT statement. */
#define BACKFILL_BATCH 5000

/* ------------------------------------------------------------------- SQL */

static const char SQL_NOTIFY[] = "SELECT pg_notify('" WARREN_NOTIFY_CHANNEL "', $1)";

static const char SQL_TRIGGER[] =
    "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload, note) "
    "VALUES ($1, $2::timestamptz, $2::timestamptz, 'trigger', $3::jsonb, "
    "format('triggered at %s', warren.plan_utc(now()))) "
    "ON CONFLICT DO NOTHING RETURNING run_key";

static const char SQL_RUN_STATE[] =
    "SELECT run_key, state FROM warren.runs WHERE run_key = warren.run_key($1, $2::timestamptz)";

/* An operator's pause or resume owns the job's state from then on: a
 * template coming back to the config no longer resumes it (paused_by_template,
 * docs/api-jobs.md). */
static const char SQL_PAUSE_JOB[] =
    "UPDATE warren.jobs SET paused = true, paused_at = now(), updated_at = now(), "
    "paused_by_template = false "
    "WHERE name = $1 RETURNING (SELECT paused FROM warren.jobs WHERE name = $1)";

/* Scheduled runs not yet due and not yet claimed: cancelled, so a published
 * message finds nothing to claim; resume deletes them and re-plans. */
static const char SQL_PAUSE_RUNS[] =
    "UPDATE warren.runs SET state = 'cancelled', finished_at = now(), "
    "note = warren.plan_note(note, format('cancelled: job paused at %s', warren.plan_utc(now()))) "
    "WHERE job = $1 AND origin IN ('schedule', 'misfire') AND state IN ('planned', 'published') "
    "AND due_at > now()";

static const char SQL_RESUME_JOB[] =
    "UPDATE warren.jobs SET paused = false, paused_at = NULL, updated_at = now(), "
    "paused_by_template = false "
    "WHERE name = $1 RETURNING (SELECT paused FROM warren.jobs WHERE name = $1)";

static const char SQL_RESUME_RUNS[] =
    "WITH c AS (DELETE FROM warren.runs WHERE job = $1 AND state = 'cancelled' "
    "           AND origin IN ('schedule', 'misfire') AND attempt = 0 "
    "           AND note LIKE '%cancelled: job paused at %' RETURNING scheduled_at) "
    "UPDATE warren.jobs SET next_fire_at = LEAST(next_fire_at, (SELECT min(scheduled_at) FROM c)) "
    "WHERE name = $1 RETURNING (SELECT count(*) FROM c)";

static const char SQL_RUNS_EXIST[] =
    "SELECT " US("scheduled_at") " FROM warren.runs WHERE job = $1 "
                                 "AND scheduled_at = ANY($2::timestamptz[]) "
                                 "AND origin <> 'enqueue' ORDER BY scheduled_at";

static const char SQL_REPLAY[] = "SELECT warren.replay($1::text, $2::text)";

static const char SQL_REPLAY_DEAD[] =
    "SELECT count(*) FILTER (WHERE warren.replay(run_key, $2::text)) FROM "
    "(SELECT run_key FROM warren.runs WHERE job = $1 AND state = 'dead' "
    "ORDER BY scheduled_at FOR UPDATE) d";

#define RUN_COLUMNS                                                                                \
    "run_key, job, state, origin, lease_owner, last_error, note, attempt, publish_count, "         \
    "scheduled_at, due_at, lease_until, published_at, started_at, finished_at, created_at"

static const char SQL_RUNS[] = "SELECT " RUN_COLUMNS " FROM warren.runs "
                               "WHERE ($1::text IS NULL OR job = $1) AND ($2::text IS NULL OR "
                               "state = $2) ORDER BY scheduled_at DESC, job LIMIT $3::int";

static const char SQL_SHOW[] = "SELECT " RUN_COLUMNS " FROM warren.runs WHERE run_key = $1";

static const char SQL_JOB_BROKEN[] =
    "SELECT broken_reason, " US("broken_since") " FROM warren.jobs WHERE name = $1 "
                                                "AND broken_reason IS NOT NULL";

static const char SQL_JOBS[] =
    "SELECT name, schedule_kind, expression, timezone, queue, misfire, "
    "CASE WHEN next_fire_at IS NULL OR NOT isfinite(next_fire_at) THEN NULL "
    "ELSE " US("next_fire_at") " END, next_fire_at = 'infinity', paused, removed, "
                               "broken_reason, " US("broken_since") ", " US(
                                   "broken_retry_at") ", "
                                                      "origin, template, tenant, note, "
                                                      "created_by, is_template, "
                                                      "paused_by_template, "
                                                      "coalesce(max_running, 0), "
                                                      "coalesce(max_running_per_tenant, "
                                                      "0), " US("created_at") ", " US(
                                                          "updated_at") " FROM warren.jobs "
                                                                        "WHERE (NOT "
                                                                        "$1::boolean OR "
                                                                        "broken_reason IS NOT "
                                                                        "NULL) "
                                                                        "AND ($3::text IS NULL "
                                                                        "OR template = $3) AND "
                                                                        "($4::text IS NULL OR "
                                                                        "tenant = $4) "
                                                                        "AND ($5::text IS NULL "
                                                                        "OR origin = $5) AND "
                                                                        "($6::text IS NULL OR "
                                                                        "name = $6) "
                                                                        "ORDER BY name LIMIT "
                                                                        "CASE WHEN $2::int > 0 "
                                                                        "THEN $2::int END";

static const char SQL_ATTEMPTS[] =
    "SELECT attempt, worker, outcome, error, started_at, finished_at FROM warren.attempts "
    "WHERE run_key = $1 ORDER BY attempt";

/* --------------------------------------------------------------- helpers */

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static int oom(warren_error *err)
{
    return warren_error_set(err, WARREN_ENOMEM, "out of memory");
}

static int no_job(warren_error *err, const char *job)
{
    return warren_error_set(err, WARREN_ENOENT,
                            "job \"%s\" is not in the database (is it in the config? run "
                            "`warren sync`)",
                            job);
}

/* An instant column, 0 for SQL NULL. */
static warren_us get_us0(const PGresult *res, int row, int col)
{
    warren_us t = 0;
    if (!PQgetisnull(res, row, col))
        warren__store_get_us(res, row, col, &t);
    return t;
}

/* NOTIFY the planners (delivered at commit when inside a transaction) that
 * job changed: payload "job:NAME", which no job name can make one of the
 * relay-only payloads (WARREN_NOTIFY_RELAY in store.h). */
static int notify(warren_store *st, const char *job, warren_error *err)
{
    char payload[WARREN_JOB_NAME_MAX + 8];
    const char *p[] = {payload};
    snprintf(payload, sizeof(payload), "job:%s", job);
    return warren__store_exec_prepared(st, "ops_notify", SQL_NOTIFY, 1, p, NULL,
                                       "notifying planners", err);
}

/* A timestamptz[] literal of n instants: "{"t1","t2",...}" (new; NULL when
 * out of memory). */
static char *us_array(const warren_us *t, size_t n)
{
    size_t cap = 3 + n * (WARREN_TIME_BUF + 3), len = 0;
    char *p = malloc(cap);

    if (p == NULL)
        return NULL;
    p[len++] = '{';
    for (size_t i = 0; i < n; i++) {
        char tb[WARREN_TIME_BUF];
        len += (size_t)snprintf(p + len, cap - len, "%s\"%s\"", i ? "," : "",
                                warren__store_us_param(t[i], tb, sizeof(tb)));
    }
    p[len++] = '}';
    p[len] = '\0';
    return p;
}

/* ---------------------------------------------------------------- trigger */

int warren_ops_trigger(warren_store *st, const char *job, const warren_us *at, const char *payload,
                       warren_ops_trigger_result *out, warren_error *err)
{
    char tb[WARREN_TIME_BUF];
    const char *p[3];
    PGresult *res = NULL;
    warren_plan_job j;
    int rc;

    memset(out, 0, sizeof(*out));
    if (at != NULL) {
        if (*at % WARREN_US_PER_S != 0)
            return warren_error_set(err, WARREN_EINVAL,
                                    "a trigger time has whole seconds (run keys do)");
        out->at = *at;
    } else {
        if ((rc = warren_store_now(st, &out->at, err)) != 0)
            return rc;
        out->at = warren_us_to_s(out->at) * WARREN_US_PER_S;
    }
    if ((rc = warren_plan_job_get(st, job, &j, err)) != 0)
        return rc;
    warren_plan_job_clear(&j);
    p[0] = job;
    p[1] = warren__store_us_param(out->at, tb, sizeof(tb));
    p[2] = payload;
    if ((rc = warren__store_begin(st, err)) != 0)
        return rc;
    rc = warren__store_exec_prepared(st, "ops_trigger", SQL_TRIGGER, 3, p, &res,
                                     "inserting a triggered run", err);
    if (rc != 0)
        goto fail;
    if (PQntuples(res) == 1) {
        out->created = 1;
        snprintf(out->run_key, sizeof(out->run_key), "%s", warren__store_get_text(res, 0, 0));
    }
    PQclear(res);
    res = NULL;
    if (!out->created) {
        rc = warren__store_exec_prepared(st, "ops_run_state", SQL_RUN_STATE, 2, p, &res,
                                         "reading an existing run", err);
        if (rc != 0)
            goto fail;
        if (PQntuples(res) == 1) {
            const char *state = warren__store_get_text(res, 0, 1);
            snprintf(out->run_key, sizeof(out->run_key), "%s", warren__store_get_text(res, 0, 0));
            snprintf(out->state, sizeof(out->state), "%s", state ? state : "");
        }
        PQclear(res);
        res = NULL;
    } else if ((rc = notify(st, job, err)) != 0) {
        goto fail;
    }
    return warren__store_commit(st, err);
fail:
    warren__store_rollback(st);
    return rc;
}

/* ---------------------------------------------------------- pause, resume */

/* UPDATE ... RETURNING the old paused flag: the subquery sees the snapshot
 * before the update. */
static int set_paused(warren_store *st, const char *name, const char *sql, const char *job,
                      int *was_paused, const char *what, warren_error *err)
{
    const char *p[] = {job};
    PGresult *res = NULL;
    int rc = warren__store_exec_prepared(st, name, sql, 1, p, &res, what, err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return no_job(err, job);
    }
    if (warren__store_get_bool(res, 0, 0, was_paused) != 0)
        *was_paused = 0;
    PQclear(res);
    return 0;
}

int warren_ops_pause(warren_store *st, const char *job, warren_ops_pause_result *out,
                     warren_error *err)
{
    const char *p[] = {job};
    PGresult *res = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    if ((rc = warren__store_begin(st, err)) != 0)
        return rc;
    if ((rc = set_paused(st, "ops_pause_job", SQL_PAUSE_JOB, job, &out->was_paused, "pausing a job",
                         err)) != 0)
        goto fail;
    if ((rc = warren__store_exec_prepared(st, "ops_pause_runs", SQL_PAUSE_RUNS, 1, p, &res,
                                          "cancelling planned runs of a paused job", err)) != 0)
        goto fail;
    out->cancelled = warren__store_cmd_tuples(res);
    PQclear(res);
    if ((rc = notify(st, job, err)) != 0)
        goto fail;
    return warren__store_commit(st, err);
fail:
    warren__store_rollback(st);
    return rc;
}

int warren_ops_resume(warren_store *st, const char *job, warren_ops_resume_result *out,
                      warren_error *err)
{
    const char *p[] = {job};
    PGresult *res = NULL;
    warren_plan_job j;
    int rc;

    memset(out, 0, sizeof(*out));
    if ((rc = warren__store_begin(st, err)) != 0)
        return rc;
    if ((rc = set_paused(st, "ops_resume_job", SQL_RESUME_JOB, job, &out->was_paused,
                         "resuming a job", err)) != 0)
        goto fail;
    if ((rc = warren__store_exec_prepared(st, "ops_resume_runs", SQL_RESUME_RUNS, 1, p, &res,
                                          "re-planning runs cancelled by the pause", err)) != 0)
        goto fail;
    if (PQntuples(res) == 1)
        (void)warren__store_get_int(res, 0, 0, &out->replanned);
    PQclear(res);
    /* What the caller tells the operator: the policy the missed fire times
     * meet, and whether sync will pause the job again. */
    if ((rc = warren_plan_job_get(st, job, &j, err)) != 0)
        goto fail;
    snprintf(out->misfire, sizeof(out->misfire), "%s", j.misfire);
    out->removed = j.removed;
    warren_plan_job_clear(&j);
    if ((rc = notify(st, job, err)) != 0)
        goto fail;
    return warren__store_commit(st, err);
fail:
    warren__store_rollback(st);
    return rc;
}

/* --------------------------------------------------------------- backfill */

void warren_ops_backfill_result_clear(warren_ops_backfill_result *r)
{
    if (r == NULL)
        return;
    free(r->times);
    free(r->exists);
    memset(r, 0, sizeof(*r));
}

/* The fire times of s in [from, to] into r->times / r->n. */
static int fire_times(const warren_schedule *s, warren_us from, warren_us to,
                      warren_ops_backfill_result *r, warren_error *err)
{
    size_t cap = 0;
    int64_t t;
    int rc = warren_schedule_next(s, from - 1, &t, NULL, err);

    while (rc == 0 && t * WARREN_US_PER_S <= to) {
        if (r->n == WARREN_OPS_BACKFILL_MAX)
            return warren_error_set(err, WARREN_ERANGE,
                                    "the range holds more than %d fire times; narrow it",
                                    WARREN_OPS_BACKFILL_MAX);
        if (r->n == cap) {
            cap = cap ? cap * 2 : 64;
            warren_us *nt = realloc(r->times, cap * sizeof(*nt));
            if (nt == NULL)
                return oom(err);
            r->times = nt;
        }
        r->times[r->n++] = t * WARREN_US_PER_S;
        rc = warren_schedule_next(s, t * WARREN_US_PER_S, &t, NULL, err);
    }
    if (rc == WARREN_ENEVER) {
        rc = 0;
        warren_error_clear(err);
    }
    return rc;
}

/* Which of the r->n sorted fire times already have a run: r->exists, r->existing. */
static int runs_exist(warren_store *st, warren_ops_backfill_result *r, warren_error *err)
{
    PGresult *res = NULL;
    char *arr;
    int rc;

    if (r->n == 0)
        return 0;
    if ((r->exists = calloc(r->n, sizeof(*r->exists))) == NULL)
        return oom(err);
    if ((arr = us_array(r->times, r->n)) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory building a planner query");
    {
        const char *p[] = {r->job, arr};
        rc = warren__store_exec_prepared(st, "ops_runs_exist", SQL_RUNS_EXIST, 2, p, &res,
                                         "looking up existing runs", err);
    }
    free(arr);
    if (rc != 0)
        return rc;
    for (int row = 0, i = 0; row < PQntuples(res); row++) {
        warren_us t;
        if (warren__store_get_us(res, row, 0, &t) != 0)
            continue;
        while ((size_t)i < r->n && r->times[i] < t)
            i++;
        if ((size_t)i < r->n && r->times[i] == t)
            r->exists[i] = 1;
    }
    PQclear(res);
    for (size_t i = 0; i < r->n; i++)
        r->existing += r->exists[i] != 0;
    return 0;
}

/* Inserts a planned run for each fire time (the existing ones are skipped by
 * ON CONFLICT DO NOTHING): r->inserted. */
static int write_runs(warren_store *st, const warren_plan_job *j, warren_ops_backfill_result *r,
                      warren_error *err)
{
    char note[96], nb[WARREN_TIME_BUF];
    warren_plan_run *runs;
    int64_t jit = warren_jitter_offset_s(j->name, j->jitter_ms);
    warren_us now = 0;
    int rc;

    if ((rc = warren_store_now(st, &now, err)) != 0)
        return rc;
    if (r->n == 0)
        return 0;
    if ((runs = calloc(r->n, sizeof(*runs))) == NULL)
        return oom(err);
    snprintf(note, sizeof(note), "backfill at %s", warren_time_format(now, nb, sizeof(nb)));
    for (size_t i = 0; i < r->n; i++) {
        runs[i].job = j->name;
        runs[i].scheduled_at = r->times[i];
        runs[i].due_at = r->times[i] + jit * WARREN_US_PER_S;
        runs[i].state = "planned";
        runs[i].origin = "backfill";
        runs[i].note = note;
    }
    for (size_t off = 0; off < r->n && rc == 0; off += BACKFILL_BATCH) {
        size_t len = r->n - off < BACKFILL_BATCH ? r->n - off : BACKFILL_BATCH;
        int k = 0;
        rc = warren_plan_insert_runs(st, runs + off, len, &k, err);
        r->inserted += k;
    }
    free(runs);
    if (rc == 0 && r->inserted > 0)
        rc = notify(st, j->name, err);
    return rc;
}

int warren_ops_backfill(warren_store *st, const char *job, warren_us from, warren_us to,
                        int dry_run, warren_ops_backfill_result *out, warren_error *err)
{
    warren_tzdb *tzdb = NULL;
    warren_schedule *s = NULL;
    warren_plan_job j = {0};
    int rc;

    memset(out, 0, sizeof(*out));
    if (to < from)
        return warren_error_set(err, WARREN_EINVAL, "the end of the range is before its start");
    if ((rc = warren_plan_job_get(st, job, &j, err)) != 0)
        goto out;
    snprintf(out->job, sizeof(out->job), "%s", j.name);
    if ((tzdb = warren_tzdb_new(NULL)) == NULL) {
        rc = oom(err);
        goto out;
    }
    if ((rc = warren_schedule_new(tzdb, j.name, j.kind, j.expression, j.timezone, &s, err)) != 0)
        goto out;
    if ((rc = fire_times(s, from, to, out, err)) != 0)
        goto out;
    if ((rc = runs_exist(st, out, err)) != 0)
        goto out;
    if (!dry_run)
        rc = write_runs(st, &j, out, err);
out:
    warren_schedule_free(s);
    warren_tzdb_free(tzdb);
    warren_plan_job_clear(&j);
    return rc;
}

/* ----------------------------------------------------------------- replay */

int warren_ops_replay(warren_store *st, const char *run_key, const char *who, int *replayed,
                      warren_error *err)
{
    PGresult *res = NULL;
    const char *params[2] = {run_key, who};
    int rc, b = 0;

    *replayed = 0;
    rc = warren__store_exec(st, SQL_REPLAY, 2, params, &res, "replay run", err);
    if (rc != 0)
        return rc;
    warren__store_get_bool(res, 0, 0, &b);
    PQclear(res);
    *replayed = b;
    return 0;
}

int warren_ops_replay_dead(warren_store *st, const char *job, const char *who, int64_t *count,
                           warren_error *err)
{
    PGresult *res = NULL;
    const char *params[2] = {job, who};
    int rc;

    *count = 0;
    rc = warren__store_exec(st, SQL_REPLAY_DEAD, 2, params, &res, "replay dead runs", err);
    if (rc != 0)
        return rc;
    warren__store_get_int64(res, 0, 0, count);
    PQclear(res);
    return 0;
}

/* -------------------------------------------------------------- runs, show */

void warren_ops_run_clear(warren_ops_run *r)
{
    if (r == NULL)
        return;
    free(r->run_key);
    free(r->job);
    free(r->state);
    free(r->origin);
    free(r->lease_owner);
    free(r->last_error);
    free(r->note);
    memset(r, 0, sizeof(*r));
}

void warren_ops_runs_free(warren_ops_run *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        warren_ops_run_clear(&rows[i]);
    free(rows);
}

int warren_ops_state_valid(const char *state)
{
    static const char *const states[] = {"planned",   "published", "running", "retrying", "waiting",
                                         "succeeded", "dead",      "skipped", "cancelled"};
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
        if (strcmp(state, states[i]) == 0)
            return 1;
    return 0;
}

/* Reads RUN_COLUMNS at row into r. */
static int read_run(const PGresult *res, int row, warren_ops_run *r, warren_error *err)
{
    memset(r, 0, sizeof(*r));
    r->run_key = dup_or_null(warren__store_get_text(res, row, 0));
    r->job = dup_or_null(warren__store_get_text(res, row, 1));
    r->state = dup_or_null(warren__store_get_text(res, row, 2));
    r->origin = dup_or_null(warren__store_get_text(res, row, 3));
    r->lease_owner = dup_or_null(warren__store_get_text(res, row, 4));
    r->last_error = dup_or_null(warren__store_get_text(res, row, 5));
    r->note = dup_or_null(warren__store_get_text(res, row, 6));
    warren__store_get_int(res, row, 7, &r->attempt);
    warren__store_get_int(res, row, 8, &r->publish_count);
    r->scheduled_at = get_us0(res, row, 9);
    r->due_at = get_us0(res, row, 10);
    r->lease_until = get_us0(res, row, 11);
    r->published_at = get_us0(res, row, 12);
    r->started_at = get_us0(res, row, 13);
    r->finished_at = get_us0(res, row, 14);
    r->created_at = get_us0(res, row, 15);
    if (r->run_key == NULL || r->job == NULL || r->state == NULL || r->origin == NULL) {
        warren_ops_run_clear(r);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory reading runs");
    }
    return 0;
}

int warren_ops_runs(warren_store *st, const char *job, const char *state, int limit,
                    warren_ops_run **rows, size_t *n, warren_error *err)
{
    PGresult *res = NULL;
    char lbuf[24];
    const char *params[3] = {job, state,
                             warren__store_int_param(limit > 0 ? limit : 50, lbuf, sizeof(lbuf))};
    int rc, nt;

    *rows = NULL;
    *n = 0;
    rc = warren__store_exec(st, SQL_RUNS, 3, params, &res, "list runs", err);
    if (rc != 0)
        return rc;
    nt = PQntuples(res);
    if (nt > 0 && (*rows = calloc((size_t)nt, sizeof(**rows))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    for (int i = 0; i < nt; i++) {
        if ((rc = read_run(res, i, &(*rows)[i], err)) != 0) {
            warren_ops_runs_free(*rows, *n);
            *rows = NULL;
            *n = 0;
            PQclear(res);
            return rc;
        }
        (*n)++;
    }
    PQclear(res);
    return 0;
}

void warren_ops_run_detail_clear(warren_ops_run_detail *d)
{
    if (d == NULL)
        return;
    warren_ops_run_clear(&d->run);
    free(d->job_broken_reason);
    for (size_t i = 0; i < d->nattempts; i++) {
        free(d->attempts[i].worker);
        free(d->attempts[i].outcome);
        free(d->attempts[i].error);
    }
    free(d->attempts);
    memset(d, 0, sizeof(*d));
}

int warren_ops_show(warren_store *st, const char *run_key, warren_ops_run_detail *out,
                    warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {run_key};
    int rc, nt;

    memset(out, 0, sizeof(*out));
    rc = warren__store_exec(st, SQL_SHOW, 1, params, &res, "show run", err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return warren_error_set(err, WARREN_ENOENT, "no run %s (run keys look like JOB@%s)",
                                run_key, "2026-11-30T14:00:00Z");
    }
    rc = read_run(res, 0, &out->run, err);
    PQclear(res);
    if (rc != 0)
        return rc;
    rc = warren__store_exec(st, SQL_ATTEMPTS, 1, params, &res, "read attempts", err);
    if (rc != 0) {
        warren_ops_run_detail_clear(out);
        return rc;
    }
    nt = PQntuples(res);
    if (nt > 0 && (out->attempts = calloc((size_t)nt, sizeof(*out->attempts))) == NULL) {
        PQclear(res);
        warren_ops_run_detail_clear(out);
        return oom(err);
    }
    for (int i = 0; i < nt; i++) {
        warren_ops_attempt *a = &out->attempts[i];
        warren__store_get_int(res, i, 0, &a->attempt);
        a->worker = dup_or_null(warren__store_get_text(res, i, 1));
        a->outcome = dup_or_null(warren__store_get_text(res, i, 2));
        a->error = dup_or_null(warren__store_get_text(res, i, 3));
        a->started_at = get_us0(res, i, 4);
        a->finished_at = get_us0(res, i, 5);
        out->nattempts++;
    }
    PQclear(res);
    {
        const char *jp[1] = {out->run.job};
        rc = warren__store_exec(st, SQL_JOB_BROKEN, 1, jp, &res, "read the run's job", err);
    }
    if (rc != 0) {
        warren_ops_run_detail_clear(out);
        return rc;
    }
    if (PQntuples(res) == 1) {
        out->job_broken_reason = dup_or_null(warren__store_get_text(res, 0, 0));
        out->job_broken_since = get_us0(res, 0, 1);
    }
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------------- jobs */

void warren_ops_job_clear(warren_ops_job *j)
{
    if (j == NULL)
        return;
    free(j->origin);
    free(j->template);
    free(j->tenant);
    free(j->note);
    free(j->created_by);
    free(j->name);
    free(j->kind);
    free(j->expression);
    free(j->timezone);
    free(j->queue);
    free(j->misfire);
    free(j->broken_reason);
    memset(j, 0, sizeof(*j));
}

void warren_ops_jobs_free(warren_ops_job *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        warren_ops_job_clear(&rows[i]);
    free(rows);
}

int warren_ops_jobs(warren_store *st, const warren_ops_jobs_query *q, warren_ops_job **rows,
                    size_t *n, warren_error *err)
{
    static const warren_ops_jobs_query all = {0};
    PGresult *res = NULL;
    char lbuf[24];
    const char *params[6];
    int rc, nt;

    *rows = NULL;
    *n = 0;
    if (q == NULL)
        q = &all;
    params[0] = q->broken_only ? "true" : "false";
    params[1] = warren__store_int_param(q->limit > 0 ? q->limit : 0, lbuf, sizeof(lbuf));
    params[2] = q->template;
    params[3] = q->tenant;
    params[4] = q->origin;
    params[5] = q->name;
    rc = warren__store_exec(st, SQL_JOBS, 6, params, &res, "list jobs", err);
    if (rc != 0)
        return rc;
    nt = PQntuples(res);
    if (nt > 0 && (*rows = calloc((size_t)nt, sizeof(**rows))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    for (int i = 0; i < nt; i++) {
        warren_ops_job *j = &(*rows)[i];
        j->name = dup_or_null(warren__store_get_text(res, i, 0));
        j->kind = dup_or_null(warren__store_get_text(res, i, 1));
        j->expression = dup_or_null(warren__store_get_text(res, i, 2));
        j->timezone = dup_or_null(warren__store_get_text(res, i, 3));
        j->queue = dup_or_null(warren__store_get_text(res, i, 4));
        j->misfire = dup_or_null(warren__store_get_text(res, i, 5));
        j->next_fire_at = get_us0(res, i, 6);
        warren__store_get_bool(res, i, 7, &j->exhausted);
        warren__store_get_bool(res, i, 8, &j->paused);
        warren__store_get_bool(res, i, 9, &j->removed);
        j->broken_reason = dup_or_null(warren__store_get_text(res, i, 10));
        j->broken_since = get_us0(res, i, 11);
        j->broken_retry_at = get_us0(res, i, 12);
        j->origin = dup_or_null(warren__store_get_text(res, i, 13));
        if (!PQgetisnull(res, i, 14))
            j->template = dup_or_null(warren__store_get_text(res, i, 14));
        if (!PQgetisnull(res, i, 15))
            j->tenant = dup_or_null(warren__store_get_text(res, i, 15));
        if (!PQgetisnull(res, i, 16))
            j->note = dup_or_null(warren__store_get_text(res, i, 16));
        if (!PQgetisnull(res, i, 17))
            j->created_by = dup_or_null(warren__store_get_text(res, i, 17));
        warren__store_get_bool(res, i, 18, &j->is_template);
        warren__store_get_bool(res, i, 19, &j->paused_by_template);
        warren__store_get_int(res, i, 20, &j->max_running);
        warren__store_get_int(res, i, 21, &j->max_running_per_tenant);
        j->created_at = get_us0(res, i, 22);
        j->updated_at = get_us0(res, i, 23);
        (*n)++;
        if (!j->name || !j->kind || !j->expression || !j->timezone || !j->queue || !j->misfire ||
            !j->origin || (!PQgetisnull(res, i, 10) && j->broken_reason == NULL) ||
            (!PQgetisnull(res, i, 14) && j->template == NULL) ||
            (!PQgetisnull(res, i, 15) && j->tenant == NULL) ||
            (!PQgetisnull(res, i, 16) && j->note == NULL) ||
            (!PQgetisnull(res, i, 17) && j->created_by == NULL)) {
            warren_ops_jobs_free(*rows, *n);
            *rows = NULL;
            *n = 0;
            PQclear(res);
            return oom(err);
        }
    }
    PQclear(res);
    return 0;
}

int warren_ops_job_get(warren_store *st, const char *name, warren_ops_job *out, warren_error *err)
{
    warren_ops_jobs_query q = {0};
    warren_ops_job *rows = NULL;
    size_t n = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    q.name = name;
    if ((rc = warren_ops_jobs(st, &q, &rows, &n, err)) != 0)
        return rc;
    if (n == 0)
        return warren_error_set(err, WARREN_ENOENT,
                                "no job \"%s\" in the database (config jobs come from `warren "
                                "sync`, API jobs from warren.upsert_job; run keys have an '@')",
                                name);
    *out = rows[0];
    free(rows);
    return 0;
}

/* ----------------------------------------------------------------- grants */

static const char SQL_GRANT_ROLE[] =
    "SELECT coalesce(pg_has_role(r.oid, (SELECT w.oid FROM pg_roles w"
    "                                     WHERE w.rolname = 'warren_worker'), 'MEMBER'), false),"
    "       r.rolsuper OR pg_has_role(r.oid, (SELECT n.nspowner FROM pg_namespace n"
    "                                         WHERE n.nspname = 'warren'), 'MEMBER')"
    "  FROM pg_roles r WHERE r.rolname = $1";

static const char SQL_GRANT[] = "INSERT INTO warren.worker_grants (login, queue) "
                                "SELECT $1, q FROM unnest($2::text[]) q "
                                "ON CONFLICT (login, queue) DO NOTHING";

static const char SQL_REVOKE[] =
    "DELETE FROM warren.worker_grants WHERE login = $1 AND queue = ANY ($2::text[])";

static const char SQL_GRANTS[] = "SELECT login, queue, granted_by, " US(
    "granted_at") " "
                  "FROM warren.worker_grants "
                  "WHERE $1::text IS NULL OR login = $1 ORDER BY login, queue";

/* The queues as a text[] literal into *out (new): valid names need no
 * quoting. WARREN_EINVAL for no queue or a bad name. */
static int queue_array(const char *const *queues, size_t n, char **out, warren_error *err)
{
    size_t cap = 3, len = 0;
    char *p;

    *out = NULL;
    if (n == 0)
        return warren_error_set(err, WARREN_EINVAL, "give at least one queue");
    for (size_t i = 0; i < n; i++) {
        if (queues[i] == NULL || !warren_name_valid(queues[i]))
            return warren_error_set(err, WARREN_EINVAL,
                                    "queue \"%s\" is not a valid queue name "
                                    "([A-Za-z0-9][A-Za-z0-9._-]{0,62})",
                                    queues[i] ? queues[i] : "");
        cap += strlen(queues[i]) + 1;
    }
    if ((p = malloc(cap)) == NULL)
        return oom(err);
    p[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(p + len, cap - len, "%s%s", i ? "," : "", queues[i]);
    p[len++] = '}';
    p[len] = '\0';
    *out = p;
    return 0;
}

/* Fills out's is_worker and privileged; *found = 0 for no such role. */
static int read_login(warren_store *st, const char *login, warren_ops_grant_result *out, int *found,
                      warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {login};
    int rc = warren__store_exec(st, SQL_GRANT_ROLE, 1, params, &res, "read the login", err);

    *found = 0;
    if (rc != 0)
        return rc;
    if (PQntuples(res) == 1) {
        *found = 1;
        warren__store_get_bool(res, 0, 0, &out->is_worker);
        warren__store_get_bool(res, 0, 1, &out->privileged);
    }
    PQclear(res);
    return 0;
}

static int change_grants(warren_store *st, const char *sql, const char *what, const char *login,
                         const char *const *queues, size_t n, warren_ops_grant_result *out,
                         warren_error *err)
{
    PGresult *res = NULL;
    char *arr;
    const char *params[2];
    int rc, found = 0;

    memset(out, 0, sizeof(*out));
    if (login == NULL || login[0] == '\0' || strlen(login) > 63)
        return warren_error_set(err, WARREN_EINVAL, "a login name has 1 to 63 characters");
    if ((rc = queue_array(queues, n, &arr, err)) != 0)
        return rc;
    rc = read_login(st, login, out, &found, err);
    if (rc == 0 && !found && sql == SQL_GRANT)
        rc = warren_error_set(err, WARREN_ENOENT,
                              "no role \"%s\" in this cluster: create it first (CREATE ROLE %s "
                              "LOGIN PASSWORD '...' IN ROLE warren_worker)",
                              login, login);
    if (rc == 0) {
        params[0] = login;
        params[1] = arr;
        rc = warren__store_exec(st, sql, 2, params, &res, what, err);
    }
    if (rc == 0) {
        out->changed = warren__store_cmd_tuples(res);
        PQclear(res);
    }
    free(arr);
    return rc;
}

int warren_ops_grant(warren_store *st, const char *login, const char *const *queues, size_t n,
                     warren_ops_grant_result *out, warren_error *err)
{
    return change_grants(st, SQL_GRANT, "grant queues", login, queues, n, out, err);
}

int warren_ops_revoke(warren_store *st, const char *login, const char *const *queues, size_t n,
                      warren_ops_grant_result *out, warren_error *err)
{
    return change_grants(st, SQL_REVOKE, "revoke queues", login, queues, n, out, err);
}

void warren_ops_grant_rows_free(warren_ops_grant_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].login);
        free(rows[i].queue);
        free(rows[i].granted_by);
    }
    free(rows);
}

int warren_ops_grants(warren_store *st, const char *login, warren_ops_grant_row **rows, size_t *n,
                      warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {login};
    int rc, nt;

    *rows = NULL;
    *n = 0;
    rc = warren__store_exec(st, SQL_GRANTS, 1, params, &res, "list grants", err);
    if (rc != 0)
        return rc;
    nt = PQntuples(res);
    if (nt > 0 && (*rows = calloc((size_t)nt, sizeof(**rows))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    for (int i = 0; i < nt; i++) {
        warren_ops_grant_row *g = &(*rows)[i];
        g->login = dup_or_null(warren__store_get_text(res, i, 0));
        g->queue = dup_or_null(warren__store_get_text(res, i, 1));
        g->granted_by = dup_or_null(warren__store_get_text(res, i, 2));
        g->granted_at = get_us0(res, i, 3);
        (*n)++;
        if (g->login == NULL || g->queue == NULL || g->granted_by == NULL) {
            warren_ops_grant_rows_free(*rows, *n);
            *rows = NULL;
            *n = 0;
            PQclear(res);
            return oom(err);
        }
    }
    PQclear(res);
    return 0;
}

/* -------------------------------------------------------- producer grants */

static const char SQL_PRODUCER_ROLE[] =
    "SELECT coalesce(pg_has_role(r.oid, (SELECT w.oid FROM pg_roles w"
    "                                     WHERE w.rolname = 'warren_producer'), 'MEMBER'), false),"
    "       r.rolsuper OR pg_has_role(r.oid, (SELECT n.nspowner FROM pg_namespace n"
    "                                         WHERE n.nspname = 'warren'), 'MEMBER')"
    "  FROM pg_roles r WHERE r.rolname = $1";

/* The grants of one login, counted before and after a change in the same
 * transaction: what the change did. */
static const char SQL_PRODUCER_COUNT[] =
    "SELECT (SELECT count(*) FROM warren.producer_grants WHERE login = $1),"
    "       EXISTS (SELECT 1 FROM warren.producer_logins WHERE login = $1)";

static const char SQL_GRANT_PRODUCER[] =
    "SELECT warren.grant_producer($1, $2::text[], $3::text[], $4)";

static const char SQL_REVOKE_PRODUCER[] =
    "SELECT warren.revoke_producer($1, $2::text[], $3::text[])";

static const char SQL_PRODUCER_GRANTS[] =
    "SELECT l.login, l.tenant_prefix, g.kind, g.name, coalesce(g.granted_by, l.granted_by), " US(
        "coalesce(g.granted_at, l.granted_at)") " FROM warren.producer_logins l"
                                                " LEFT JOIN warren.producer_grants g ON g.login = "
                                                "l.login"
                                                " WHERE $1::text IS NULL OR l.login = $1 ORDER BY "
                                                "l.login, g.kind, g.name";

/* names as a text[] literal into *out (new; NULL for n == 0): valid job
 * names need no quoting. WARREN_EINVAL naming what (template, job) for a bad
 * name. */
static int name_array(const char *what, const char *const *names, size_t n, char **out,
                      warren_error *err)
{
    size_t cap = 3, len = 0;
    char *p;

    *out = NULL;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (names[i] == NULL || !warren_job_name_valid(names[i]))
            return warren_error_set(err, WARREN_EINVAL,
                                    "%s \"%.80s\" is not a valid job name "
                                    "([A-Za-z0-9][A-Za-z0-9._-]{0,199})",
                                    what, names[i] ? names[i] : "");
        cap += strlen(names[i]) + 1;
    }
    if ((p = malloc(cap)) == NULL)
        return oom(err);
    p[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(p + len, cap - len, "%s%s", i ? "," : "", names[i]);
    p[len++] = '}';
    p[len] = '\0';
    *out = p;
    return 0;
}

/* A failure of an owner-only function, mapped by its SQLSTATE: bad input
 * (22023) is the caller's to fix, an unknown role (42704) is not found. */
static int producer_fail(warren_store *st, int rc)
{
    const char *state = warren__store_sqlstate(st);

    if (rc == WARREN_EDB && strcmp(state, "22023") == 0)
        return WARREN_EINVAL;
    if (rc == WARREN_EDB && strcmp(state, "42704") == 0)
        return WARREN_ENOENT;
    return rc;
}

static int producer_count(warren_store *st, const char *login, int *grants, int *listed,
                          warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {login};
    int rc = warren__store_exec(st, SQL_PRODUCER_COUNT, 1, params, &res,
                                "count the producer grants", err);
    if (rc != 0)
        return rc;
    warren__store_get_int(res, 0, 0, grants);
    warren__store_get_bool(res, 0, 1, listed);
    PQclear(res);
    return 0;
}

static int change_producer(warren_store *st, int grant, const char *login,
                           const char *const *templates, size_t nt, const char *const *jobs,
                           size_t nj, const char *tenant_prefix, warren_ops_producer_result *out,
                           warren_error *err)
{
    char *ta = NULL, *ja = NULL;
    const char *params[4];
    PGresult *res = NULL;
    int rc, found = 0, before = 0, after = 0, listed_before = 0, listed_after = 0;
    warren_ops_grant_result who = {0};

    memset(out, 0, sizeof(*out));
    if (login == NULL || login[0] == '\0' || strlen(login) > 63)
        return warren_error_set(err, WARREN_EINVAL, "a login name has 1 to 63 characters");
    if (grant && nt == 0 && nj == 0 && tenant_prefix == NULL)
        return warren_error_set(err, WARREN_EINVAL,
                                "nothing to grant: give a template, a job or a tenant prefix");
    if (tenant_prefix != NULL && tenant_prefix[0] != '\0' && !warren_tenant_valid(tenant_prefix))
        return warren_error_set(err, WARREN_EINVAL,
                                "tenant prefix \"%.80s\" can never start a tenant name (tenants "
                                "are [A-Za-z0-9][A-Za-z0-9._:@-]{0,199})",
                                tenant_prefix);
    if ((rc = name_array("template", templates, nt, &ta, err)) != 0 ||
        (rc = name_array("job", jobs, nj, &ja, err)) != 0)
        goto out;
    {
        const char *lp[1] = {login};
        rc = warren__store_exec(st, SQL_PRODUCER_ROLE, 1, lp, &res, "read the login", err);
        if (rc != 0)
            goto out;
        if (PQntuples(res) == 1) {
            found = 1;
            warren__store_get_bool(res, 0, 0, &who.is_worker);
            warren__store_get_bool(res, 0, 1, &who.privileged);
        }
        PQclear(res);
        res = NULL;
    }
    out->is_producer = who.is_worker;
    out->privileged = who.privileged;
    if (grant && !found) {
        rc = warren_error_set(err, WARREN_ENOENT,
                              "no role \"%s\" in this cluster: create it first (CREATE ROLE %s "
                              "LOGIN PASSWORD '...' IN ROLE warren_producer)",
                              login, login);
        goto out;
    }
    if ((rc = warren__store_begin(st, err)) != 0)
        goto out;
    rc = producer_count(st, login, &before, &listed_before, err);
    if (rc == 0) {
        params[0] = login;
        params[1] = ta;
        params[2] = ja;
        params[3] = tenant_prefix;
        rc = warren__store_exec(st, grant ? SQL_GRANT_PRODUCER : SQL_REVOKE_PRODUCER, grant ? 4 : 3,
                                params, NULL,
                                grant ? "warren.grant_producer" : "warren.revoke_producer", err);
        if (rc != 0)
            rc = producer_fail(st, rc);
    }
    if (rc == 0)
        rc = producer_count(st, login, &after, &listed_after, err);
    if (rc == 0)
        rc = warren__store_commit(st, err);
    if (rc != 0) {
        warren__store_rollback(st);
        goto out;
    }
    out->had_login = listed_before;
    out->changed = grant ? after - before : before - after;
out:
    free(ta);
    free(ja);
    return rc;
}

int warren_ops_grant_producer(warren_store *st, const char *login, const char *const *templates,
                              size_t nt, const char *const *jobs, size_t nj,
                              const char *tenant_prefix, warren_ops_producer_result *out,
                              warren_error *err)
{
    return change_producer(st, 1, login, templates, nt, jobs, nj, tenant_prefix, out, err);
}

int warren_ops_revoke_producer(warren_store *st, const char *login, const char *const *templates,
                               size_t nt, const char *const *jobs, size_t nj,
                               warren_ops_producer_result *out, warren_error *err)
{
    return change_producer(st, 0, login, templates, nt, jobs, nj, NULL, out, err);
}

void warren_ops_producer_rows_free(warren_ops_producer_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].login);
        free(rows[i].tenant_prefix);
        free(rows[i].kind);
        free(rows[i].name);
        free(rows[i].granted_by);
    }
    free(rows);
}

int warren_ops_producer_grants(warren_store *st, const char *login, warren_ops_producer_row **rows,
                               size_t *n, warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {login};
    int rc, nt;

    *rows = NULL;
    *n = 0;
    rc = warren__store_exec(st, SQL_PRODUCER_GRANTS, 1, params, &res, "list producer grants", err);
    if (rc != 0)
        return rc;
    nt = PQntuples(res);
    if (nt > 0 && (*rows = calloc((size_t)nt, sizeof(**rows))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    for (int i = 0; i < nt; i++) {
        warren_ops_producer_row *g = &(*rows)[i];
        g->login = dup_or_null(warren__store_get_text(res, i, 0));
        g->tenant_prefix = dup_or_null(warren__store_get_text(res, i, 1));
        g->kind = dup_or_null(warren__store_get_text(res, i, 2));
        g->name = dup_or_null(warren__store_get_text(res, i, 3));
        g->granted_by = dup_or_null(warren__store_get_text(res, i, 4));
        g->granted_at = get_us0(res, i, 5);
        (*n)++;
        if (g->login == NULL || g->granted_by == NULL ||
            (warren__store_get_text(res, i, 1) != NULL && g->tenant_prefix == NULL) ||
            (warren__store_get_text(res, i, 2) != NULL && (g->kind == NULL || g->name == NULL))) {
            warren_ops_producer_rows_free(*rows, *n);
            *rows = NULL;
            *n = 0;
            PQclear(res);
            return oom(err);
        }
    }
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------ tenant caps */

static const char SQL_SET_TENANT_CAP[] = "SELECT warren.set_tenant_cap($1, $2::int)";

static const char SQL_TENANT_CAP_OF[] =
    "SELECT max_running FROM " TENANT_CAPS_TABLE " WHERE tenant = $1";

static const char SQL_TENANT_CAPS[] = "SELECT tenant, max_running FROM " TENANT_CAPS_TABLE
                                      " WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant";

/* A database migrated before the tenant caps (no table, no function): the
 * fix, not the catalog's words. e1 holds the failure; the result goes to err. */
static int tenant_caps_fail(warren_store *st, int rc, const warren_error *e1, warren_error *err)
{
    const char *state = warren__store_sqlstate(st);

    if (rc == WARREN_EDB && (strcmp(state, "42P01") == 0 || strcmp(state, "42883") == 0))
        return warren_error_set(err, WARREN_EDB,
                                "this database has no tenant caps yet (migration 020): run "
                                "`warren migrate` with this warren's sql/ first");
    return warren_error_set(err, rc, "%s", e1->message);
}

int warren_ops_set_tenant_cap(warren_store *st, const char *tenant, int max_running, int *had,
                              warren_error *err)
{
    PGresult *res = NULL;
    warren_error e1 = {0};
    char nb[24];
    const char *params[2] = {tenant, max_running > 0 ? nb : NULL};
    int rc, before = 0;

    if (had != NULL)
        *had = 0;
    if (tenant == NULL || !warren_tenant_valid(tenant))
        return warren_error_set(
            err, WARREN_EINVAL,
            "\"%.80s\" is not a tenant name ([A-Za-z0-9][A-Za-z0-9._:@-]{0,199})",
            tenant ? tenant : "");
    snprintf(nb, sizeof(nb), "%d", max_running);
    if ((rc = warren__store_begin(st, err)) != 0)
        return rc;
    rc = warren__store_exec(st, SQL_TENANT_CAP_OF, 1, params, &res, "read the tenant's cap", &e1);
    if (rc == 0) {
        if (PQntuples(res) == 1)
            warren__store_get_int(res, 0, 0, &before);
        PQclear(res);
        res = NULL;
        rc = warren__store_exec(st, SQL_SET_TENANT_CAP, 2, params, NULL, "warren.set_tenant_cap",
                                &e1);
        if (rc != 0)
            rc = producer_fail(st, rc);
    }
    if (rc == 0)
        rc = warren__store_commit(st, &e1);
    if (rc != 0) {
        rc = tenant_caps_fail(st, rc, &e1, err);
        warren__store_rollback(st);
        return rc;
    }
    if (had != NULL)
        *had = before;
    return 0;
}

void warren_ops_tenant_caps_free(warren_ops_tenant_cap *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].tenant);
    }
    free(rows);
}

int warren_ops_tenant_caps(warren_store *st, const char *tenant, warren_ops_tenant_cap **rows,
                           size_t *n, warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {tenant};
    int rc, nt;

    *rows = NULL;
    *n = 0;
    warren_error e1 = {0};
    rc = warren__store_exec(st, SQL_TENANT_CAPS, 1, params, &res, "list tenant caps", &e1);
    if (rc != 0)
        return tenant_caps_fail(st, rc, &e1, err);
    nt = PQntuples(res);
    if (nt > 0 && (*rows = calloc((size_t)nt, sizeof(**rows))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    for (int i = 0; i < nt; i++) {
        warren_ops_tenant_cap *c = &(*rows)[i];
        c->tenant = dup_or_null(warren__store_get_text(res, i, 0));
        warren__store_get_int(res, i, 1, &c->max_running);
        (*n)++;
        if (c->tenant == NULL) {
            warren_ops_tenant_caps_free(*rows, *n);
            *rows = NULL;
            *n = 0;
            PQclear(res);
            return oom(err);
        }
    }
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------------- sync */

int warren_ops_sync(warren_store *st, const warren_config *cfg, const warren_ops_sync_options *o,
                    warren_ops_sync_result *out, warren_error *err)
{
    return warren__store_sync(st, cfg, o, out, err);
}
