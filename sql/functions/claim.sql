-- claim.sql: the claim (docs/design.md §6.1, docs/worker-protocol.md): warren.claim for
-- workers in any language, warren.claim_many for batches (the C worker),
-- warren.reclaim_many after a claim whose answer was lost, and their
-- helpers. The one current definition; `warren migrate` re-applies it.
--
-- Fencing: runs.attempt is bumped by every successful claim and is the token.
-- heartbeat and complete succeed only while the run is `running` under the
-- caller's attempt. A lease that ran out but that nobody took over (no newer
-- claim, no reaper pass) still fences correctly: the lease only decides when
-- others may take over, the attempt number decides who may write.

-- The claim answers end with the run's template (NULL for a config job):
-- a worker picks the handler from the database's answer, never from the
-- message (anything that can publish to a ready queue could name another
-- template). A function's result columns cannot change in place: a
-- definition from before that column is dropped here and made again below
-- (grants.sql grants it again). Only then: a re-run drops nothing.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['warren.wp_claim(text,text,boolean)', 'warren.claim(text,text)',
                             'warren.claim_many(text[],text)',
                             'warren.reclaim_many(text[],text,integer)',
                             'warren.take_many(text[],text)']
    LOOP
        IF to_regprocedure(f) IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM pg_proc p
                            WHERE p.oid = to_regprocedure(f)
                              AND 'template' = ANY (p.proargnames)) THEN
            EXECUTE 'DROP FUNCTION ' || f;
        END IF;
    END LOOP;
END
$$;

-- ------------------------------------------------------------ waiting

-- The claim waits until the run is due, and times the claim from then.
--
-- Why: the relay releases a run planner.release_lead (default 3 s) before its
-- due time, so that the broker's dead-letter hop from the delay queue into
-- the ready queue is done before the run is due instead of after (a burst of
-- 50,000 runs due at one instant spent its first 2-3 s in that hop). The
-- worker holds an early delivery until it is due; the claim makes sure of it
-- on the database's clock, whatever the worker does: a run due at most
-- wp_max_wait() (15 s) ahead is waited for (pg_sleep, before any lock), one
-- further ahead gives no row (its own message is still to come). The lease,
-- started_at and the attempt's start are clock_timestamp() after the wait:
-- now() is the transaction's start, before it. (Since migration 009.)

-- ----------------------------------------------------------------------------
-- Function: warren.wp_max_wait()
--     How far ahead of its due time a run is still claimable (15 s; also src/config.c).
-- Parameters: none
-- Returns: interval
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_max_wait()
RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '15 seconds' $$;
COMMENT ON FUNCTION warren.wp_max_wait() IS
    'How far ahead of its due time a run is still claimable (the claim waits for it); '
    'more than the longest planner.release_lead (10 s)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_wait_until(t timestamptz)
--     Sleeps until clock_timestamp() >= t.
-- Parameters:
--     t - the instant
-- Returns: void
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_wait_until(t timestamptz)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- pg_sleep may wake early on a signal: loop until the clock has passed t.
    WHILE clock_timestamp() < t LOOP
        PERFORM pg_sleep(greatest(0.001, extract(epoch FROM t - clock_timestamp())));
    END LOOP;
END
$$;
COMMENT ON FUNCTION warren.wp_wait_until(timestamptz) IS
    'Sleeps until clock_timestamp() >= t (the claim waiting for a run released early)';

-- ------------------------------------------------------------ claim

-- The claim itself; warren.claim(k, w) is wp_claim(k, w, true). claim_many's
-- per-key path calls it with may_wait false: that transaction holds row and
-- claim locks already, so it never sleeps there (a run that is not due by
-- then gives no row). A planned, published or retrying run is claimed only
-- when it is due, checked again after taking the run's lock.
--
-- For a job with an overlap policy (skip, queue, cancel_previous) the claim
-- first reaps the job's other runs whose lease ran out. Why: the overlap
-- check counts only runs with a live lease, so a run whose holder stopped
-- heartbeating does not hold back the job's next run (a dead worker must not
-- block the job until the reconciler reaps it, up to 5 s later). But until
-- then the old run was still 'running' under its old attempt: a holder that
-- was only paused (SIGSTOP, a VM freeze) could resume, heartbeat successfully
-- and complete it while the next run ran, so two runs of a `skip` job were
-- recorded as overlapping. Reaping it in the claim that lets the next run
-- start closes that: the old attempt becomes lease_lost in the same
-- transaction, and the resumed holder's heartbeat returns false.
-- The overlap policy a run is claimed under: its job's, but `allow` for a
-- run enqueued by an application (origin 'enqueue', warren.enqueue): an
-- overlap policy is about a schedule's successive fire times, and runs
-- enqueued with distinct keys are distinct pieces of work, as in every
-- queue. A template that wants its enqueued runs one at a time says so
-- with a cap (max_running = 1, or max_running_per_tenant = 1): they then
-- wait their turn in due order instead of being skipped (docs/api-jobs.md,
-- "Enqueued runs and overlap"). Both ways: a scheduled run's own check
-- counts only the job's running runs that were not enqueued (its queries
-- of "the job's other running runs" say `o.origin <> 'enqueue'`), so a
-- `cancel_previous` fire never cancels enqueued work and a `skip` fire is
-- not skipped because of it.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_overlap_of(job_overlap text, run_origin text)
--     The overlap policy a run is claimed under: its job's, allow for an enqueued run.
-- Parameters:
--     job_overlap - jobs.overlap
--     run_origin  - runs.origin
-- Returns: text
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_overlap_of(job_overlap text, run_origin text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN run_origin = 'enqueue' THEN 'allow' ELSE job_overlap END
$$;
COMMENT ON FUNCTION warren.wp_overlap_of(text, text) IS
    'The overlap policy a run is claimed under: its job''s, allow for an enqueued run';

-- A run's claim policy, each part defined once: the states a claim starts
-- from, the overlap policy (above) and whether its cap group has a cap
-- (wp_capped, caps.sql). Plain SQL, no SET clause: inlined by the planner
-- into the statements and plpgsql expressions that use them, so they cost
-- what the expressions written out did.

-- ----------------------------------------------------------------------------
-- Function: warren.wp_claimable(state text)
--     Does a claim start a new attempt of a run in this state (when due)? planned, published,
--     retrying (a running run is taken over only when its lease ran out).
-- Parameters:
--     state - runs.state
-- Returns: boolean (NULL for NULL)
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_claimable(state text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('planned', 'published', 'retrying')
$$;
COMMENT ON FUNCTION warren.wp_claimable(text) IS
    'Does a claim start a new attempt of a run in this state (planned, published, retrying)?';

-- The SQL functions below read columns and tables of later migrations; a
-- stepwise migrate applies the function files on every intermediate
-- schema, where their bodies cannot be checked yet: checked at their first
-- call instead (as status.sql does). Reset after them.
SET LOCAL check_function_bodies = off;

-- ----------------------------------------------------------------------------
-- Function: warren.wp_policy(job_overlap text, run_origin text, job_template text, job_mr int,
--           job_mrt int, run_tenant text, tc_any boolean)
--     A run's claim policy from its job's row: claim_many, take_many and finish_many inline it
--     into their statements (a LATERAL subquery of no table).
-- Parameters:
--     job_overlap  - jobs.overlap
--     run_origin   - runs.origin
--     job_template - jobs.template (NULL: a config job, whose caps are its own)
--     job_mr       - the job's own max_running
--     job_mrt      - the job's own max_running_per_tenant
--     run_tenant   - the run's tenant, coalesce(runs.tenant, jobs.tenant)
--     tc_any       - whether any operator's tenant cap exists (false: none is looked up)
-- Returns: one row: overlap (wp_overlap_of); capped: the cap group has max_running or
--          max_running_per_tenant (an API job's template's), or the tenant an operator's cap
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_policy(job_overlap text, run_origin text, job_template text,
                                            job_mr int, job_mrt int, run_tenant text,
                                            tc_any boolean)
RETURNS TABLE(overlap text, capped boolean) LANGUAGE sql STABLE AS $$
    -- $n, not the names: a name that is also a column of warren.jobs (template)
    -- would be read as the column
    SELECT warren.wp_overlap_of($1, $2),
           CASE WHEN $3 IS NULL THEN warren.wp_capped($4, $5)
                ELSE EXISTS (SELECT 1 FROM warren.jobs gj
                              WHERE gj.name = $3
                                AND warren.wp_capped(gj.max_running, gj.max_running_per_tenant))
           END
           OR ($7 AND EXISTS (SELECT 1 FROM warren.tenant_caps tc WHERE tc.tenant = $6))
$$;
COMMENT ON FUNCTION warren.wp_policy(text, text, text, int, int, text, boolean) IS
    'A run''s claim policy from its job''s row: the overlap policy it is claimed under, and '
    'whether a cap (its group''s, or its tenant''s) applies (inlined into the set-based claims)';

RESET check_function_bodies;

-- ----------------------------------------------------------------------------
-- Function: warren.wp_overlap_lock(jn text, try_only boolean)
--     Takes the overlap lock of job jn: claims of its runs serialise.
-- Parameters:
--     jn       - the job
--     try_only - only if free at once
-- Returns: true: held; false: not free at once; NULL for NULL jn
-- Locks:   claim_locks o|jn exclusive, to the end of the transaction
-- Writes:  warren.claim_locks: the lock row made the first time
CREATE OR REPLACE FUNCTION warren.wp_overlap_lock(jn text, try_only boolean)
RETURNS boolean LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    -- A row of warren.claim_locks (locks.sql): no other login can hold it.
    SELECT warren.wp_lock_row('o|' || jn, true, try_only)
$$;
COMMENT ON FUNCTION warren.wp_overlap_lock(text, boolean) IS
    'Takes the overlap lock of job jn (claims of its runs serialise): a row of '
    'warren.claim_locks; try_only: only if free at once (false: not taken); NULL for NULL jn';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_claim_locks(cg text, ct text, mr int, mrt int, jn text, pol text,
--           try_only boolean)
--     The locks a claim takes before the run's row, in the lock order (docs/delivery.md, "Lock
--     order"): the cap lock(s) when its group has a cap, then the job's overlap lock unless the
--     policy is allow.
-- Parameters:
--     cg       - the cap group
--     ct       - the run's tenant ('' for none)
--     mr       - the group's max_running
--     mrt      - the tenant's cap (wp_tenant_cap)
--     jn       - the job
--     pol      - the overlap policy the run is claimed under (wp_overlap_of)
--     try_only - only if free at once
-- Returns: true: held; false: one was not free at once (try_only; those taken stay held)
-- Locks:   wp_cap_lock's, then wp_overlap_lock's, to the end of the transaction
-- Writes:  warren.claim_locks: a lock row made the first time
CREATE OR REPLACE FUNCTION warren.wp_claim_locks(cg text, ct text, mr int, mrt int, jn text,
                                                 pol text, try_only boolean)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
-- No SET clause (as wp_event): called under its caller's search_path, for
-- the cost of a call (a SET clause costs several microseconds a call)
BEGIN
    IF warren.wp_capped(mr, mrt) AND NOT warren.wp_cap_lock(cg, ct, mr, mrt, try_only) THEN
        RETURN false;
    END IF;
    IF pol <> 'allow' AND NOT warren.wp_overlap_lock(jn, try_only) THEN
        RETURN false;
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION warren.wp_claim_locks(text, text, int, int, text, text, boolean) IS
    'The locks a claim takes before the run''s row, in the lock order: the cap lock(s), then '
    'the overlap lock; false when one is not free at once (try_only)';

-- For a job with an overlap policy (skip, queue, cancel_previous) the claim
-- first reaps the job's other runs whose lease ran out (see above), then
-- looks at its runs still running.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_overlap_verdict(r warren.runs, pol text, cg text, ct text,
--           t0 timestamptz, w text)
--     The overlap check of a locked run claimed under skip, queue or cancel_previous (the job's
--     overlap lock held): reaps the job's expired runs, cancels older ones (cancel_previous); a
--     run still running holds this one back (queue: retrying in 1 s; else skipped).
-- Parameters:
--     r   - the run's row, locked (FOR UPDATE)
--     pol - skip, queue or cancel_previous
--     cg  - the run's cap group: a slot it held (released from waiting) goes to the next
--     ct  - its tenant
--     t0  - the claim's time
--     w   - the claiming worker
-- Returns: true: go ahead and claim r; false: r was held back (retrying or skipped)
-- Locks:   the job's other running rows (FOR UPDATE, in scheduled order); a release's
-- Writes:  the reaped runs (wp_after_failure), the cancelled ones (runs, attempts, events);
--          r (retrying or skipped, note, event run.skipped); waiting runs released
CREATE OR REPLACE FUNCTION warren.wp_overlap_verdict(r warren.runs, pol text, cg text, ct text,
                                                     t0 timestamptz, w text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    k text := r.run_key;
    b record;
    newer_key text;
    line text;
BEGIN
    -- Another run of this job whose lease ran out is reaped here, just as
    -- the reconciler would (attempt lease_lost; retrying with backoff or
    -- dead): this run does not wait for it, and its holder, if only
    -- paused, is fenced off now (its next heartbeat and its completion
    -- return false) instead of finishing it alongside this run.
    FOR b IN SELECT * FROM warren.runs o
              WHERE o.job = r.job AND o.run_key <> k AND o.state = 'running'
                AND o.origin <> 'enqueue'
                AND o.lease_until < t0
              ORDER BY o.scheduled_at
              FOR UPDATE
    LOOP
        UPDATE warren.attempts a SET finished_at = t0, outcome = 'lease_lost',
               error = format('lease expired at %s', warren.wp_utc_ms(b.lease_until))
         WHERE a.run_key = b.run_key AND a.attempt = b.attempt AND a.finished_at IS NULL;
        PERFORM warren.wp_after_failure(b.run_key, 'lease_lost',
            format('lease lost: worker %s stopped heartbeating', b.lease_owner), b.lease_owner,
            format('lease of attempt %s (worker %s) expired at %s; reaped at %s by the '
                   'overlap check of %s', b.attempt, b.lease_owner,
                   warren.wp_utc_ms(b.lease_until), warren.wp_utc_ms(t0), k));
    END LOOP;

    FOR b IN SELECT * FROM warren.runs o
              WHERE o.job = r.job AND o.run_key <> k AND o.state = 'running'
                AND o.origin <> 'enqueue'
                AND o.lease_until >= t0
              ORDER BY o.scheduled_at
              FOR UPDATE
    LOOP
        IF pol = 'cancel_previous' AND b.scheduled_at < r.scheduled_at THEN
            UPDATE warren.runs o
               SET state = 'cancelled', finished_at = t0, lease_owner = NULL,
                   lease_until = NULL,
                   note = warren.plan_note(o.note, format(
                       'cancelled by overlap policy cancel_previous at %s: newer run %s claimed by %s',
                       warren.wp_utc_ms(t0), k, w))
             WHERE o.run_key = b.run_key;
            UPDATE warren.attempts a SET finished_at = t0, outcome = 'cancelled',
                   error = format('cancelled: newer run %s started', k)
             WHERE a.run_key = b.run_key AND a.attempt = b.attempt AND a.finished_at IS NULL;
            PERFORM warren.wp_event(o, 'cancelled', NULL, b.lease_owner)
               FROM warren.runs o WHERE o.run_key = b.run_key;
        ELSE
            newer_key := b.run_key;
            EXIT;
        END IF;
    END LOOP;
    IF newer_key IS NULL THEN
        RETURN true;
    END IF;

    -- A run released from waiting held a slot of its cap group (caps.sql):
    -- it is not running after all, so the slot goes to the next waiting run
    -- (its group's lock is held already).
    IF r.cap_released_at IS NOT NULL AND r.cap_group IS NOT NULL THEN
        cg := r.cap_group;
        ct := r.cap_tenant;
    END IF;
    IF pol = 'queue' THEN
        line := format('held back by overlap policy queue: %s was still running', newer_key);
        UPDATE warren.runs rr
           SET state = 'retrying', due_at = t0 + interval '1 second',
               note = CASE WHEN rr.note LIKE '%held back by overlap policy queue%'
                           THEN rr.note ELSE warren.plan_note(rr.note, line) END
         WHERE rr.run_key = k;
    ELSE
        -- skip, or cancel_previous with a newer run already running
        line := format('skipped by overlap policy %s at %s: %s was still running',
                       pol, warren.wp_utc_ms(t0), newer_key);
        UPDATE warren.runs rr
           SET state = 'skipped', finished_at = t0, note = warren.plan_note(rr.note, line)
         WHERE rr.run_key = k
        RETURNING * INTO r;
        PERFORM warren.wp_event(r, 'skipped', NULL, w);
    END IF;
    IF cg IS NOT NULL THEN
        UPDATE warren.runs rr SET cap_released_at = NULL WHERE rr.run_key = k;
        PERFORM warren.wp_cap_release(cg, ct, true);
    END IF;
    RETURN false;
END
$fn$;
COMMENT ON FUNCTION warren.wp_overlap_verdict(warren.runs, text, text, text, timestamptz, text) IS
    'The overlap check of a claim: reaps expired runs of the job, cancels older ones '
    '(cancel_previous); false when a run still running held this one back (retrying or skipped)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_start_attempt(k text, w text, lease_ms bigint, t0 timestamptz, cg text,
--           ct text)
--     Starts the next attempt of a locked, admitted run: running under the worker's lease from
--     t0, counted in cap group cg (NULL: uncapped), and its attempt row.
-- Parameters:
--     k        - the run, locked
--     w        - the worker
--     lease_ms - the job's lease
--     t0       - the claim's time (started_at, the lease's start)
--     cg       - the cap group it counts in, or NULL
--     ct       - its tenant ('' for none)
-- Returns: the run's row, running, its attempt the new fencing token
-- Locks:   the run's row (held already)
-- Writes:  warren.runs (running, lease, cap columns); warren.attempts (the attempt, inserted)
CREATE OR REPLACE FUNCTION warren.wp_start_attempt(k text, w text, lease_ms bigint, t0 timestamptz,
                                                   cg text, ct text)
RETURNS warren.runs LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    r warren.runs;
BEGIN
    UPDATE warren.runs rr
       SET state = 'running', attempt = rr.attempt + 1, lease_owner = w,
           lease_login = session_user, lease_ms = wp_start_attempt.lease_ms,
           lease_until = t0 + make_interval(secs => wp_start_attempt.lease_ms / 1000.0),
           started_at = t0, cap_group = cg, cap_tenant = ct, cap_released_at = NULL
     WHERE rr.run_key = k
    RETURNING * INTO r;
    INSERT INTO warren.attempts (run_key, attempt, worker, login, started_at)
    VALUES (k, r.attempt, w, session_user, t0)
    ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
        SET worker = EXCLUDED.worker, login = EXCLUDED.login, started_at = EXCLUDED.started_at,
            finished_at = NULL, outcome = NULL, error = NULL;
    RETURN r;
END
$fn$;
COMMENT ON FUNCTION warren.wp_start_attempt(text, text, bigint, timestamptz, text, text) IS
    'Starts the next attempt of a locked, admitted run: running under the worker''s lease, its '
    'attempt row';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_claim(run_key text, worker text, may_wait boolean)
--     The claim of one run: warren.claim, and claim_many's per-key path. Reads the run, waits
--     for it, then wp_claim_locks, the row, wp_overlap_verdict, wp_cap_admit, wp_start_attempt.
-- Parameters:
--     run_key  - the run
--     worker   - the worker's name
--     may_wait - true: sleep for a run due within wp_max_wait() and wait for locks; false
--                (claim_many, locks held): no sleep, locks only tried
-- Returns: one row (attempt, job, scheduled_at, payload, lease_seconds, template), or none:
--          unknown, finished, leased by a live worker, not due, held back (overlap, cap), or a
--          lock not free
-- Locks:   in order: a wait slot (before sleeping); the group's cap lock(s); the job's overlap
--          lock; the run's row; the job's other running rows (overlap policy); waiting rows a
--          release moves
-- Writes:  warren.runs (running; or waiting, skipped, retrying (queue); an older run cancelled or
--          reaped); warren.attempts (the new attempt; a lost or cancelled one closed);
--          warren.outbox (events lease_lost, skipped, cancelled, and wp_after_failure's)
CREATE OR REPLACE FUNCTION warren.wp_claim(run_key text, worker text, may_wait boolean)
RETURNS TABLE(attempt int, job text, scheduled_at timestamptz, payload jsonb, lease_seconds int,
              template text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := wp_claim.run_key;
    w text := wp_claim.worker;
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
    pol text;
    both_ record;
    t0 timestamptz;
    st text;
    due timestamptz;
    q text;
    mr int;
    mrt int;
    cg text;
    ct text;
    lu timestamptz;
    jn0 text;
    pol0 text;
    cg0 text;
    ct0 text;
    mr0 int;
    mrt0 int;
    gmrt int;
BEGIN
    IF k IS NULL THEN
        RAISE EXCEPTION 'warren.claim: run_key and worker are required' USING ERRCODE = '22023';
    END IF;
    PERFORM warren.wp_check_worker('warren.claim', w);
    -- Not due yet: wait for it (a run is released up to planner.release_lead
    -- early), before any lock is taken. Further ahead than the longest lead
    -- (warren.wp_max_wait) it is not claimable: its own message comes later.
    -- The login must be granted the run's queue (access.sql), checked before
    -- it may sleep; a sleeping claim takes one of its login's wait slots.
    SELECT rr.state, rr.due_at, jb.queue, rr.lease_until, jb.name,
           warren.wp_overlap_of(jb.overlap, rr.origin),
           coalesce(jb.template, jb.name), coalesce(rr.tenant, jb.tenant, ''),
           gj.max_running, gj.max_running_per_tenant
      INTO st, due, q, lu, jn0, pol0, cg0, ct0, mr0, mrt0
      FROM warren.runs rr JOIN warren.jobs jb ON jb.name = rr.job
      LEFT JOIN warren.jobs gj ON gj.name = coalesce(jb.template, jb.name)
     WHERE rr.run_key = k;
    mrt0 := warren.wp_tenant_cap(mrt0, ct0); -- the operator's tenant cap, if any (caps.sql)
    PERFORM warren.wp_require_queue('warren.claim', k, q);
    IF st = 'waiting' THEN
        RETURN; -- held back by a cap (caps.sql): released by a completion, not by a message
    END IF;
    -- Finished, or leased by a live worker (a duplicate delivery): no row,
    -- before any lock (the latest committed state; a run that leaves
    -- running later gets a message of its own, from the relay or the
    -- reaper). Only claimable runs take locks, below.
    IF NOT (warren.wp_claimable(st) OR st = 'running')
       OR (st = 'running' AND lu >= clock_timestamp()) THEN
        RETURN;
    END IF;
    IF warren.wp_claimable(st) AND due > clock_timestamp() THEN
        IF NOT may_wait THEN
            RETURN; -- not due (claim_many waited for the keys due within 1 s)
        ELSIF due > clock_timestamp() + warren.wp_max_wait() THEN
            RETURN;
        END IF;
        PERFORM warren.wp_wait_slot('warren.claim');
        PERFORM warren.wp_wait_until(due);
    END IF;
    t0 := clock_timestamp(); -- the claim's time, after the wait (now() is the call's start)
    -- Lock order (caps.sql; docs/delivery.md, "Lock order"): the cap lock(s)
    -- of the run's group and tenant, then the job's overlap lock, then the
    -- run's row, then the job's other running rows; never a cap or overlap
    -- lock after a row lock. They are taken from the unlocked read above
    -- (a run's job and tenant do not change; a job's template, tenant, caps
    -- and overlap only by a sync). claim_many took them already, sorted,
    -- for its whole batch: there (may_wait false) they are only tried, and
    -- so are, in every claim, locks that the row read under its lock asks
    -- for beyond them (a sync in between). Not free at once: no row and
    -- nothing written (the run's message comes again: the reconciler
    -- republishes a published run not started within its grace).
    IF NOT warren.wp_claim_locks(cg0, ct0, mr0, mrt0, jn0, pol0, NOT may_wait) THEN
        RETURN;
    END IF;
    -- The run (locked) and its job in one statement.
    SELECT rr AS run, jb AS job INTO both_
      FROM warren.runs rr JOIN warren.jobs jb ON jb.name = rr.job
     WHERE rr.run_key = k
       FOR UPDATE OF rr;
    IF NOT FOUND THEN
        RETURN; -- unknown run
    END IF;
    r := both_.run;
    j := both_.job;
    -- Again under the lock: the run may not have existed at the first check
    -- (q NULL), or a sync may have moved its job to another queue since.
    PERFORM warren.wp_require_queue('warren.claim', k, j.queue);
    pol := warren.wp_overlap_of(j.overlap, r.origin);
    -- The group's caps as of now (a sync may have changed them since the
    -- unlocked read): locks beyond those taken above are only tried.
    cg := coalesce(j.template, j.name);
    IF j.template IS NULL THEN
        mr := j.max_running;
        mrt := j.max_running_per_tenant;
    ELSE
        SELECT gj.max_running, gj.max_running_per_tenant INTO mr, mrt
          FROM warren.jobs gj WHERE gj.name = j.template;
    END IF;
    ct := coalesce(r.tenant, j.tenant, '');
    gmrt := mrt;
    mrt := warren.wp_tenant_cap(mrt, ct); -- the operator's tenant cap, if any (caps.sql)
    -- A cap's count must see every committed claim: a statement's snapshot
    -- taken after the lock, which only READ COMMITTED gives (in REPEATABLE
    -- READ or SERIALIZABLE it is the transaction's first, and two claims
    -- could both count one slot free).
    IF warren.wp_capped(mr, mrt)
       AND current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'warren.claim: run % is in cap group % (max_running / '
                        'max_running_per_tenant), which needs isolation level READ COMMITTED, '
                        'not %: claim it in a READ COMMITTED transaction', k,
                        warren.wp_cap_label(cg), upper(current_setting('transaction_isolation'))
            USING ERRCODE = '0A000';
    END IF;
    -- Claims of one job's runs serialise so the overlap check (a statement
    -- after the lock, so with a fresh snapshot) sees every committed claim.
    -- A row of warren.claim_locks (locks.sql), not the job's own row: the
    -- planner's FOR UPDATE SKIP LOCKED on warren.jobs is not disturbed.
    IF NOT warren.wp_claim_locks(cg, ct, mr, mrt, j.name, pol, true) THEN
        RETURN;
    END IF;

    IF r.state = 'running' THEN
        IF r.lease_until >= t0 THEN
            RETURN; -- leased by a live worker (a duplicate delivery)
        END IF;
        -- The holder's lease ran out: it is presumed dead; take over within the budget.
        UPDATE warren.attempts a SET finished_at = t0, outcome = 'lease_lost',
               error = format('lease expired at %s; taken over by %s', warren.wp_utc_ms(r.lease_until), w)
         WHERE a.run_key = k AND a.attempt = r.attempt AND a.finished_at IS NULL;
        IF r.attempt - r.attempt_base >= j.retry_max_attempts THEN
            PERFORM warren.wp_after_failure(k, 'lease_lost', r.last_error, w,
                format('lease of attempt %s (worker %s) expired at %s', r.attempt,
                       r.lease_owner, warren.wp_utc_ms(r.lease_until)));
            IF r.cap_group IS NOT NULL THEN
                PERFORM warren.wp_cap_release(r.cap_group, r.cap_tenant, true); -- its slot is free
            END IF;
            RETURN;
        END IF;
        PERFORM warren.wp_event(r, 'lease_lost', NULL, r.lease_owner);
    ELSIF NOT warren.wp_claimable(r.state) THEN
        RETURN; -- finished (succeeded, dead, skipped, cancelled)
    ELSIF r.due_at > t0 THEN
        -- Not due: a stale message for a run waiting for its retry time (the
        -- relay publishes it again when due), or a due time that moved
        -- after the wait above was decided. Never early.
        RETURN;
    END IF;

    IF pol <> 'allow' AND NOT warren.wp_overlap_verdict(r, pol, cg, ct, t0, w) THEN
        RETURN; -- held back by a run of the job still running
    END IF;

    -- Caps (caps.sql): the group's lock is held since the start of the
    -- claim; over a cap the run waits (wp_cap_admit): no row, and the
    -- message is acknowledged; a completion of the group releases it.
    cg := coalesce(j.template, j.name);
    ct := coalesce(r.tenant, j.tenant, '');
    IF NOT warren.wp_capped(mr, mrt) THEN
        cg := NULL;
    ELSIF NOT warren.wp_cap_admit(r, cg, ct, mr, mrt, gmrt) THEN
        RETURN;
    END IF;
    r := warren.wp_start_attempt(k, w, j.lease_ms, t0, cg, ct);

    attempt := r.attempt;
    job := r.job;
    scheduled_at := r.scheduled_at;
    payload := coalesce(r.payload, j.payload);
    lease_seconds := greatest(1, ceil(j.lease_ms / 1000.0))::int;
    template := j.template;
    RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION warren.wp_claim(text, text, boolean) IS
    'The claim (warren.claim = may_wait true; claim_many''s per-key path: false, no sleep with '
    'locks held)';

-- ----------------------------------------------------------------------------
-- Function: warren.claim(run_key text, worker text)
--     Claims a run for worker (docs/worker-protocol.md): wp_claim(run_key, worker, true).
-- Parameters:
--     run_key - the run (the message's message_id)
--     worker  - the worker's name, 1-256 characters
-- Returns: one row: attempt (the fencing token), job, scheduled_at, payload, lease_seconds,
--          template; none when the run is not claimable (wp_claim)
-- Locks:   as wp_claim
-- Writes:  as wp_claim
CREATE OR REPLACE FUNCTION warren.claim(run_key text, worker text)
RETURNS TABLE(attempt int, job text, scheduled_at timestamptz, payload jsonb, lease_seconds int,
              template text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT * FROM warren.wp_claim($1, $2, true) $fn$;
COMMENT ON FUNCTION warren.claim(text, text) IS
    'Claims a run for worker: one row (attempt = fencing token, lease from the claim) or none '
    'when the run is finished, unknown, leased by a live worker, due more than 15 s ahead, '
    'held back by the job''s overlap policy (skip, queue, cancel_previous), or over a cap of its '
    'template (max_running, max_running_per_tenant: then waiting until a slot is free). A run '
    'due within 15 s is waited for: the claim returns when it is due. The row''s template (NULL '
    'for a config job) names the handler to run: the template''s, else the job''s; never the '
    'message''s';

-- ------------------------------------------------------------ batch claim

-- The same protocol for many runs in one call (the C worker claims and
-- completes the messages it has in batches). Rows a set-based statement can
-- settle are settled in one statement; everything else goes through
-- warren.wp_claim one by one, so there is one set of rules.
--
-- Key lookups only (the SET enable_* = off lines): keep the planner on index
-- probes even when the table's statistics are stale (right after a large
-- backfill, a plan cached for a tiny table would scan the whole table once
-- per batch).
--
-- Each key is looked up by a subquery of its own. Why: the first version's
-- fast path joined the keys, warren.runs and warren.jobs in one UPDATE ...
-- FROM. Right after a large backfill or burst (50,000 rows inserted, not
-- analyzed yet) the planner's default selectivities put "runs of job X in
-- state planned/published" at 3 rows and chose jobs -> runs_pkey (every run
-- of the job) -> a nested loop over the keys: measured 175 million
-- join-filter rows and 18.8 s for one 3,968-key batch, 1.2-1.7 s for 128-key
-- batches (auto_explain, bench_worker burst). Now each key is looked up by an
-- index probe on the unique run_key, which no estimate can make look worse
-- than a scan, and the UPDATE is a TID scan over what was found, with the
-- job's row read once per run (from the TIDs into jobs_pkey, never the
-- other way: see the fast path below).
--
-- It waits at most 1 s (for a caller's clock estimate): batch callers hold
-- deliveries until due, and a long wait would stall a whole batch behind one
-- stale redelivery (a run whose retry is due later). Its per-key path never
-- sleeps (it holds locks by then). It finds what its fast path claimed by
-- key (looking for the rows' old ctids found nothing and sent every key
-- through the per-key claim again).
-- ----------------------------------------------------------------------------
-- Function: warren.claim_many(run_keys text[], worker text)
--     warren.claim for many run keys: a set-based fast path for fresh runs of uncapped jobs,
--     wp_claim for the others.
-- Parameters:
--     run_keys - at most wp_max_batch() keys
--     worker   - the worker's name
-- Returns: one row per claimed run (run_key first); the others give none
-- Locks:   before any row: the cap locks of the capped (group, tenant)s in that order, then the
--          overlap locks of their jobs in name order; then the runs' rows (fast path in TID order,
--          the rest in key order, as wp_claim)
-- Writes:  warren.runs (running); warren.attempts; the per-key path as wp_claim
CREATE OR REPLACE FUNCTION warren.claim_many(run_keys text[], worker text)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int, template text)
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
    nkeys bigint;
    t0 timestamptz;
    due timestamptz;
    bad text[];
    locks boolean;
    skipk text[];
    priv boolean := warren.wp_privileged();
    -- any operator's tenant cap (caps.sql)? None: no run is capped by one
    tc_any boolean := EXISTS (SELECT 1 FROM warren.tenant_caps);
BEGIN
    PERFORM warren.wp_check_worker('warren.claim_many', w);
    PERFORM warren.wp_check_batch('warren.claim_many', keys);
    -- Keys of queues the login is not granted give no row (access.sql: a
    -- foreign key must not fail the whole batch).
    IF NOT priv THEN
        bad := warren.wp_ungranted('warren.claim_many', keys);
        IF cardinality(bad) > 0 THEN
            keys := ARRAY(SELECT x FROM unnest(keys) x WHERE NOT (x = ANY (bad)));
        END IF;
    END IF;
    -- One pass over the distinct keys, one run_key index probe each and one
    -- probe of its job (a lateral subquery per key: no join order for the
    -- planner to get wrong when warren.runs has no statistics yet, e.g.
    -- right after a large backfill): the rows' TIDs; the latest due time of
    -- those due within 1 s (the wait below); whether any of them may need a
    -- cap or overlap lock (the pre-pass below, skipped when none does); and
    -- how many distinct keys there are.
    SELECT array_agg(p.tid) FILTER (WHERE p.tid IS NOT NULL),
           max(p.due_at) FILTER (WHERE warren.wp_claimable(p.state)
                                   AND p.due_at <= clock_timestamp() + interval '1 second'),
           coalesce(bool_or(p.locks), false), count(*)
      INTO tids, due, locks, nkeys
      FROM (SELECT DISTINCT x AS k FROM unnest(keys) x) t
      LEFT JOIN LATERAL (
           SELECT rr.ctid AS tid, rr.state, rr.due_at,
                  -- any run that a claim could still start (the lease test
                  -- is left to the pre-pass itself), of a job with an
                  -- overlap check or a cap (wp_policy)
                  (warren.wp_claimable(rr.state) OR rr.state = 'running')
                  AND (pol.overlap <> 'allow' OR pol.capped) AS locks
             FROM warren.runs rr JOIN warren.jobs jb ON jb.name = rr.job
            CROSS JOIN LATERAL warren.wp_policy(jb.overlap, rr.origin, jb.template,
                                                jb.max_running, jb.max_running_per_tenant,
                                                coalesce(rr.tenant, jb.tenant), tc_any) pol
            WHERE rr.run_key = t.k) p ON true;
    -- Wait until the latest of them is due, if that is at most 1 s away:
    -- batch callers hold deliveries until due (as the C worker does) and
    -- send keys that are due now. Runs due later give no row. (A longer
    -- wait would stall the caller behind a stale redelivery of a run whose
    -- retry is due in 10 s, with every other key of the batch.)
    IF due > clock_timestamp() THEN
        PERFORM warren.wp_wait_until(due); -- at most 1 s: no wait slot (access.sql)
    END IF;
    -- Lock order (caps.sql; docs/delivery.md, "Lock order"): before any row
    -- lock, the cap locks of every capped group and tenant among the
    -- claimable keys in (group, tenant) order, then the overlap locks of
    -- their jobs in name order; the per-key claims below only try them
    -- again (held: re-entrant). In key order two batches with runs of
    -- tenants X and Y in opposite key orders would deadlock, and so would a
    -- batch and a completion or a single claim. Runs that are finished or
    -- leased by a live worker (duplicates) take none. Skipped when the pass
    -- above found no key of a job with an overlap check or a cap (every
    -- run of an uncapped `allow` fleet): a sync that gives a job a cap or
    -- an overlap policy after it is seen by the fast path's own read of
    -- the job (the run goes to the per-key claim), and there the locks are
    -- only tried, as for any lock beyond those taken.
    -- (One pass over the keys, one probe per distinct job.) The same pass
    -- names, for each uncapped `skip` job whose lock it took, the job's
    -- smallest key among the batch's claimable ones (skipk): the per-key
    -- path claims in key order, so that is the key it would claim (or
    -- reap for, or take over) first; the fast path may claim it (below).
    IF locks THEN
        SELECT bool_and(CASE WHEN x.kind = 0 THEN warren.wp_cap_lock(x.g, x.t, x.mr, x.mrt)
                             ELSE warren.wp_overlap_lock(x.g, false) END),
               array_agg(x.k) FILTER (WHERE x.k IS NOT NULL)
          INTO locks, skipk
          FROM (WITH kr AS (
                    -- By key, not by the first pass's TIDs: a row updated
                    -- since (the relay's `published` mark, written after
                    -- the broker's ack, so often while the worker already
                    -- claims) has a new TID, and a key missed here took no
                    -- lock: its per-key claim only tried the lock, found it
                    -- held by another claim or a completion of the group,
                    -- and gave no row with nothing written (its only
                    -- message acknowledged, the run stranded `published`
                    -- until the reconciler's republish, 30 s).
                    SELECT rr.job, rr.tenant, rr.run_key, rr.origin
                      FROM (SELECT DISTINCT x AS k FROM unnest(keys) x) kk
                      JOIN warren.runs rr ON rr.run_key = kk.k
                     WHERE warren.wp_claimable(rr.state)
                        OR (rr.state = 'running' AND rr.lease_until < clock_timestamp())
                ), jc AS (
                    SELECT jb.name, jb.tenant, jb.overlap, coalesce(jb.template, jb.name) AS g,
                           gj.max_running AS mr, gj.max_running_per_tenant AS mrt
                      FROM (SELECT DISTINCT kr.job FROM kr) d
                      JOIN warren.jobs jb ON jb.name = d.job
                      JOIN warren.jobs gj ON gj.name = coalesce(jb.template, jb.name)
                     WHERE jb.overlap <> 'allow'
                        OR warren.wp_capped(gj.max_running, gj.max_running_per_tenant) OR tc_any
                )
                SELECT DISTINCT 0 AS kind, jc.g, coalesce(kr.tenant, jc.tenant, '') AS t, jc.mr,
                       jc.mrt, NULL::text AS k
                  FROM jc JOIN kr ON kr.job = jc.name
                 WHERE warren.wp_capped(jc.mr,
                                        warren.wp_tenant_cap(jc.mrt,
                                                             coalesce(kr.tenant, jc.tenant, '')))
                UNION
                -- an uncapped `skip` job's smallest key among the batch's
                -- claimable ones: the one the per-key path, in key order,
                -- would claim first (the fast path's candidate, below)
                SELECT 1, jc.name, '', NULL::int, NULL::int,
                       CASE WHEN jc.overlap = 'skip' AND NOT warren.wp_capped(jc.mr, jc.mrt)
                                 AND NOT (tc_any AND EXISTS (
                                     SELECT 1 FROM kr JOIN warren.tenant_caps tc
                                         ON tc.tenant = coalesce(kr.tenant, jc.tenant)
                                      WHERE kr.job = jc.name))
                            THEN (SELECT min(kr.run_key) FROM kr
                                   WHERE kr.job = jc.name AND kr.origin <> 'enqueue') END
                  FROM jc WHERE jc.overlap <> 'allow'
                   -- enqueued runs have no overlap check (wp_overlap_of)
                   AND EXISTS (SELECT 1 FROM kr WHERE kr.job = jc.name AND kr.origin <> 'enqueue')
                 ORDER BY 1, 2, 3) x;
    END IF;
    -- The claim's time: after the wait and after the locks (now() is the
    -- call's start), as wp_claim takes it. A lease timed from before a
    -- wait for a lock could run out before the batch's own per-key claims
    -- (a 1 s lease behind a 1.5 s wait): the next key of the same skip job
    -- would then reap the run this batch just claimed.
    t0 := clock_timestamp();
    -- A tenant cap set since the call began: the fast path leaves its runs
    -- to the per-key claim (which takes their locks) from now on.
    tc_any := tc_any OR EXISTS (SELECT 1 FROM warren.tenant_caps);
    -- Fast path: fresh runs of jobs without an overlap check or a cap, and
    -- the fresh skipk run of an uncapped `skip` job none of whose runs is
    -- running (the overlap lock is held: a statement after it sees every
    -- committed claim). There wp_claim reaps nothing and skips nothing: it
    -- claims, leaving cap_group and cap_released_at NULL and cap_tenant
    -- set, as this statement does. The job's other keys then go to the
    -- per-key path, which finds this run running and skips them, as it
    -- did when it claimed this one first; a job with a run running
    -- (expired or not) goes there whole. `queue` and `cancel_previous`
    -- jobs, and capped ones, always take the per-key path. The
    -- job's row is read once per run (f: its lease, caps, overlap, queue
    -- grant and payload), in the statement that claims, so a sync that
    -- changed the job is seen as before. `rr.job || ''`: f can only join
    -- from the TIDs into jobs_pkey, never from jobs into runs_job (every
    -- run of the job, 004's trap); f is sorted by TID, and the UPDATE joins
    -- it to warren.runs by TID (the only way in: enable_seqscan is off), so
    -- rows are locked in physical order, the same order in every batch,
    -- whatever plan f gets. A row updated since its TID was read fails the
    -- recheck and goes to the full path below.
    RETURN QUERY
    WITH f AS MATERIALIZED (
        SELECT rr.ctid AS tid, jb.lease_ms, jb.payload, pol.overlap <> 'allow' AS sk, jb.template,
               coalesce(rr.tenant, jb.tenant, '') AS ct
          FROM warren.runs rr JOIN warren.jobs jb ON jb.name = rr.job || ''
         CROSS JOIN LATERAL warren.wp_policy(jb.overlap, rr.origin, jb.template, jb.max_running,
                                             jb.max_running_per_tenant,
                                             coalesce(rr.tenant, jb.tenant), tc_any) pol
         WHERE rr.ctid = ANY (tids)
           -- `state || ''`: no index on state (runs_history, the partial
           -- ones) for the planner to prefer to the TID scan (with a stale
           -- estimate of one row it scanned runs_history's every entry)
           AND warren.wp_claimable(rr.state || '') AND rr.due_at <= t0
           -- no overlap check
           AND (pol.overlap = 'allow'
                -- or a `skip` job's candidate (its overlap lock taken by the
                -- pre-pass) while none of the job's runs is running: what
                -- wp_claim would do then (no reap, no skip) is a plain
                -- claim. Anything else goes to the per-key path below.
                OR (pol.overlap = 'skip' AND rr.run_key = ANY (skipk)
                    AND NOT EXISTS (SELECT 1 FROM warren.runs o
                                     WHERE o.job = rr.job AND o.state = 'running'
                                       AND o.origin <> 'enqueue'
                                       AND o.run_key <> rr.run_key)))
           -- and no cap (caps.sql): a config job's caps are on its own row,
           -- read with its overlap; an API job's on its template's, one more
           -- probe; no operator's tenant cap on the run's tenant
           AND NOT pol.capped
           -- the grant again, in the statement that claims (access.sql): a
           -- run inserted or a job moved since `bad` was computed
           AND (priv OR EXISTS (SELECT 1 FROM warren.worker_grants g
                                 WHERE g.login = session_user AND g.queue = jb.queue))
         ORDER BY rr.ctid
    ), c AS (
        UPDATE warren.runs rr
           SET state = 'running', attempt = rr.attempt + 1, lease_owner = w,
               lease_login = session_user, lease_ms = f.lease_ms,
               lease_until = t0 + make_interval(secs => f.lease_ms / 1000.0),
               started_at = t0,
               -- as wp_claim leaves an uncapped run of an overlap job
               cap_group = CASE WHEN f.sk THEN NULL ELSE rr.cap_group END,
               cap_tenant = CASE WHEN f.sk THEN f.ct ELSE rr.cap_tenant END,
               cap_released_at = CASE WHEN f.sk THEN NULL ELSE rr.cap_released_at END
          FROM f
         WHERE rr.ctid = f.tid
           AND warren.wp_claimable(rr.state || '') AND rr.due_at <= t0
        RETURNING rr.run_key, rr.attempt, rr.job, rr.scheduled_at,
                  coalesce(rr.payload, f.payload) AS payload, f.lease_ms, f.template
    ), a AS (
        INSERT INTO warren.attempts (run_key, attempt, worker, login, started_at)
        SELECT c.run_key, c.attempt, w, session_user, t0 FROM c
        ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
            SET worker = EXCLUDED.worker, login = EXCLUDED.login,
                started_at = EXCLUDED.started_at,
                finished_at = NULL, outcome = NULL, error = NULL
    )
    SELECT c.run_key, c.attempt, c.job, c.scheduled_at, c.payload,
           greatest(1, ceil(c.lease_ms / 1000.0))::int, c.template
      FROM c;
    GET DIAGNOSTICS nfast = ROW_COUNT;
    IF nfast >= nkeys THEN
        RETURN;
    END IF;
    -- What the fast path claimed, by key: its UPDATE gave those rows new
    -- ctids, so 004's lookup by the old ones found nothing and sent every
    -- key through the per-key claim again (harmless while that compared
    -- leases with the same now(); with the claim's clock_timestamp() a
    -- short lease could look expired and be taken over by its own batch).
    SELECT array_agg(rr.run_key) INTO done_
      FROM warren.runs rr
     WHERE rr.run_key = ANY (keys) AND rr.state || '' = 'running' AND rr.lease_owner = w
       AND rr.lease_login = session_user AND rr.started_at = t0;
    RETURN QUERY
    SELECT t.k, cl.attempt, cl.job, cl.scheduled_at, cl.payload, cl.lease_seconds, cl.template
      FROM (SELECT DISTINCT x AS k FROM unnest(keys) x
             WHERE done_ IS NULL OR NOT (x = ANY (done_)) ORDER BY 1) t
     CROSS JOIN LATERAL warren.wp_claim(t.k, w, false) cl;
END
$fn$;
COMMENT ON FUNCTION warren.claim_many(text[], text) IS
    'warren.claim for many run keys: one row per claimed run (run_key first); the others gave '
    'no row. Waits until the latest of them is due if that is at most 1 s away; runs due later '
    'give no row (hold deliveries until due)';

-- ------------------------------------------------------------ lost answers

-- warren.reclaim_many lets a worker whose claim answer was lost take its runs
-- again at once.
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
-- ----------------------------------------------------------------------------
-- Function: warren.reclaim_many(run_keys text[], worker text, within_ms int)
--     After a claim whose answer was lost: the worker's own fresh claims get a new attempt.
-- Parameters:
--     run_keys  - at most wp_max_batch() keys
--     worker    - the worker's name
--     within_ms - how long ago the lost claim may have been made
-- Returns: one row per reclaimed run, as claim_many
-- Locks:   each run's row FOR UPDATE, in key order
-- Writes:  warren.attempts (the lost attempt lease_lost, a new one); warren.runs (attempt,
--          attempt_base, lease); warren.outbox (event lease_lost)
CREATE OR REPLACE FUNCTION warren.reclaim_many(run_keys text[], worker text, within_ms int)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int, template text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    w text := reclaim_many.worker;
    k text;
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
    priv boolean := warren.wp_privileged();
    bad text[];
BEGIN
    IF within_ms IS NULL OR within_ms < 0 THEN
        RAISE EXCEPTION 'warren.reclaim_many: worker and within_ms >= 0 are required'
            USING ERRCODE = '22023';
    END IF;
    PERFORM warren.wp_check_worker('warren.reclaim_many', w);
    PERFORM warren.wp_check_batch('warren.reclaim_many', reclaim_many.run_keys);
    bad := warren.wp_ungranted('warren.reclaim_many', reclaim_many.run_keys);
    -- Rare (after a lost connection): one key at a time, in key order as claims.
    FOR k IN SELECT DISTINCT x FROM unnest(reclaim_many.run_keys) x
              WHERE x IS NOT NULL AND NOT (x = ANY (bad)) ORDER BY 1
    LOOP
        SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        SELECT * INTO j FROM warren.jobs jb WHERE jb.name = r.job;
        CONTINUE WHEN r.state <> 'running' OR r.lease_owner IS DISTINCT FROM w
                   OR NOT (priv OR r.lease_login IS NULL OR r.lease_login = session_user)
                   OR r.started_at < now() - make_interval(secs => within_ms / 1000.0)
                   OR r.lease_until IS DISTINCT FROM
                      r.started_at + make_interval(secs => coalesce(r.lease_ms, j.lease_ms)
                                                           / 1000.0);
        UPDATE warren.attempts a
           SET finished_at = now(), outcome = 'lease_lost',
               error = format('the answer to this claim did not reach worker %s; it claimed '
                              'the run again as attempt %s', w, r.attempt + 1)
         WHERE a.run_key = k AND a.attempt = r.attempt AND a.finished_at IS NULL;
        PERFORM warren.wp_event(r, 'lease_lost', NULL, w);
        UPDATE warren.runs rr
           SET attempt = rr.attempt + 1, attempt_base = rr.attempt_base + 1,
               lease_login = session_user, lease_ms = j.lease_ms,
               lease_until = now() + make_interval(secs => j.lease_ms / 1000.0),
               started_at = now()
         WHERE rr.run_key = k
        RETURNING * INTO r;
        INSERT INTO warren.attempts (run_key, attempt, worker, login, started_at)
        VALUES (k, r.attempt, w, session_user, now())
        ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
            SET worker = EXCLUDED.worker, login = EXCLUDED.login, started_at = EXCLUDED.started_at,
                finished_at = NULL, outcome = NULL, error = NULL;
        run_key := k;
        attempt := r.attempt;
        job := r.job;
        scheduled_at := r.scheduled_at;
        payload := coalesce(r.payload, j.payload);
        lease_seconds := greatest(1, ceil(j.lease_ms / 1000.0))::int;
        template := j.template;
        RETURN NEXT;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION warren.reclaim_many(text[], text, int) IS
    'After a claim whose answer was lost: the runs among run_keys running under this worker''s '
    'lease, claimed at most within_ms ago and never heartbeated, get a new attempt (one row '
    'each, as claim_many); the lost attempt is lease_lost and does not count against the retry '
    'budget';
