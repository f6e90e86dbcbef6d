-- 010_jobs_broken.sql: a job whose fire times cannot be computed (its zone
-- file unreadable or corrupt, too many open files, an expression written by a
-- newer warren) is marked broken instead of being skipped ahead: the planner
-- keeps its cursor, records why, retries with a backoff and, once the cause
-- is gone, plans the missed fire times through the job's misfire policy
-- (docs/delivery.md, "Broken jobs"). `warren jobs` and `warren show` print it.
-- Never edit this file once landed: add NNN_*.sql instead.

ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS broken_reason text;
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS broken_since timestamptz;
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS broken_retry_at timestamptz;
COMMENT ON COLUMN warren.jobs.broken_reason IS
    'Why the planner cannot compute the job''s fire times (NULL: it can); its cursor waits';
COMMENT ON COLUMN warren.jobs.broken_since IS 'When the planner first failed to plan it (database clock)';
COMMENT ON COLUMN warren.jobs.broken_retry_at IS
    'The planner tries a broken job again no earlier than this (backoff 5 s doubling to 60 s)';

INSERT INTO warren.schema_migrations (version, name) VALUES (10, '010_jobs_broken')
ON CONFLICT (version) DO NOTHING;
