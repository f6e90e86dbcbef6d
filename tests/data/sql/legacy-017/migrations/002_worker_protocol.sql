-- 002_worker_protocol.sql: the columns and indexes of the worker protocol
-- (DESIGN §3): the retry budget's base and the overlap check's index. The
-- protocol's functions (warren.claim, warren.heartbeat, warren.complete, ...)
-- and the role warren_worker live in sql/functions/ (claim.sql, lease.sql,
-- complete.sql, grants.sql, ...), re-applied by every `warren migrate`.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS attempt_base int NOT NULL DEFAULT 0;
COMMENT ON COLUMN warren.runs.attempt_base IS
    'runs.attempt when the run was last replayed: the retry budget counts attempts above it';

-- The overlap check looks for live runs of the same job.
CREATE INDEX IF NOT EXISTS runs_running_job ON warren.runs (job) WHERE state = 'running';

INSERT INTO warren.schema_migrations (version, name) VALUES (2, '002_worker_protocol')
ON CONFLICT (version) DO NOTHING;
