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
-- reclaim_many(run_keys, worker): each of run_keys that is running under a
-- lease of this very worker (lease_owner = worker, live or not) gets a new
-- attempt, exactly as a claim would give it: the attempt number goes up (the
-- fencing token: if another process used the same worker name, its heartbeat
-- and completion of the old attempt now return false), the lease runs from
-- now(). The lost attempt is recorded as lease_lost with the reason. It does
-- not use up the retry budget: its handler never ran (the budget counts
-- attempts from attempt_base, which moves up by one with it). Keys not held
-- by this worker give no row; the caller then claims them as usual.
--
-- Only a worker that knows its claim's answer was lost should call it (the C
-- worker does, after a connection error during claim_many); a worker name
-- must be unique per process.

CREATE OR REPLACE FUNCTION warren.reclaim_many(run_keys text[], worker text)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
    w text := reclaim_many.worker;
BEGIN
    IF w IS NULL OR w = '' THEN
        RAISE EXCEPTION 'warren.reclaim_many: worker is required' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH c AS (
        -- one runs_run_key probe per key, rows locked in key order (as claims)
        UPDATE warren.runs rr
           SET attempt = rr.attempt + 1, attempt_base = rr.attempt_base + 1,
               lease_until = now() + make_interval(secs =>
                   (SELECT jb.lease_ms FROM warren.jobs jb WHERE jb.name = rr.job) / 1000.0),
               started_at = now()
          FROM (SELECT DISTINCT x AS k FROM unnest(reclaim_many.run_keys) x ORDER BY 1) t
         WHERE rr.run_key = t.k AND rr.state || '' = 'running' AND rr.lease_owner = w
        RETURNING rr.run_key, rr.attempt, rr.job, rr.scheduled_at, rr.payload
    ), lost AS (
        UPDATE warren.attempts x
           SET finished_at = now(), outcome = 'lease_lost',
               error = format('the answer to this claim did not reach worker %s; it claimed '
                              'the run again as attempt %s', w, c.attempt)
          FROM c
         WHERE x.run_key = c.run_key AND x.attempt = c.attempt - 1 AND x.finished_at IS NULL
    ), a AS (
        INSERT INTO warren.attempts (run_key, attempt, worker, started_at)
        SELECT c.run_key, c.attempt, w, now() FROM c
        ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
            SET worker = EXCLUDED.worker, started_at = EXCLUDED.started_at,
                finished_at = NULL, outcome = NULL, error = NULL
    )
    SELECT c.run_key, c.attempt, c.job, c.scheduled_at, coalesce(c.payload, jb.payload),
           greatest(1, ceil(jb.lease_ms / 1000.0))::int
      FROM c JOIN warren.jobs jb ON jb.name = c.job;
END
$fn$;
COMMENT ON FUNCTION warren.reclaim_many(text[], text) IS
    'After a claim whose answer was lost: the runs among run_keys running under this worker''s '
    'lease get a new attempt (one row each, as claim_many); the lost attempt is lease_lost and '
    'does not count against the retry budget';

REVOKE ALL ON FUNCTION warren.reclaim_many(text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION warren.reclaim_many(text[], text) TO warren_worker;
COMMENT ON ROLE warren_worker IS
    'May execute warren.claim, warren.heartbeat and warren.complete (their batch forms, and '
    'warren.reclaim_many after a lost claim answer) only; grant it to worker logins';

INSERT INTO warren.schema_migrations (version, name) VALUES (8, '008_reclaim_lost_claims')
ON CONFLICT (version) DO NOTHING;
