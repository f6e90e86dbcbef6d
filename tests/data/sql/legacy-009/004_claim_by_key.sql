-- 004_claim_by_key.sql: warren.claim_many finds its rows one run_key probe
-- per key, whatever the planner believes about warren.runs.
-- Never edit this file once landed: add 00N_*.sql instead.
--
-- Why: 002's fast path joined the keys, warren.runs and warren.jobs in one
-- UPDATE ... FROM. Right after a large backfill or burst (50,000 rows
-- inserted, not analyzed yet) the planner's default selectivities put
-- "runs of job X in state planned/published" at 3 rows and chose jobs ->
-- runs_pkey (every run of the job) -> a nested loop over the keys: measured
-- 175 million join-filter rows and 18.8 s for one 3,968-key batch, 1.2-1.7 s
-- for 128-key batches (auto_explain, bench_worker burst). Now each key is
-- looked up by a subquery of its own (an index probe on the unique run_key,
-- which no estimate can make look worse than a scan) and the UPDATE is a TID
-- scan over what was found, with the job's settings read per row.

CREATE OR REPLACE FUNCTION warren.claim_many(run_keys text[], worker text)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
    w text := claim_many.worker;
    keys text[] := claim_many.run_keys;
    tids tid[];
    done_ text[];
    nfast bigint;
BEGIN
    IF w IS NULL OR w = '' THEN
        RAISE EXCEPTION 'warren.claim_many: worker is required' USING ERRCODE = '22023';
    END IF;
    -- The rows, one run_key index probe per key (a subquery per key: no join
    -- order for the planner to get wrong when warren.runs has no statistics
    -- yet, e.g. right after a large backfill).
    tids := ARRAY(SELECT (SELECT rr.ctid FROM warren.runs rr WHERE rr.run_key = t.k)
                    FROM (SELECT DISTINCT x AS k FROM unnest(keys) x) t);
    -- Fast path: fresh runs of jobs without an overlap check. Rows are locked
    -- in physical order (the TID scan sorts), the same order in every batch.
    -- A row updated since its TID was read fails the recheck and goes to the
    -- full path below.
    RETURN QUERY
    WITH c AS (
        UPDATE warren.runs rr
           SET state = 'running', attempt = rr.attempt + 1, lease_owner = w,
               lease_until = now() + make_interval(secs =>
                   (SELECT jb.lease_ms FROM warren.jobs jb WHERE jb.name = rr.job) / 1000.0),
               started_at = now()
         WHERE rr.ctid = ANY (tids)
           AND (SELECT jb.overlap FROM warren.jobs jb WHERE jb.name = rr.job) = 'allow'
           AND (rr.state IN ('planned', 'published')
                OR (rr.state = 'retrying' AND rr.due_at <= now() + interval '1 second'))
        RETURNING rr.run_key, rr.attempt, rr.job, rr.scheduled_at, rr.payload
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
    GET DIAGNOSTICS nfast = ROW_COUNT;
    IF nfast >= (SELECT count(*) FROM (SELECT DISTINCT x FROM unnest(keys) x) d) THEN
        RETURN;
    END IF;
    SELECT array_agg(rr.run_key) INTO done_
      FROM warren.runs rr
     WHERE rr.ctid = ANY (tids) AND rr.state || '' = 'running' AND rr.lease_owner = w
       AND rr.started_at = now();
    RETURN QUERY
    SELECT t.k, cl.attempt, cl.job, cl.scheduled_at, cl.payload, cl.lease_seconds
      FROM (SELECT DISTINCT x AS k FROM unnest(keys) x
             WHERE done_ IS NULL OR NOT (x = ANY (done_)) ORDER BY 1) t
     CROSS JOIN LATERAL warren.claim(t.k, w) cl;
END
$fn$;
COMMENT ON FUNCTION warren.claim_many(text[], text) IS
    'warren.claim for many run keys: one row per claimed run (run_key first); the others gave no row';

INSERT INTO warren.schema_migrations (version, name) VALUES (4, '004_claim_by_key')
ON CONFLICT (version) DO NOTHING;
