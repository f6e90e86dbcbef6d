-- install.sql: warren's schema in one psql run, as `warren migrate` would
-- leave it: psql -X -v ON_ERROR_STOP=1 -f sql/install.sql postgresql://...
-- Safe on a database migrated before (every migration is idempotent and
-- records its own version). One transaction, under the migration lock that
-- `warren migrate` takes (warren.schema_migrations locked IN SHARE ROW
-- EXCLUSIVE MODE: only its owner or a superuser can take it, so no producer
-- or worker login can stall an install), so it serialises with `warren
-- migrate`. A first install has no table to lock yet: one racing another
-- first install fails (duplicate key) with nothing applied; run it again.
-- A new migration is added here as well.

\set ON_ERROR_STOP on
BEGIN;
SELECT to_regclass('warren.schema_migrations') IS NOT NULL AS warren_installed \gset
\if :warren_installed
LOCK TABLE warren.schema_migrations IN SHARE ROW EXCLUSIVE MODE;
\endif

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
\ir migrations/018_producer_grants.sql
\ir migrations/019_claim_locks.sql
\ir migrations/020_tenant_caps.sql

\ir functions.sql

COMMIT;
