-- lease.sql: a claim's lease: warren.heartbeat (workers) extends it,
-- warren.reap_expired_leases (the planner's reconciler) settles runs whose
-- holder stopped heartbeating. The one current definition; `warren migrate`
-- re-applies it.

-- ----------------------------------------------------------------------------
-- Function: warren.heartbeat(run_key text, attempt int)
--     Extends the lease of the caller's attempt by the lease it was claimed with.
-- Parameters:
--     run_key - the run
--     attempt - the fencing token the claim returned
-- Returns: true; false: the caller no longer holds the run and must stop
-- Locks:   the run's row (UPDATE)
-- Writes:  warren.runs.lease_until
CREATE OR REPLACE FUNCTION warren.heartbeat(run_key text, attempt int)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := heartbeat.run_key;
    fence int := heartbeat.attempt;
    priv boolean := warren.wp_privileged();
BEGIN
    IF NOT priv AND cardinality(warren.wp_ungranted('warren.heartbeat', ARRAY[k])) > 0 THEN
        RETURN false; -- not granted (any more): stop (access.sql)
    END IF;
    -- By the lease the attempt was claimed with (runs.lease_ms), not the
    -- job's current one: the worker paces its heartbeats (every lease/3) by
    -- the lease_seconds its claim returned, so a sync that shortened the
    -- job's lease mid-run would otherwise let the lease lapse between two of
    -- them. A run claimed before migration 011 has no lease_ms: the job's.
    -- Only the login that claimed the attempt may extend it (access.sql).
    UPDATE warren.runs rr
       SET lease_until = now() + make_interval(secs => coalesce(rr.lease_ms, jb.lease_ms) / 1000.0)
      FROM warren.jobs jb
     WHERE rr.run_key = k AND rr.attempt = fence AND rr.state = 'running' AND jb.name = rr.job
       AND (priv OR rr.lease_login IS NULL OR rr.lease_login = session_user);
    RETURN FOUND;
END
$fn$;
COMMENT ON FUNCTION warren.heartbeat(text, int) IS
    'Extends the lease of the caller''s attempt by the lease it was claimed with; false: the '
    'caller no longer holds the run (or another login claimed it) and must stop';

-- ----------------------------------------------------------------------------
-- Function: warren.reap_expired_leases(max int)
--     The reconciler: runs whose lease ran out go to retrying or dead; then waiting runs that fit
--     their caps are released.
-- Parameters:
--     max - the most leases reaped per call (NULL: 100)
-- Returns: how many leases were reaped
-- Locks:   the expired running rows FOR UPDATE SKIP LOCKED, in lease order; then
--          wp_cap_release_all's tried cap locks
-- Writes:  warren.attempts (lease_lost); warren.runs and warren.outbox (wp_after_failure);
--          releases
CREATE OR REPLACE FUNCTION warren.reap_expired_leases(max int)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM warren.runs rr
              WHERE rr.state = 'running' AND rr.lease_until < now()
              ORDER BY rr.lease_until
              LIMIT greatest(coalesce(max, 100), 0)
              FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE warren.attempts a SET finished_at = now(), outcome = 'lease_lost',
               error = format('lease expired at %s', warren.wp_utc_ms(r.lease_until))
         WHERE a.run_key = r.run_key AND a.attempt = r.attempt AND a.finished_at IS NULL;
        PERFORM warren.wp_after_failure(r.run_key, 'lease_lost',
            format('lease lost: worker %s stopped heartbeating', r.lease_owner), r.lease_owner,
            format('lease of attempt %s (worker %s) expired at %s; reaped at %s', r.attempt,
                   r.lease_owner, warren.wp_utc_ms(r.lease_until), warren.wp_utc_ms(now())));
        n := n + 1;
    END LOOP;
    -- Caps (caps.sql): the reaped runs' slots, and any other group with
    -- waiting runs that fit (a cap raised by sync, a release that was
    -- missed), in (group, tenant) order after the loop, so that two
    -- reconcilers never take two groups' locks in opposite orders.
    PERFORM warren.wp_cap_release_all(1000);
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION warren.reap_expired_leases(int) IS
    'Reconciler: runs whose lease expired go to retrying (backoff) or dead per their job''s '
    'retry policy, with attempts.outcome = lease_lost and a note; then waiting runs that fit '
    'their caps again are released; returns how many leases were reaped';
