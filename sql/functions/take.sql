-- take.sql: warren.take_many and warren.finish_many, the claim and the
-- completion of one transaction that also holds the runs' effects (the C
-- worker's sql handler: docs/worker-protocol.md, "Taken in the effect's
-- transaction"). The one current definition; `warren migrate` re-applies it.
--
-- Why: claim_many commits the claim (the run `running`, a lease, an attempt
-- row) and complete_many then writes the run a second time (`succeeded`) and
-- updates that attempt row: two non-HOT updates of warren.runs per run, each
-- with an entry in every full index (runs_run_key, runs_history, runs_job),
-- and two commits per batch. When the effect is one transaction of SQL
-- statements that finishes within milliseconds, nobody needs to see the run
-- `running` in between: take_many locks the runs (FOR UPDATE, writing
-- nothing), the caller runs the statements, and finish_many writes each run
-- once, in its final state (`succeeded`, its attempt, started_at the take's
-- time), with its attempt row inserted once, finished. One commit makes the
-- effects and the outcome durable together; a rollback (a statement failed,
-- the connection dropped) leaves the runs as they were, `published`, and
-- claimable through the ordinary claim.
--
-- Only the runs claim_many's fast path would claim: fresh (planned,
-- published, retrying), due, of a job with no cap (its own or its
-- template's), of a queue the login is granted, and of a job with overlap
-- `allow`, or with overlap `skip` when the run is the job's only fresh key in
-- the batch, none of the job's runs is running and the job's overlap lock
-- (claim.sql, wp_overlap_lock) is free. take_many then holds that lock to the
-- commit, as a claim holds it to its own: the job's next claim waits for the
-- take's outcome and sees the run finished, never a run it could overlap.
-- Runs of `queue` and `cancel_previous` jobs and of capped ones need their
-- claim committed (the next claim must see them running, a cap slot taken).
-- Those, and every key take_many does not return, go through
-- warren.claim_many. A run whose row or overlap lock another transaction
-- holds is skipped, never waited for: the caller's ordinary claim waits for
-- it with its own bound.

-- ----------------------------------------------------------------------------
-- Function: warren.take_many(run_keys text[], worker text)
--     Locks, writing nothing, the runs claim_many's fast path would claim, for an effect in the
--     caller's transaction; finish_many records them.
-- Parameters:
--     run_keys - at most wp_max_batch() keys
--     worker   - the worker's name
-- Returns: one row per taken run (run_key, attempt to record, job, scheduled_at, payload,
--          lease_seconds, taken_at, template)
-- Locks:   the rows it returns FOR UPDATE SKIP LOCKED, in key order; an uncapped skip job's
--          overlap lock (tried); held to the caller's commit
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.take_many(run_keys text[], worker text)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int, taken_at timestamptz, template text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Key lookups only, as claim_many (claim.sql).
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
    w text := take_many.worker;
    keys text[] := take_many.run_keys;
    bad text[];
    due timestamptz;
    t0 timestamptz;
    sk text[];
    n int;
    priv boolean := warren.wp_privileged();
BEGIN
    PERFORM warren.wp_check_worker('warren.take_many', w);
    PERFORM warren.wp_check_batch('warren.take_many', keys);
    IF NOT priv THEN
        bad := warren.wp_ungranted('warren.take_many', keys);
        IF cardinality(bad) > 0 THEN
            keys := ARRAY(SELECT x FROM unnest(keys) x WHERE NOT (x = ANY (bad)));
        END IF;
    END IF;
    -- As claim_many: wait until the latest of them is due, if that is at
    -- most 1 s away (before any lock); runs due later are not taken.
    SELECT max(rr.due_at) INTO due FROM warren.runs rr
     WHERE rr.run_key = ANY (keys) AND warren.wp_claimable(rr.state || '')
       AND rr.due_at <= clock_timestamp() + interval '1 second';
    IF due > clock_timestamp() THEN
        PERFORM warren.wp_wait_until(due);
    END IF;
    t0 := clock_timestamp(); -- the runs' started_at (finish_many), after the wait
    -- Pass 1: the runs of uncapped `allow` jobs. Pass 2, only when keys are
    -- left: those of uncapped `skip` jobs (sk, below). In key order within
    -- each pass (SKIP LOCKED never waits, so no lock order to keep with
    -- claim_many's per-key path and the completions).
    FOR pass IN 1 .. 2 LOOP
        IF pass = 2 THEN
            IF n >= (SELECT count(DISTINCT x) FROM unnest(keys) x) THEN
                RETURN;
            END IF;
            -- The `skip` jobs with exactly one fresh, due key, none of whose
            -- runs is running: a job with two keys would have its first
            -- claimed and its second skipped, so both go to the claim, and
            -- so does a job with a run running (live, or one to reap). Read
            -- before the lock, so that a job seen busy here is never locked.
            SELECT array_agg(d.job ORDER BY d.job) INTO sk
              FROM (SELECT rr.job FROM warren.runs rr
                      JOIN warren.jobs jb ON jb.name = rr.job || ''
                     WHERE rr.run_key = ANY (keys) AND warren.wp_claimable(rr.state || '')
                       AND rr.due_at <= t0
                       AND warren.wp_overlap_of(jb.overlap, rr.origin) = 'skip'
                     GROUP BY rr.job HAVING count(*) = 1) d
             WHERE NOT EXISTS (SELECT 1 FROM warren.runs o
                                WHERE o.job = d.job AND o.state = 'running'
                                  AND o.origin <> 'enqueue');
            IF sk IS NULL THEN
                RETURN;
            END IF;
            -- Their overlap locks, only tried (never a wait), held to the
            -- commit; then, in a statement after them (a snapshot that sees
            -- every committed claim of those jobs), the jobs none of whose
            -- runs is running still. A job whose lock is held elsewhere (a
            -- claim of its runs under way) goes to the claim, as does one a
            -- claim started meanwhile (its lock is then held to this
            -- transaction's end: that job's next claim waits for it).
            sk := ARRAY(SELECT j FROM unnest(sk) j WHERE warren.wp_overlap_lock(j, true));
            sk := ARRAY(SELECT j FROM unnest(sk) j
                         WHERE NOT EXISTS (SELECT 1 FROM warren.runs o
                                            WHERE o.job = j AND o.state = 'running'
                                              AND o.origin <> 'enqueue'));
        END IF;
        -- `state || ''` and `job || ''` as in claim_many's fast path: no
        -- index on state to prefer, no way in from warren.jobs.
        RETURN QUERY
        SELECT rr.run_key, rr.attempt + 1, rr.job, rr.scheduled_at,
               coalesce(rr.payload, jb.payload), greatest(1, ceil(jb.lease_ms / 1000.0))::int, t0,
               jb.template
          FROM warren.runs rr JOIN warren.jobs jb ON jb.name = rr.job || ''
         CROSS JOIN LATERAL warren.wp_policy(jb.overlap, rr.origin, jb.template, jb.max_running,
                                             jb.max_running_per_tenant,
                                             coalesce(rr.tenant, jb.tenant), true) pol
         WHERE rr.run_key = ANY (keys)
           AND warren.wp_claimable(rr.state || '') AND rr.due_at <= t0
           -- not a run released from waiting under a cap (its slot is
           -- released by its completion: caps.sql), even if a sync removed
           -- the cap since
           AND rr.cap_group IS NULL AND rr.cap_released_at IS NULL
           AND CASE WHEN pass = 1 THEN pol.overlap = 'allow'
                    ELSE pol.overlap = 'skip' AND rr.job = ANY (sk) END
           -- no cap: the group's, or an operator's tenant cap (caps.sql)
           AND NOT pol.capped
           AND (priv OR EXISTS (SELECT 1 FROM warren.worker_grants g
                                 WHERE g.login = session_user AND g.queue = jb.queue))
         ORDER BY rr.run_key
           FOR UPDATE OF rr SKIP LOCKED;
        GET DIAGNOSTICS n = ROW_COUNT;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION warren.take_many(text[], text) IS
    'Locks the runs among run_keys that claim_many''s fast path would claim (fresh, due, of '
    'an uncapped allow job, or of an uncapped skip job with no run running, under its overlap '
    'lock, granted), writing nothing, skipping rows and locks another transaction holds: '
    'one row each with the attempt finish_many records; finish_many in the same transaction '
    'records them as succeeded';

-- ----------------------------------------------------------------------------
-- Function: warren.finish_many(run_keys text[], worker text, taken_at timestamptz)
--     Records the runs take_many took in this transaction as succeeded, in one write each.
-- Parameters:
--     run_keys - the keys take_many returned
--     worker   - the worker's name
--     taken_at - take_many's taken_at
-- Returns: how many runs were recorded; 55000 unless every key is a run take_many takes
-- Locks:   the rows FOR UPDATE NOWAIT (held already; another holder: 55P03); skip jobs' overlap
--          locks (tried, held already)
-- Writes:  warren.runs (succeeded); warren.attempts (inserted, finished); warren.outbox (events
--          run.succeeded)
CREATE OR REPLACE FUNCTION warren.finish_many(run_keys text[], worker text, taken_at timestamptz)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
    w text := finish_many.worker;
    t0 timestamptz := finish_many.taken_at;
    priv boolean := warren.wp_privileged();
    nkeys int;
    n int;
    twice text;
BEGIN
    PERFORM warren.wp_check_worker('warren.finish_many', w);
    PERFORM warren.wp_check_batch('warren.finish_many', finish_many.run_keys);
    -- taken_at is take_many's, of this transaction: not before it began,
    -- not in the future (the runs' started_at, which lateness is measured by).
    IF t0 IS NULL OR t0 < now() OR t0 > clock_timestamp() THEN
        RAISE EXCEPTION 'warren.finish_many: taken_at % is not the taken_at warren.take_many '
                        'returned in this transaction', t0 USING ERRCODE = '22023';
    END IF;
    IF NOT priv AND cardinality(warren.wp_ungranted('warren.finish_many',
                                                    finish_many.run_keys)) > 0 THEN
        RAISE EXCEPTION 'warren.finish_many: a run of a queue this login is not granted'
            USING ERRCODE = '42501';
    END IF;
    SELECT count(DISTINCT x) INTO nkeys FROM unnest(finish_many.run_keys) x;
    -- The rows as take_many left them: held by this transaction already
    -- (then this is immediate), or free; a row another transaction holds
    -- fails at once (55P03) instead of being waited for.
    PERFORM 1 FROM warren.runs rr WHERE rr.run_key = ANY (finish_many.run_keys)
      ORDER BY rr.run_key FOR UPDATE NOWAIT;
    WITH u AS (
        -- The take's lock is held: the row is as take_many found it. The
        -- same fields claim_many's fast path sets for an uncapped job's run,
        -- then the ones complete_many sets, in one write (cap_tenant, which
        -- the fast path sets for a skip job's run, is read only with a
        -- cap_group, and these runs have none).
        UPDATE warren.runs rr
           SET state = 'succeeded', attempt = rr.attempt + 1, lease_owner = w,
               lease_login = session_user, lease_ms = jb.lease_ms,
               lease_until = NULL, started_at = t0, finished_at = clock_timestamp()
          FROM (SELECT DISTINCT x AS k FROM unnest(finish_many.run_keys) x ORDER BY 1) tk,
               warren.jobs jb
         WHERE rr.run_key = tk.k AND warren.wp_claimable(rr.state || '')
           AND rr.due_at <= t0 AND rr.cap_group IS NULL AND rr.cap_released_at IS NULL
           -- `rr.job || ''`: the job's row from the run's, never a way in
           -- from warren.jobs into runs_job (as claim_many's fast path)
           AND jb.name = rr.job || ''
           -- what take_many takes, checked again: a key it did not return
           -- (a capped job's, a queue or cancel_previous job's, a skip job's
           -- with a run running) must not be recorded here. A skip job's
           -- overlap lock is take_many's, held since a statement before
           -- this one (so this one's snapshot sees every committed claim of
           -- the job); tried again here, it is re-entrant, and one another
           -- transaction holds fails the row. (A subquery: an UPDATE's FROM
           -- cannot refer to its target row, as the LATERAL wp_policy of
           -- take_many does; measured as cheap as the expressions written out.)
           AND (SELECT (pol.overlap = 'allow'
                        OR (pol.overlap = 'skip' AND warren.wp_overlap_lock(jb.name, true)
                            AND NOT EXISTS (SELECT 1 FROM warren.runs o
                                             WHERE o.job = rr.job AND o.state = 'running'
                                               AND o.origin <> 'enqueue')))
                       AND NOT pol.capped
                  FROM warren.wp_policy(jb.overlap, rr.origin, jb.template, jb.max_running,
                                        jb.max_running_per_tenant,
                                        coalesce(rr.tenant, jb.tenant), true) pol)
        RETURNING rr.run_key, rr.job, rr.attempt, rr.scheduled_at, rr.due_at, rr.finished_at,
                  warren.wp_overlap_of(jb.overlap, rr.origin) = 'skip' AS sk
    ), at AS (
        INSERT INTO warren.attempts (run_key, attempt, worker, login, started_at, finished_at,
                                     outcome)
        SELECT u.run_key, u.attempt, w, session_user, t0, u.finished_at, 'succeeded' FROM u
        ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
            SET worker = EXCLUDED.worker, login = EXCLUDED.login,
                started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
                outcome = 'succeeded', error = NULL
    ), ev AS (
        -- the event as wp_event writes it (outbox.sql; inlined)
        INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
        SELECT 'warren.events', 'run.succeeded.' || u.job, u.run_key, u.job,
               warren.wp_event_headers(u.job, u.scheduled_at, u.attempt, 'succeeded',
                                       'succeeded'),
               warren.wp_event_body('succeeded', u.run_key, u.job, u.scheduled_at, u.due_at,
                                    u.attempt, 'succeeded', w, NULL)
          FROM u
         ORDER BY u.run_key
    )
    -- one run a skip job (take_many takes no more: the claim would skip
    -- the second)
    SELECT count(*),
           (SELECT min(d.job) FROM (SELECT x.job FROM u x WHERE x.sk GROUP BY x.job
                                     HAVING count(*) > 1) d)
      INTO n, twice FROM u;
    -- All or nothing: the caller commits right after (its COMMIT goes in
    -- the same pipeline), so a run that is not as take_many takes them must
    -- fail the transaction, or that run's effect would commit without its
    -- outcome.
    IF twice IS NOT NULL THEN
        RAISE EXCEPTION 'warren.finish_many: two or more runs of skip job % among run_keys '
                        '(warren.take_many takes at most one a skip job)', twice
            USING ERRCODE = '55000',
                  HINT = 'pass only the keys take_many returned, in the same transaction';
    END IF;
    IF n <> nkeys THEN
        RAISE EXCEPTION 'warren.finish_many: % of % runs are not runs warren.take_many took in '
                        'this transaction (fresh, due, of an uncapped allow job, or of an '
                        'uncapped skip job none of whose runs is running, with its overlap '
                        'lock)', nkeys - n, nkeys
            USING ERRCODE = '55000',
                  HINT = 'pass only the keys take_many returned, in the same transaction; claim '
                         'the others with warren.claim_many and complete them with '
                         'warren.complete_many';
    END IF;
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION warren.finish_many(text[], text, timestamptz) IS
    'Records the runs warren.take_many took in this transaction as succeeded (one write each, '
    'its attempt row and success event); raises 55000 unless every key is a run take_many '
    'takes (a skip job''s with its overlap lock held, one a job), 55P03 for a row another '
    'transaction holds';
