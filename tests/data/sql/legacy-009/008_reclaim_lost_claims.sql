-- 008_reclaim_lost_claims.sql: warren.reclaim_many lets a worker whose claim
-- answer was lost take its runs again at once. Never edit this file once
-- landed: add 00N_*.sql instead.
--
-- Why: when the connection drops after claim_many committed but before its
-- answer arrived, the worker does not know which runs it holds. Claiming them
-- again found them running under its own live lease and gave no row, so the
-- worker acknowledged its deliveries as duplicates and the runs waited for
-- their lease to run out; the reaper then counted the lost attempt as a
-- failure (with max_attempts = 1 the run went dead without ever running).
--
-- reclaim_many(run_keys, worker, within_ms): each of run_keys that is running
-- under a lease of this very worker, claimed at most within_ms milliseconds
-- ago and never heartbeated since (lease_until is still claim time + lease),
-- gets a new attempt, exactly as a claim would give it: the attempt number
-- goes up (the fencing token), the lease runs from now(). The lost attempt is
-- recorded as lease_lost with the reason, with the event
-- run.lease_lost.<job>. It does not use up the retry budget: its handler
-- never ran (the budget counts attempts from attempt_base, which moves up by
-- one with it). Other keys give no row; the caller then claims them as usual.
--
-- The two conditions keep it to the claim whose answer was lost: a run that
-- another process under the same worker name claimed earlier and is running
-- has been heartbeated (every lease/3), or was claimed before that claim was
-- sent. Worker names should still be unique per process.

CREATE OR REPLACE FUNCTION warren.reclaim_many(run_keys text[], worker text, within_ms int)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    w text := reclaim_many.worker;
    k text;
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
BEGIN
    IF w IS NULL OR w = '' OR within_ms IS NULL OR within_ms < 0 THEN
        RAISE EXCEPTION 'warren.reclaim_many: worker and within_ms >= 0 are required'
            USING ERRCODE = '22023';
    END IF;
    -- Rare (after a lost connection): one key at a time, in key order as claims.
    FOR k IN SELECT DISTINCT x FROM unnest(reclaim_many.run_keys) x WHERE x IS NOT NULL ORDER BY 1
    LOOP
        SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        SELECT * INTO j FROM warren.jobs jb WHERE jb.name = r.job;
        CONTINUE WHEN r.state <> 'running' OR r.lease_owner IS DISTINCT FROM w
                   OR r.started_at < now() - make_interval(secs => within_ms / 1000.0)
                   OR r.lease_until IS DISTINCT FROM
                      r.started_at + make_interval(secs => j.lease_ms / 1000.0);
        UPDATE warren.attempts a
           SET finished_at = now(), outcome = 'lease_lost',
               error = format('the answer to this claim did not reach worker %s; it claimed '
                              'the run again as attempt %s', w, r.attempt + 1)
         WHERE a.run_key = k AND a.attempt = r.attempt AND a.finished_at IS NULL;
        PERFORM warren.wp_event(r, 'lease_lost', NULL, w);
        UPDATE warren.runs rr
           SET attempt = rr.attempt + 1, attempt_base = rr.attempt_base + 1,
               lease_until = now() + make_interval(secs => j.lease_ms / 1000.0),
               started_at = now()
         WHERE rr.run_key = k
        RETURNING * INTO r;
        INSERT INTO warren.attempts (run_key, attempt, worker, started_at)
        VALUES (k, r.attempt, w, now())
        ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
            SET worker = EXCLUDED.worker, started_at = EXCLUDED.started_at,
                finished_at = NULL, outcome = NULL, error = NULL;
        run_key := k;
        attempt := r.attempt;
        job := r.job;
        scheduled_at := r.scheduled_at;
        payload := coalesce(r.payload, j.payload);
        lease_seconds := greatest(1, ceil(j.lease_ms / 1000.0))::int;
        RETURN NEXT;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION warren.reclaim_many(text[], text, int) IS
    'After a claim whose answer was lost: the runs among run_keys running under this worker''s '
    'lease, claimed at most within_ms ago and never heartbeated, get a new attempt (one row '
    'each, as claim_many); the lost attempt is lease_lost and does not count against the retry '
    'budget';

REVOKE ALL ON FUNCTION warren.reclaim_many(text[], text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION warren.reclaim_many(text[], text, int) TO warren_worker;
COMMENT ON ROLE warren_worker IS
    'May execute warren.claim, warren.heartbeat and warren.complete (their batch forms, and '
    'warren.reclaim_many after a lost claim answer) only; grant it to worker logins';

INSERT INTO warren.schema_migrations (version, name) VALUES (8, '008_reclaim_lost_claims')
ON CONFLICT (version) DO NOTHING;
