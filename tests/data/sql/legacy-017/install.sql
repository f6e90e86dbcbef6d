-- install.sql: warren's schema in one psql run, as `warren migrate` would
-- leave it: psql -X -v ON_ERROR_STOP=1 -f sql/install.sql postgresql://...
-- Safe on a database migrated before (every migration is idempotent and
-- records its own version). One transaction, under the migration lock
-- (WARREN_MIGRATE_LOCK_KEY in include/warren/store.h), so it serialises with
-- `warren migrate`. A new migration is added here as well.

\set ON_ERROR_STOP on
BEGIN;
SELECT pg_advisory_xact_lock(8243214190722195001) AS locked \gset

\ir migrations/001_schema.sql
\ir migrations/002_worker_protocol.sql
\ir migrations/003_planner.sql
\ir migrations/004_claim_by_key.sql
\ir migrations/005_outbox_urgent.sql
\ir migrations/006_claim_reaps_expired_leases.sql
\ir migrations/007_retry_wakes_the_relay.sql
\ir migrations/008_reclaim_lost_claims.sql
\ir migrations/009_claim_waits_until_due.sql
\ir migrations/010_jobs_broken.sql
\ir migrations/011_worker_grants.sql
\ir migrations/012_api_jobs.sql
\ir migrations/013_caps.sql
\ir migrations/015_api_jobs_sync.sql
\ir migrations/016_attempts_fillfactor.sql
\ir migrations/017_jobs_replan.sql

\ir functions.sql

COMMIT;
