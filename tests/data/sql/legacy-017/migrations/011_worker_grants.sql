-- 011_worker_grants.sql: the tables and columns of least privilege for the
-- worker protocol (docs/worker-protocol.md, "Privileges"): which queues a
-- login may work on, which login holds a claim, and the lease a claim was
-- given. The checks themselves are in sql/functions/ (claim.sql, lease.sql,
-- complete.sql, grants.sql), re-applied by every `warren migrate`.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

CREATE TABLE IF NOT EXISTS warren.worker_grants (
    login      text NOT NULL CHECK (length(login) BETWEEN 1 AND 63),
    queue      text NOT NULL CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    granted_at timestamptz NOT NULL DEFAULT now(),
    granted_by text NOT NULL DEFAULT session_user,
    PRIMARY KEY (login, queue)
);
COMMENT ON TABLE warren.worker_grants IS
    'Which queues a login that is not the schema owner or a superuser may claim, heartbeat, '
    'complete and reclaim runs of (set by `warren grant`/`warren revoke`)';
COMMENT ON COLUMN warren.worker_grants.login IS 'The login (session_user) granted the queue';
COMMENT ON COLUMN warren.worker_grants.queue IS 'The job queue (jobs.queue)';
COMMENT ON COLUMN warren.worker_grants.granted_at IS 'When it was granted (database clock)';
COMMENT ON COLUMN warren.worker_grants.granted_by IS 'The login that granted it';

ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS lease_login text;
COMMENT ON COLUMN warren.runs.lease_login IS
    'The login (session_user) that claimed the current (or last) attempt: only it may heartbeat, '
    'complete or reclaim it (NULL: claimed before migration 011)';
ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS lease_ms bigint CHECK (lease_ms > 0);
COMMENT ON COLUMN warren.runs.lease_ms IS
    'The lease the current (or last) attempt was claimed with (the job''s lease then): every '
    'heartbeat extends by it, whatever a later sync sets (NULL: claimed before migration 011)';
ALTER TABLE warren.attempts ADD COLUMN IF NOT EXISTS login text;
COMMENT ON COLUMN warren.attempts.login IS
    'The login (session_user) that claimed it; worker is the name it gave (NULL: before 011)';

INSERT INTO warren.schema_migrations (version, name) VALUES (11, '011_worker_grants')
ON CONFLICT (version) DO NOTHING;
