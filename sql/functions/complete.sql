-- complete.sql: warren.complete records the outcome of the caller's attempt
-- (fenced by the attempt number, see claim.sql); warren.complete_many is its
-- batch form for successes. The one current definition; `warren migrate`
-- re-applies it.

-- ----------------------------------------------------------------------------
-- Function: warren.complete(run_key text, attempt int, outcome text, error text DEFAULT NULL)
--     Records the outcome of the caller's attempt (fenced by the attempt number).
-- Parameters:
--     run_key - the run
--     attempt - the fencing token the claim returned
--     outcome - succeeded, retry or failed
--     error   - the error text (at most 4000 kept)
-- Returns: true: recorded; false: a stale token (another attempt, another login, not granted)
-- Locks:   a capped run's cap lock(s); then the run's row; the release's waiting rows
-- Writes:  warren.runs (succeeded, retrying or dead); warren.attempts (outcome); warren.outbox
--          (events, dead letter); waiting runs of its cap group released
CREATE OR REPLACE FUNCTION warren.complete(run_key text, attempt int, outcome text,
                                           error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := complete.run_key;
    fence int := complete.attempt;
    o text := complete.outcome;
    err text := left(complete.error, 4000);
    r warren.runs%ROWTYPE;
    priv boolean := warren.wp_privileged();
    cg text;
    ct text;
    mr int;
    mrt int;
BEGIN
    IF o IS NULL OR o NOT IN ('succeeded', 'retry', 'failed') THEN
        RAISE EXCEPTION 'warren.complete: outcome must be succeeded, retry or failed, not %',
            left(coalesce(o, 'NULL'), 100) USING ERRCODE = '22023';
    END IF;
    IF NOT priv AND cardinality(warren.wp_ungranted('warren.complete', ARRAY[k])) > 0 THEN
        RETURN false; -- not granted (any more): a stale token (access.sql)
    END IF;
    -- A success without an error text is complete_many's case, with the
    -- same rules (fence, login, grants, caps) and the same event (one
    -- statement instead of this function's several). The C worker's sql
    -- handler completes a run alone this way when its pool thread found
    -- only that run queued.
    IF o = 'succeeded' AND err IS NULL THEN
        RETURN coalesce((SELECT cm.recorded
                           FROM warren.complete_many(ARRAY[k], ARRAY[fence]) cm), false);
    END IF;
    -- Lock order (caps.sql): a run counted under a cap takes its group's
    -- cap lock(s) before its row (read without a lock: the claim of this
    -- attempt committed them; another attempt fails the fence below).
    SELECT rr.cap_group, rr.cap_tenant INTO cg, ct FROM warren.runs rr
     WHERE rr.run_key = k AND rr.state = 'running' AND rr.attempt = fence;
    IF cg IS NOT NULL THEN
        SELECT jb.max_running, jb.max_running_per_tenant INTO mr, mrt
          FROM warren.jobs jb WHERE jb.name = cg;
        PERFORM warren.wp_cap_lock(cg, ct, mr, mrt);
    END IF;
    -- Only the login that claimed the attempt may complete it (access.sql):
    -- another login's call is a stale token.
    IF o = 'succeeded' THEN
        UPDATE warren.runs rr
           SET state = 'succeeded', finished_at = now(), lease_until = NULL
         WHERE rr.run_key = k AND rr.state = 'running' AND rr.attempt = fence
           AND (priv OR rr.lease_login IS NULL OR rr.lease_login = session_user)
        RETURNING * INTO r;
        IF NOT FOUND THEN
            RETURN false; -- stale token: another attempt holds (or finished) the run
        END IF;
        UPDATE warren.attempts a SET finished_at = now(), outcome = o, error = err
         WHERE a.run_key = k AND a.attempt = fence;
        PERFORM warren.wp_event(r, 'succeeded', err, r.lease_owner);
        IF r.cap_group IS NOT NULL THEN
            PERFORM warren.wp_cap_release(r.cap_group, r.cap_tenant, true); -- held: caps.sql
        END IF;
        RETURN true;
    END IF;
    SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k FOR UPDATE;
    IF NOT FOUND OR r.state <> 'running' OR r.attempt IS DISTINCT FROM fence
       OR NOT (priv OR r.lease_login IS NULL OR r.lease_login = session_user) THEN
        RETURN false;
    END IF;
    UPDATE warren.attempts a SET finished_at = now(), outcome = o, error = err
     WHERE a.run_key = k AND a.attempt = fence;
    PERFORM warren.wp_after_failure(k, o, coalesce(err, o), r.lease_owner, NULL);
    IF r.cap_group IS NOT NULL THEN
        PERFORM warren.wp_cap_release(r.cap_group, r.cap_tenant, true); -- held: caps.sql
    END IF;
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.complete(text, int, text, text) IS
    'Records the outcome (succeeded, retry, failed) of the caller''s attempt with its retry '
    'schedule or dead letter and events as outbox rows, in the caller''s transaction; false: stale token';

-- Successes of many runs in one statement (the C worker completes in
-- batches); failures go through warren.complete one by one. Key lookups only
-- (the SET enable_* = off lines): keep the planner on index probes even when
-- the table's statistics are stale (right after a large backfill, a plan
-- cached for a tiny table would scan the whole table once per batch).
-- ----------------------------------------------------------------------------
-- Function: warren.complete_many(run_keys text[], attempts int[])
--     Successes of many runs in one statement; failures go through warren.complete.
-- Parameters:
--     run_keys - at most wp_max_batch() keys
--     attempts - their fencing tokens, in order
-- Returns: one row (run_key, recorded) per key, in order
-- Locks:   the cap locks of the capped (group, tenant)s, in that order; then the rows, in key
--          order
-- Writes:  warren.runs (succeeded); warren.attempts; warren.outbox (events run.succeeded); waiting
--          runs of their cap groups released
CREATE OR REPLACE FUNCTION warren.complete_many(run_keys text[], attempts int[])
RETURNS TABLE(run_key text, recorded boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Key lookups only: keep the planner on index probes even when the table's
-- statistics are stale (right after a large backfill, a plan cached for a
-- tiny table would scan the whole table once per batch).
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
    priv boolean := warren.wp_privileged();
    bad text[];
    ks text[];
    recs boolean[];
    groups text[];
    tenants text[];
BEGIN
    IF coalesce(array_length(complete_many.run_keys, 1), 0)
       <> coalesce(array_length(complete_many.attempts, 1), 0) THEN
        RAISE EXCEPTION 'warren.complete_many: run_keys and attempts differ in length'
            USING ERRCODE = '22023';
    END IF;
    PERFORM warren.wp_check_batch('warren.complete_many', complete_many.run_keys);
    -- Keys of queues the login is not granted are not recorded (access.sql).
    bad := CASE WHEN priv THEN '{}'
                ELSE warren.wp_ungranted('warren.complete_many', complete_many.run_keys) END;
    -- Lock order (caps.sql): the cap locks of the capped groups and tenants
    -- among the runs this call may record, in (group, tenant) order, before
    -- any row (read without a lock: the claims of these attempts committed
    -- them; another attempt fails the fence below). Only when some run
    -- anywhere holds a cap slot (one probe of the partial index
    -- runs_cap_held, whose predicate this is): a run this call records was
    -- claimed, and its cap_group set, by a claim that committed before
    -- this statement, so when no running run has a cap_group none of these
    -- keys needs a lock (an uncapped fleet pays one index probe per call,
    -- not a run_key probe per key).
    IF EXISTS (SELECT 1 FROM warren.runs rr
                WHERE rr.cap_group IS NOT NULL
                  AND warren.wp_holds_slot(rr.state, rr.cap_released_at)) THEN
        PERFORM warren.wp_cap_lock(x.g, x.t, x.mr, x.mrt)
           FROM (SELECT DISTINCT rr.cap_group AS g, coalesce(rr.cap_tenant, '') AS t,
                        gj.max_running AS mr, gj.max_running_per_tenant AS mrt
                   FROM unnest(complete_many.run_keys, complete_many.attempts) t(k, a)
                   JOIN warren.runs rr ON rr.run_key = t.k
                   LEFT JOIN warren.jobs gj ON gj.name = rr.cap_group
                  WHERE rr.cap_group IS NOT NULL AND rr.attempt = t.a
                    AND rr.state || '' = 'running'
                  ORDER BY 1, 2) x;
    END IF;
    -- The answer is collected first: the runs of capped groups that
    -- succeeded release their groups' waiting runs afterwards (caps.sql), in
    -- a statement of their own (after the cap lock, with a fresh snapshot).
    WITH t AS (
        SELECT * FROM unnest(complete_many.run_keys, complete_many.attempts)
                      WITH ORDINALITY AS t(k, a, i)
    ), u AS (
        -- Driven by the keys, one runs_run_key probe each. `state || ''`
        -- keeps the planner off the partial index runs_running_job: its
        -- statistics say "a handful of rows", and scanning every running run
        -- against every key (a nested loop: hash and merge joins are off
        -- here) cost 5 ms per 100-run batch with 200 runs running.
        UPDATE warren.runs rr
           SET state = 'succeeded', finished_at = now(), lease_until = NULL
          FROM (SELECT k, a FROM t ORDER BY k) tk
         WHERE rr.run_key = tk.k AND rr.attempt = tk.a AND rr.state || '' = 'running'
           AND (priv OR rr.lease_login IS NULL OR rr.lease_login = session_user)
           AND NOT (tk.k = ANY (bad))
        RETURNING rr.run_key, rr.job, rr.attempt, rr.scheduled_at, rr.due_at, rr.lease_owner,
                  rr.cap_group, rr.cap_tenant
    ), at AS (
        UPDATE warren.attempts x SET finished_at = now(), outcome = 'succeeded', error = NULL
          FROM u WHERE x.run_key = u.run_key AND x.attempt = u.attempt
    ), ev AS (
        -- the event as wp_event writes it (outbox.sql; inlined)
        INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
        SELECT 'warren.events', 'run.succeeded.' || u.job, u.run_key, u.job,
               warren.wp_event_headers(u.job, u.scheduled_at, u.attempt, 'succeeded',
                                       'succeeded'),
               warren.wp_event_body('succeeded', u.run_key, u.job, u.scheduled_at, u.due_at,
                                    u.attempt, 'succeeded', u.lease_owner, NULL)
          FROM u
         ORDER BY u.run_key
    ), g AS (
        SELECT DISTINCT u.cap_group, coalesce(u.cap_tenant, '') AS cap_tenant FROM u
         WHERE u.cap_group IS NOT NULL
    ), r AS (
        -- the EXISTS in a plain select list, where it is a hashed subplan
        -- (inside an aggregate it was probed once per key: 30 us per run)
        SELECT t.k, t.i, EXISTS (SELECT 1 FROM u WHERE u.run_key = t.k) AS rec FROM t
    )
    SELECT (SELECT array_agg(r.k ORDER BY r.i) FROM r), (SELECT array_agg(r.rec ORDER BY r.i) FROM r),
           (SELECT array_agg(g.cap_group ORDER BY g.cap_group, g.cap_tenant) FROM g),
           (SELECT array_agg(g.cap_tenant ORDER BY g.cap_group, g.cap_tenant) FROM g)
      INTO ks, recs, groups, tenants;
    -- In (group, tenant) order: one lock order for every caller that
    -- releases several groups.
    FOR i IN 1 .. coalesce(cardinality(groups), 0) LOOP
        PERFORM warren.wp_cap_release(groups[i], tenants[i], true); -- held
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(ks, recs);
END
$fn$;
COMMENT ON FUNCTION warren.complete_many(text[], int[]) IS
    'warren.complete(key, attempt, ''succeeded'') for many runs in one statement; recorded per key';
