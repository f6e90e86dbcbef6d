-- status.sql: what an application can read about what it created
-- (docs/api-jobs.md, "What an application can see"): a job's state and a
-- run's state by key, single and bulk forms, for the warren_producer role.
-- The one current definition; `warren migrate` re-applies it.
--
-- Scope (the producer contract, sql/functions/producer.sql): every call
-- first runs warren.wp_producer_require (42501 for a login without a
-- producer grant in this database). A privileged session (superuser, member
-- of the schema owner) sees everything; any other login sees a job only when
-- warren.wp_producer_job_ok accepts its row, and a run only when its job is
-- such a job and warren.wp_producer_tenant_ok accepts the run's tenant
-- (coalesce(runs.tenant, jobs.tenant), as the claim counts it). Anything
-- else answers exactly as a name or key that does not exist: state
-- 'unknown', every other column NULL. A refusal would tell the caller that
-- the name is taken, which is itself another application's information; an
-- unknown answer tells nothing, and a bulk call is not failed by one foreign
-- element.
--
-- Decisions:
-- - Unknown (or out of scope): one row, state 'unknown' (not NULL: a
--   client switching on state always gets one of the documented values),
--   the name or key as given, the rest NULL.
-- - A job's state is one of active, paused, broken, deleted, first match in
--   the order deleted (removed from the config, or warren.delete_job),
--   paused, broken (jobs.broken_reason: the planner cannot compute its fire
--   times, docs/delivery.md "Broken jobs"), active. A paused job whose
--   schedule is also broken says so in its reason.
-- - "Next": next_runs are the scheduled_at of the job's runs that the
--   planner has made from its schedule (origin schedule or misfire) and that
--   no worker has started yet (state planned, published or waiting),
--   earliest first, at most 5; one may lie in the past when it is late (a
--   backlog, no worker). next_fire_at is the planner's cursor: the first fire
--   time not planned yet, which comes after all of next_runs; it is given
--   for an active job only (paused, deleted and broken jobs fire nothing
--   there) and is NULL for a template, a one-shot `at` job already planned,
--   and an active job the planner has not looked at yet.
-- - "Last run": the job's run with the latest scheduled_at at or before
--   now(), whatever its origin (a schedule's, an enqueued one, an
--   operator's trigger) and state: its outcome is its state, last_error and
--   note. A run scheduled in the future is not "last" yet.
-- - run_status(job, key) reads run key JOB@KEY: KEY is the key given to
--   warren.enqueue, or, for a scheduled run, its time as in its run key
--   (run_status('nightly', '2026-12-05T02:00:00Z')): an enqueue key cannot
--   begin with such a time, and a job name cannot contain '@', so the two
--   never meet. run_statuses takes whole run keys.
-- - NULL arguments and NULL array elements are refused (22023), as is an
--   array of more than 10,000 elements: a status call reads a bounded amount.
--
-- Reads only (STABLE): no lock, so a status call never waits for and never
-- delays a writer. It sees the snapshot of its statement (READ COMMITTED) or
-- of the transaction (REPEATABLE READ).
--
-- Index use: run_statuses probes runs by its primary key (run_key) and jobs
-- by theirs, per element; job_statuses probes jobs by name, runs_history
-- (state, job, scheduled_at DESC) for the next runs and runs_job (job,
-- scheduled_at) backwards for the last one. Nothing scans a table.

-- ------------------------------------------------------------ helpers

-- Raises 22023 unless a status call's array is given, has at most 10,000
-- elements and no NULL element. fn names the function; what the argument
-- (names, run_keys), or for a single form the one that is NULL (name, job,
-- key) with a one-element array.
-- The SQL-language functions below read columns of later migrations; a
-- stepwise migrate applies the function files on every intermediate schema,
-- where their bodies cannot be checked yet: checked at their first call
-- instead (as pg_dump restores do). Reset at the end of this file.
SET LOCAL check_function_bodies = off;

-- ----------------------------------------------------------------------------
-- Function: warren.wp_status_check(fn text, what text, a text[])
--     Raises 22023 for a status call's NULL array, more than 10000 elements or a NULL element.
-- Parameters:
--     fn   - the calling function
--     what - the argument's name
--     a    - the array
-- Returns: void
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_status_check(fn text, what text, a text[])
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    i int;
BEGIN
    IF a IS NULL THEN
        RAISE EXCEPTION '%: % is NULL: give an array of at most 10000 (ARRAY[]::text[] for none)',
            fn, what USING ERRCODE = '22023';
    END IF;
    IF cardinality(a) > 10000 THEN
        RAISE EXCEPTION '%: % has % elements; at most 10000 are allowed in one call: ask in '
                        'smaller batches', fn, what, cardinality(a) USING ERRCODE = '22023';
    END IF;
    IF array_ndims(a) > 1 THEN
        RAISE EXCEPTION '%: % has % dimensions: give a one-dimensional array', fn, what,
            array_ndims(a) USING ERRCODE = '22023';
    END IF;
    -- array_position finds a NULL element (= would not)
    i := array_position(a, NULL);
    IF i IS NULL THEN
        RETURN;
    ELSIF what = 'name' THEN
        RAISE EXCEPTION '%: name is NULL: give a job''s name', fn USING ERRCODE = '22023';
    ELSIF what IN ('job', 'key') THEN
        RAISE EXCEPTION '%: % is NULL: give the job''s name and the key given to warren.enqueue '
                        '(or a scheduled run''s time, e.g. 2026-12-05T02:00:00Z)', fn, what
            USING ERRCODE = '22023';
    END IF;
    RAISE EXCEPTION '%: %[%] is NULL: every element must be a %', fn, what, i - array_lower(a, 1),
        CASE WHEN what = 'names' THEN 'job name' ELSE 'run key (JOB@KEY)' END
        USING ERRCODE = '22023';
END
$$;
COMMENT ON FUNCTION warren.wp_status_check(text, text, text[]) IS
    'Raises 22023 for a status call''s NULL array, more than 10000 elements or a NULL element';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_job_state(j warren.jobs)
--     A job's status: state (deleted, paused, broken, active), why, since when.
-- Parameters:
--     j - the job's row
-- Returns: one row (state, reason, since)
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_job_state(j warren.jobs)
RETURNS TABLE(state text, reason text, since timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN j.removed THEN 'deleted' WHEN j.paused THEN 'paused'
                WHEN j.broken_reason IS NOT NULL THEN 'broken' ELSE 'active' END,
           CASE
               WHEN j.removed AND j.origin = 'api' THEN
                   'deleted (warren.delete_job): it takes no new runs; warren.upsert_job makes '
                   'it again'
               WHEN j.removed THEN
                   'removed from the config file (warren sync): it takes no new runs'
               WHEN j.paused THEN
                   concat('paused since ', warren.plan_utc(j.paused_at),
                          CASE WHEN j.paused_by_template THEN
                              format(': its template %s was removed from the config; warren sync '
                                     'resumes the job when the operator adds it back',
                                     to_json(j.template)::text)
                          WHEN j.origin = 'api' THEN
                              ' (warren.pause_job, or "paused" in its spec): warren.resume_job '
                              'resumes it'
                          ELSE ' (the config or `warren pause`): the operator resumes it' END,
                          CASE WHEN j.broken_reason IS NOT NULL THEN
                              '; its schedule is also broken: ' || j.broken_reason END)
               ELSE j.broken_reason
           END,
           CASE WHEN j.removed OR j.paused THEN j.paused_at
                WHEN j.broken_reason IS NOT NULL THEN j.broken_since END
$$;
COMMENT ON FUNCTION warren.wp_job_state(warren.jobs) IS
    'A job''s status: state (deleted, paused, broken, active), why, and since when';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_job_statuses(fn text, what text, names text[])
--     The implementation of job_status and job_statuses.
-- Parameters:
--     fn    - the calling function
--     what  - the argument's name
--     names - job names
-- Returns: one row per element, in order (state unknown outside the session's scope)
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_job_statuses(fn text, what text, names text[])
RETURNS TABLE(idx int, name text, kind text, template text, tenant text, schedule text,
              state text, reason text, since timestamptz, note text,
              next_runs timestamptz[], next_fire_at timestamptz,
              last_run_key text, last_run_state text, last_run_scheduled_at timestamptz,
              last_run_finished_at timestamptz, last_error text, last_note text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    priv boolean;
    t0 timestamptz := now();
BEGIN
    PERFORM warren.wp_status_check(fn, what, names);
    PERFORM warren.wp_producer_require(fn);
    priv := warren.wp_privileged();
    RETURN QUERY
    SELECT (n.ord - 1)::int, n.nm,
           CASE WHEN j.name IS NULL THEN NULL WHEN j.origin = 'api' THEN 'api'
                WHEN j.is_template THEN 'template' ELSE 'config' END,
           j.template, j.tenant,
           CASE WHEN j.schedule_kind <> 'none'
                THEN warren.wp_sched_text(j.schedule_kind, j.expression, j.timezone) END,
           coalesce(s.state, 'unknown'), s.reason, s.since, j.note,
           CASE WHEN j.name IS NOT NULL THEN coalesce(nx.at, '{}') END,
           CASE WHEN s.state = 'active' AND j.schedule_kind <> 'none'
                     AND isfinite(j.next_fire_at) THEN j.next_fire_at END,
           lr.run_key, lr.state, lr.scheduled_at, lr.finished_at, lr.last_error, lr.note
      FROM unnest(names) WITH ORDINALITY n(nm, ord)
      LEFT JOIN LATERAL (
          -- LIMIT 1: a subquery the planner cannot turn into a join, so
          -- each name is an index probe even when the array is larger than
          -- the table's estimate (a hash join would read every job)
          SELECT x.* FROM warren.jobs x
           WHERE x.name = n.nm AND (priv OR warren.wp_producer_job_ok(x)) LIMIT 1) j ON true
      LEFT JOIN LATERAL warren.wp_job_state(j) s ON j.name IS NOT NULL
      -- per state, the earliest 5 through runs_history (state, job,
      -- scheduled_at DESC), read backwards; then the earliest 5 of those
      LEFT JOIN LATERAL (
          SELECT array_agg(u.scheduled_at ORDER BY u.scheduled_at) AS at
            FROM (SELECT v.scheduled_at FROM (
                      (SELECT r.scheduled_at FROM warren.runs r
                        WHERE r.state = 'planned' AND r.job = j.name
                          AND r.origin IN ('schedule', 'misfire')
                        ORDER BY r.state, r.job, r.scheduled_at LIMIT 5)
                      UNION ALL
                      (SELECT r.scheduled_at FROM warren.runs r
                        WHERE r.state = 'published' AND r.job = j.name
                          AND r.origin IN ('schedule', 'misfire')
                        ORDER BY r.state, r.job, r.scheduled_at LIMIT 5)
                      UNION ALL
                      (SELECT r.scheduled_at FROM warren.runs r
                        WHERE r.state = 'waiting' AND r.job = j.name
                          AND r.origin IN ('schedule', 'misfire')
                        ORDER BY r.state, r.job, r.scheduled_at LIMIT 5)) v
                   ORDER BY v.scheduled_at LIMIT 5) u) nx
          ON j.name IS NOT NULL AND j.schedule_kind <> 'none'
      LEFT JOIN LATERAL (
          SELECT r.run_key, r.state, r.scheduled_at, r.finished_at, r.last_error, r.note
            FROM warren.runs r
           WHERE r.job = j.name AND r.scheduled_at <= t0
           ORDER BY r.job DESC, r.scheduled_at DESC LIMIT 1) lr ON j.name IS NOT NULL
     ORDER BY n.ord;
END
$fn$;
COMMENT ON FUNCTION warren.wp_job_statuses(text, text, text[]) IS
    'The status of each named job the session may read (state unknown otherwise), in order: '
    'the implementation of job_status and job_statuses';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_run_statuses(fn text, what text, run_keys text[])
--     The implementation of run_status and run_statuses.
-- Parameters:
--     fn       - the calling function
--     what     - the argument's name
--     run_keys - run keys
-- Returns: one row per element, in order (state unknown outside the session's scope)
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_run_statuses(fn text, what text, run_keys text[])
RETURNS TABLE(idx int, run_key text, job text, state text, attempts int, last_error text,
              scheduled_at timestamptz, due_at timestamptz, started_at timestamptz,
              finished_at timestamptz, note text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    priv boolean;
BEGIN
    PERFORM warren.wp_status_check(fn, what, run_keys);
    PERFORM warren.wp_producer_require(fn);
    priv := warren.wp_privileged();
    -- The runs first, one primary-key probe per key (LIMIT 1: a subquery
    -- the planner cannot turn into a join, so it never hashes all of
    -- warren.runs when the array is large); then the scope, once per
    -- distinct job and tenant among them (a batch usually holds a few jobs
    -- and tenants: the checks cost far more than the probes).
    RETURN QUERY
    WITH k AS MATERIALIZED (
        SELECT n.ord, n.rk, x.*
          FROM unnest(run_keys) WITH ORDINALITY n(rk, ord)
          LEFT JOIN LATERAL (
              SELECT r.job, r.tenant, r.state, r.attempt, r.last_error, r.scheduled_at,
                     r.due_at, r.started_at, r.finished_at, r.note
                FROM warren.runs r WHERE r.run_key = n.rk LIMIT 1) x ON true
    ), scope AS MATERIALIZED (
        SELECT d.job, d.tenant,
               (SELECT warren.wp_producer_job_ok(jb)
                       AND warren.wp_producer_tenant_ok(coalesce(d.tenant, jb.tenant))
                  FROM warren.jobs jb WHERE jb.name = d.job) AS ok
          FROM (SELECT DISTINCT k.job, k.tenant FROM k WHERE k.job IS NOT NULL AND NOT priv) d
    ), v AS (
        SELECT k.*, k.job IS NOT NULL AND (priv OR coalesce(sc.ok, false)) AS seen
          FROM k LEFT JOIN scope sc
            ON sc.job = k.job AND sc.tenant IS NOT DISTINCT FROM k.tenant
    )
    SELECT (v.ord - 1)::int, v.rk,
           CASE WHEN v.seen THEN v.job END,
           CASE WHEN v.seen THEN v.state ELSE 'unknown' END,
           CASE WHEN v.seen THEN v.attempt END, CASE WHEN v.seen THEN v.last_error END,
           CASE WHEN v.seen THEN v.scheduled_at END, CASE WHEN v.seen THEN v.due_at END,
           CASE WHEN v.seen THEN v.started_at END, CASE WHEN v.seen THEN v.finished_at END,
           CASE WHEN v.seen THEN v.note END
      FROM v
     ORDER BY v.ord;
END
$fn$;
COMMENT ON FUNCTION warren.wp_run_statuses(text, text, text[]) IS
    'The state of each run key the session may read (state unknown otherwise), in order: the '
    'implementation of run_status and run_statuses';

-- ------------------------------------------------------------ jobs

-- The single forms are SQL functions: a PL/pgSQL function cannot have an
-- output column named as an argument (name, job), and these names are the
-- ones warren.enqueue and the bulk forms use.
-- ----------------------------------------------------------------------------
-- Function: warren.job_status(name text)
--     A job's kind, state and why, next planned runs and cursor, last run (docs/api-jobs.md).
-- Parameters:
--     name - the job
-- Returns: one row; state unknown when missing or outside the producer's scope
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.job_status(name text)
RETURNS TABLE(name text, kind text, template text, tenant text, schedule text, state text,
              reason text, since timestamptz, note text, next_runs timestamptz[],
              next_fire_at timestamptz, last_run_key text, last_run_state text,
              last_run_scheduled_at timestamptz, last_run_finished_at timestamptz,
              last_error text, last_note text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT s.name, s.kind, s.template, s.tenant, s.schedule, s.state, s.reason, s.since, s.note,
           s.next_runs, s.next_fire_at, s.last_run_key, s.last_run_state,
           s.last_run_scheduled_at, s.last_run_finished_at, s.last_error, s.last_note
      FROM warren.wp_job_statuses('warren.job_status', 'name', ARRAY[$1]) s
$fn$;
COMMENT ON FUNCTION warren.job_status(text) IS
    'One row: a job''s kind, state (active, paused, broken, deleted; unknown when it does not '
    'exist or is outside the session''s producer scope) and why, its next planned runs and '
    'cursor, and its last run and that run''s outcome';

-- ----------------------------------------------------------------------------
-- Function: warren.job_statuses(names text[])
--     warren.job_status for up to 10000 names.
-- Parameters:
--     names - job names
-- Returns: one row per element, in order, idx from 0
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.job_statuses(names text[])
RETURNS TABLE(idx int, name text, kind text, template text, tenant text, schedule text,
              state text, reason text, since timestamptz, note text,
              next_runs timestamptz[], next_fire_at timestamptz,
              last_run_key text, last_run_state text, last_run_scheduled_at timestamptz,
              last_run_finished_at timestamptz, last_error text, last_note text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT * FROM warren.wp_job_statuses('warren.job_statuses', 'names', $1)
$fn$;
COMMENT ON FUNCTION warren.job_statuses(text[]) IS
    'warren.job_status for each of up to 10000 names: one row per element, in order, idx from '
    '0';

-- ------------------------------------------------------------ runs

-- ----------------------------------------------------------------------------
-- Function: warren.run_status(job text, key text)
--     The run JOB@KEY's state, attempts, last error, times and note (docs/api-jobs.md).
-- Parameters:
--     job - the job
--     key - the enqueue key, or a scheduled run's time
-- Returns: one row; state unknown when missing or outside the producer's scope
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.run_status(job text, key text)
RETURNS TABLE(run_key text, job text, state text, attempts int, last_error text,
              scheduled_at timestamptz, due_at timestamptz, started_at timestamptz,
              finished_at timestamptz, note text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT s.run_key, s.job, s.state, s.attempts, s.last_error, s.scheduled_at, s.due_at,
           s.started_at, s.finished_at, s.note
      FROM warren.wp_run_statuses('warren.run_status',
                                  CASE WHEN $1 IS NULL THEN 'job' ELSE 'key' END,
                                  ARRAY[$1 || '@' || $2]) s
$fn$;
COMMENT ON FUNCTION warren.run_status(text, text) IS
    'One row: the run JOB@KEY''s state (unknown when it does not exist or is outside the '
    'session''s producer scope), attempts, last error, times and note (why it was skipped or '
    'cancelled)';

-- ----------------------------------------------------------------------------
-- Function: warren.run_statuses(run_keys text[])
--     warren.run_status for up to 10000 whole run keys.
-- Parameters:
--     run_keys - run keys JOB@KEY
-- Returns: one row per element, in order, idx from 0
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.run_statuses(run_keys text[])
RETURNS TABLE(idx int, run_key text, job text, state text, attempts int, last_error text,
              scheduled_at timestamptz, due_at timestamptz, started_at timestamptz,
              finished_at timestamptz, note text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT * FROM warren.wp_run_statuses('warren.run_statuses', 'run_keys', $1)
$fn$;
COMMENT ON FUNCTION warren.run_statuses(text[]) IS
    'warren.run_status for each of up to 10000 whole run keys (JOB@KEY): one row per element, '
    'in order, idx from 0';

RESET check_function_bodies;
