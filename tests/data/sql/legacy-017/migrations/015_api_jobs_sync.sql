-- 015_api_jobs_sync.sql: what warren.upsert_job(s) and `warren sync` share
-- about API jobs (docs/api-jobs.md): the partition count the last sync used
-- (an API job's partition is computed in SQL from it, so every planner owns
-- it as it owns a config job), and which API jobs a template's removal
-- paused (so adding the template back resumes exactly those); and what
-- makes API jobs cheap at a million: fast name checks and a due-jobs index
-- whose scan stops when nothing is due.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

CREATE TABLE IF NOT EXISTS warren.sync_state (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    partitions int NOT NULL CHECK (partitions BETWEEN 1 AND 65536),
    synced_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE warren.sync_state IS
    'One row: what the last `warren sync` applied that API jobs need (written by sync)';
COMMENT ON COLUMN warren.sync_state.id IS 'Always true: the table has one row';
COMMENT ON COLUMN warren.sync_state.partitions IS
    'planner.partitions of the last sync: API jobs are placed in partition '
    'mod(hashtext(name) + 2^31, partitions) (warren.wp_job_partition)';
COMMENT ON COLUMN warren.sync_state.synced_at IS 'When the last sync committed (database clock)';

ALTER TABLE warren.jobs ADD COLUMN IF NOT EXISTS paused_by_template boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN warren.jobs.paused_by_template IS
    'An API job paused because its template was removed from the config: `warren sync` resumes '
    'it when the template comes back (an explicit pause or resume clears the mark)';

-- The zone names warren.upsert_job(s) accept without a scan of
-- pg_timezone_names (a directory walk: 50-150 ms a call). A zone missing here
-- is still looked up there (warren.wp_zone_known), so a zone of a newer
-- PostgreSQL tz database is never refused because of this copy.
CREATE TABLE IF NOT EXISTS warren.timezones (name text PRIMARY KEY);
COMMENT ON TABLE warren.timezones IS
    'A copy of pg_timezone_names.name for the API''s zone check (a cache: misses fall back to '
    'pg_timezone_names)';
COMMENT ON COLUMN warren.timezones.name IS 'An IANA zone name PostgreSQL knows';
INSERT INTO warren.timezones (name) SELECT name FROM pg_catalog.pg_timezone_names
ON CONFLICT (name) DO NOTHING;

-- The name and tenant rules of 012, written so that PostgreSQL checks them
-- fast: its regex engine matches a bounded repetition such as {0,199} tens
-- of times slower than a negated character class (measured 15-55 us against
-- under 3 us a row: most of the cost of inserting an API job). The same sets
-- of values pass. (A psql re-run of install.sql lets 012 put its own form
-- back and this one replace it again.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.jobs'::regclass AND conname = 'jobs_name_check'
                      AND pg_get_constraintdef(oid) LIKE '%length(name) <= 200%') THEN
        ALTER TABLE warren.jobs DROP CONSTRAINT IF EXISTS jobs_name_check;
        ALTER TABLE warren.jobs ADD CONSTRAINT jobs_name_check
            CHECK (name ~ '^[A-Za-z0-9]' AND name !~ '[^A-Za-z0-9._-]' AND length(name) <= 200);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'warren.jobs'::regclass AND conname = 'jobs_tenant_check'
                      AND pg_get_constraintdef(oid) LIKE '%length(tenant) <= 200%') THEN
        ALTER TABLE warren.jobs DROP CONSTRAINT IF EXISTS jobs_tenant_check;
        ALTER TABLE warren.jobs ADD CONSTRAINT jobs_tenant_check
            CHECK (tenant ~ '^[A-Za-z0-9]' AND tenant !~ '[^A-Za-z0-9._:@-]'
                   AND length(tenant) <= 200);
    END IF;
END
$$;

-- The planner's due-jobs scan (src/store_plan.c, SQL_LOCK_DUE_JOBS) as a
-- range: coalesce(next_fire_at, '-infinity') <= now() + horizon, in the
-- order of this index, is an index condition, so a tick when nothing is due
-- reads nothing. 003's jobs_due (next_fire_at NULLS FIRST, name) served
-- "next_fire_at IS NULL OR next_fire_at <= ...", which no btree can bound:
-- every idle tick walked all jobs (420 ms at 20,000 jobs, measured). A NULL
-- cursor (never planned) sorts first, as NULLS FIRST did.
CREATE INDEX IF NOT EXISTS jobs_due_at
    ON warren.jobs ((coalesce(next_fire_at, '-infinity'::timestamptz)), name)
    WHERE NOT paused AND NOT removed;
DROP INDEX IF EXISTS warren.jobs_due;

INSERT INTO warren.schema_migrations (version, name) VALUES (15, '015_api_jobs_sync')
ON CONFLICT (version) DO NOTHING;
