/* store_sync.c: `warren sync`: the config's jobs upserted into warren.jobs in
 * one transaction, with their planned runs following pause, resume, removal
 * and schedule changes. API jobs (origin 'api', docs/api-jobs.md) are never
 * synced: sync only copies a changed template's settings to its API jobs,
 * pauses those of a removed template and resumes them when it is back. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/hash.h>

#include "buf.h"
#include "store_int.h"

/* The sync lock: warren.sync_state locked IN SHARE ROW EXCLUSIVE MODE (it
 * conflicts with itself, not with the FOR SHARE row locks of the Job API)
 * until the commit. Only a login with UPDATE, DELETE or TRUNCATE on the
 * table (its owner, a superuser) can take it, so no producer or worker login
 * can stall a sync the way any login could hold an advisory lock key. Then
 * its one row FOR UPDATE: the Job API's callers (which hold it FOR SHARE
 * until they commit) are done, and new ones wait for this sync. */
static const char SYNC_LOCK_SQL[] = "LOCK TABLE warren.sync_state IN SHARE ROW EXCLUSIVE MODE; "
                                    "SELECT 1 FROM warren.sync_state FOR UPDATE";

/* The sync's bound on every lock wait (for this transaction only), the
 * transaction's start (to name the sessions older than it after a timeout)
 * and whether the schema has what sync writes. */
static const char SYNC_BEGIN_SQL[] = "SELECT set_config('lock_timeout', $1, true), now()::text,"
                                     "       to_regclass('warren.jobs') IS NOT NULL AND "
                                     "to_regclass('warren.sync_state') IS NOT NULL";

/* After a lock timeout (the transaction rolled back): the sessions of this
 * database that hold a lock stronger than a plain read on a table of schema
 * warren and whose transaction began before the sync's ($1), oldest first.
 * A login that is not a superuser sees NULL for other logins' state, start
 * and query (pg_stat_activity): such sessions are listed too. */
static const char SYNC_BLOCKERS_SQL[] =
    "SELECT a.pid, coalesce(a.usename, '?'), coalesce(nullif(a.application_name, ''), '-'),"
    "  coalesce(a.state, '?'),"
    "  coalesce(round(extract(epoch FROM clock_timestamp() - a.xact_start))::bigint::text, '?'),"
    "  coalesce(left(regexp_replace(a.query, '[[:cntrl:][:space:]]+', ' ', 'g'), 60), '?')"
    " FROM pg_stat_activity a"
    " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
    "   AND (a.xact_start IS NULL OR a.xact_start <= $1::timestamptz)"
    "   AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
    "               JOIN pg_namespace n ON n.oid = c.relnamespace"
    "               WHERE l.pid = a.pid AND l.granted AND n.nspname = 'warren'"
    "                 AND l.mode <> 'AccessShareLock')"
    " ORDER BY a.xact_start NULLS LAST, a.pid LIMIT 4";

int warren_job_partition(const char *name, int partitions)
{
    if (partitions <= 1 || name == NULL)
        return 0;
    return (int)(warren_hash_fnv1a32(name) % (uint32_t)partitions);
}

/* The JSON document sync sends as one parameter is built in the library's
 * capped buffer (buf.h). */
typedef warren__buf dbuf;

/* A JSON string literal (UTF-8 passes through; the server validates it). */
static void db_json_str(dbuf *b, const char *s)
{
    warren__buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p != '\0'; p++) {
        if (*p == '"')
            warren__buf_puts(b, "\\\"");
        else if (*p == '\\')
            warren__buf_puts(b, "\\\\");
        else if (*p < 0x20)
            warren__buf_printf(b, "\\u%04x", *p);
        else
            warren__buf_add(b, (const char *)p, 1);
    }
    warren__buf_puts(b, "\"");
}

static void db_key_str(dbuf *b, const char *key, const char *val)
{
    warren__buf_printf(b, ",\"%s\":", key);
    db_json_str(b, val);
}

/* The handler column: {"kind":"exec","argv":[...],"shell":false},
 * {"kind":"sql","sql":"..."}, {"kind":"c","name":"..."} or {"kind":"none"}. */
static void db_handler(dbuf *b, const warren_job *j)
{
    switch (j->handler) {
    case WARREN_HANDLER_EXEC:
        warren__buf_puts(b, "{\"kind\":\"exec\",\"argv\":[");
        for (size_t i = 0; j->exec_argv != NULL && j->exec_argv[i] != NULL; i++) {
            if (i > 0)
                warren__buf_puts(b, ",");
            db_json_str(b, j->exec_argv[i]);
        }
        warren__buf_printf(b, "],\"shell\":%s}", j->exec_shell ? "true" : "false");
        return;
    case WARREN_HANDLER_SQL:
        warren__buf_puts(b, "{\"kind\":\"sql\"");
        db_key_str(b, "sql", j->sql);
        warren__buf_puts(b, "}");
        return;
    case WARREN_HANDLER_C:
        warren__buf_puts(b, "{\"kind\":\"c\"");
        db_key_str(b, "name", j->c_handler);
        warren__buf_puts(b, "}");
        return;
    case WARREN_HANDLER_NONE:
        break;
    }
    warren__buf_puts(b, "{\"kind\":\"none\"}");
}

/* One JSON array of the config's jobs, keys named as warren.jobs columns. */
static int jobs_document(const warren_config *cfg, int partitions, dbuf *b, warren_error *err)
{
    warren__buf_puts(b, "[");
    for (size_t i = 0; i < cfg->njobs; i++) {
        const warren_job *j = &cfg->jobs[i];
        if (j->name == NULL || j->queue == NULL || (j->schedule == NULL && !j->is_template))
            return warren_error_set(err, WARREN_EINVAL,
                                    "sync: job %zu (\"%s\") lacks a name, queue or schedule", i,
                                    j->name ? j->name : "");
        warren__buf_puts(b, i > 0 ? ",{" : "{");
        warren__buf_puts(b, "\"name\":");
        db_json_str(b, j->name);
        db_key_str(b, "schedule_kind", j->is_template ? "none" : warren_sched_kind_name(j->kind));
        db_key_str(b, "expression", j->is_template ? "" : j->schedule);
        db_key_str(b, "timezone", j->timezone ? j->timezone : "UTC");
        db_key_str(b, "queue", j->queue);
        warren__buf_puts(b, ",\"payload\":");
        warren__buf_puts(b, j->payload_json && j->payload_json[0] ? j->payload_json : "{}");
        warren__buf_puts(b, ",\"handler\":");
        db_handler(b, j);
        db_key_str(b, "misfire", warren_misfire_name(j->misfire));
        warren__buf_printf(b, ",\"max_catch_up\":%d", j->max_catch_up);
        db_key_str(b, "overlap", warren_overlap_name(j->overlap));
        warren__buf_printf(b, ",\"retry_max_attempts\":%d", j->retry_max_attempts);
        warren__buf_printf(b, ",\"retry_base_ms\":%" PRId64, j->retry_base_ms);
        warren__buf_printf(b, ",\"retry_cap_ms\":%" PRId64, j->retry_cap_ms);
        warren__buf_printf(b, ",\"lease_ms\":%" PRId64, j->lease_ms);
        warren__buf_printf(b, ",\"timeout_ms\":%" PRId64, j->timeout_ms);
        warren__buf_printf(b, ",\"jitter_ms\":%" PRId64, j->jitter_ms);
        warren__buf_printf(b, ",\"paused\":%s", j->paused ? "true" : "false");
        /* Written only when set: the hash of a job without them stays what
         * it was before these settings existed (no spurious "changed"). */
        if (j->is_template)
            warren__buf_puts(b, ",\"is_template\":true");
        if (j->max_running > 0)
            warren__buf_printf(b, ",\"max_running\":%d", j->max_running);
        if (j->max_running_per_tenant > 0)
            warren__buf_printf(b, ",\"max_running_per_tenant\":%d", j->max_running_per_tenant);
        warren__buf_printf(b, ",\"partition\":%d}", warren_job_partition(j->name, partitions));
    }
    warren__buf_puts(b, "]");
    if (b->err == WARREN_ERANGE)
        return warren_error_set(err, WARREN_ERANGE,
                                "the jobs document passes PostgreSQL's 1 GB value limit: "
                                "sync fewer jobs at a time");
    if (b->err)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    return 0;
}

/* Sync stages the config's jobs in a temporary table (parsed once from one
 * JSON parameter, then ANALYZEd so the joins below are hash joins: with
 * jsonb_array_elements' default estimate of 100 rows, 100,000 jobs took
 * nested loops for minutes). config_hash = md5 of the job's settings as
 * canonical jsonb text (jsonb sorts keys and drops whitespace), without the
 * partition, which follows planner.partitions rather than the job. The
 * primary key rejects a duplicate name. */
static const char SYNC_STAGE_SQL[] =
    "CREATE TEMPORARY TABLE warren_sync_cfg ("
    "  name text PRIMARY KEY, schedule_kind text, expression text, timezone text, queue text,"
    "  payload jsonb, handler jsonb, misfire text, max_catch_up int, overlap text,"
    "  retry_max_attempts int, retry_base_ms bigint, retry_cap_ms bigint, lease_ms bigint,"
    "  timeout_ms bigint, jitter_ms bigint, paused boolean, partition int, config_hash text,"
    "  is_template boolean, max_running int, max_running_per_tenant int,"
    "  existed boolean NOT NULL DEFAULT false, old_paused boolean, old_removed boolean,"
    "  old_kind text, old_expr text, old_tz text, old_hash text,"
    "  resched boolean NOT NULL DEFAULT false"
    ") ON COMMIT DROP";

static const char SYNC_LOAD_SQL[] =
    "INSERT INTO warren_sync_cfg (name, schedule_kind, expression, timezone, queue, payload,"
    "    handler, misfire, max_catch_up, overlap, retry_max_attempts, retry_base_ms,"
    "    retry_cap_ms, lease_ms, timeout_ms, jitter_ms, paused, partition, config_hash,"
    "    is_template, max_running, max_running_per_tenant)"
    "  SELECT r.name, r.schedule_kind, r.expression, r.timezone, r.queue, r.payload, r.handler,"
    "    r.misfire, r.max_catch_up, r.overlap, r.retry_max_attempts, r.retry_base_ms,"
    "    r.retry_cap_ms, r.lease_ms, r.timeout_ms, r.jitter_ms, r.paused, r.partition,"
    "    md5((e - 'partition')::text), coalesce(r.is_template, false), r.max_running,"
    "    r.max_running_per_tenant"
    "  FROM jsonb_array_elements($1::jsonb) AS e,"
    "       jsonb_to_record(e) AS r(name text, schedule_kind text, expression text,"
    "         timezone text, queue text, payload jsonb, handler jsonb, misfire text,"
    "         max_catch_up int, overlap text, retry_max_attempts int, retry_base_ms bigint,"
    "         retry_cap_ms bigint, lease_ms bigint, timeout_ms bigint, jitter_ms bigint,"
    "         paused boolean, partition int, is_template boolean, max_running int,"
    "         max_running_per_tenant int)";

/* A config job may not take the name of a live API job (that job is the
 * application's: delete it with warren.delete_job first). */
static const char SYNC_CLASH_SQL[] =
    "SELECT c.name, coalesce(j.template, '?'), coalesce(j.created_by, '?'),"
    "  warren.plan_utc(j.created_at), coalesce(j.tenant, '')"
    " FROM warren_sync_cfg c JOIN warren.jobs j USING (name)"
    " WHERE j.origin = 'api' AND NOT j.removed ORDER BY c.name LIMIT 11";

/* --take-over: a name the config lacks ($1 text[]). */
static const char SYNC_TAKE_MISSING_SQL[] =
    "SELECT n FROM unnest($1::text[]) n"
    " WHERE NOT EXISTS (SELECT 1 FROM warren_sync_cfg c WHERE c.name = n) LIMIT 1";

/* A future scheduled run never claimed (the planner plans it again). */
#define TAKE_PLANNED                                                                               \
    "r.origin IN ('schedule', 'misfire') AND r.attempt = 0"                                        \
    " AND r.state IN ('planned', 'published') AND r.due_at > now()"

/* --take-over: each named live API job becomes the config's job. Its future
 * scheduled runs never claimed are dropped (the config's schedule plans its
 * own fire times under the same keys, as after any schedule change); its
 * other unclaimed runs are cancelled with a note (an enqueued run would
 * otherwise run the config job's handler with the application's payload);
 * runs started and attempts stay (history). The job's cursor starts again
 * from now and its hash is emptied, so the upsert below writes every setting
 * from the config. */
static const char SYNC_TAKE_OVER_SQL[] =
    "WITH t AS ("
    "  SELECT j.name, j.template, j.tenant, j.created_by FROM warren.jobs j"
    "  WHERE j.name = ANY ($1::text[]) AND j.origin = 'api' AND NOT j.removed FOR UPDATE"
    "), dropped AS ("
    "  DELETE FROM warren.runs r USING t WHERE r.job = t.name AND " TAKE_PLANNED "  RETURNING r.job"
    "), cancelled AS ("
    "  UPDATE warren.runs r SET state = 'cancelled', finished_at = now(), cap_released_at = NULL,"
    "    note = warren.plan_note(r.note, format('cancelled: job taken over by the config at %s "
    "(warren sync --take-over, login %s)', warren.plan_utc(now()), session_user))"
    "  FROM t WHERE r.job = t.name AND r.state IN ('planned', 'published', 'retrying', 'waiting')"
    "    AND NOT (" TAKE_PLANNED ")"
    "  RETURNING r.job"
    "), job AS ("
    "  UPDATE warren.jobs j SET origin = 'config', template = NULL, tenant = NULL,"
    "    paused_by_template = false, config_hash = '', next_fire_at = NULL, updated_at = now(),"
    "    note = warren.plan_note(j.note, format('taken over at %s by warren sync --take-over "
    "(login %s): it was an API job of template %s%s made by %s; %s unclaimed runs cancelled, "
    "%s planned runs dropped', warren.plan_utc(now()), session_user, t.template,"
    "      CASE WHEN t.tenant IS NULL THEN '' ELSE format(' (tenant %s)', t.tenant) END,"
    "      coalesce(t.created_by, '?'),"
    "      (SELECT count(*) FROM cancelled c WHERE c.job = t.name),"
    "      (SELECT count(*) FROM dropped d WHERE d.job = t.name)))"
    "  FROM t WHERE j.name = t.name RETURNING j.name"
    ")"
    "SELECT t.name, t.template, t.created_by,"
    "  (SELECT count(*) FROM cancelled c WHERE c.job = t.name),"
    "  (SELECT count(*) FROM dropped d WHERE d.job = t.name)"
    " FROM t JOIN job USING (name) ORDER BY t.name";

/* What each job was before this sync (one snapshot, taken under the sync
 * lock): decides what happens to its not-yet-run runs below. */
static const char SYNC_SNAPSHOT_SQL[] =
    "UPDATE warren_sync_cfg c SET existed = true, old_paused = j.paused,"
    "  old_removed = j.removed, old_kind = j.schedule_kind, old_expr = j.expression,"
    "  old_tz = j.timezone, old_hash = j.config_hash,"
    "  resched = (j.schedule_kind, j.expression, j.timezone)"
    "            IS DISTINCT FROM (c.schedule_kind, c.expression, c.timezone)"
    " FROM warren.jobs j WHERE j.name = c.name";

/* The upsert. A row is written only when its hash differs, it was removed,
 * or its partition moved (unchanged rows are filtered before the INSERT,
 * so they are not even locked); the config's paused value is applied with a
 * settings change (so `warren pause` on an unchanged job survives a sync).
 * A changed schedule, or a job coming back, restarts the planner's cursor
 * (next_fire_at NULL = from now). `old` sees the rows as they were before
 * the INSERT (one snapshot for the whole statement). */
static const char SYNC_UPSERT_SQL[] =
    "WITH up AS ("
    "  INSERT INTO warren.jobs AS j (name, schedule_kind, expression, timezone, queue, payload,"
    "    handler, misfire, max_catch_up, overlap, retry_max_attempts, retry_base_ms,"
    "    retry_cap_ms, lease_ms, timeout_ms, jitter_ms, paused, paused_at, partition,"
    "    config_hash, is_template, max_running, max_running_per_tenant, next_fire_at,"
    "    created_by)"
    "  SELECT name, schedule_kind, expression, timezone, queue, payload, handler, misfire,"
    "    max_catch_up, overlap, retry_max_attempts, retry_base_ms, retry_cap_ms, lease_ms,"
    "    timeout_ms, jitter_ms, paused, CASE WHEN paused THEN now() END, partition, config_hash,"
    "    is_template, max_running, max_running_per_tenant,"
    "    CASE WHEN is_template THEN 'infinity'::timestamptz END, session_user"
    "  FROM warren_sync_cfg c"
    "  WHERE NOT EXISTS (SELECT 1 FROM warren.jobs o WHERE o.name = c.name"
    "                    AND NOT o.removed AND o.config_hash = c.config_hash"
    "                    AND o.partition = c.partition)"
    "  ON CONFLICT (name) DO UPDATE SET"
    "    schedule_kind = EXCLUDED.schedule_kind, expression = EXCLUDED.expression,"
    "    timezone = EXCLUDED.timezone, queue = EXCLUDED.queue, payload = EXCLUDED.payload,"
    "    handler = EXCLUDED.handler, misfire = EXCLUDED.misfire,"
    "    max_catch_up = EXCLUDED.max_catch_up, overlap = EXCLUDED.overlap,"
    "    retry_max_attempts = EXCLUDED.retry_max_attempts,"
    "    retry_base_ms = EXCLUDED.retry_base_ms, retry_cap_ms = EXCLUDED.retry_cap_ms,"
    "    lease_ms = EXCLUDED.lease_ms, timeout_ms = EXCLUDED.timeout_ms,"
    "    jitter_ms = EXCLUDED.jitter_ms,"
    "    paused = CASE WHEN j.removed OR j.config_hash IS DISTINCT FROM EXCLUDED.config_hash"
    "                  THEN EXCLUDED.paused ELSE j.paused END,"
    "    paused_at = CASE"
    "      WHEN NOT (j.removed OR j.config_hash IS DISTINCT FROM EXCLUDED.config_hash)"
    "        THEN j.paused_at"
    "      WHEN NOT EXCLUDED.paused THEN NULL"
    "      WHEN j.paused THEN j.paused_at"
    "      ELSE now() END,"
    "    removed = false,"
    "    partition = EXCLUDED.partition,"
    "    is_template = EXCLUDED.is_template, max_running = EXCLUDED.max_running,"
    "    max_running_per_tenant = EXCLUDED.max_running_per_tenant,"
    "    origin = 'config', template = NULL, tenant = NULL, paused_by_template = false,"
    "    next_fire_at = CASE"
    "      WHEN EXCLUDED.is_template THEN 'infinity'::timestamptz"
    "      WHEN j.removed OR (j.schedule_kind, j.expression, j.timezone) IS DISTINCT FROM"
    "           (EXCLUDED.schedule_kind, EXCLUDED.expression, EXCLUDED.timezone)"
    "        THEN NULL ELSE j.next_fire_at END,"
    "    config_hash = EXCLUDED.config_hash,"
    "    updated_at = now()"
    "  WHERE j.removed OR j.config_hash IS DISTINCT FROM EXCLUDED.config_hash"
    "     OR j.partition IS DISTINCT FROM EXCLUDED.partition"
    "  RETURNING j.name"
    ")"
    "SELECT up.name,"
    "  CASE WHEN NOT c.existed OR c.old_removed THEN 'added'"
    "       WHEN c.old_hash IS DISTINCT FROM c.config_hash THEN 'changed'"
    "       ELSE 'moved' END AS what"
    " FROM up JOIN warren_sync_cfg c USING (name)"
    " ORDER BY up.name";

/* Runs the planner already materialised (up to its horizon ahead) follow the
 * job, with the same rules and notes as `warren pause` / `warren resume`
 * (store_plan.c): only scheduled runs (origin schedule or misfire) never
 * claimed (attempt 0) are touched; triggered and backfilled runs, and
 * anything started, stay. A published message whose run was deleted or
 * cancelled finds nothing to claim and is dropped by the worker.
 *
 * Schedule changed, or job restored: its future unclaimed runs (planned,
 * published, or cancelled by a pause) belonged to the old definition and are
 * deleted, so the planner, starting again from now, can plan the new fire
 * times under the same keys. */
static const char SYNC_RUNS_REPLAN_SQL[] =
    "DELETE FROM warren.runs r USING warren_sync_cfg c"
    " WHERE r.job = c.name AND c.existed AND (c.resched OR c.old_removed)"
    "   AND r.origin IN ('schedule', 'misfire') AND r.attempt = 0 AND r.due_at > now()"
    "   AND (r.state IN ('planned', 'published')"
    "        OR (r.state = 'cancelled' AND r.note LIKE '%cancelled: job paused at %'))";

/* Unpaused by the config (as `warren resume`): the runs the pause cancelled
 * are deleted and the cursor moves back to the first of them, so the planner
 * plans them again under the job's misfire policy. */
static const char SYNC_RUNS_RESUME_SQL[] =
    "WITH c AS ("
    "  SELECT c.name FROM warren_sync_cfg c JOIN warren.jobs j USING (name)"
    "  WHERE c.existed AND NOT c.old_removed AND NOT c.resched AND c.old_paused AND NOT j.paused"
    "), d AS ("
    "  DELETE FROM warren.runs r USING c"
    "  WHERE r.job = c.name AND r.state = 'cancelled' AND r.origin IN ('schedule', 'misfire')"
    "    AND r.attempt = 0 AND r.note LIKE '%cancelled: job paused at %'"
    "  RETURNING r.job, r.scheduled_at"
    ")"
    "UPDATE warren.jobs j SET next_fire_at = LEAST(j.next_fire_at, m.first)"
    " FROM (SELECT job, min(scheduled_at) AS first FROM d GROUP BY job) m"
    " WHERE j.name = m.job";

/* The note line the pause writes; `warren resume` looks for it. */
#define PAUSE_NOTE(why)                                                                            \
    "'cancelled: job paused at ' ||"                                                               \
    " to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') || ' (" why ")'"
#define APPEND_NOTE(line)                                                                          \
    "CASE WHEN r.note IS NULL OR r.note = '' THEN " line " ELSE r.note || E'\\n' || " line " END"

/* Paused by the config (as `warren pause`): future unclaimed runs cancelled. */
static const char SYNC_RUNS_PAUSE_SQL[] =
    "UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),"
    "  note = " APPEND_NOTE(PAUSE_NOTE(
        "paused in the config; warren sync")) ""
                                              " FROM warren_sync_cfg c JOIN warren.jobs j USING "
                                              "(name)"
                                              " WHERE r.job = c.name AND c.existed AND NOT "
                                              "c.old_paused AND NOT c.old_removed AND j.paused"
                                              "   AND r.origin IN ('schedule', 'misfire') AND "
                                              "r.state IN ('planned', 'published')"
                                              "   AND r.due_at > now()";

/* Jobs no longer in the config: paused and marked, never deleted; their
 * future unclaimed runs cancelled as by a pause. */
static const char SYNC_REMOVE_SQL[] =
    "WITH rm AS ("
    "  UPDATE warren.jobs j SET removed = true, paused = true,"
    "    paused_at = CASE WHEN j.paused THEN j.paused_at ELSE now() END, updated_at = now()"
    "  WHERE NOT j.removed AND j.origin = 'config'"
    "    AND NOT EXISTS (SELECT 1 FROM warren_sync_cfg c WHERE c.name = j.name)"
    "  RETURNING j.name"
    "), cancelled AS ("
    "  UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),"
    "    note = " APPEND_NOTE(PAUSE_NOTE(
        "removed from the config; warren sync")) ""
                                                 "  FROM rm WHERE r.job = rm.name"
                                                 "    AND r.origin IN ('schedule', 'misfire') AND "
                                                 "r.state IN ('planned', 'published')"
                                                 "    AND r.due_at > now()"
                                                 ")"
                                                 "SELECT name FROM rm ORDER BY name";

/* ---- API jobs (docs/api-jobs.md, "warren sync and API jobs") ---- */

/* A changed template's settings reach its API jobs (queue, handler, misfire,
 * overlap, retry, lease, timeout): what the template fixes. Only templates
 * whose settings changed in this sync are looked at, and only API jobs whose
 * copy differs are written: a sync that changes no template writes no API
 * job. An API job's own fields (schedule, zone, payload, jitter, tenant,
 * paused) are never touched. */
static const char SYNC_API_PROPAGATE_SQL[] =
    "UPDATE warren.jobs a SET queue = t.queue, handler = t.handler, misfire = t.misfire,"
    "  max_catch_up = t.max_catch_up, overlap = t.overlap,"
    "  retry_max_attempts = t.retry_max_attempts, retry_base_ms = t.retry_base_ms,"
    "  retry_cap_ms = t.retry_cap_ms, lease_ms = t.lease_ms, timeout_ms = t.timeout_ms,"
    "  updated_at = now()"
    " FROM warren_sync_cfg c JOIN warren.jobs t ON t.name = c.name"
    " WHERE c.is_template AND (NOT c.existed OR c.old_removed"
    "                          OR c.old_hash IS DISTINCT FROM c.config_hash)"
    "   AND a.template = t.name AND a.origin = 'api'"
    "   AND (a.queue, a.handler, a.misfire, a.max_catch_up, a.overlap, a.retry_max_attempts,"
    "        a.retry_base_ms, a.retry_cap_ms, a.lease_ms, a.timeout_ms)"
    "       IS DISTINCT FROM (t.queue, t.handler, t.misfire, t.max_catch_up, t.overlap,"
    "        t.retry_max_attempts, t.retry_base_ms, t.retry_cap_ms, t.lease_ms, t.timeout_ms)";

/* A template removed from the config (or no longer a template): its active
 * API jobs are paused, marked paused_by_template and noted, never deleted;
 * their future unclaimed runs are cancelled as by a pause. API jobs the
 * application had paused already stay as they are (and unmarked). */
static const char SYNC_API_PAUSE_SQL[] =
    "WITH p AS ("
    "  UPDATE warren.jobs a SET paused = true, paused_at = now(), paused_by_template = true,"
    "    updated_at = now(),"
    "    note = warren.plan_note(a.note, format('paused at %s by warren sync: its template %s '"
    "      || 'was removed from the config (or is no longer a template); it resumes when the '"
    "      || 'template is back', warren.plan_utc(now()), a.template))"
    "  FROM warren.jobs t WHERE t.name = a.template AND a.origin = 'api' AND NOT a.removed"
    "    AND NOT a.paused AND (t.removed OR NOT t.is_template)"
    "  RETURNING a.name"
    "), c AS ("
    "  UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),"
    "    note = " APPEND_NOTE(PAUSE_NOTE("its template was removed from the config; warren "
                                         "sync")) ""
                                                  "  FROM p WHERE r.job = p.name AND r.origin "
                                                  "IN ('schedule', 'misfire')"
                                                  "    AND r.state IN ('planned', 'published') "
                                                  "AND r.due_at > now()"
                                                  ")"
                                                  "SELECT count(*) FROM p";

/* The template is back: the API jobs its removal paused resume as by
 * `warren resume` (the runs the pause cancelled are deleted, the cursor
 * moves back to the first of them, the misfire policy applies). */
static const char SYNC_API_RESUME_SQL[] =
    "WITH t AS ("
    "  SELECT a.name FROM warren.jobs a JOIN warren.jobs t ON t.name = a.template"
    "  WHERE a.paused_by_template AND a.origin = 'api' AND NOT a.removed"
    "    AND NOT t.removed AND t.is_template"
    "), d AS ("
    "  DELETE FROM warren.runs r USING t"
    "  WHERE r.job = t.name AND r.state = 'cancelled' AND r.origin IN ('schedule', 'misfire')"
    "    AND r.attempt = 0 AND r.note LIKE '%cancelled: job paused at %'"
    "  RETURNING r.job, r.scheduled_at"
    "), m AS (SELECT job, min(scheduled_at) AS first FROM d GROUP BY job)"
    "UPDATE warren.jobs a SET paused = false, paused_at = NULL, paused_by_template = false,"
    "  updated_at = now(), next_fire_at = LEAST(a.next_fire_at, m.first),"
    "  note = warren.plan_note(a.note, format('resumed at %s by warren sync: its template %s '"
    "    || 'is back in the config', warren.plan_utc(now()), a.template))"
    " FROM t LEFT JOIN m ON m.job = t.name WHERE a.name = t.name";

/* The partition count API jobs are placed by (warren.wp_job_partition):
 * recorded for warren.upsert_job(s); a change moves the API jobs too (their
 * placement, not one of their fields). $1 the count; returns the old one. */
static const char SYNC_STATE_SQL[] =
    "WITH o AS (SELECT partitions FROM warren.sync_state)"
    "INSERT INTO warren.sync_state (id, partitions) VALUES (true, $1::int)"
    " ON CONFLICT (id) DO UPDATE SET partitions = EXCLUDED.partitions, synced_at = now()"
    " RETURNING (SELECT partitions FROM o)";

static const char SYNC_API_REPARTITION_SQL[] =
    "UPDATE warren.jobs SET partition = warren.wp_job_partition(name, $1::int)"
    " WHERE origin = 'api' AND partition <> warren.wp_job_partition(name, $1::int)";

/* The count a one-row, one-column answer carries (0 when there is none). */
static int count_of(PGresult *res)
{
    int n = 0;
    if (PQntuples(res) != 1 || warren__store_get_int(res, 0, 0, &n) != 0 || n < 0)
        return 0;
    return n;
}

static int report_add(char ***arr, size_t *n, const char *name)
{
    char **p = realloc(*arr, (*n + 1) * sizeof(*p));

    if (p == NULL)
        return WARREN_ENOMEM;
    *arr = p;
    p[*n] = strdup(name);
    if (p[*n] == NULL)
        return WARREN_ENOMEM;
    (*n)++;
    return 0;
}

static void free_names(char **a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(a[i]);
    free(a);
}

void warren_sync_report_free(warren_sync_report *r)
{
    if (r == NULL)
        return;
    free_names(r->added, r->nadded);
    free_names(r->changed, r->nchanged);
    free_names(r->removed, r->nremoved);
    memset(r, 0, sizeof(*r));
}

/* The names of a take-over as a text[] literal into *out (new): valid job
 * names need no quoting. WARREN_EINVAL for a name that is not one. */
static int take_over_array(const warren_ops_sync_options *o, char **out, warren_error *err)
{
    dbuf b = {0};

    *out = NULL;
    warren__buf_puts(&b, "{");
    for (size_t i = 0; i < o->ntake_over; i++) {
        if (o->take_over[i] == NULL || !warren_job_name_valid(o->take_over[i])) {
            free(b.p);
            return warren_error_set(err, WARREN_EINVAL,
                                    "--take-over \"%.80s\" is not a job name "
                                    "([A-Za-z0-9][A-Za-z0-9._-]{0,199})",
                                    o->take_over[i] ? o->take_over[i] : "");
        }
        warren__buf_printf(&b, "%s%s", i ? "," : "", o->take_over[i]);
    }
    warren__buf_puts(&b, "}");
    if (b.err) {
        free(b.p);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    *out = b.p;
    return 0;
}

/* The error for config jobs named like live API jobs (res: SYNC_CLASH_SQL's
 * rows, at least one). */
static int clash_error(PGresult *res, warren_error *err)
{
    char more[600] = "", cmd[400] = "";
    int n = PQntuples(res), shown = n > 10 ? 10 : n;
    size_t len = 0, clen = 0;
    const char *tenant = PQgetvalue(res, 0, 4);

    for (int i = 0; i < shown; i++) {
        if (i > 0 && len < sizeof(more))
            len += (size_t)snprintf(more + len, sizeof(more) - len, "%s%s", i > 1 ? ", " : "",
                                    PQgetvalue(res, i, 0));
        if (clen < sizeof(cmd))
            clen += (size_t)snprintf(cmd + clen, sizeof(cmd) - clen, " --take-over %s",
                                     PQgetvalue(res, i, 0));
    }
    return warren_error_set(
        err, WARREN_EINVAL,
        "job \"%s\" of the config has the name of an API job (made by login %s at %s from "
        "template \"%s\"%s%s%s)%s%s%s: an application holds that name. Run `warren sync%s` to "
        "make it the config's job (its unclaimed runs are cancelled, its history kept, its note "
        "says who took it over), or rename the config job, or delete the API job first "
        "(SELECT warren.delete_job('%s'))",
        PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3), PQgetvalue(res, 0, 1),
        tenant[0] ? ", tenant \"" : "", tenant, tenant[0] ? "\"" : "", n > 1 ? "; so do " : "",
        more, n > 10 ? " and more" : "", cmd, PQgetvalue(res, 0, 0));
}

/* The message after a lock timeout (55P03): what timed out (failed, the
 * libpq message), the sessions that hold locks on warren's tables since
 * before the sync began (at xact_start) and the fix. */
static int timeout_error(warren_store *st, const char *failed, const char *xact_start,
                         int64_t timeout_ms, warren_error *err)
{
    PGresult *res = NULL;
    warren_error qerr = {0};
    const char *params[1] = {xact_start};
    char who[700] = "", pids[120] = "";
    size_t len = 0, plen = 0;
    int n = 0;

    if (warren__store_exec(st, SYNC_BLOCKERS_SQL, 1, params, &res, "find the blocking sessions",
                           &qerr) == 0) {
        n = PQntuples(res);
        for (int i = 0; i < n && len < sizeof(who); i++) {
            len += (size_t)snprintf(who + len, sizeof(who) - len,
                                    "%spid %s (login %s, application %s, %s, transaction open "
                                    "%s s, query \"%s\")",
                                    i ? "; " : "", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                                    PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
                                    PQgetvalue(res, i, 4), PQgetvalue(res, i, 5));
            if (plen < sizeof(pids))
                plen += (size_t)snprintf(pids + plen, sizeof(pids) - plen, "%s%s", i ? ", " : "",
                                         PQgetvalue(res, i, 0));
        }
        PQclear(res);
    }
    (void)failed;
    if (n == 0)
        return warren_error_set(
            err, WARREN_ETIMEOUT,
            "sync waited %lld ms for a lock and gave up; nothing was changed. No session holds a "
            "lock on warren's tables any more (%s): run warren sync again",
            (long long)timeout_ms, qerr.code ? qerr.message : "it ended meanwhile");
    return warren_error_set(
        err, WARREN_ETIMEOUT,
        "sync waited %lld ms for a lock and gave up; nothing was changed. Sessions holding locks "
        "on warren's tables since before this sync: %s. End that transaction (the application "
        "commits or rolls back; or SELECT pg_terminate_backend(%s)), then run warren sync again; "
        "--lock-timeout waits longer",
        (long long)timeout_ms, who, pids);
}

void warren_ops_sync_result_clear(warren_ops_sync_result *r)
{
    if (r == NULL)
        return;
    warren_sync_report_free(&r->report);
    for (size_t i = 0; i < r->ntaken_over; i++) {
        free(r->taken_over[i].name);
        free(r->taken_over[i].template);
        free(r->taken_over[i].created_by);
    }
    free(r->taken_over);
    memset(r, 0, sizeof(*r));
}

/* Takes over the API jobs o names (in the open transaction, after the
 * snapshot). */
static int take_over(warren_store *st, const warren_ops_sync_options *o,
                     warren_ops_sync_result *out, warren_error *err)
{
    PGresult *res = NULL;
    char *arr = NULL;
    const char *params[1];
    int rc, n;

    if (o->ntake_over == 0)
        return 0;
    if ((rc = take_over_array(o, &arr, err)) != 0)
        return rc;
    params[0] = arr;
    rc = warren__store_exec(st, SYNC_TAKE_MISSING_SQL, 1, params, &res,
                            "look for the jobs to take over", err);
    if (rc == 0 && PQntuples(res) > 0)
        rc = warren_error_set(err, WARREN_EINVAL,
                              "--take-over %s: the config has no job of that name (a config job "
                              "takes over the API job of its own name)",
                              PQgetvalue(res, 0, 0));
    PQclear(res);
    res = NULL;
    if (rc == 0)
        rc = warren__store_exec(st, SYNC_TAKE_OVER_SQL, 1, params, &res,
                                "take over API jobs for the config", err);
    free(arr);
    if (rc != 0)
        return rc;
    n = PQntuples(res);
    if (n > 0 && (out->taken_over = calloc((size_t)n, sizeof(*out->taken_over))) == NULL) {
        PQclear(res);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        warren_ops_taken_over *t = &out->taken_over[i];
        const char *tpl = warren__store_get_text(res, i, 1),
                   *by = warren__store_get_text(res, i, 2);
        t->name = strdup(PQgetvalue(res, i, 0));
        t->template = tpl ? strdup(tpl) : NULL;
        t->created_by = by ? strdup(by) : NULL;
        warren__store_get_int(res, i, 3, &t->runs_cancelled);
        warren__store_get_int(res, i, 4, &t->runs_dropped);
        out->ntaken_over++;
        if (t->name == NULL || (tpl && !t->template) || (by && !t->created_by)) {
            PQclear(res);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
    }
    PQclear(res);
    return 0;
}

int warren_store_sync(warren_store *st, const warren_config *cfg, warren_sync_report *report,
                      warren_error *err)
{
    warren_ops_sync_result r = {0};
    int rc = warren__store_sync(st, cfg, NULL, &r, err);

    if (report != NULL) {
        *report = r.report;
        memset(&r.report, 0, sizeof(r.report));
    }
    warren_ops_sync_result_clear(&r);
    return rc;
}

int warren__store_sync(warren_store *st, const warren_config *cfg, const warren_ops_sync_options *o,
                       warren_ops_sync_result *out, warren_error *err)
{
    static const warren_ops_sync_options defaults = {0};
    warren_sync_report rep = {0};
    warren_error e1 = {0};
    dbuf doc = {0};
    PGresult *res = NULL;
    const char *params[1];
    char timeout[24], xact_start[64] = "";
    int partitions = cfg->planner.partitions > 0 ? cfg->planner.partitions : 64;
    int rc, moved = 0;
    int64_t timeout_ms;

    memset(out, 0, sizeof(*out));
    if (o == NULL)
        o = &defaults;
    timeout_ms = o->lock_timeout_ms > 0 ? o->lock_timeout_ms : WARREN_OPS_SYNC_LOCK_TIMEOUT_MS;
    if (timeout_ms > INT32_MAX)
        timeout_ms = INT32_MAX;
    snprintf(timeout, sizeof(timeout), "%lld", (long long)timeout_ms);
    rc = jobs_document(cfg, partitions, &doc, &e1);
    if (rc != 0)
        goto fail;
    params[0] = doc.p;
    rc = warren__store_begin(st, &e1);
    if (rc != 0)
        goto fail;
    {
        const char *tp[1] = {timeout};
        rc =
            warren__store_exec(st, SYNC_BEGIN_SQL, 1, tp, &res, "set the sync's lock timeout", &e1);
    }
    if (rc != 0)
        goto fail;
    snprintf(xact_start, sizeof(xact_start), "%s", PQgetvalue(res, 0, 1));
    if (strcmp(PQgetvalue(res, 0, 2), "t") != 0) {
        rc = warren_error_set(&e1, WARREN_EDB,
                              "the database at %s has no table warren.jobs or warren.sync_state: "
                              "run `warren migrate` first",
                              warren__store_where(st));
        goto fail;
    }
    PQclear(res);
    res = NULL;
    /* Two syncs at once serialise; the partition count's row before any job
     * (the order warren.upsert_jobs takes them in): an API job an upsert is
     * inserting now is committed before this sync repartitions, or reads the
     * count this sync writes. */
    rc = warren__store_exec_simple(st, SYNC_LOCK_SQL, "take the sync lock", &e1);
    if (rc != 0)
        goto fail;
    rc = warren__store_exec_simple(st, SYNC_STAGE_SQL, "stage the config's jobs", &e1);
    if (rc == 0)
        rc = warren__store_exec(st, SYNC_LOAD_SQL, 1, params, NULL, "load the config's jobs", &e1);
    if (rc == 0)
        rc = warren__store_exec_simple(st, "ANALYZE warren_sync_cfg", "analyze the config's jobs",
                                       &e1);
    if (rc == 0)
        rc = warren__store_exec_simple(st, SYNC_SNAPSHOT_SQL, "read the jobs as they were", &e1);
    if (rc == 0)
        rc = take_over(st, o, out, &e1);
    if (rc == 0)
        rc = warren__store_exec(st, SYNC_CLASH_SQL, 0, NULL, &res, "look for API job names", &e1);
    if (rc != 0)
        goto fail;
    if (PQntuples(res) > 0) {
        rc = clash_error(res, &e1);
        goto fail;
    }
    PQclear(res);
    res = NULL;
    rc = warren__store_exec(st, SYNC_UPSERT_SQL, 0, NULL, &res, "sync jobs into warren.jobs", &e1);
    if (rc != 0)
        goto fail;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        const char *name = PQgetvalue(res, i, 0), *what = PQgetvalue(res, i, 1);
        if (strcmp(what, "added") == 0)
            rc = report_add(&rep.added, &rep.nadded, name);
        else if (strcmp(what, "changed") == 0)
            rc = report_add(&rep.changed, &rep.nchanged, name);
        else
            moved++;
    }
    PQclear(res);
    res = NULL;
    if (rc != 0) {
        rc = warren_error_set(&e1, WARREN_ENOMEM, "out of memory");
        goto fail;
    }
    rc = warren__store_exec_simple(st, SYNC_RUNS_REPLAN_SQL,
                                   "delete planned runs of changed schedules", &e1);
    if (rc == 0)
        rc = warren__store_exec_simple(st, SYNC_RUNS_RESUME_SQL, "re-plan runs of unpaused jobs",
                                       &e1);
    if (rc == 0)
        rc = warren__store_exec_simple(st, SYNC_RUNS_PAUSE_SQL, "cancel runs of paused jobs", &e1);
    if (rc != 0)
        goto fail;
    rc = warren__store_exec(st, SYNC_REMOVE_SQL, 0, NULL, &res, "mark removed jobs", &e1);
    if (rc != 0)
        goto fail;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++)
        rc = report_add(&rep.removed, &rep.nremoved, PQgetvalue(res, i, 0));
    PQclear(res);
    res = NULL;
    if (rc != 0) {
        rc = warren_error_set(&e1, WARREN_ENOMEM, "out of memory");
        goto fail;
    }
    {
        char pb[24];
        const char *pp[1] = {pb};
        snprintf(pb, sizeof(pb), "%d", partitions);
        rc = warren__store_exec(st, SYNC_STATE_SQL, 1, pp, &res, "record the partition count", &e1);
        if (rc != 0)
            goto fail;
        int before = 0;
        int changed = warren__store_get_int(res, 0, 0, &before) != 0 || before != partitions;
        PQclear(res);
        res = NULL;
        if (changed) {
            rc = warren__store_exec(st, SYNC_API_REPARTITION_SQL, 1, pp, &res,
                                    "move API jobs to the new partitions", &e1);
            if (rc != 0)
                goto fail;
            PQclear(res);
            res = NULL;
        }
    }
    rc = warren__store_exec(st, SYNC_API_PROPAGATE_SQL, 0, NULL, &res,
                            "copy changed templates to their API jobs", &e1);
    if (rc != 0)
        goto fail;
    rep.api_updated = (size_t)warren__store_cmd_tuples(res);
    PQclear(res);
    res = NULL;
    rc = warren__store_exec(st, SYNC_API_PAUSE_SQL, 0, NULL, &res,
                            "pause the API jobs of removed templates", &e1);
    if (rc != 0)
        goto fail;
    rep.api_paused = (size_t)count_of(res);
    PQclear(res);
    res = NULL;
    rc = warren__store_exec(st, SYNC_API_RESUME_SQL, 0, NULL, &res,
                            "resume the API jobs of templates back in the config", &e1);
    if (rc != 0)
        goto fail;
    rep.api_resumed = (size_t)warren__store_cmd_tuples(res);
    PQclear(res);
    res = NULL;
    /* Delivered on commit: planners wake up and plan the new definitions. */
    rc = warren_store_notify(st, "sync", &e1);
    if (rc != 0)
        goto fail;
    rc = warren__store_commit(st, &e1);
    if (rc != 0)
        goto fail;
    free(doc.p);
    if (moved > 0)
        warren_log(warren__store_logger(st), WARREN_LOG_INFO,
                   "sync: %d unchanged jobs moved to a new partition", moved);
    out->report = rep;
    return 0;
fail:
    PQclear(res);
    {
        int lock_timeout = strcmp(warren__store_sqlstate(st), "55P03") == 0;
        warren__store_rollback(st);
        if (lock_timeout && xact_start[0] != '\0')
            rc = timeout_error(st, e1.message, xact_start, timeout_ms, err);
        else
            warren_error_set(err, rc, "%s", e1.message);
    }
    free(doc.p);
    warren_sync_report_free(&rep);
    warren_ops_sync_result_clear(out);
    return rc;
}
