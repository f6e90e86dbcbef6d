-- 007_retry_wakes_the_relay.sql: a run that goes to retrying wakes the
-- planners (NOTIFY warren_jobs, delivered at commit). Never edit this file
-- once landed: add 00N_*.sql instead.
--
-- Why: the relay publishes a retrying run to its delay queue on its next pass.
-- Passes run every planner tick (1 s by default) or on a NOTIFY; a retry whose
-- backoff ended before the next tick started late by up to a tick (the demo
-- showed 725 ms). With the NOTIFY the relay runs at once and the delay queue
-- releases the retry at its due time.

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
               note = CASE WHEN why IS NULL THEN rr.note ELSE warren.wp_note(rr.note, why) END
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
           note = warren.wp_note(rr.note, coalesce(why || '; ', '') ||
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

INSERT INTO warren.schema_migrations (version, name) VALUES (7, '007_retry_wakes_the_relay')
ON CONFLICT (version) DO NOTHING;
