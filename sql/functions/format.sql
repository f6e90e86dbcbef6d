-- format.sql: the formatting and note helpers of the other function files
-- and of the planner (src/store_plan.c): RFC 3339 UTC text and note lines.
-- Functions are code, not history: this is the one current definition;
-- `warren migrate` re-applies it after the migrations (sql/functions.sql).
--
-- warren.run_key is not here: runs.run_key is a stored column generated from
-- it, so it is part of the table and lives in sql/migrations/001_schema.sql
-- (changing it means rewriting every run's key: a migration).
--
-- The to_char ones are STABLE, as to_char is (its output may follow the
-- session's locale for some patterns; not for these): declared IMMUTABLE, a
-- SQL function around a STABLE call is never inlined, so each call was
-- parsed and planned again.

-- One note helper and one whole-second format: plan_note and plan_utc (the
-- planner's and the CLI's statements in src/ call them by these names) are
-- the only ones; wp_note and wp_utc, their copies, are dropped where a
-- database still has them (a re-run drops nothing).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['warren.wp_note(text,text)', 'warren.wp_utc(timestamptz)'] LOOP
        IF to_regprocedure(f) IS NOT NULL THEN
            EXECUTE 'DROP FUNCTION ' || f;
        END IF;
    END LOOP;
END
$$;

-- ----------------------------------------------------------------------------
-- Function: warren.wp_utc_ms(t timestamptz)
--     RFC 3339 UTC with milliseconds.
-- Parameters:
--     t - the instant
-- Returns: text; NULL for NULL
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_utc_ms(t timestamptz)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
COMMENT ON FUNCTION warren.wp_utc_ms(timestamptz) IS 'RFC 3339 UTC with milliseconds';

-- A run's scheduled_at as its message has it (src/codec.c): whole seconds,
-- with milliseconds when the instant has them (an enqueued run's).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_utc_run(t timestamptz)
--     A run's scheduled_at as its message has it: whole seconds, milliseconds when t has them.
-- Parameters:
--     t - the instant
-- Returns: text; NULL for NULL
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_utc_run(t timestamptz)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', CASE WHEN date_trunc('second', t) = t
                                             THEN 'YYYY-MM-DD"T"HH24:MI:SS"Z"'
                                             ELSE 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"' END)
$$;
COMMENT ON FUNCTION warren.wp_utc_run(timestamptz) IS
    'RFC 3339 UTC, whole seconds, with milliseconds when t has them (a run''s scheduled_at, as '
    'in its message)';

-- ----------------------------------------------------------------------------
-- Function: warren.plan_note(old text, line text)
--     Appends a line to a run's note: the planner's, the CLI's and every function's.
-- Parameters:
--     old  - the note (NULL or '' for none)
--     line - the line
-- Returns: text
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.plan_note(old text, line text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN old IS NULL OR old = '' THEN line ELSE old || E'\n' || line END
$$;
COMMENT ON FUNCTION warren.plan_note(text, text) IS
    'Appends a line to a run note (the planner, the CLI and the functions)';

-- ----------------------------------------------------------------------------
-- Function: warren.plan_utc(t timestamptz)
--     RFC 3339 UTC, whole seconds, for notes: the planner's, the CLI's and every function's.
-- Parameters:
--     t - the instant
-- Returns: text; NULL for NULL
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.plan_utc(t timestamptz)
RETURNS text LANGUAGE sql STABLE STRICT AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;
COMMENT ON FUNCTION warren.plan_utc(timestamptz) IS
    'RFC 3339 UTC with whole seconds (notes of the planner, the CLI and the functions)';
