-- locks.sql: the locks that serialise claims, as row locks on
-- warren.claim_locks (migration 019), a table only the schema owner can
-- lock: a cap group's and tenant's (caps.sql, wp_cap_lock), a job's overlap
-- check (claim.sql, wp_overlap_lock) and a login's wait slots (access.sql,
-- wp_wait_slot). Why not advisory locks: PostgreSQL has no privilege on
-- them, and their keys were hashed from public names, so any login of the
-- cluster could hold `hashtextextended('warren.cap:T', 0)` and stall every
-- claim of template T (or take a worker login's wait slots). Locking a row
-- needs UPDATE on its table, which no login but the owner has; every
-- caller is a SECURITY DEFINER function. The one current definition;
-- `warren migrate` re-applies it.
--
-- Held to the end of the transaction, as the advisory transaction locks
-- were, and re-entrant the same way (a transaction never waits for a row
-- it locked itself). Exclusive is FOR UPDATE, shared FOR KEY SHARE (the two
-- conflict; two shared holders do not).
--
-- A lock's row is made the first time it is taken (a wait slot's when its
-- login is granted a queue). Making it is itself the lock: a transaction
-- that inserts the row holds it exclusively until it ends (another one does
-- not see the row, and its own insert waits for the first to end, then
-- finds it and locks it). A try (try_only: never wait) makes a missing row
-- only if it can at once (wp_make_lock_row); a row another transaction is
-- still making answers "not taken", like a row held elsewhere.

-- Internal (prefix wp_): called by the SECURITY DEFINER functions only.

-- A try that found no row it could lock: the row is held elsewhere, or it
-- is not made yet, or another transaction is making it. Makes it if that
-- can be done at once: the insert waits at most 1 ms for another
-- transaction making the same row (lock_timeout, in a subtransaction that
-- is rolled back when it runs out). true: made, and so held by this
-- transaction; false: held or being made elsewhere. Why not "not taken"
-- for any missing row: a try is all the reconciler's sweep does, and a
-- capped group's tenant row may never have been made (the cap was
-- max_running when the tenant's runs were held back, and a sync made it
-- per tenant): its waiting runs would wait for good.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_make_lock_row(lk text)
--     Makes row lk of warren.claim_locks if that can be done at once.
-- Parameters:
--     lk - the lock key
-- Returns: true: made, and held by this transaction; false: there already, or being made elsewhere
-- Locks:   the new row (waits at most 1 ms for another transaction making it)
-- Writes:  warren.claim_locks
CREATE OR REPLACE FUNCTION warren.wp_make_lock_row(lk text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lt text := current_setting('lock_timeout');
    made boolean;
BEGIN
    BEGIN
        PERFORM set_config('lock_timeout', '1ms', true);
        INSERT INTO warren.claim_locks (lock_key) VALUES (lk) ON CONFLICT (lock_key) DO NOTHING;
        made := FOUND;
        PERFORM set_config('lock_timeout', lt, true);
    EXCEPTION WHEN lock_not_available OR serialization_failure THEN
        -- being made by another transaction (the setting is rolled back
        -- too); or, in REPEATABLE READ, made after this snapshot
        made := false;
    END;
    RETURN made;
END
$$;
COMMENT ON FUNCTION warren.wp_make_lock_row(text) IS
    'Makes row lk of warren.claim_locks if that can be done at once (true: made and held); '
    'false when it is there already or another transaction is making it';

-- Locks row lk (exclusive, or shared); try_only: only if free at once
-- (false: not taken). NULL for a NULL key (as the strict advisory lock
-- functions were: a claim of an unknown run takes nothing).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_lock_row(lk text, exclusive boolean, try_only boolean)
--     Locks row lk of warren.claim_locks to the end of the transaction, making it if missing.
-- Parameters:
--     lk        - the lock key
--     exclusive - FOR UPDATE; else FOR KEY SHARE
--     try_only  - only if free (or made) at once
-- Returns: true: held; false: not free at once (try_only); NULL for a NULL key
-- Locks:   row lk
-- Writes:  warren.claim_locks: row lk, when missing
CREATE OR REPLACE FUNCTION warren.wp_lock_row(lk text, exclusive boolean, try_only boolean)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF lk IS NULL THEN
        RETURN NULL;
    END IF;
    LOOP
        IF exclusive AND try_only THEN
            PERFORM 1 FROM warren.claim_locks c WHERE c.lock_key = lk FOR UPDATE SKIP LOCKED;
        ELSIF exclusive THEN
            PERFORM 1 FROM warren.claim_locks c WHERE c.lock_key = lk FOR UPDATE;
        ELSIF try_only THEN
            PERFORM 1 FROM warren.claim_locks c WHERE c.lock_key = lk FOR KEY SHARE SKIP LOCKED;
        ELSE
            PERFORM 1 FROM warren.claim_locks c WHERE c.lock_key = lk FOR KEY SHARE;
        END IF;
        IF FOUND THEN
            RETURN true;
        ELSIF try_only THEN
            -- there (committed) but held elsewhere: not taken, at once;
            -- missing (or being made): make it if that can be done at once
            IF EXISTS (SELECT 1 FROM warren.claim_locks c WHERE c.lock_key = lk) THEN
                RETURN false;
            END IF;
            RETURN warren.wp_make_lock_row(lk);
        END IF;
        -- Not there yet: make it (held by this transaction until it ends).
        -- Another transaction making it at the same time: this insert waits
        -- for it to end, does nothing, and the loop locks the row.
        INSERT INTO warren.claim_locks (lock_key) VALUES (lk) ON CONFLICT (lock_key) DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION warren.wp_lock_row(text, boolean, boolean) IS
    'Locks row lk of warren.claim_locks to the end of the transaction (exclusive: FOR UPDATE, '
    'else FOR KEY SHARE), making it if missing; try_only: only if free (or made) at once '
    '(false: not taken); NULL for a NULL key';
