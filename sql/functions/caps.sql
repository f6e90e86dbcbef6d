-- caps.sql: a template's (or config job's) caps on running runs,
-- max_running and max_running_per_tenant (docs/delivery.md, "Caps"): the
-- lock that serialises a capped group's claims and releases, and the release
-- of waiting runs that fit again. The check itself is warren.wp_cap_admit,
-- called by wp_claim; complete.sql, lease.sql and claim.sql call the release. The
-- one current definition; `warren migrate` re-applies it.
--
-- The cap group of a run of job J is coalesce(J.template, J.name), its caps
-- that group row's; the run's tenant is coalesce(runs.tenant, J.tenant), ''
-- for none (runs without a tenant count as one tenant of their own, so a
-- per-tenant cap is never escaped by leaving the tenant out). What counts
-- against a cap: the group's runs in state running that the claim counted in
-- it (runs.cap_group, migration 013) and its runs released from waiting and
-- not claimed yet (runs.cap_released_at): a released run holds its slot
-- until its claim, so a newer run cannot take it first and the waiting runs
-- start in due order. A running run counts until it leaves 'running', also
-- when its lease ran out (until the reaper or a takeover settles it): a
-- holder that was only paused must not find its slot given away.
--
-- Locks, always in this order (docs/delivery.md, "Lock order"): the
-- group's cap lock(s) here, several in (group, tenant) order; the job's
-- overlap lock(s) (claim.sql), several in name order; then row locks: the
-- claimed or completed run's, the job's other running rows (a claim's
-- overlap check), and last the waiting rows a release moves (never waited
-- for). No cap or overlap lock is waited for after a row lock: the claim
-- and the completion read a run's group without a lock first; a lock
-- found needed only under the row lock (a sync in between) is tried. With
-- max_running the group's lock is exclusive (every claim and release of the
-- group serialises: the total and every tenant's count are exact); without
-- it (per-tenant caps only: the group's, or an operator's tenant cap) it is
-- shared and the tenant's lock exclusive (claims of different tenants run
-- in parallel). A count is a statement
-- after the lock, so it sees every committed claim.

-- Internal (prefix wp_): called by the SECURITY DEFINER functions only.

-- What a cap is, defined once: plain SQL, inlined by the planner into the
-- statements and plpgsql expressions that use them.

-- ----------------------------------------------------------------------------
-- Function: warren.wp_capped(mr int, mrt int)
--     Has a cap group a cap: max_running or a per-tenant cap?
-- Parameters:
--     mr  - the group's max_running
--     mrt - its max_running_per_tenant (for a tenant: wp_tenant_cap's)
-- Returns: boolean
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_capped(mr int, mrt int)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT mr IS NOT NULL OR mrt IS NOT NULL
$$;
COMMENT ON FUNCTION warren.wp_capped(int, int) IS
    'Has a cap group a cap (max_running, or max_running_per_tenant or a tenant cap)?';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_holds_slot(state text, cap_released_at timestamptz)
--     Does a run count against its cap group's caps? Running, or released and not claimed yet
--     (the predicate of the partial index runs_cap_held, migration 013).
-- Parameters:
--     state           - runs.state
--     cap_released_at - runs.cap_released_at
-- Returns: boolean
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_holds_slot(state text, cap_released_at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state = 'running' OR (cap_released_at IS NOT NULL AND state IN ('planned', 'published'))
$$;
COMMENT ON FUNCTION warren.wp_holds_slot(text, timestamptz) IS
    'Does a run count against its cap group''s caps (running, or released and not claimed)?';

-- The per-tenant cap of tenant t in a group whose max_running_per_tenant
-- is mrt: the operator's tenant cap (warren.tenant_caps, `warren
-- tenant-cap`, migration 020) when t has one, else mrt. Every place that
-- reads a group's per-tenant cap for a tenant reads it through this
-- (plpgsql: function files are applied on every intermediate schema of a
-- stepwise migration, before the table exists).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_tenant_cap(mrt int, t text)
--     The per-tenant cap of tenant t: the operator's tenant cap when t has one, else mrt.
-- Parameters:
--     mrt - the group's max_running_per_tenant
--     t   - the tenant ('' for none)
-- Returns: int; NULL: no per-tenant cap
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_tenant_cap(mrt int, t text)
RETURNS int LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce((SELECT tc.max_running FROM warren.tenant_caps tc WHERE tc.tenant = t), mrt);
END
$$;
COMMENT ON FUNCTION warren.wp_tenant_cap(int, text) IS
    'The per-tenant cap of tenant t: its operator''s tenant cap (warren.tenant_caps), else mrt '
    '(its group''s max_running_per_tenant)';

-- Sets (max_running 1 to 1,000,000) or removes (NULL) the operator's cap on
-- tenant t: in every cap group at most that many of its runs run at once,
-- in place of the group's max_running_per_tenant. For the schema owner
-- only (`warren tenant-cap TENANT N`; no role is granted it: an
-- application must not raise its own tenants' caps). A raised or removed
-- cap releases waiting runs at the reconciler's next sweep (within
-- seconds); a lowered one holds back the next claims (running runs run
-- on). Returns whether anything changed.
-- ----------------------------------------------------------------------------
-- Function: warren.set_tenant_cap(tenant text, max_running int)
--     Sets (1-1000000) or removes (NULL) the operator's cap on a tenant (`warren tenant-cap`).
-- Parameters:
--     tenant      - the tenant
--     max_running - the cap, or NULL to remove it
-- Returns: true when something changed
-- Locks:   the tenant's row of warren.tenant_caps
-- Writes:  warren.tenant_caps
CREATE OR REPLACE FUNCTION warren.set_tenant_cap(tenant text, max_running int)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    t text := set_tenant_cap.tenant;
    n int := set_tenant_cap.max_running;
    k int;
BEGIN
    IF t IS NULL OR t !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$' THEN
        RAISE EXCEPTION 'warren.set_tenant_cap: "%" is not a tenant name '
                        '([A-Za-z0-9][A-Za-z0-9._:@-]{0,199})',
            left(coalesce(t, 'NULL'), 80) USING ERRCODE = '22023';
    ELSIF n IS NOT NULL AND (n < 1 OR n > 1000000) THEN
        RAISE EXCEPTION 'warren.set_tenant_cap: max_running % is not a cap: give 1 to 1000000, or '
                        'NULL to remove the tenant''s cap', n USING ERRCODE = '22023';
    END IF;
    IF n IS NULL THEN
        DELETE FROM warren.tenant_caps tc WHERE tc.tenant = t;
    ELSE
        INSERT INTO warren.tenant_caps AS tc (tenant, max_running) VALUES (t, n)
        ON CONFLICT ON CONSTRAINT tenant_caps_pkey DO UPDATE
            SET max_running = EXCLUDED.max_running, set_at = now(), set_by = session_user
            WHERE tc.max_running IS DISTINCT FROM EXCLUDED.max_running;
    END IF;
    GET DIAGNOSTICS k = ROW_COUNT;
    RETURN k > 0;
END
$fn$;
COMMENT ON FUNCTION warren.set_tenant_cap(text, int) IS
    'The operator''s cap on tenant''s running runs, per cap group, in place of '
    'max_running_per_tenant (NULL removes it); owner only; true when something changed';

-- Takes the cap lock(s) of group g, tenant t, for caps (mr, mrt); with
-- try_only, only if free at once (returns false when not taken: the locks
-- already taken stay held until the end of the transaction). mrt (the
-- group's max_running_per_tenant) does not change the mode: see below.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_cap_lock(g text, t text, mr int, mrt int, try_only boolean DEFAULT false)
--     Takes the cap lock(s) of group g for tenant t (docs/delivery.md, "Lock order").
-- Parameters:
--     g        - the cap group (template, or config job)
--     t        - the tenant ('' for none)
--     mr       - the group's max_running: exclusive group lock when set
--     mrt      - its max_running_per_tenant (does not change the mode)
--     try_only - only if free at once
-- Returns: true: held; false: not free at once (try_only; locks taken so far stay held); NULL for
--          NULL g
-- Locks:   claim_locks c|g (exclusive with mr, else shared) and, without mr, c|g|t exclusive
-- Writes:  warren.claim_locks: a lock row made the first time
CREATE OR REPLACE FUNCTION warren.wp_cap_lock(g text, t text, mr int, mrt int,
                                              try_only boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kg text := 'c|' || g;
    kt text := 'c|' || g || '|' || coalesce(t, '');
BEGIN
    -- Rows of warren.claim_locks (locks.sql): no other login can hold them.
    -- The mode depends on the group's max_running alone, never on the
    -- tenant: every caller takes one mode for a group, whatever tenants its
    -- runs have, so no call holds a group's lock shared and then waits to
    -- take it exclusively (a tenant with an operator's tenant cap next to
    -- one without, in one complete_many, would otherwise deadlock with a
    -- second such call). Without max_running the group's lock is shared and
    -- the tenant's exclusive (a tenant without any cap takes its tenant lock
    -- for nothing, harmlessly).
    IF mr IS NULL THEN
        RETURN warren.wp_lock_row(kg, false, try_only) AND warren.wp_lock_row(kt, true, try_only);
    END IF;
    RETURN warren.wp_lock_row(kg, true, try_only);
END
$$;
COMMENT ON FUNCTION warren.wp_cap_lock(text, text, int, int, boolean) IS
    'Takes the cap lock of group g (exclusive when max_running is set; else shared plus tenant '
    't''s exclusive lock): rows of warren.claim_locks; try_only: only if free at once (false: '
    'not taken); NULL for a NULL group';

-- How a note names a group: the template, or the config job itself.
-- (plpgsql: function files are applied on every intermediate schema of a
-- stepwise migration, and an SQL function's body is checked at creation.)
-- ----------------------------------------------------------------------------
-- Function: warren.wp_cap_label(g text)
--     How notes name a cap group: template NAME or job NAME.
-- Parameters:
--     g - the cap group
-- Returns: text
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_cap_label(g text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN CASE WHEN coalesce((SELECT jb.is_template FROM warren.jobs jb WHERE jb.name = g), false)
                THEN 'template ' ELSE 'job ' END || g;
END
$$;
COMMENT ON FUNCTION warren.wp_cap_label(text) IS
    'How notes name a cap group: template NAME or job NAME';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_cap_admit(r warren.runs, cg text, ct text, mr int, mrt int, gmrt int)
--     Cap admission of a locked run under its group's cap lock: a run holding no released slot
--     first releases the older waiting runs of its scope (they take free slots first, in due
--     order); then it fits its caps, or it waits.
-- Parameters:
--     r    - the run's row, locked (a takeover's is still running)
--     cg   - its cap group
--     ct   - its tenant ('' for none)
--     mr   - the group's max_running
--     mrt  - the tenant's cap (wp_tenant_cap)
--     gmrt - the group's max_running_per_tenant (how the waiting note names the cap)
-- Returns: true: it fits (claim it); false: it waits (state waiting, with a note)
-- Locks:   a release's waiting rows
-- Writes:  warren.runs (r waiting; waiting runs released)
CREATE OR REPLACE FUNCTION warren.wp_cap_admit(r warren.runs, cg text, ct text, mr int, mrt int,
                                               gmrt int)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
-- No SET clause (as wp_event): the cost of a call (see wp_claim_locks)
DECLARE
    k text := r.run_key;
    held bigint;
    wline text;
BEGIN
    -- The group's lock is held since the start of the claim; a count (a
    -- statement after it) sees every committed claim. A slot can come free
    -- without a release (an overlap reap, cancel_previous, a released run
    -- that died): a run that holds no released slot releases the older
    -- waiting runs of its scope first (the tenant's with
    -- max_running_per_tenant alone, the group's otherwise), so that they
    -- take the free slots before it, in due order; the counts below then
    -- see them.
    IF r.cap_released_at IS NULL
       AND ((mr IS NULL
             AND EXISTS (SELECT 1 FROM warren.runs o
                          WHERE o.cap_group = cg AND o.cap_tenant = ct
                            AND o.state = 'waiting'
                            AND (o.due_at, o.run_key) < (r.due_at, k)))
            OR (mr IS NOT NULL
                AND EXISTS (SELECT 1 FROM warren.runs o
                             WHERE o.cap_group = cg AND o.state = 'waiting'
                               AND (o.due_at, o.run_key) < (r.due_at, k)))) THEN
        PERFORM warren.wp_cap_release(cg, ct, true);
    END IF;
    IF mr IS NOT NULL THEN
        SELECT count(*) INTO held FROM warren.runs o
         WHERE o.cap_group = cg AND o.run_key <> k
           AND warren.wp_holds_slot(o.state, o.cap_released_at);
        IF held >= mr THEN
            wline := format('waiting: %s of max_running %s running (%s)', held, mr,
                            warren.wp_cap_label(cg));
        END IF;
    END IF;
    IF wline IS NULL AND mrt IS NOT NULL THEN
        SELECT count(*) INTO held FROM warren.runs o
         WHERE o.cap_group = cg AND o.cap_tenant = ct AND o.run_key <> k
           AND warren.wp_holds_slot(o.state, o.cap_released_at);
        IF held >= mrt THEN
            wline := format('waiting: tenant %s has %s of %s %s running (%s)',
                            CASE WHEN ct = '' THEN '(none)' ELSE ct END, held,
                            CASE WHEN mrt IS DISTINCT FROM gmrt
                                 THEN 'its tenant cap (warren tenant-cap)'
                                 ELSE 'max_running_per_tenant' END, mrt,
                            warren.wp_cap_label(cg));
        END IF;
    END IF;
    IF wline IS NULL THEN
        RETURN true;
    END IF;
    IF r.state = 'running' THEN
        -- a takeover (its lease ran out) finding the cap lowered: the lost
        -- attempt is closed by the claim; the run waits like the others
        UPDATE warren.runs rr SET lease_owner = NULL, lease_until = NULL
         WHERE rr.run_key = k;
    END IF;
    UPDATE warren.runs rr
       SET state = 'waiting', cap_group = cg, cap_tenant = ct, cap_released_at = NULL,
           note = warren.plan_note(rr.note,
                                   wline || ' at ' || warren.wp_utc_ms(clock_timestamp()))
     WHERE rr.run_key = k;
    RETURN false;
END
$fn$;
COMMENT ON FUNCTION warren.wp_cap_admit(warren.runs, text, text, int, int, int) IS
    'Cap admission of a locked run under its group''s cap lock: true when it fits its caps, '
    'else it waits (false); older waiting runs are released first';

-- A slot of group g (tenant t) may have come free: under the cap lock, the
-- oldest waiting runs (due_at, run_key) that fit now go back to 'planned',
-- due_at unchanged, holding their slot (cap_released_at) until claimed, with
-- a note; a NOTIFY (at commit) wakes the planners, whose relay publishes
-- them at once (they are due: first in its due order). With
-- max_running_per_tenant alone only tenant t's runs can fit; with
-- max_running any tenant's (with both, per tenant: each tenant's oldest
-- that fit its own cap, then the oldest of those). A group without caps any more releases its
-- waiting runs, 1,000 per call. Returns how many were released. With
-- try_only (the reconciler's sweep) a group whose lock is taken is left for
-- the next pass instead of waited for: its holder is a claim or a release of
-- the group anyway, and a reconciler that holds reaped rows must not wait
-- for a claim batch that waits for one of those rows.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_cap_release(g text, t text, try_only boolean DEFAULT false)
--     A slot of group g (tenant t) may be free: the oldest waiting runs that fit go back to
--     planned, holding their slot until claimed.
-- Parameters:
--     g        - the cap group
--     t        - the tenant ('' for none)
--     try_only - the sweep: a group whose lock is taken is left for the next pass
-- Returns: how many runs were released
-- Locks:   the group's cap lock(s) (wp_cap_lock); then the waiting rows it moves (never waited
--          for)
-- Writes:  warren.runs (waiting -> planned, cap_released_at, note); NOTIFY warren_jobs
CREATE OR REPLACE FUNCTION warren.wp_cap_release(g text, t text, try_only boolean DEFAULT false)
RETURNS int LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    mr int;
    mrt int;
    gmrt int;
    held bigint;
    room bigint;
    keys text[] := '{}';
    n int;
    t0 timestamptz;
    why text;
BEGIN
    t := coalesce(t, '');
    SELECT jb.max_running, jb.max_running_per_tenant INTO mr, gmrt
      FROM warren.jobs jb WHERE jb.name = g;
    mrt := warren.wp_tenant_cap(gmrt, t); -- t's cap (its tenant cap, else the group's)
    IF NOT warren.wp_cap_lock(g, t, mr, gmrt, try_only) THEN
        RETURN 0; -- the sweep, and the group busy: next pass
    END IF;
    t0 := clock_timestamp(); -- after the lock: notes order releases as they happened
    IF mr IS NULL AND mrt IS NOT NULL THEN
        SELECT count(*) INTO held FROM warren.runs o
         WHERE o.cap_group = g AND o.cap_tenant = t
           AND warren.wp_holds_slot(o.state, o.cap_released_at);
        room := mrt - held;
        IF room <= 0 THEN
            RETURN 0;
        END IF;
        keys := ARRAY(SELECT o.run_key FROM warren.runs o
                       WHERE o.cap_group = g AND o.cap_tenant = t AND o.state = 'waiting'
                       ORDER BY o.due_at, o.run_key LIMIT room FOR UPDATE SKIP LOCKED);
        why := format('tenant %s has %s of %s %s running',
                      CASE WHEN t = '' THEN '(none)' ELSE t END, held,
                      CASE WHEN mrt IS DISTINCT FROM gmrt THEN 'its tenant cap'
                           ELSE 'max_running_per_tenant' END, mrt);
    ELSIF mr IS NULL THEN
        -- (tenants with a tenant cap of their own are released by their own
        -- calls, above)
        keys := ARRAY(SELECT o.run_key FROM warren.runs o
                       WHERE o.cap_group = g AND o.state = 'waiting'
                         AND NOT EXISTS (SELECT 1 FROM warren.tenant_caps tc
                                          WHERE tc.tenant = o.cap_tenant)
                       ORDER BY o.due_at, o.run_key LIMIT 1000 FOR UPDATE SKIP LOCKED);
        why := 'no cap any more';
    ELSE
        SELECT count(*) INTO held FROM warren.runs o
         WHERE o.cap_group = g
           AND warren.wp_holds_slot(o.state, o.cap_released_at);
        room := mr - held;
        IF room <= 0 THEN
            RETURN 0;
        END IF;
        why := format('%s of max_running %s running', held, mr);
        -- per tenant when the group has a per-tenant cap, or when any
        -- tenant has a tenant cap (one of this group's may)
        IF gmrt IS NULL AND NOT EXISTS (SELECT 1 FROM warren.tenant_caps) THEN
            keys := ARRAY(SELECT o.run_key FROM warren.runs o
                           WHERE o.cap_group = g AND o.state = 'waiting'
                           ORDER BY o.due_at, o.run_key LIMIT room FOR UPDATE SKIP LOCKED);
        ELSE
            -- Per tenant (a skip scan of runs_waiting_tenant): the oldest
            -- waiting runs of each tenant below its own cap, as many as fit
            -- it, then the oldest of those overall. No FOR UPDATE: the
            -- group's exclusive lock serialises every claim and release of
            -- the group, and the UPDATE below checks the state again.
            keys := ARRAY(
                WITH RECURSIVE tn AS (
                    (SELECT o.cap_tenant AS t FROM warren.runs o
                      WHERE o.cap_group = g AND o.state = 'waiting'
                      ORDER BY o.cap_tenant LIMIT 1)
                    UNION ALL
                    SELECT (SELECT o.cap_tenant FROM warren.runs o
                             WHERE o.cap_group = g AND o.state = 'waiting' AND o.cap_tenant > tn.t
                             ORDER BY o.cap_tenant LIMIT 1)
                      FROM tn WHERE tn.t IS NOT NULL
                )
                SELECT c.run_key
                  FROM tn
                 CROSS JOIN LATERAL (
                       SELECT coalesce(warren.wp_tenant_cap(gmrt, tn.t) - count(*), room) AS free
                         FROM warren.runs o
                        WHERE o.cap_group = g AND o.cap_tenant = tn.t
                          AND warren.wp_holds_slot(o.state, o.cap_released_at)) h
                 CROSS JOIN LATERAL (
                       SELECT o.run_key, o.due_at FROM warren.runs o
                        WHERE o.cap_group = g AND o.cap_tenant = tn.t AND o.state = 'waiting'
                        ORDER BY o.due_at, o.run_key LIMIT least(greatest(h.free, 0), room)) c
                 WHERE tn.t IS NOT NULL
                 ORDER BY c.due_at, c.run_key LIMIT room);
            why := why || format(', its tenant below %s',
                                 CASE WHEN gmrt IS NULL THEN 'its tenant cap'
                                      ELSE format('its cap (max_running_per_tenant %s, or its '
                                                  'tenant cap)', gmrt) END);
        END IF;
    END IF;
    IF cardinality(keys) = 0 THEN
        RETURN 0;
    END IF;
    UPDATE warren.runs rr
       SET state = 'planned', cap_released_at = t0,
           note = warren.plan_note(rr.note, format('released at %s: %s (%s)',
                  warren.wp_utc_ms(t0), why, warren.wp_cap_label(g)))
     WHERE rr.run_key = ANY (keys) AND rr.state = 'waiting';
    GET DIAGNOSTICS n = ROW_COUNT;
    -- Wake the planners (delivered at commit): the relay publishes them now.
    PERFORM pg_notify('warren_jobs', 'release');
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION warren.wp_cap_release(text, text, boolean) IS
    'Under the cap lock: the oldest waiting runs of group g (tenant t) that fit go back to '
    'planned (due_at unchanged, holding their slot until claimed) and the planners are woken; '
    'returns how many; try_only: nothing when the lock is not free at once';

-- The reconciler's safety net (called by warren.reap_expired_leases every
-- few seconds): a release for every group with waiting runs that has room:
-- one per group with max_running (or without caps any more: it releases
-- any tenant's), one per tenant below its cap with max_running_per_tenant
-- alone, up to max of them per call. The groups and tenants with waiting
-- runs are found by a skip scan of runs_waiting_tenant (one index probe per
-- pair, not a scan of every waiting run), and the pass starts at a random
-- point of that order and wraps around, so that with more than max pairs
-- none is left behind for good. Locks are only tried (try_only above): a
-- group or tenant whose lock is taken is left for the next pass (order
-- does not matter for locks that never wait). It catches what no
-- completion released: a cap raised or removed by `warren sync`, a
-- released run that became dead before its claim (its slot is free again),
-- a run reaped by another run's overlap check.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_cap_release_all(max int)
--     The reconciler's safety net: a release for every group (or tenant) with waiting runs that
--     has room, from a random point of (group, tenant) order.
-- Parameters:
--     max - the most releases per call (NULL: 1000)
-- Returns: how many runs were released
-- Locks:   as wp_cap_release, only tried
-- Writes:  as wp_cap_release
CREATE OR REPLACE FUNCTION warren.wp_cap_release_all(max int)
RETURNS int LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    x record;
    n int := 0;
    calls int := 0;
    lim int := greatest(coalesce(max, 1000), 0);
    pivot text := md5(random()::text);
BEGIN
    FOR x IN
        WITH RECURSIVE pr AS (
            (SELECT o.cap_group AS g, o.cap_tenant AS t FROM warren.runs o
              WHERE o.state = 'waiting' AND o.cap_group IS NOT NULL
              ORDER BY o.cap_group, o.cap_tenant LIMIT 1)
            UNION ALL
            SELECT nx.g, nx.t
              FROM pr CROSS JOIN LATERAL (
                   SELECT o.cap_group AS g, o.cap_tenant AS t FROM warren.runs o
                    WHERE o.state = 'waiting' AND o.cap_group IS NOT NULL
                      AND (o.cap_group, o.cap_tenant) > (pr.g, pr.t)
                    ORDER BY o.cap_group, o.cap_tenant LIMIT 1) nx
        ), u AS (
            -- one row per group with max_running or no caps, one per tenant otherwise
            SELECT DISTINCT pr.g,
                   CASE WHEN jb.max_running IS NULL
                             AND warren.wp_tenant_cap(jb.max_running_per_tenant, pr.t) IS NOT NULL
                        THEN pr.t END AS t,
                   jb.max_running AS mr,
                   CASE WHEN jb.max_running IS NULL
                        THEN warren.wp_tenant_cap(jb.max_running_per_tenant, pr.t) END AS mrt
              FROM pr LEFT JOIN warren.jobs jb ON jb.name = pr.g
        )
        SELECT u.g, u.t FROM u
         WHERE CASE WHEN u.mr IS NOT NULL
                    THEN (SELECT count(*) FROM warren.runs o
                           WHERE o.cap_group = u.g
                             AND warren.wp_holds_slot(o.state, o.cap_released_at)) < u.mr
                    WHEN u.mrt IS NOT NULL
                    THEN (SELECT count(*) FROM warren.runs o
                           WHERE o.cap_group = u.g AND o.cap_tenant = u.t
                             AND warren.wp_holds_slot(o.state, o.cap_released_at)) < u.mrt
                    ELSE true END
         ORDER BY (u.g || '|' || coalesce(u.t, '')) < pivot, u.g, u.t
    LOOP
        EXIT WHEN calls >= lim;
        calls := calls + 1;
        n := n + warren.wp_cap_release(x.g, x.t, true);
    END LOOP;
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION warren.wp_cap_release_all(int) IS
    'Releases the waiting runs that fit, one release per group with max_running and per tenant '
    'below its cap otherwise, up to max releases, from a random point of (group, tenant) order '
    '(the reconciler''s safety net); returns how many runs were released';
