/* store_plan.c: the planner's SQL: leases, materialising, the relay and the
 * outbox, the reconciler (the operator's commands are in ops.c). Arrays go to
 * the server as text array literals built here (elements always quoted and
 * escaped), so a batch is one statement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "store_int.h"
#include "store_plan.h"

/* Instants come back as integer microseconds (extract(epoch) is exact numeric). */
#define US(x) "(extract(epoch FROM " x ") * 1000000)::bigint"

/* ------------------------------------------------------------------- SQL */

static const char SQL_HEARTBEAT[] =
    "INSERT INTO warren.planners (owner, alive_until) "
    "VALUES ($1, now() + $2::bigint * interval '1 millisecond') "
    "ON CONFLICT (owner) DO UPDATE SET alive_until = EXCLUDED.alive_until";

static const char SQL_FORGET_DEAD[] =
    "DELETE FROM warren.planners WHERE alive_until < now() - interval '1 hour'";

static const char SQL_LEASE_ROWS[] =
    "INSERT INTO warren.planner_leases (partition, owner, lease_until) "
    "SELECT g, '', '-infinity' FROM generate_series(0, $1::int - 1) g "
    "ON CONFLICT (partition) DO NOTHING";

static const char SQL_LEASE_RENEW[] =
    "UPDATE warren.planner_leases SET lease_until = now() + $2::bigint * interval '1 millisecond', "
    "renewed_at = now() WHERE owner = $1 AND partition < $3::int";

static const char SQL_LIVE[] = "SELECT count(*) FROM warren.planners WHERE alive_until > now()";

static const char SQL_LEASE_COUNT[] =
    "SELECT count(*) FROM warren.planner_leases WHERE owner = $1 AND lease_until > now() "
    "AND partition < $2::int";

/* (Leases of partitions at or above the count, after the count shrank: not
 * renewed, not counted, so not dropped here either; they expire.) */
static const char SQL_LEASE_DROP[] =
    "UPDATE warren.planner_leases SET owner = '', lease_until = '-infinity', renewed_at = now() "
    "WHERE partition IN (SELECT partition FROM warren.planner_leases WHERE owner = $1 "
    "AND partition < $3::int ORDER BY partition DESC LIMIT $2::int)";

static const char SQL_LEASE_TAKE[] =
    "UPDATE warren.planner_leases l SET owner = $1, "
    "lease_until = now() + $2::bigint * interval '1 millisecond', renewed_at = now() "
    "FROM (SELECT partition FROM warren.planner_leases "
    "      WHERE lease_until <= now() AND partition < $3::int "
    "      ORDER BY partition LIMIT $4::int FOR UPDATE SKIP LOCKED) f "
    "WHERE l.partition = f.partition";

static const char SQL_LEASE_RELEASE[] =
    "UPDATE warren.planner_leases SET owner = '', lease_until = '-infinity', renewed_at = now() "
    "WHERE owner = $1";

static const char SQL_MEMBER_DELETE[] = "DELETE FROM warren.planners WHERE owner = $1";

/* A cursor of '-infinity' is no instant: column 14 says so (the planner marks
 * the job broken) instead of failing the whole select. */
#define JOB_COLS                                                                                   \
    "j.name, j.schedule_kind, j.expression, j.timezone, j.queue, j.misfire, j.max_catch_up, "      \
    "j.jitter_ms, CASE WHEN j.next_fire_at IS NULL OR NOT isfinite(j.next_fire_at) THEN NULL "     \
    "ELSE " US(                                                                                    \
        "j.next_fire_at") " END, j.paused, j.removed, j.next_fire_at = 'infinity', "               \
                          "j.broken_reason, CASE WHEN isfinite(j.broken_since) THEN " US(          \
                              "j.broken_since") " END, "                                           \
                                                "coalesce(j.next_fire_at = '-infinity', false)"

static const char SQL_LOCK_LEASES[] =
    "SELECT coalesce(array_agg(partition), '{}') FROM (SELECT partition FROM warren.planner_leases "
    "WHERE owner = $1 AND lease_until > now() FOR SHARE) l";

/* coalesce(next_fire_at, '-infinity') (NULL: never planned, first) is the
 * key of index jobs_due_at (015): the range bounds the scan, so a tick when
 * nothing is due reads no job, however many there are. The scan starts after
 * ($4, $5), the (key, name) of the last job the previous batch of this tick
 * locked: the index entries before it are the old cursors of the jobs just
 * planned (a cursor update is not HOT), dead until a vacuum, and a scan from
 * '-infinity' stepped over all of them, batch after batch (34 µs a job at
 * 1,000,000 jobs, measured). */
#define LOCK_DUE_JOBS(REPLAN)                                                                      \
    "SELECT " JOB_COLS                                                                             \
    ", " US("now()") ", j.replan "                                                                 \
                     "FROM warren.jobs j "                                                         \
                     "WHERE " REPLAN "j.partition = ANY($1::int[]) AND NOT j.paused AND NOT "      \
                     "j.removed "                                                                  \
                     "AND coalesce(j.next_fire_at, '-infinity'::timestamptz) <= now() + "          \
                     "$2::bigint * interval '1 millisecond' "                                      \
                     "AND (j.broken_retry_at IS NULL OR j.broken_retry_at <= now() "               \
                     "OR j.updated_at > j.broken_since) "                                          \
                     "AND (coalesce(j.next_fire_at, '-infinity'::timestamptz), j.name) > "         \
                     "($4::timestamptz, $5::text) "                                                \
                     "ORDER BY coalesce(j.next_fire_at, '-infinity'::timestamptz), j.name "        \
                     "LIMIT $3::int FOR UPDATE OF j SKIP LOCKED"
static const char SQL_LOCK_DUE_JOBS[] = LOCK_DUE_JOBS("");
/* The jobs marked replan (migration 017), through index jobs_replan: the
 * ones a scan from the floor may not reach. */
static const char SQL_LOCK_REPLAN_JOBS[] = LOCK_DUE_JOBS("j.replan AND ");

/* The scan floor after a tick (src/planner.c, "The scan floor"): the
 * smallest cursor at or above $2 of a job of owner's partitions (a lease
 * expired or not: an expired one may be renewed without counting as taken)
 * that is eligible and not marked replan; NULL when there is none with a finite cursor
 * ('infinity': jobs that never fire again); column 2 true for an unmarked
 * job without one (NULL or '-infinity', which the rule never leaves: no floor). */
static const char SQL_FLOOR[] = "SELECT CASE WHEN isfinite(f) THEN " US(
    "f") " END, coalesce(f = '-infinity', false) "
         "FROM (SELECT min(coalesce("
         "j.next_fire_at, '-infinity'::timestamptz)) AS f FROM warren.jobs j "
         "WHERE NOT j.paused AND NOT j.removed AND NOT j.replan "
         "AND coalesce(j.next_fire_at, '-infinity'::timestamptz) >= $2::timestamptz "
         "AND j.partition = ANY(ARRAY(SELECT partition FROM warren.planner_leases "
         "WHERE owner = $1))) m";

static const char SQL_JOB_GET[] = "SELECT " JOB_COLS " FROM warren.jobs j WHERE j.name = $1";

static const char SQL_INSERT_RUNS[] =
    "INSERT INTO warren.runs (job, scheduled_at, due_at, state, origin, note, payload, "
    "finished_at) "
    "SELECT u.job, u.sched, u.due, u.state, u.origin, u.note, u.payload::jsonb, "
    "CASE WHEN u.state = 'skipped' THEN now() END "
    "FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], "
    "$6::text[], $7::text[]) AS u(job, sched, due, state, origin, note, payload) "
    "ON CONFLICT DO NOTHING";

/* The same rows without ON CONFLICT, for the planner's runs, which are new
 * but for rare races (warren_plan_insert_new_runs): a speculative insertion
 * (the index probe and the extra WAL record of every row ON CONFLICT needs)
 * cost a fifth of the statement (measured, docs/benchmarks.md). */
static const char SQL_INSERT_NEW_RUNS[] =
    "INSERT INTO warren.runs (job, scheduled_at, due_at, state, origin, note, payload, "
    "finished_at) "
    "SELECT u.job, u.sched, u.due, u.state, u.origin, u.note, u.payload::jsonb, "
    "CASE WHEN u.state = 'skipped' THEN now() END "
    "FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], "
    "$6::text[], $7::text[]) AS u(job, sched, due, state, origin, note, payload)";

/* The replan mark (017) is cleared only when the cursor moved past this
 * transaction's horizon ($3 ms after now(), the scan's): a job planned only
 * part of the way (a catch-up cut at MAX_RUNS_PER_JOB) keeps it, so a cursor
 * left below the scan floor is still found. */
#define ADVANCE_REPLAN                                                                             \
    "replan = CASE WHEN u.nf > now() + $3::bigint * interval '1 millisecond' THEN false "          \
    "ELSE j.replan END "

/* A job planned again after it was broken loses its mark and says so on
 * warren.events (job.recovered.<job>); `o` is the row before the update. */
static const char SQL_ADVANCE[] =
    "WITH a AS (UPDATE warren.jobs j SET next_fire_at = u.nf, broken_reason = NULL, "
    "broken_since = NULL, broken_retry_at = NULL, " ADVANCE_REPLAN
    "FROM unnest($1::text[], $2::timestamptz[]) AS u(name, nf) JOIN warren.jobs o "
    "ON o.name = u.name WHERE j.name = u.name "
    "RETURNING j.name, o.broken_reason AS was, o.broken_since AS since) "
    "INSERT INTO warren.outbox (exchange, routing_key, type, headers, body) "
    "SELECT 'warren.events', 'job.recovered.' || a.name, a.name, "
    "jsonb_build_object('x-warren-job', a.name, 'x-warren-event', 'job.recovered'), "
    "jsonb_build_object('event', 'job.recovered', 'job', a.name, 'broken_since', "
    "warren.plan_utc(a.since), 'error', a.was, 'at', warren.plan_utc(now())) "
    "FROM a WHERE a.was IS NOT NULL";

/* The cursors of jobs that were not broken (the planner read their mark under
 * its row lock): no event to write, so no second look at the row before the
 * update (a fifth of SQL_ADVANCE, measured). */
static const char SQL_ADVANCE_PLAIN[] =
    "UPDATE warren.jobs j SET next_fire_at = u.nf, broken_reason = NULL, broken_since = NULL, "
    "broken_retry_at = NULL, " ADVANCE_REPLAN "FROM unnest($1::text[], $2::timestamptz[]) AS "
    "u(name, nf) "
    "WHERE j.name = u.name";

/* Broken jobs (docs/delivery.md, "Broken jobs"): the reason, since when (a
 * job changed since it broke, by sync, pause or resume, breaks anew), the
 * next try after a backoff of the time broken so far (5 s doubling to 60 s);
 * the cursor stays (a NULL u.cursor) or is set where planning stopped. A new
 * reason is an event job.broken.<job> on warren.events. */
static const char SQL_MARK_BROKEN[] =
    "WITH b AS (UPDATE warren.jobs j SET broken_reason = u.reason, "
    "broken_since = CASE WHEN o.broken_since IS NULL OR o.updated_at > o.broken_since "
    "THEN now() ELSE o.broken_since END, "
    "broken_retry_at = now() + least(interval '60 s', greatest(interval '5 s', "
    "now() - CASE WHEN o.broken_since IS NULL OR o.updated_at > o.broken_since "
    "THEN now() ELSE o.broken_since END)), "
    "next_fire_at = coalesce(u.cursor, o.next_fire_at), replan = true "
    "FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(name, reason, cursor) "
    "JOIN warren.jobs o ON o.name = u.name WHERE j.name = u.name "
    "RETURNING j.name, j.queue, u.reason, o.broken_reason AS was, j.broken_since AS since) "
    "INSERT INTO warren.outbox (exchange, routing_key, type, headers, body) "
    "SELECT 'warren.events', 'job.broken.' || b.name, b.name, "
    "jsonb_build_object('x-warren-job', b.name, 'x-warren-event', 'job.broken', "
    "'x-warren-queue', b.queue), "
    "jsonb_build_object('event', 'job.broken', 'job', b.name, 'error', b.reason, "
    "'broken_since', warren.plan_utc(b.since), 'at', warren.plan_utc(now())) "
    "FROM b WHERE b.was IS DISTINCT FROM b.reason";

/* A time that is not a finite instant ('-infinity' written into the table)
 * comes back NULL: the row is recorded as unpublishable (relay.c) instead of
 * failing the select, and with it the relay, on every pass. */
static const char SQL_RELAY_SELECT[] =
    "SELECT r.run_key, r.job, j.queue, COALESCE(r.payload, j.payload)::text, "
    "CASE WHEN isfinite(r.scheduled_at) THEN (extract(epoch FROM r.scheduled_at) * "
    "1000000)::bigint "
    "END, "
    "CASE WHEN isfinite(r.due_at) THEN (extract(epoch FROM r.due_at) * 1000000)::bigint END, "
    "r.attempt, "
    "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint, j.template, "
    "coalesce(r.tenant, j.tenant) "
    "FROM warren.runs r JOIN warren.jobs j ON j.name = r.job "
    "WHERE r.state IN ('planned', 'retrying') "
    "AND r.due_at <= now() + $1::bigint * interval '1 millisecond' "
    "AND (r.relay_retry_at IS NULL OR r.relay_retry_at <= now()) "
    "ORDER BY r.due_at LIMIT $2::int FOR UPDATE OF r SKIP LOCKED";

static const char SQL_MARK_PUBLISHED[] =
    "UPDATE warren.runs SET state = 'published', published_at = now(), "
    "publish_count = publish_count + 1, relay_retry_at = NULL "
    "WHERE run_key = ANY($1::text[]) AND state IN ('planned', 'retrying')";

static const char SQL_MARK_PUBLISH_ERROR[] =
    "UPDATE warren.runs SET last_error = $2, "
    "relay_retry_at = now() + $3::bigint * interval '1 millisecond' "
    "WHERE run_key = $1 AND state IN ('planned', 'retrying')";

/* A run the relay cannot publish (its message cannot be built or the broker
 * refuses it as invalid: the payload is not a JSON object, the body is too
 * large) is dead: it is never taken again in a loop, and a replay after the
 * fix sends it back. Its dead letter and run.dead event are those of the
 * worker protocol (sql/functions/outbox.sql). */
static const char SQL_MARK_UNPUBLISHABLE[] =
    "WITH d AS (UPDATE warren.runs r SET state = 'dead', finished_at = now(), last_error = "
    "$2::text, "
    "relay_retry_at = NULL, note = warren.plan_note(r.note, format('not published at %s: %s; "
    "dead (fix it, then `warren replay`)', warren.plan_utc(now()), $2::text)) "
    "WHERE r.run_key = $1 AND r.state IN ('planned', 'retrying') RETURNING r) "
    "SELECT warren.wp_dead_letter(d.r, j, $2::text), warren.wp_event(d.r, 'dead', $2::text, NULL) "
    "FROM d JOIN warren.jobs j ON j.name = (d.r).job";

static const char SQL_OUTBOX_SELECT[] =
    "SELECT id, exchange, routing_key, message_id, type, body::text, true FROM warren.outbox "
    "ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED";

/* outbox_urgent (005) holds exactly these rows */
static const char SQL_OUTBOX_SELECT_URGENT[] =
    "SELECT id, exchange, routing_key, message_id, type, body::text, true FROM warren.outbox "
    "WHERE exchange <> 'warren.events' ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED";

/* From an id on: the scan starts past the rows just published and deleted,
 * whose index entries are dead but not yet reclaimable (a scan from the start
 * steps over all of them: 10 ms a query in a 50,000-run burst). */
static const char SQL_OUTBOX_SELECT_EVENTS[] =
    "SELECT id, exchange, routing_key, message_id, type, body::text, "
    "created_at <= now() - $3::bigint * interval '1 millisecond' FROM warren.outbox "
    "WHERE exchange = 'warren.events' AND id >= $2::bigint "
    "ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED";

static const char SQL_OUTBOX_EVENTS_WAITING[] =
    "SELECT count(*), coalesce(bool_or(created_at <= now() - $3::bigint * interval "
    "'1 millisecond') FILTER (WHERE first), false) FROM (SELECT created_at, "
    "row_number() OVER (ORDER BY id) = 1 AS first FROM warren.outbox "
    "WHERE exchange = 'warren.events' AND id >= $1::bigint ORDER BY id LIMIT $2::int) e";

/* A header whose value is JSON null is left out (AMQP has no null string
 * here), and headers that are not a JSON object are none: either would
 * otherwise fail the whole batch, every pass. */
static const char SQL_OUTBOX_HEADERS[] =
    "SELECT o.id, h.key, h.value FROM warren.outbox o, "
    "jsonb_each_text(CASE jsonb_typeof(o.headers) WHEN 'object' THEN o.headers "
    "ELSE '{}'::jsonb END) h "
    "WHERE o.id = ANY($1::bigint[]) AND h.value IS NOT NULL ORDER BY o.id, h.key";

static const char SQL_OUTBOX_DELETE[] = "DELETE FROM warren.outbox WHERE id = ANY($1::bigint[])";

static const char SQL_RECONCILE[] =
    "UPDATE warren.runs r SET state = 'planned', "
    "note = warren.plan_note(r.note, format('republished by reconciler at %s: not started %s s "
    "after due', warren.plan_utc(now()), floor(extract(epoch FROM now() - r.due_at))::bigint)) "
    "FROM (SELECT run_key FROM warren.runs "
    "      WHERE state = 'published' "
    "      AND due_at < now() - $1::bigint * interval '1 millisecond' "
    "      AND published_at < now() - $1::bigint * interval '1 millisecond' "
    "          * power(2, least(greatest(publish_count - 1, 0), 6)) "
    "      ORDER BY due_at LIMIT $2::int FOR UPDATE SKIP LOCKED) s "
    "WHERE r.run_key = s.run_key AND r.state = 'published'";

static const char SQL_REAP_EXISTS[] =
    "SELECT to_regprocedure('warren.reap_expired_leases(integer)') IS NOT NULL";
static const char SQL_REAP[] = "SELECT warren.reap_expired_leases($1::int)";

/* --------------------------------------------------------------- helpers */

/* Array literals are built in the library's capped buffer (buf.h). */
typedef warren__buf buf;

/* Array literal: "{" + elements + "}"; each element quoted, '"' and '\'
 * escaped; NULL written as the bare NULL keyword. */
static void arr_open(buf *b)
{
    warren__buf_reset(b);
    warren__buf_add(b, "{", 1);
}

static void arr_elem(buf *b, const char *s)
{
    if (b->len > 1)
        warren__buf_add(b, ",", 1);
    if (s == NULL) {
        warren__buf_add(b, "NULL", 4);
        return;
    }
    warren__buf_add(b, "\"", 1);
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\')
            warren__buf_add(b, "\\", 1);
        warren__buf_add(b, c, 1);
    }
    warren__buf_add(b, "\"", 1);
}

static void arr_close(buf *b)
{
    warren__buf_add(b, "}", 1);
}

static void arr_us(buf *b, warren_us t)
{
    char tb[WARREN_TIME_BUF];
    arr_elem(b, warren__store_us_param(t, tb, sizeof(tb)));
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static int oom(warren_error *err)
{
    return warren_error_set(err, WARREN_ENOMEM, "out of memory building a planner query");
}

static int bad_row(warren_error *err, const char *what)
{
    return warren_error_set(err, WARREN_EDB, "unexpected result from PostgreSQL while %s", what);
}

int warren_plan_begin(warren_store *st, warren_error *err)
{
    return warren__store_begin(st, err);
}

int warren_plan_commit(warren_store *st, warren_error *err)
{
    return warren__store_commit(st, err);
}

void warren_plan_rollback(warren_store *st)
{
    warren__store_rollback(st);
}

/* ------------------------------------------------------------------ leases */

static int count_query(warren_store *st, const char *name, const char *sql, int np,
                       const char *const *params, int *out, const char *what, warren_error *err);

static const char SQL_SYNC_PARTITIONS[] =
    "SELECT coalesce((SELECT partitions FROM warren.sync_state), 0)";

int warren_plan_sync_partitions(warren_store *st, int *n, warren_error *err)
{
    *n = 0;
    return count_query(st, "plan_sync_partitions", SQL_SYNC_PARTITIONS, 0, NULL, n,
                       "reading the partition count of the last sync", err);
}

int warren_plan_heartbeat(warren_store *st, const char *owner, int64_t ttl_ms, int partitions,
                          warren_error *err)
{
    char a[24], b[24];
    const char *p1[] = {owner, warren__store_int_param(ttl_ms, a, sizeof(a))};
    const char *p2[] = {warren__store_int_param(partitions, b, sizeof(b))};
    int rc;

    if ((rc = warren__store_exec_prepared(st, "plan_heartbeat", SQL_HEARTBEAT, 2, p1, NULL,
                                          "announcing the planner", err)) != 0)
        return rc;
    if ((rc = warren__store_exec_prepared(st, "plan_forget_dead", SQL_FORGET_DEAD, 0, NULL, NULL,
                                          "forgetting dead planners", err)) != 0)
        return rc;
    return warren__store_exec_prepared(st, "plan_lease_rows", SQL_LEASE_ROWS, 1, p2, NULL,
                                       "creating partition lease rows", err);
}

static int count_query(warren_store *st, const char *name, const char *sql, int np,
                       const char *const *params, int *out, const char *what, warren_error *err)
{
    PGresult *res = NULL;
    int rc = warren__store_exec_prepared(st, name, sql, np, params, &res, what, err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) != 1 || warren__store_get_int(res, 0, 0, out) != 0) {
        PQclear(res);
        return bad_row(err, what);
    }
    PQclear(res);
    return 0;
}

int warren_plan_leases(warren_store *st, const char *owner, int partitions, int64_t lease_ms,
                       int *owned, int *taken, int *dropped, int *live, warren_error *err)
{
    char lms[24], parts[24], nb[24];
    PGresult *res = NULL;
    int rc, have = 0, nlive = 1, fair, moved = 0;

    if (taken)
        *taken = 0;
    if (dropped)
        *dropped = 0;
    warren__store_int_param(lease_ms, lms, sizeof(lms));
    warren__store_int_param(partitions, parts, sizeof(parts));
    if ((rc = warren__store_begin(st, err)) != 0)
        return rc;
    {
        const char *p[] = {owner, lms, parts};
        if ((rc = warren__store_exec_prepared(st, "plan_lease_renew", SQL_LEASE_RENEW, 3, p, NULL,
                                              "renewing partition leases", err)) != 0)
            goto fail;
    }
    if ((rc = count_query(st, "plan_live", SQL_LIVE, 0, NULL, &nlive, "counting live planners",
                          err)) != 0)
        goto fail;
    if (nlive < 1)
        nlive = 1;
    {
        const char *p[] = {owner, parts};
        if ((rc = count_query(st, "plan_lease_count", SQL_LEASE_COUNT, 2, p, &have,
                              "counting partition leases", err)) != 0)
            goto fail;
    }
    fair = (partitions + nlive - 1) / nlive;
    if (have > fair) {
        const char *p[] = {owner, warren__store_int_param(have - fair, nb, sizeof(nb)), parts};
        if ((rc = warren__store_exec_prepared(st, "plan_lease_drop", SQL_LEASE_DROP, 3, p, &res,
                                              "giving up partitions above the fair share", err)) !=
            0)
            goto fail;
        moved = warren__store_cmd_tuples(res);
        PQclear(res);
        res = NULL;
        have -= moved;
        if (dropped)
            *dropped = moved;
    } else if (have < fair) {
        const char *p[] = {owner, lms, parts, warren__store_int_param(fair - have, nb, sizeof(nb))};
        if ((rc = warren__store_exec_prepared(st, "plan_lease_take", SQL_LEASE_TAKE, 4, p, &res,
                                              "taking free partitions", err)) != 0)
            goto fail;
        moved = warren__store_cmd_tuples(res);
        PQclear(res);
        res = NULL;
        have += moved;
        if (taken)
            *taken = moved;
    }
    if ((rc = warren__store_commit(st, err)) != 0)
        goto fail;
    if (owned)
        *owned = have;
    if (live)
        *live = nlive;
    return 0;
fail:
    warren__store_rollback(st);
    return rc;
}

int warren_plan_release(warren_store *st, const char *owner, warren_error *err)
{
    const char *p[] = {owner};
    int rc = warren__store_exec_prepared(st, "plan_lease_release", SQL_LEASE_RELEASE, 1, p, NULL,
                                         "releasing partition leases", err);
    if (rc != 0)
        return rc;
    return warren__store_exec_prepared(st, "plan_member_delete", SQL_MEMBER_DELETE, 1, p, NULL,
                                       "leaving the planner membership", err);
}

/* -------------------------------------------------------------------- jobs */

void warren_plan_job_clear(warren_plan_job *j)
{
    if (j == NULL)
        return;
    free(j->name);
    free(j->kind);
    free(j->expression);
    free(j->timezone);
    free(j->queue);
    free(j->misfire);
    free(j->broken_reason);
    memset(j, 0, sizeof(*j));
}

void warren_plan_jobs_free(warren_plan_job *jobs, size_t n)
{
    if (jobs == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        warren_plan_job_clear(&jobs[i]);
    free(jobs);
}

/* Reads JOB_COLS at row i into j. */
static int read_job(const PGresult *res, int i, warren_plan_job *j)
{
    int inf = 0;
    memset(j, 0, sizeof(*j));
    j->name = dup_or_null(warren__store_get_text(res, i, 0));
    j->kind = dup_or_null(warren__store_get_text(res, i, 1));
    j->expression = dup_or_null(warren__store_get_text(res, i, 2));
    j->timezone = dup_or_null(warren__store_get_text(res, i, 3));
    j->queue = dup_or_null(warren__store_get_text(res, i, 4));
    j->misfire = dup_or_null(warren__store_get_text(res, i, 5));
    if (!j->name || !j->kind || !j->expression || !j->timezone || !j->queue || !j->misfire)
        return -1;
    if (warren__store_get_int(res, i, 6, &j->max_catch_up) != 0 ||
        warren__store_get_int64(res, i, 7, &j->jitter_ms) != 0)
        return -1;
    j->has_next = warren__store_get_us(res, i, 8, &j->next_fire_at) == 0;
    if (warren__store_get_bool(res, i, 9, &j->paused) != 0 ||
        warren__store_get_bool(res, i, 10, &j->removed) != 0)
        return -1;
    if (warren__store_get_bool(res, i, 11, &inf) == 0 && inf) {
        j->has_next = 1;
        j->next_fire_at = INT64_MAX;
    }
    if (!PQgetisnull(res, i, 12) &&
        (j->broken_reason = dup_or_null(warren__store_get_text(res, i, 12))) == NULL)
        return -1;
    if (warren__store_get_us(res, i, 13, &j->broken_since) != 0)
        j->broken_since = 0;
    if (warren__store_get_bool(res, i, 14, &j->cursor_invalid) != 0)
        return -1;
    return 0;
}

void warren_plan_pos_start(warren_plan_pos *pos)
{
    memset(pos, 0, sizeof(*pos));
}

void warren_plan_pos_from(warren_plan_pos *pos, warren_us floor)
{
    memset(pos, 0, sizeof(*pos));
    pos->set = 1;
    pos->key = floor;
}

int warren_plan_floor(warren_store *st, const char *owner, int has_lo, warren_us lo, int *found,
                      warren_us *floor, warren_error *err)
{
    char tb[WARREN_TIME_BUF];
    const char *p[] = {owner, has_lo ? warren__store_us_param(lo, tb, sizeof(tb)) : "-infinity"};
    PGresult *res = NULL;
    int rc = warren__store_exec_prepared(st, "plan_floor", SQL_FLOOR, 2, p, &res,
                                         "reading the scan floor", err);
    if (rc != 0)
        return rc;
    *found = 0;
    if (PQntuples(res) != 1 || PQnfields(res) != 2) {
        PQclear(res);
        return bad_row(err, "reading the scan floor");
    }
    if (!PQgetisnull(res, 0, 0)) {
        if (warren__store_get_us(res, 0, 0, floor) != 0) {
            PQclear(res);
            return bad_row(err, "reading the scan floor");
        }
        *found = 1;
    } else if (PQgetvalue(res, 0, 1)[0] == 't') {
        *found = -1;
    }
    PQclear(res);
    return 0;
}

int warren_plan_lock_due_jobs(warren_store *st, const char *owner, int64_t horizon_ms, int limit,
                              int replan_only, warren_plan_pos *pos, warren_plan_job **jobs,
                              size_t *n, warren_us *now, warren_error *err)
{
    char h[24], l[24], tb[WARREN_TIME_BUF];
    const char *p[] = {owner, warren__store_int_param(horizon_ms, h, sizeof(h)),
                       warren__store_int_param(limit, l, sizeof(l)),
                       pos->set ? warren__store_us_param(pos->key, tb, sizeof(tb)) : "-infinity",
                       pos->name};
    PGresult *res = NULL;
    warren_plan_job *out = NULL;
    int rc, rows;

    *jobs = NULL;
    *n = 0;
    {
        const char *lp[] = {owner};
        rc = warren__store_exec_prepared(st, "plan_lock_leases", SQL_LOCK_LEASES, 1, lp, &res,
                                         "locking partition leases", err);
        if (rc != 0)
            return rc;
        char *parts = strdup(PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "{}");
        PQclear(res);
        res = NULL;
        if (parts == NULL)
            return oom(err);
        p[0] = parts;
        rc = replan_only
                 ? warren__store_exec_prepared(st, "plan_lock_replan_jobs", SQL_LOCK_REPLAN_JOBS, 5,
                                               p, &res, "locking due jobs marked replan", err)
                 : warren__store_exec_prepared(st, "plan_lock_due_jobs", SQL_LOCK_DUE_JOBS, 5, p,
                                               &res, "locking due jobs", err);
        free(parts);
    }
    if (rc != 0)
        return rc;
    rows = PQntuples(res);
    if (rows > 0 && (out = calloc((size_t)rows, sizeof(*out))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    if (warren__store_get_us(res, 0, 15, now) != 0 && rows > 0)
        goto bad;
    for (int i = 0; i < rows; i++) {
        if (read_job(res, i, &out[i]) != 0) {
            warren_plan_jobs_free(out, (size_t)i + 1);
            out = NULL;
            goto bad;
        }
        out[i].replan = PQgetvalue(res, i, 16)[0] == 't';
    }
    PQclear(res);
    if (rows > 0) {
        /* the last row's key: its cursor, '-infinity' for none (NULL, or
         * -infinity written into the table) */
        const warren_plan_job *last = &out[rows - 1];
        int finite = last->has_next && last->next_fire_at != INT64_MAX;
        if (strlen(last->name) >= sizeof(pos->name)) {
            warren_plan_jobs_free(out, (size_t)rows);
            return bad_row(err, "locking due jobs (a job name over 255 bytes)");
        }
        pos->set = finite;
        pos->key = finite ? last->next_fire_at : 0;
        snprintf(pos->name, sizeof(pos->name), "%s", last->name);
    }
    *jobs = out;
    *n = (size_t)rows;
    return 0;
bad:
    free(out);
    PQclear(res);
    return bad_row(err, "locking due jobs");
}

int warren_plan_job_get(warren_store *st, const char *name, warren_plan_job *out, warren_error *err)
{
    const char *p[] = {name};
    PGresult *res = NULL;
    int rc = warren__store_exec_prepared(st, "plan_job_get", SQL_JOB_GET, 1, p, &res,
                                         "reading a job", err);
    memset(out, 0, sizeof(*out));
    if (rc != 0)
        return rc;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return warren_error_set(err, WARREN_ENOENT,
                                "job \"%s\" is not in the database (is it in the config? run "
                                "`warren sync`)",
                                name);
    }
    if (read_job(res, 0, out) != 0) {
        warren_plan_job_clear(out);
        PQclear(res);
        return bad_row(err, "reading a job");
    }
    PQclear(res);
    return 0;
}

/* The seven array parameters of SQL_INSERT_RUNS and SQL_INSERT_NEW_RUNS. */
static int runs_arrays(const warren_plan_run *runs, size_t n, buf a[7], warren_error *err)
{
    int rc = 0;
    for (int k = 0; k < 7; k++)
        arr_open(&a[k]);
    for (size_t i = 0; i < n; i++) {
        arr_elem(&a[0], runs[i].job);
        arr_us(&a[1], runs[i].scheduled_at);
        arr_us(&a[2], runs[i].due_at);
        arr_elem(&a[3], runs[i].state ? runs[i].state : "planned");
        arr_elem(&a[4], runs[i].origin ? runs[i].origin : "schedule");
        arr_elem(&a[5], runs[i].note);
        arr_elem(&a[6], runs[i].payload);
    }
    for (int k = 0; k < 7; k++) {
        arr_close(&a[k]);
        if (a[k].err && rc == 0)
            rc = oom(err);
    }
    return rc;
}

static int insert_runs(warren_store *st, const char *name, const char *sql, const buf a[7],
                       int *inserted, warren_error *err)
{
    const char *p[7];
    PGresult *res = NULL;
    int rc;
    for (int k = 0; k < 7; k++)
        p[k] = a[k].p;
    rc = warren__store_exec_prepared(st, name, sql, 7, p, &res, "inserting runs", err);
    if (rc == 0) {
        if (inserted)
            *inserted = warren__store_cmd_tuples(res);
        PQclear(res);
    }
    return rc;
}

int warren_plan_insert_runs(warren_store *st, const warren_plan_run *runs, size_t n, int *inserted,
                            warren_error *err)
{
    buf a[7] = {{0}};
    int rc;

    if (inserted)
        *inserted = 0;
    if (n == 0)
        return 0;
    if ((rc = runs_arrays(runs, n, a, err)) == 0)
        rc = insert_runs(st, "plan_insert_runs", SQL_INSERT_RUNS, a, inserted, err);
    for (int k = 0; k < 7; k++)
        free(a[k].p);
    return rc;
}

int warren_plan_insert_new_runs(warren_store *st, const warren_plan_run *runs, size_t n,
                                int *inserted, warren_error *err)
{
    buf a[7] = {{0}};
    int rc;

    if (inserted)
        *inserted = 0;
    if (n == 0)
        return 0;
    if ((rc = runs_arrays(runs, n, a, err)) != 0)
        goto out;
    if ((rc = warren__store_exec_simple(st, "SAVEPOINT warren_plan_insert",
                                        "inserting runs (savepoint)", err)) != 0)
        goto out;
    rc = insert_runs(st, "plan_insert_new_runs", SQL_INSERT_NEW_RUNS, a, inserted, err);
    if (rc == 0) {
        rc = warren__store_exec_simple(st, "RELEASE SAVEPOINT warren_plan_insert",
                                       "inserting runs (release savepoint)", err);
    } else if (strcmp(warren__store_sqlstate(st), "23505") == 0) {
        /* A run key taken already (a trigger in the same second, a second
         * planner after a lease moved, a cursor set back): the rows again,
         * the taken ones skipped. */
        warren_error_clear(err);
        if ((rc = warren__store_exec_simple(st, "ROLLBACK TO SAVEPOINT warren_plan_insert",
                                            "inserting runs (rollback to savepoint)", err)) == 0)
            rc = insert_runs(st, "plan_insert_runs", SQL_INSERT_RUNS, a, inserted, err);
    }
out:
    for (int k = 0; k < 7; k++)
        free(a[k].p);
    return rc;
}

/* The cursors of the jobs whose broken_reason is NULL (broken == 0) or not
 * NULL (broken == 1) as it was read; was_broken NULL: every job with the
 * statement that looks at the row before the update. */
static int advance(warren_store *st, const char *const *names, const warren_us *next,
                   const int *never_again, const int *was_broken, int broken, size_t n,
                   int64_t horizon_ms, warren_error *err)
{
    char h[24];
    buf a = {0}, b = {0};
    size_t m = 0;
    int rc = 0;

    arr_open(&a);
    arr_open(&b);
    for (size_t i = 0; i < n; i++) {
        if (was_broken != NULL && (was_broken[i] != 0) != broken)
            continue;
        m++;
        arr_elem(&a, names[i]);
        if (never_again && never_again[i])
            arr_elem(&b, "infinity");
        else
            arr_us(&b, next[i]);
    }
    arr_close(&a);
    arr_close(&b);
    if (a.err || b.err) {
        rc = oom(err);
    } else if (m > 0) {
        const char *p[] = {a.p, b.p, warren__store_int_param(horizon_ms, h, sizeof(h))};
        if (broken)
            rc = warren__store_exec_prepared(st, "plan_advance", SQL_ADVANCE, 3, p, NULL,
                                             "advancing job cursors", err);
        else
            rc = warren__store_exec_prepared(st, "plan_advance_plain", SQL_ADVANCE_PLAIN, 3, p,
                                             NULL, "advancing job cursors", err);
    }
    free(a.p);
    free(b.p);
    return rc;
}

int warren_plan_advance(warren_store *st, const char *const *names, const warren_us *next,
                        const int *never_again, const int *was_broken, size_t n, int64_t horizon_ms,
                        warren_error *err)
{
    int rc;

    if (n == 0)
        return 0;
    if (was_broken == NULL)
        return advance(st, names, next, never_again, NULL, 1, n, horizon_ms, err);
    if ((rc = advance(st, names, next, never_again, was_broken, 0, n, horizon_ms, err)) != 0)
        return rc;
    return advance(st, names, next, never_again, was_broken, 1, n, horizon_ms, err);
}

int warren_plan_mark_broken(warren_store *st, const char *const *names, const char *const *reasons,
                            const warren_us *cursors, const int *has_cursor, size_t n,
                            warren_error *err)
{
    buf a = {0}, b = {0}, c = {0};
    int rc = 0;

    if (n == 0)
        return 0;
    arr_open(&a);
    arr_open(&b);
    arr_open(&c);
    for (size_t i = 0; i < n; i++) {
        arr_elem(&a, names[i]);
        arr_elem(&b, reasons[i]);
        if (has_cursor[i])
            arr_us(&c, cursors[i]);
        else
            arr_elem(&c, NULL);
    }
    arr_close(&a);
    arr_close(&b);
    arr_close(&c);
    if (a.err || b.err || c.err) {
        rc = oom(err);
    } else {
        const char *p[] = {a.p, b.p, c.p};
        rc = warren__store_exec_prepared(st, "plan_mark_broken", SQL_MARK_BROKEN, 3, p, NULL,
                                         "marking jobs broken", err);
    }
    free(a.p);
    free(b.p);
    free(c.p);
    return rc;
}

/* ------------------------------------------------------------------- relay */

void warren_plan_relay_rows_free(warren_relay_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].run_key);
        free(rows[i].job);
        free(rows[i].queue);
        free(rows[i].payload);
        free(rows[i].template_name);
        free(rows[i].tenant);
    }
    free(rows);
}

int warren_plan_relay_select(warren_store *st, int64_t lead_ms, int limit, warren_relay_row **rows,
                             size_t *n, warren_us *now, warren_error *err)
{
    char a[24], b[24];
    const char *p[] = {warren__store_int_param(lead_ms, a, sizeof(a)),
                       warren__store_int_param(limit, b, sizeof(b))};
    PGresult *res = NULL;
    warren_relay_row *out = NULL;
    int rc, nr;

    *rows = NULL;
    *n = 0;
    rc = warren__store_exec_prepared(st, "plan_relay_select", SQL_RELAY_SELECT, 2, p, &res,
                                     "selecting runs to publish", err);
    if (rc != 0)
        return rc;
    nr = PQntuples(res);
    if (nr == 0) {
        PQclear(res);
        return warren_store_now(st, now, err);
    }
    if ((out = calloc((size_t)nr, sizeof(*out))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    for (int i = 0; i < nr; i++) {
        warren_relay_row *r = &out[i];
        r->run_key = dup_or_null(warren__store_get_text(res, i, 0));
        r->job = dup_or_null(warren__store_get_text(res, i, 1));
        r->queue = dup_or_null(warren__store_get_text(res, i, 2));
        r->payload = dup_or_null(warren__store_get_text(res, i, 3));
        r->template_name = dup_or_null(warren__store_get_text(res, i, 8));
        r->tenant = dup_or_null(warren__store_get_text(res, i, 9));
        if (PQgetisnull(res, i, 4) || PQgetisnull(res, i, 5))
            r->invalid = 1;
        if (!r->run_key || !r->job || !r->queue || !r->payload ||
            (!PQgetisnull(res, i, 8) && !r->template_name) ||
            (!PQgetisnull(res, i, 9) && !r->tenant) ||
            (!r->invalid && (warren__store_get_us(res, i, 4, &r->scheduled_at) != 0 ||
                             warren__store_get_us(res, i, 5, &r->due_at) != 0)) ||
            warren__store_get_int(res, i, 6, &r->attempt) != 0 ||
            (i == 0 && warren__store_get_us(res, i, 7, now) != 0)) {
            warren_plan_relay_rows_free(out, (size_t)nr);
            PQclear(res);
            return bad_row(err, "selecting runs to publish");
        }
    }
    PQclear(res);
    *rows = out;
    *n = (size_t)nr;
    return 0;
}

int warren_plan_mark_published(warren_store *st, const char *const *keys, size_t n, int *marked,
                               warren_error *err)
{
    buf a = {0};
    PGresult *res = NULL;
    int rc;

    if (marked)
        *marked = 0;
    if (n == 0)
        return 0;
    arr_open(&a);
    for (size_t i = 0; i < n; i++)
        arr_elem(&a, keys[i]);
    arr_close(&a);
    if (a.err) {
        free(a.p);
        return oom(err);
    }
    {
        const char *p[] = {a.p};
        rc = warren__store_exec_prepared(st, "plan_mark_published", SQL_MARK_PUBLISHED, 1, p, &res,
                                         "marking runs published", err);
    }
    free(a.p);
    if (rc != 0)
        return rc;
    if (marked)
        *marked = warren__store_cmd_tuples(res);
    PQclear(res);
    return 0;
}

int warren_plan_mark_publish_error(warren_store *st, const char *key, const char *error,
                                   int64_t retry_ms, warren_error *err)
{
    char a[24];
    const char *p[] = {key, error, warren__store_int_param(retry_ms, a, sizeof(a))};
    return warren__store_exec_prepared(st, "plan_mark_publish_error", SQL_MARK_PUBLISH_ERROR, 3, p,
                                       NULL, "recording a publish error", err);
}

int warren_plan_mark_unpublishable(warren_store *st, const char *key, const char *error,
                                   warren_error *err)
{
    const char *p[] = {key, error};
    return warren__store_exec_prepared(st, "plan_mark_unpublishable", SQL_MARK_UNPUBLISHABLE, 2, p,
                                       NULL, "recording a run that cannot be published", err);
}

/* ------------------------------------------------------------------ outbox */

void warren_plan_outbox_rows_free(warren_outbox_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].exchange);
        free(rows[i].routing_key);
        free(rows[i].message_id);
        free(rows[i].type);
        free(rows[i].body);
        for (size_t k = 0; k < rows[i].nheaders; k++) {
            free(rows[i].headers[k].key);
            free(rows[i].headers[k].value);
        }
        free(rows[i].headers);
    }
    free(rows);
}

int warren_plan_outbox_events_waiting(warren_store *st, int64_t from_id, int cap, int64_t ripe_ms,
                                      int *count, int *ripe, warren_error *err)
{
    char a[24], b[24], c[24];
    const char *p[] = {warren__store_int_param(from_id, a, sizeof(a)),
                       warren__store_int_param(cap, b, sizeof(b)),
                       warren__store_int_param(ripe_ms, c, sizeof(c))};
    PGresult *res = NULL;
    int rc =
        warren__store_exec_prepared(st, "plan_outbox_events_waiting", SQL_OUTBOX_EVENTS_WAITING, 3,
                                    p, &res, "counting the events waiting", err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) != 1 || warren__store_get_int(res, 0, 0, count) != 0 ||
        warren__store_get_bool(res, 0, 1, ripe) != 0) {
        PQclear(res);
        return bad_row(err, "counting the events waiting");
    }
    PQclear(res);
    return 0;
}

int warren_plan_outbox_select(warren_store *st, int limit, warren_outbox_kind kind, int64_t from_id,
                              int64_t ripe_ms, warren_outbox_row **rows, size_t *n,
                              warren_error *err)
{
    static const struct {
        const char *name, *sql;
        int nparams;
    } q[] = {{"plan_outbox_select", SQL_OUTBOX_SELECT, 1},
             {"plan_outbox_select_urgent", SQL_OUTBOX_SELECT_URGENT, 1},
             {"plan_outbox_select_events", SQL_OUTBOX_SELECT_EVENTS, 3}};
    char a[24], b[24], c[24];
    const char *p[] = {warren__store_int_param(limit, a, sizeof(a)),
                       warren__store_int_param(from_id, b, sizeof(b)),
                       warren__store_int_param(ripe_ms, c, sizeof(c))};
    PGresult *res = NULL;
    warren_outbox_row *out = NULL;
    buf ids = {0};
    int rc, nr;

    *rows = NULL;
    *n = 0;
    rc = warren__store_exec_prepared(st, q[kind].name, q[kind].sql, q[kind].nparams, p, &res,
                                     "selecting outbox rows", err);
    if (rc != 0)
        return rc;
    nr = PQntuples(res);
    if (nr == 0) {
        PQclear(res);
        return 0;
    }
    if ((out = calloc((size_t)nr, sizeof(*out))) == NULL) {
        PQclear(res);
        return oom(err);
    }
    arr_open(&ids);
    for (int i = 0; i < nr; i++) {
        warren_outbox_row *o = &out[i];
        if (warren__store_get_int64(res, i, 0, &o->id) != 0)
            goto bad;
        o->exchange = dup_or_null(warren__store_get_text(res, i, 1));
        o->routing_key = dup_or_null(warren__store_get_text(res, i, 2));
        o->message_id = dup_or_null(warren__store_get_text(res, i, 3));
        o->type = dup_or_null(warren__store_get_text(res, i, 4));
        o->body = dup_or_null(warren__store_get_text(res, i, 5));
        if (warren__store_get_bool(res, i, 6, &o->ripe) != 0)
            goto bad;
        if (!o->exchange || !o->routing_key || !o->body)
            goto bad;
        arr_elem(&ids, warren__store_get_text(res, i, 0));
    }
    arr_close(&ids);
    PQclear(res);
    res = NULL;
    if (ids.err) {
        warren_plan_outbox_rows_free(out, (size_t)nr);
        free(ids.p);
        return oom(err);
    }
    {
        const char *hp[] = {ids.p};
        rc = warren__store_exec_prepared(st, "plan_outbox_headers", SQL_OUTBOX_HEADERS, 1, hp, &res,
                                         "reading outbox headers", err);
    }
    free(ids.p);
    if (rc != 0) {
        warren_plan_outbox_rows_free(out, (size_t)nr);
        return rc;
    }
    /* Rows come ordered by id, as the outbox rows are. */
    for (int h = 0, i = 0; h < PQntuples(res); h++) {
        int64_t id;
        if (warren__store_get_int64(res, h, 0, &id) != 0)
            continue;
        while (i < nr && out[i].id != id)
            i++;
        if (i == nr)
            break;
        warren_outbox_row *o = &out[i];
        warren_outbox_header *nh = realloc(o->headers, (o->nheaders + 1) * sizeof(*nh));
        if (nh == NULL) {
            PQclear(res);
            warren_plan_outbox_rows_free(out, (size_t)nr);
            return oom(err);
        }
        o->headers = nh;
        nh[o->nheaders].key = dup_or_null(warren__store_get_text(res, h, 1));
        nh[o->nheaders].value = dup_or_null(warren__store_get_text(res, h, 2));
        o->nheaders++;
        if (nh[o->nheaders - 1].key == NULL || nh[o->nheaders - 1].value == NULL) {
            PQclear(res);
            warren_plan_outbox_rows_free(out, (size_t)nr);
            return oom(err);
        }
    }
    PQclear(res);
    *rows = out;
    *n = (size_t)nr;
    return 0;
bad:
    free(ids.p);
    warren_plan_outbox_rows_free(out, (size_t)nr);
    PQclear(res);
    return bad_row(err, "selecting outbox rows");
}

int warren_plan_outbox_delete(warren_store *st, const int64_t *ids, size_t n, warren_error *err)
{
    buf a = {0};
    char nb[24];
    int rc;

    if (n == 0)
        return 0;
    arr_open(&a);
    for (size_t i = 0; i < n; i++)
        arr_elem(&a, warren__store_int_param(ids[i], nb, sizeof(nb)));
    arr_close(&a);
    if (a.err) {
        free(a.p);
        return oom(err);
    }
    {
        const char *p[] = {a.p};
        rc = warren__store_exec_prepared(st, "plan_outbox_delete", SQL_OUTBOX_DELETE, 1, p, NULL,
                                         "deleting published outbox rows", err);
    }
    free(a.p);
    return rc;
}

/* -------------------------------------------------------------- reconciler */

int warren_plan_reconcile_published(warren_store *st, int64_t grace_ms, int limit, int *n,
                                    warren_error *err)
{
    char a[24], b[24];
    const char *p[] = {warren__store_int_param(grace_ms, a, sizeof(a)),
                       warren__store_int_param(limit, b, sizeof(b))};
    PGresult *res = NULL;
    int rc = warren__store_exec_prepared(st, "plan_reconcile", SQL_RECONCILE, 2, p, &res,
                                         "reconciling published runs", err);
    *n = 0;
    if (rc != 0)
        return rc;
    *n = warren__store_cmd_tuples(res);
    PQclear(res);
    return 0;
}

int warren_plan_reap(warren_store *st, int max, int *n, warren_error *err)
{
    char a[24];
    const char *p[] = {warren__store_int_param(max, a, sizeof(a))};
    PGresult *res = NULL;
    int exists = 0, rc;

    *n = 0;
    rc = warren__store_exec_prepared(st, "plan_reap_exists", SQL_REAP_EXISTS, 0, NULL, &res,
                                     "looking for warren.reap_expired_leases", err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) != 1 || warren__store_get_bool(res, 0, 0, &exists) != 0)
        exists = 0;
    PQclear(res);
    if (!exists)
        return warren_error_set(err, WARREN_ENOENT,
                                "warren.reap_expired_leases is missing (run `warren migrate`)");
    rc = warren__store_exec_prepared(st, "plan_reap", SQL_REAP, 1, p, &res,
                                     "reaping expired worker leases", err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) == 1)
        (void)warren__store_get_int(res, 0, 0, n);
    PQclear(res);
    return 0;
}
