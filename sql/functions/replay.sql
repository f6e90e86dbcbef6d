-- replay.sql: warren.replay, for operators (`warren replay`): a dead run goes
-- back to planned under the same run key, with a fresh retry budget
-- (attempt_base moves up, see retry.sql). The one current definition;
-- `warren migrate` re-applies it.

-- ----------------------------------------------------------------------------
-- Function: warren.replay(run_key text, who text DEFAULT NULL)
--     Operator (`warren replay`): a dead run goes back to planned with a fresh retry budget.
-- Parameters:
--     run_key - the run
--     who     - who replayed it, for the note
-- Returns: true; false when the run is not dead
-- Locks:   the run's row (UPDATE)
-- Writes:  warren.runs (planned, due now, attempt_base, note); NOTIFY warren_jobs
CREATE OR REPLACE FUNCTION warren.replay(run_key text, who text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := replay.run_key;
BEGIN
    UPDATE warren.runs rr
       SET state = 'planned', due_at = now(), finished_at = NULL, lease_owner = NULL,
           lease_until = NULL, attempt_base = rr.attempt,
           cap_released_at = NULL, -- a slot a released run held (caps.sql) ended with it
           note = warren.plan_note(rr.note, format('replayed at %s%s after %s attempts',
                  warren.wp_utc_ms(now()), coalesce(' by ' || replay.who, ''),
                  rr.attempt - rr.attempt_base))
     WHERE rr.run_key = k AND rr.state = 'dead';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('warren_jobs', 'replay');
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.replay(text, text) IS
    'A dead run goes back to planned, due now, under the same run key; history kept; false if not dead';
