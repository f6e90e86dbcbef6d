-- lease.sql: a claim's lease: warren.heartbeat (workers) extends it,
-- warren.reap_expired_leases (the planner's reconciler) settles runs whose
-- holder stopped heartbeating. The one current definition; `warren migrate`
-- re-applies it.

CREATE OR REPLACE FUNCTION warren.heartbeat(run_key text, attempt int)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := heartbeat.run_key;
    fence int := heartbeat.attempt;
BEGIN
    UPDATE warren.runs rr
       SET lease_until = now() + make_interval(secs => jb.lease_ms / 1000.0)
      FROM warren.jobs jb
     WHERE rr.run_key = k AND rr.attempt = fence AND rr.state = 'running' AND jb.name = rr.job;
    RETURN FOUND;
END
$fn$;
COMMENT ON FUNCTION warren.heartbeat(text, int) IS
    'Extends the lease of the caller''s attempt; false: the caller no longer holds the run and must stop';

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
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION warren.reap_expired_leases(int) IS
    'Reconciler: runs whose lease expired go to retrying (backoff) or dead per their job''s '
    'retry policy, with attempts.outcome = lease_lost and a note; returns how many';
