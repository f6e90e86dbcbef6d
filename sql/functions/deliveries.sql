-- deliveries.sql: what a worker asks about a delivery it cannot settle by a
-- claim (docs/worker-protocol.md, "Deliveries the worker does not claim"):
-- warren.run_states, the database's word on runs a claim gave no row for, and
-- warren.refuse, for a run no worker of its queue can handle. The one current
-- definition; `warren migrate` re-applies it.

-- The state and due time of each of run_keys that exists, with the
-- database's clock. Why: claim_many gives no row for a run that is finished,
-- leased elsewhere, held back, unknown or not due yet, and a worker that
-- acknowledged all of those as duplicates dropped runs that were only not
-- due yet on its own clock estimate (the run then waited for the
-- reconciler), and held a delivery whose body claimed a due time far ahead
-- forever. The worker decides from this: hold a published run until its
-- due_at (the database's, not the message's), acknowledge a stale copy,
-- dead-letter a message whose run does not exist. At most 4096 keys. Runs of
-- queues the session is not granted are left out (access.sql), as if they
-- did not exist: a login learns nothing of another team's runs.
-- ----------------------------------------------------------------------------
-- Function: warren.run_states(run_keys text[])
--     The state and due time of the existing runs among run_keys, with the database's clock.
-- Parameters:
--     run_keys - at most 4096 keys
-- Returns: one row (run_key, state, due_at, db_now) per known, granted run
-- Locks:   none
-- Writes:  nothing (a WARNING for ungranted keys)
CREATE OR REPLACE FUNCTION warren.run_states(run_keys text[])
RETURNS TABLE(run_key text, state text, due_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    bad text[];
BEGIN
    IF run_keys IS NULL OR cardinality(run_keys) > 4096 THEN
        RAISE EXCEPTION 'warren.run_states: between 0 and 4096 run keys'
            USING ERRCODE = '22023';
    END IF;
    -- Once, not per row (it probes every key and warns).
    bad := warren.wp_ungranted('warren.run_states', run_keys);
    RETURN QUERY
    SELECT rr.run_key, rr.state, rr.due_at, clock_timestamp()
      FROM (SELECT DISTINCT x AS k FROM unnest(run_keys) x) t
      JOIN warren.runs rr ON rr.run_key = t.k
     WHERE NOT (rr.run_key = ANY (bad));
END
$fn$;
COMMENT ON FUNCTION warren.run_states(text[]) IS
    'State and due time of the existing runs among run_keys (at most 4096), with the database''s '
    'clock: what a worker decides a delivery''s fate by when a claim gave no row';

-- A worker that cannot run a published run (its job is not in the worker's
-- config, or its in-process handler is not registered) gives the delivery
-- back to its queue a few times, so that a worker that knows the job takes
-- it; when none has, it calls this: the run becomes dead with the reason as
-- its last_error and a note, with the event run.dead.<job> and a dead letter
-- (through the outbox), so the reconciler stops republishing it. `warren
-- replay` brings it back once a worker knows the job. Returns the run's
-- state afterwards: 'dead' when this call made it dead, its state when it
-- was not published (a stale copy: acknowledge it), NULL when there is no
-- such run. A login not granted the run's queue gets insufficient_privilege
-- (42501), naming the login, the queue and the fix.
-- ----------------------------------------------------------------------------
-- Function: warren.refuse(run_key text, worker text, reason text)
--     A published run no worker of its queue can run becomes dead.
-- Parameters:
--     run_key - the run
--     worker  - the worker's name
--     reason  - why (last_error)
-- Returns: 'dead'; the state of a run that was not published; NULL for no such run; 42501 when the
--          queue is not granted
-- Locks:   the run's row FOR UPDATE
-- Writes:  warren.runs (dead, note); warren.outbox (event run.dead, dead letter)
CREATE OR REPLACE FUNCTION warren.refuse(run_key text, worker text, reason text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := refuse.run_key;
    w text := refuse.worker;
    why text := left(coalesce(refuse.reason, 'no worker can run it'), 1000);
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
BEGIN
    PERFORM warren.wp_check_worker('warren.refuse', w);
    -- Only a login granted the run's queue may learn its state or end it
    -- (access.sql): checked before the row is locked, and again after (the
    -- job's queue may have changed in between).
    PERFORM warren.wp_require_queue('warren.refuse', k,
                                    (SELECT jb.queue FROM warren.runs rr
                                       JOIN warren.jobs jb ON jb.name = rr.job
                                      WHERE rr.run_key = k));
    SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT * INTO j FROM warren.jobs jb WHERE jb.name = r.job;
    PERFORM warren.wp_require_queue('warren.refuse', k, j.queue);
    IF r.state <> 'published' THEN
        RETURN r.state;
    END IF;
    UPDATE warren.runs rr
       SET state = 'dead', finished_at = now(), lease_owner = NULL, lease_until = NULL,
           last_error = why,
           note = warren.plan_note(rr.note, format('dead: no worker of queue %s could run it '
                                                 '(last refused by %s)', j.queue, w))
     WHERE rr.run_key = k
    RETURNING * INTO r;
    PERFORM warren.wp_event(r, 'dead', why, w);
    PERFORM warren.wp_dead_letter(r, j, why);
    RETURN 'dead';
END
$fn$;
COMMENT ON FUNCTION warren.refuse(text, text, text) IS
    'A published run no worker could handle becomes dead with the reason (event, dead letter); '
    'returns ''dead'', the state of a run that was not published, or NULL for no such run';
