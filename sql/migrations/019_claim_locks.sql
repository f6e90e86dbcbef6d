-- 019_claim_locks.sql: the locks that serialise claims (a cap group's and
-- tenant's, a job's overlap check) and bound a login's sleeping claims (its
-- wait slots) become row locks on a table only the schema owner can touch.
-- Before, they were advisory locks on keys hashed from public names, and
-- PostgreSQL has no privilege on advisory locks: any login of the cluster
-- could take `hashtextextended('warren.cap:T', 0)` and stall every claim of
-- template T, or take a worker login's 64 wait slots. A row lock on
-- warren.claim_locks needs UPDATE on it, which nobody but the owner has.
-- The functions are in sql/functions/ (locks.sql; docs/delivery.md, "Lock
-- order"). Plain SQL, appliable with psql and safe to re-run; records its
-- own version. Never edit this file once landed: add NNN_*.sql instead.

-- One row per lock, made the first time a claim needs it (a cap group's and
-- tenant's, a job's overlap lock) or when a login is granted a queue (its
-- wait slots, below). Rows are never updated, only locked (FOR UPDATE,
-- FOR KEY SHARE) and, by nobody yet, deleted: one small row per capped
-- group, per tenant of it and per job with an overlap policy. No grant on
-- it to anyone (a new table has none): only the owner can lock its rows.
CREATE TABLE IF NOT EXISTS warren.claim_locks (
    lock_key text PRIMARY KEY
);
COMMENT ON TABLE warren.claim_locks IS
    'The rows whose locks serialise claims (sql/functions/locks.sql): c|GROUP (a cap group), '
    'c|GROUP|TENANT, o|JOB (an overlap check), w|LOGIN|SLOT (a sleeping claim''s wait slot); '
    'only the schema owner may lock them';
COMMENT ON COLUMN warren.claim_locks.lock_key IS
    'What the row locks: c|GROUP, c|GROUP|TENANT, o|JOB or w|LOGIN|SLOT (job names have no |, '
    'tenants neither; a slot number ends a wait slot''s key)';

-- A login's wp_max_waiting() (64) wait slots are made when it is first
-- granted a queue (`warren grant`), so that taking one never inserts: a try
-- that had to insert a row could wait for another transaction inserting the
-- same one. Defined here, not in functions/: the trigger needs it (as
-- runs_fill_key in 012).
CREATE OR REPLACE FUNCTION warren.worker_grants_make_slots()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO warren.claim_locks (lock_key)
    SELECT 'w|' || NEW.login || '|' || i FROM generate_series(0, 63) i
    ON CONFLICT (lock_key) DO NOTHING;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION warren.worker_grants_make_slots() IS
    'Trigger: a login granted a queue gets its 64 wait slots in warren.claim_locks';
DROP TRIGGER IF EXISTS worker_grants_make_slots ON warren.worker_grants;
CREATE TRIGGER worker_grants_make_slots AFTER INSERT ON warren.worker_grants
    FOR EACH ROW EXECUTE FUNCTION warren.worker_grants_make_slots();

-- Wait slots of the logins granted a queue before this migration.
INSERT INTO warren.claim_locks (lock_key)
SELECT 'w|' || g.login || '|' || i
  FROM (SELECT DISTINCT login FROM warren.worker_grants) g
 CROSS JOIN generate_series(0, 63) i
ON CONFLICT (lock_key) DO NOTHING;

-- The cap locks in use today: every capped group's, and the (group,
-- tenant) of every run held back or holding a slot (read through the
-- partial indexes of migration 013). Made here, the first claims after the
-- upgrade find them (a lock's first maker holds it exclusively, and a try
-- makes one only if it can at once).
INSERT INTO warren.claim_locks (lock_key)
SELECT 'c|' || jb.name FROM warren.jobs jb
 WHERE jb.max_running IS NOT NULL OR jb.max_running_per_tenant IS NOT NULL
UNION
SELECT DISTINCT 'c|' || o.cap_group || '|' || o.cap_tenant FROM warren.runs o
 WHERE o.state = 'waiting' AND o.cap_group IS NOT NULL AND o.cap_tenant IS NOT NULL
UNION
SELECT DISTINCT 'c|' || o.cap_group || '|' || o.cap_tenant FROM warren.runs o
 WHERE o.cap_group IS NOT NULL AND o.cap_tenant IS NOT NULL
   AND (o.state = 'running'
        OR (o.cap_released_at IS NOT NULL AND o.state IN ('planned', 'published')))
ON CONFLICT (lock_key) DO NOTHING;

INSERT INTO warren.schema_migrations (version, name) VALUES (19, '019_claim_locks')
ON CONFLICT (version) DO NOTHING;
