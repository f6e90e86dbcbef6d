-- access.sql: least privilege for the worker protocol (docs/worker-protocol.md,
-- "Privileges"): who may work on which queue, and the bounds on what a
-- caller may send. Helpers of the SECURITY DEFINER protocol functions
-- (claim.sql, lease.sql, complete.sql); executable by the owner only. The one
-- current definition; `warren migrate` re-applies it.
--
-- A privileged session (a superuser, or a member of the schema's owner, the
-- role that migrates) is not restricted: it can write the tables anyway, and
-- the planner, the CLI and a single-team worker connect as it. Every other
-- login works only on the queues warren.worker_grants lists for it
-- (`warren grant LOGIN QUEUE...`), checked against session_user (SET ROLE
-- does not change it), and heartbeats, completes or reclaims only the claims
-- it made itself (runs.lease_login).

-- ------------------------------------------------------------ who

-- plpgsql, not sql: an SQL function that cannot be inlined (this one has a
-- subquery and a SET clause) is parsed, rewritten (pg_roles is a view) and
-- planned again at every call, which perf showed as a tenth of a batch
-- claim's backend CPU; a plpgsql function keeps its plan for the session.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_privileged()
--     Is the session privileged (a superuser, or a member of the schema owner)?
-- Parameters: none
-- Returns: true: not limited to granted queues nor to its own claims
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_privileged()
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- current_user is the owner inside the SECURITY DEFINER callers.
    RETURN coalesce((SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user), false)
        OR pg_has_role(session_user, current_user, 'MEMBER');
END
$$;
COMMENT ON FUNCTION warren.wp_privileged() IS
    'True for a superuser session or a member of the schema owner: not limited to granted '
    'queues or to its own claims';

-- Raises insufficient_privilege unless the session may work on queue (NULL:
-- an unknown run, nothing to protect). fn names the protocol function.
-- warren.claim's check: one message, one call, so an error there holds up
-- nothing else and tells the caller what to fix.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_require_queue(fn text, run_key text, queue text)
--     Raises 42501 (naming the login, the queue and `warren grant`) unless the session may work on
--     queue.
-- Parameters:
--     fn      - the calling function, for the message
--     run_key - the run, for the message
--     queue   - the run's queue (NULL: an unknown run, nothing to check)
-- Returns: void
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_require_queue(fn text, run_key text, queue text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF queue IS NULL OR warren.wp_privileged()
       OR EXISTS (SELECT 1 FROM warren.worker_grants g
                   WHERE g.login = session_user AND g.queue = wp_require_queue.queue) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION '%: login "%" is not granted queue "%" (run %): an operator grants it with '
                    '`warren grant % %`', fn, session_user, queue, run_key, session_user, queue
        USING ERRCODE = '42501';
END
$$;
COMMENT ON FUNCTION warren.wp_require_queue(text, text, text) IS
    'Raises 42501 naming the login, the queue and `warren grant` unless the session may work on '
    'queue';

-- The known runs among run_keys whose queue the session may not work on
-- (empty for a privileged session), with one WARNING naming the first of
-- them, the login and the fix. The batch functions and heartbeat/complete
-- leave those keys out (no row, false) instead of failing: a worker sends a
-- whole batch again when it fails (and its other calls wait meanwhile), so
-- one foreign key, a misrouted or forged message or a queue revoked
-- mid-run, would otherwise block every run of the batch.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_ungranted(fn text, run_keys text[])
--     The known runs among run_keys of queues the session may not work on, with one WARNING.
-- Parameters:
--     fn       - the calling function (heartbeat and complete(_many) spare runs claimed before
--                migration 011)
--     run_keys - the keys of the call
-- Returns: text[], sorted; empty for a privileged session
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_ungranted(fn text, run_keys text[])
RETURNS text[] LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad text[];
    q text;
BEGIN
    IF warren.wp_privileged() THEN
        RETURN '{}';
    END IF;
    SELECT array_agg(rr.run_key ORDER BY rr.run_key),
           (array_agg(jb.queue ORDER BY rr.run_key))[1] INTO bad, q
      FROM warren.runs rr JOIN warren.jobs jb ON jb.name = rr.job
     WHERE rr.run_key = ANY (run_keys)
       AND NOT EXISTS (SELECT 1 FROM warren.worker_grants g
                        WHERE g.login = session_user AND g.queue = jb.queue)
       -- A run claimed before migration 011 (no lease_login) may still be
       -- heartbeated and completed by whoever holds its attempt: right after
       -- the upgrade no login has grants yet, and its handler must not be
       -- stopped for that. Claims (and reclaims) are checked in full.
       AND NOT (fn IN ('warren.heartbeat', 'warren.complete', 'warren.complete_many')
                AND rr.state = 'running' AND rr.lease_login IS NULL);
    IF bad IS NULL THEN
        RETURN '{}';
    END IF;
    RAISE WARNING '%: login "%" is not granted queue "%" (run %): left out; an operator '
                  'grants it with `warren grant % %`', fn, session_user, q,
                  bad[1] || CASE WHEN cardinality(bad) > 1
                                 THEN format(' and %s more of ungranted queues',
                                             cardinality(bad) - 1)
                                 ELSE '' END,
                  session_user, q;
    RETURN bad;
END
$$;
COMMENT ON FUNCTION warren.wp_ungranted(text, text[]) IS
    'The known runs among run_keys of queues the session may not work on (a WARNING names the '
    'first, the login and `warren grant`); empty for a privileged session';

-- ------------------------------------------------------------ bounds

-- ----------------------------------------------------------------------------
-- Function: warren.wp_max_batch()
--     The most run keys one batch call of the worker protocol carries (10000).
-- Parameters: none
-- Returns: int
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_max_batch()
RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 10000 $$;
COMMENT ON FUNCTION warren.wp_max_batch() IS
    'The most run keys one claim_many, complete_many or reclaim_many call may carry (a C '
    'worker sends at most worker.concurrency, at most 4096)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_max_worker_name()
--     The longest worker name a claim records (256 characters).
-- Parameters: none
-- Returns: int
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_max_worker_name()
RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 256 $$;
COMMENT ON FUNCTION warren.wp_max_worker_name() IS
    'The longest worker name a claim may record, in characters';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_max_waiting()
--     How many claims of one login may sleep at once for a due time (64).
-- Parameters: none
-- Returns: int
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_max_waiting()
RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 64 $$;
COMMENT ON FUNCTION warren.wp_max_waiting() IS
    'How many claims of one login may sleep at once waiting for their runs'' due time';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_check_worker(fn text, worker text)
--     Raises 22023 for a missing worker name or one longer than wp_max_worker_name().
-- Parameters:
--     fn     - the calling function
--     worker - the name to check
-- Returns: void
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_check_worker(fn text, worker text)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF worker IS NULL OR worker = '' THEN
        RAISE EXCEPTION '%: worker is required', fn USING ERRCODE = '22023';
    ELSIF length(worker) > warren.wp_max_worker_name() THEN
        RAISE EXCEPTION '%: worker name is % characters long; at most % are allowed', fn,
            length(worker), warren.wp_max_worker_name() USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION warren.wp_check_worker(text, text) IS
    'Raises 22023 for a missing worker name or one longer than wp_max_worker_name()';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_check_batch(fn text, run_keys text[])
--     Raises 22023 for more than wp_max_batch() run keys.
-- Parameters:
--     fn       - the calling function
--     run_keys - the keys of the call
-- Returns: void
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_check_batch(fn text, run_keys text[])
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF cardinality(run_keys) > warren.wp_max_batch() THEN
        RAISE EXCEPTION '%: % run keys in one call; at most % are allowed: send smaller batches',
            fn, cardinality(run_keys), warren.wp_max_batch() USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION warren.wp_check_batch(text, text[]) IS
    'Raises 22023 for more than wp_max_batch() run keys in one call';

-- Takes one of the session login's wp_max_waiting() wait slots (rows
-- w|LOGIN|0..63 of warren.claim_locks, made when the login was granted a
-- queue: locks.sql, migration 019; locked to commit or rollback) before
-- warren.claim sleeps for a due time; raises configuration_limit_exceeded
-- when every slot is taken. Why: a claim's sleep holds a backend for up to
-- wp_max_wait() (15 s); without a bound one login could keep any number of
-- them asleep. Row locks, not advisory locks: no other login can take this
-- login's slots. A session usually holds one slot however many claims it
-- sends (the first free one in slot order, its own included).
-- Privileged sessions take none (they could pg_sleep anyway), nor does
-- claim_many, whose wait is at most 1 s: a fleet of batch workers sharing
-- one login must not fail its batches on this bound.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_wait_slot(fn text)
--     Takes one of the session login's wait slots before a claim sleeps; raises 53400 when all are
--     taken. Privileged sessions take none.
-- Parameters:
--     fn - the calling function, for the message
-- Returns: void
-- Locks:   one row w|LOGIN|N of warren.claim_locks (FOR UPDATE SKIP LOCKED), to the end of the
--          transaction
-- Writes:  warren.claim_locks: the login's 64 slot rows, only when none exist
CREATE OR REPLACE FUNCTION warren.wp_wait_slot(fn text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    slots text[];
BEGIN
    IF warren.wp_privileged() THEN
        RETURN;
    END IF;
    slots := ARRAY(SELECT 'w|' || session_user || '|' || i
                     FROM generate_series(0, warren.wp_max_waiting() - 1) i);
    FOR pass IN 1 .. 2 LOOP
        PERFORM 1 FROM warren.claim_locks c
         WHERE c.lock_key = ANY (slots)
         ORDER BY c.lock_key LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            RETURN;
        END IF;
        -- No slot rows at all (a grant made with triggers disabled, e.g. by
        -- a restore): make them (a concurrent claim of the same login making
        -- them too is waited for, then the rows are there) and try again.
        EXIT WHEN pass = 2
               OR EXISTS (SELECT 1 FROM warren.claim_locks c WHERE c.lock_key = slots[1]);
        INSERT INTO warren.claim_locks (lock_key) SELECT unnest(slots)
        ON CONFLICT (lock_key) DO NOTHING;
    END LOOP;
    RAISE EXCEPTION '%: login "%" already has % claims waiting for their due time; keep the '
                    'message and claim it again when it is due (x-warren-due-at)', fn,
                    session_user, warren.wp_max_waiting()
        USING ERRCODE = '53400';
END
$$;
COMMENT ON FUNCTION warren.wp_wait_slot(text) IS
    'Takes a wait slot of the session''s login before a claim sleeps; raises 53400 when all '
    'wp_max_waiting() are taken';
