-- 012_api_jobs.sql: the schema of jobs from application code (README, "Jobs
-- from application code"): templates and API jobs in warren.jobs, job names
-- up to 200 characters, runs keyed by their run key alone (enqueued runs are
-- JOB@KEY with the caller's key, and may be due at any millisecond), the
-- run's tenant, per-template caps on running runs and the 'waiting' state of
-- a run held back by them. The functions are in sql/functions/.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

-- ------------------------------------------------------------ jobs

-- Names: the same characters as before, up to 200 of them (a tenant-scoped
-- name such as usage-report.tenant-4711). A run key is at most 255 bytes (an
-- AMQP short string: it is the message_id), which the key grammar respects.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.jobs'::regclass AND conname = 'jobs_name_check'
                      AND (pg_get_constraintdef(oid) LIKE '%{0,199}%'
                           OR pg_get_constraintdef(oid) LIKE '%length(name) <= 200%')) THEN
        -- (the second form: 015's, equivalent and faster; a psql re-run of
        -- install.sql must not swap it back and re-check every job twice)
        ALTER TABLE warren.jobs DROP CONSTRAINT IF EXISTS jobs_name_check;
        ALTER TABLE warren.jobs ADD CONSTRAINT jobs_name_check
            CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$');
    END IF;
    -- A template has no schedule: schedule_kind 'none' (and only a template).
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.jobs'::regclass
                      AND conname = 'jobs_schedule_kind_check'
                      AND pg_get_constraintdef(oid) LIKE '%none%') THEN
        ALTER TABLE warren.jobs DROP CONSTRAINT IF EXISTS jobs_schedule_kind_check;
        ALTER TABLE warren.jobs ADD CONSTRAINT jobs_schedule_kind_check
            CHECK (schedule_kind IN ('cron', 'every', 'at', 'none'));
    END IF;
END
$$;

ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS origin text NOT NULL DEFAULT 'config'
    CHECK (origin IN ('config', 'api'));
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS is_template boolean NOT NULL DEFAULT false;
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS template text
    REFERENCES warren.jobs (name) ON UPDATE CASCADE;
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS tenant text
    CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$');
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS max_running int CHECK (max_running > 0);
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS max_running_per_tenant int
    CHECK (max_running_per_tenant > 0);
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS note text;
ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS created_by text;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.jobs'::regclass AND conname = 'jobs_origin_shape') THEN
        -- An API job names its template; a config job does not; only a
        -- config job is a template, and a template (only) has no schedule.
        ALTER TABLE warren.jobs ADD CONSTRAINT jobs_origin_shape CHECK (
            ((origin = 'api') = (template IS NOT NULL))
            AND (NOT is_template OR origin = 'config')
            AND ((schedule_kind = 'none') = is_template));
    END IF;
END
$$;

CREATE INDEX IF NOT EXISTS jobs_template ON warren.jobs (template) WHERE template IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_tenant ON warren.jobs (tenant) WHERE tenant IS NOT NULL;

COMMENT ON TABLE warren.jobs IS
    'Job definitions: config jobs and templates upserted from the config file by `warren sync`, '
    'API jobs created from a template by warren.upsert_job(s)';
COMMENT ON COLUMN warren.jobs.name IS
    'The job name ([A-Za-z0-9][A-Za-z0-9._-]{0,199}); a run-key and routing-key component';
COMMENT ON COLUMN warren.jobs.schedule_kind IS
    'cron, every (fixed interval), at (one shot) or none (a template: it fires nothing itself)';
COMMENT ON COLUMN warren.jobs.origin IS
    'config (the config file, `warren sync`) or api (warren.upsert_job(s), from its template)';
COMMENT ON COLUMN warren.jobs.is_template IS
    'A config job marked template = true: no schedule; API jobs are created from it';
COMMENT ON COLUMN warren.jobs.template IS 'An API job''s template (NULL for config jobs)';
COMMENT ON COLUMN warren.jobs.tenant IS
    'The tenant of an API job''s runs (NULL: none); caps per tenant count by it';
COMMENT ON COLUMN warren.jobs.max_running IS
    'A template''s or config job''s cap: at most this many of its runs running at once (NULL: no cap)';
COMMENT ON COLUMN warren.jobs.max_running_per_tenant IS
    'A template''s or config job''s cap: at most this many of its runs of one tenant running at '
    'once (NULL: no cap)';
COMMENT ON COLUMN warren.jobs.note IS
    'What happened to the job itself (paused because its template was removed, deleted, ...)';
COMMENT ON COLUMN warren.jobs.created_by IS
    'The login (session_user) that created it (NULL: synced before migration 012)';

-- ------------------------------------------------------------ runs

-- run_key becomes a plain column: scheduled runs keep JOB@YYYY-MM-DDTHH:MM:SSZ
-- (filled in by the trigger below when an INSERT leaves it out), enqueued runs
-- are JOB@KEY with the caller's key. It is the primary key: the same kind of
-- unique constraint that makes a second planner's insert a no-op makes a
-- second enqueue with the same key one.
ALTER TABLE warren.runs ALTER COLUMN run_key DROP EXPRESSION IF EXISTS;

-- The one other function a migration defines (as warren.run_key in 001): the
-- trigger below needs it before the function files are applied.
CREATE OR REPLACE FUNCTION warren.runs_fill_key()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.run_key := warren.run_key(NEW.job, NEW.scheduled_at);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION warren.runs_fill_key() IS
    'Trigger: a run inserted without a run_key gets JOB@scheduled_at (warren.run_key)';
DROP TRIGGER IF EXISTS runs_fill_key ON warren.runs;
CREATE TRIGGER runs_fill_key BEFORE INSERT ON warren.runs
    FOR EACH ROW WHEN (NEW.run_key IS NULL) EXECUTE FUNCTION warren.runs_fill_key();

ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS tenant text;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
                WHERE conrelid = 'warren.runs'::regclass AND conname = 'runs_pkey') THEN
        ALTER TABLE warren.runs DROP CONSTRAINT runs_pkey;
        ALTER TABLE warren.runs ADD CONSTRAINT runs_run_key PRIMARY KEY USING INDEX runs_run_key;
    END IF;
    -- Enqueued runs are due at any millisecond; the others at whole seconds.
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.runs'::regclass
                      AND conname = 'runs_scheduled_at_check'
                      AND pg_get_constraintdef(oid) LIKE '%enqueue%') THEN
        ALTER TABLE warren.runs DROP CONSTRAINT IF EXISTS runs_scheduled_at_check;
        ALTER TABLE warren.runs ADD CONSTRAINT runs_scheduled_at_check CHECK (
            CASE WHEN origin = 'enqueue'
                 THEN scheduled_at = date_trunc('milliseconds', scheduled_at AT TIME ZONE 'UTC')
                                     AT TIME ZONE 'UTC'
                 ELSE scheduled_at = date_trunc('second', scheduled_at AT TIME ZONE 'UTC')
                                     AT TIME ZONE 'UTC' END);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.runs'::regclass AND conname = 'runs_origin_check'
                      AND pg_get_constraintdef(oid) LIKE '%enqueue%') THEN
        ALTER TABLE warren.runs DROP CONSTRAINT IF EXISTS runs_origin_check;
        ALTER TABLE warren.runs ADD CONSTRAINT runs_origin_check
            CHECK (origin IN ('schedule', 'trigger', 'backfill', 'misfire', 'enqueue'));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.runs'::regclass AND conname = 'runs_state_check'
                      AND pg_get_constraintdef(oid) LIKE '%waiting%') THEN
        ALTER TABLE warren.runs DROP CONSTRAINT IF EXISTS runs_state_check;
        ALTER TABLE warren.runs ADD CONSTRAINT runs_state_check
            CHECK (state IN ('planned', 'published', 'running', 'retrying', 'waiting',
                             'succeeded', 'dead', 'skipped', 'cancelled'));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.runs'::regclass AND conname = 'runs_run_key_length') THEN
        ALTER TABLE warren.runs ADD CONSTRAINT runs_run_key_length
            CHECK (octet_length(run_key) <= 255);
    END IF;
END
$$;
ALTER TABLE warren.runs ALTER COLUMN run_key SET NOT NULL;

-- What the old primary key served: a job's runs in time order.
CREATE INDEX IF NOT EXISTS runs_job ON warren.runs (job, scheduled_at);

COMMENT ON TABLE warren.runs IS
    'One row per run key: the unique key makes a second planner''s insert, and a second enqueue '
    'with the same key, a no-op';
COMMENT ON COLUMN warren.runs.run_key IS
    'JOB@SCHEDULED_AT (scheduled, triggered, backfilled runs) or JOB@KEY (enqueued with the '
    'caller''s key): message_id, idempotency key for handlers; opaque to workers';
COMMENT ON COLUMN warren.runs.scheduled_at IS
    'The fire time (whole seconds) before jitter, or an enqueued run''s time (milliseconds)';
COMMENT ON COLUMN warren.runs.state IS
    'planned, published, running, retrying, waiting (held back by a cap), succeeded, dead, '
    'skipped, cancelled';
COMMENT ON COLUMN warren.runs.origin IS
    'schedule, trigger, backfill, misfire or enqueue (what created the row)';
COMMENT ON COLUMN warren.runs.tenant IS
    'The run''s tenant: the enqueue''s, else its job''s (NULL: none); caps per tenant count by it';

INSERT INTO warren.schema_migrations (version, name) VALUES (12, '012_api_jobs')
ON CONFLICT (version) DO NOTHING;
