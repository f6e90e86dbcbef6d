-- 017_jobs_replan.sql: a planner's due-jobs scan that starts at a floor, not
-- at '-infinity', so that an idle tick does not step over the index entries
-- of every cursor moved since the last vacuum.
--
-- Why: a cursor update is never HOT (next_fire_at is indexed), so each one
-- leaves its old entry in jobs_due_at, dead until a vacuum, at a key below
-- every live cursor: exactly where a scan from '-infinity' starts. At
-- 1,000,000 jobs right after materialising, that scan took 6.8-13.5 ms of an
-- idle tick (docs/benchmarks.md). The planner now keeps, per tick, a floor
-- F: every job of its partitions that is not paused or removed has a cursor
-- at or above F, or is marked replan. Its scan reads the replan jobs through
-- jobs_replan and the rest from F on (src/planner.c, "The scan floor").
--
-- What keeps the rule true: a job is marked replan when it is created (the
-- column's default), and by the trigger below whenever an UPDATE moves its
-- cursor earlier (NULL counts as '-infinity'), makes it eligible again
-- (paused or removed cleared) or moves it to another partition: every
-- writer (sync, upsert_job(s), pause/resume, backfill, an operator's own
-- UPDATE) is covered without knowing of it. Only the planner clears the
-- mark, in the statement that moves the cursor past its horizon; broken jobs
-- are marked again. A planner rescans from '-infinity' whenever its
-- partitions change, after a reconnect, and once a minute whatever happens,
-- and logs a job that only such a rescan found (a broken rule, never a
-- silent miss).
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS replan boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN warren.jobs.replan IS
    'Planner: the cursor may be below the planner''s scan floor (new, moved earlier, made eligible or repartitioned); cleared when planned past the horizon';

CREATE INDEX IF NOT EXISTS jobs_replan
    ON warren.jobs ((coalesce(next_fire_at, '-infinity'::timestamptz)), name)
    WHERE replan AND NOT paused AND NOT removed;

-- Defined here, not in functions/: the trigger needs it (as runs_fill_key in
-- 012).
CREATE OR REPLACE FUNCTION warren.jobs_mark_replan()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.replan := true;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION warren.jobs_mark_replan() IS
    'Trigger: a job whose cursor moved earlier, that became eligible again or changed partition is marked replan';
DROP TRIGGER IF EXISTS jobs_mark_replan ON warren.jobs;
CREATE TRIGGER jobs_mark_replan BEFORE UPDATE ON warren.jobs
    FOR EACH ROW WHEN (
        NOT NEW.replan AND (
            coalesce(NEW.next_fire_at, '-infinity'::timestamptz)
                < coalesce(OLD.next_fire_at, '-infinity'::timestamptz)
            OR (OLD.paused AND NOT NEW.paused)
            OR (OLD.removed AND NOT NEW.removed)
            OR NEW.partition IS DISTINCT FROM OLD.partition))
    EXECUTE FUNCTION warren.jobs_mark_replan();

INSERT INTO warren.schema_migrations (version, name) VALUES (17, '017_jobs_replan')
ON CONFLICT (version) DO NOTHING;
