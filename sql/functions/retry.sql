-- retry.sql: what happens after a failed attempt: the next attempt with
-- full-jitter backoff while the job's retry budget lasts, else dead with a
-- dead letter. Called by warren.complete, by warren.claim when it takes over
-- or reaps an expired lease, and by warren.reap_expired_leases. The one
-- current definition; `warren migrate` re-applies it.
--
-- Retry budget: a run may be claimed retry_max_attempts times since it was
-- planned or last replayed (runs.attempt - runs.attempt_base); replay keeps
-- the attempt counter monotonic (stale workers keep stale tokens) and moves
-- the base.
--
-- A run that goes to retrying wakes the planners (NOTIFY warren_jobs,
-- delivered at commit). Why: the relay publishes a retrying run to its delay
-- queue on its next pass. Passes run every planner tick (1 s by default) or
-- on a NOTIFY; a retry whose backoff ended before the next tick started late
-- by up to a tick (the demo showed 725 ms). With the NOTIFY the relay runs at
-- once and the delay queue releases the retry at its due time.
--
-- A claim that reaps an expired lease calls wp_after_failure, which times
-- the reaped run's retry from now(), the call's start (at most
-- warren.wp_max_wait() earlier after the claim waited).

-- ----------------------------------------------------------------------------
-- Function: warren.wp_backoff_ms(base_ms bigint, cap_ms bigint, attempt int)
--     Full-jitter backoff: random(0, min(cap, base * 2^attempt)) milliseconds.
-- Parameters:
--     base_ms - the job's retry base
--     cap_ms  - its cap
--     attempt - attempts used since the base
-- Returns: float8
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_backoff_ms(base_ms bigint, cap_ms bigint, attempt int)
RETURNS float8 LANGUAGE sql VOLATILE AS $$
    SELECT random() * least(cap_ms::float8, base_ms::float8 * power(2::float8, least(greatest(attempt, 0), 60)))
$$;
COMMENT ON FUNCTION warren.wp_backoff_ms(bigint, bigint, int) IS
    'Full-jitter retry delay in ms: random(0, min(cap, base * 2^attempt))';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_after_failure(k text, outcome text, err text, worker text, why text)
--     After a failed attempt of run k: retrying with backoff within the retry budget, else dead
--     with a dead letter.
-- Parameters:
--     k       - the run, locked by the caller
--     outcome - retry, failed or lease_lost
--     err     - the error (last_error)
--     worker  - for the events
--     why     - a note line, or NULL
-- Returns: the new state: retrying or dead
-- Locks:   none of its own (the caller holds the run's row)
-- Writes:  warren.runs (retrying or dead, note); warren.outbox (events; dead letter); NOTIFY
--          warren_jobs (retrying)
CREATE OR REPLACE FUNCTION warren.wp_after_failure(k text, outcome text, err text, worker text,
                                                   why text)
RETURNS text LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
    delay_ms float8;
BEGIN
    SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k;
    SELECT * INTO j FROM warren.jobs jb WHERE jb.name = r.job;
    IF outcome <> 'failed' AND r.attempt - r.attempt_base < j.retry_max_attempts THEN
        delay_ms := warren.wp_backoff_ms(j.retry_base_ms, j.retry_cap_ms, r.attempt - r.attempt_base);
        UPDATE warren.runs rr
           SET state = 'retrying',
               due_at = now() + make_interval(secs => delay_ms / 1000.0),
               lease_owner = NULL, lease_until = NULL,
               last_error = coalesce(err, rr.last_error),
               note = CASE WHEN why IS NULL THEN rr.note ELSE warren.plan_note(rr.note, why) END
         WHERE rr.run_key = k
        RETURNING * INTO r;
        PERFORM warren.wp_event(r, outcome, err, worker);
        -- Wake the planners (delivered at commit): the relay publishes the
        -- retry to its delay queue now, not at its next tick.
        PERFORM pg_notify('warren_jobs', 'retry');
        RETURN 'retrying';
    END IF;
    UPDATE warren.runs rr
       SET state = 'dead', finished_at = now(),
           lease_owner = NULL, lease_until = NULL,
           last_error = coalesce(err, rr.last_error),
           note = warren.plan_note(rr.note, coalesce(why || '; ', '') ||
                  CASE WHEN outcome = 'failed' THEN 'dead: permanent failure'
                       ELSE format('dead: %s attempts used (max_attempts %s)',
                                   r.attempt - r.attempt_base, j.retry_max_attempts) END)
     WHERE rr.run_key = k
    RETURNING * INTO r;
    PERFORM warren.wp_event(r, outcome, err, worker);
    PERFORM warren.wp_event(r, 'dead', err, worker);
    PERFORM warren.wp_dead_letter(r, j, coalesce(err, r.last_error, outcome));
    RETURN 'dead';
END
$fn$;
COMMENT ON FUNCTION warren.wp_after_failure(text, text, text, text, text) IS
    'After a failed attempt of the locked run k: retrying with backoff within the retry budget, '
    'else dead with a dead letter; writes the events; returns the new state';
