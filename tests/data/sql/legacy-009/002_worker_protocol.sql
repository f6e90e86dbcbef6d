-- 002_worker_protocol.sql: the worker protocol as SQL functions (DESIGN §3):
-- warren.claim, warren.heartbeat, warren.complete for workers in any language,
-- warren.reap_expired_leases for the planner's reconciler, warren.replay for
-- operators, and the role warren_worker that may execute only the first three.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
--
-- Fencing: runs.attempt is bumped by every successful claim and is the token.
-- heartbeat and complete succeed only while the run is `running` under the
-- caller's attempt. A lease that ran out but that nobody took over (no newer
-- claim, no reaper pass) still fences correctly: the lease only decides when
-- others may take over, the attempt number decides who may write.
--
-- Retry budget: a run may be claimed retry_max_attempts times since it was
-- planned or last replayed (runs.attempt - runs.attempt_base); replay keeps the
-- attempt counter monotonic (stale workers keep stale tokens) and moves the base.

ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS attempt_base int NOT NULL DEFAULT 0;
COMMENT ON COLUMN warren.runs.attempt_base IS
    'runs.attempt when the run was last replayed: the retry budget counts attempts above it';

-- The overlap check looks for live runs of the same job.
CREATE INDEX IF NOT EXISTS runs_running_job ON warren.runs (job) WHERE state = 'running';

-- ------------------------------------------------------------------ helpers
-- Internal (prefix wp_): called by the SECURITY DEFINER functions only.

CREATE OR REPLACE FUNCTION warren.wp_utc(t timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;
COMMENT ON FUNCTION warren.wp_utc(timestamptz) IS 'RFC 3339 UTC, whole seconds (NULL stays NULL)';

CREATE OR REPLACE FUNCTION warren.wp_utc_ms(t timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
COMMENT ON FUNCTION warren.wp_utc_ms(timestamptz) IS 'RFC 3339 UTC with milliseconds';

-- Full-jitter backoff in milliseconds: random(0, min(cap, base * 2^attempt)).
CREATE OR REPLACE FUNCTION warren.wp_backoff_ms(base_ms bigint, cap_ms bigint, attempt int)
RETURNS float8 LANGUAGE sql VOLATILE AS $$
    SELECT random() * least(cap_ms::float8, base_ms::float8 * power(2::float8, least(greatest(attempt, 0), 60)))
$$;
COMMENT ON FUNCTION warren.wp_backoff_ms(bigint, bigint, int) IS
    'Full-jitter retry delay in ms: random(0, min(cap, base * 2^attempt))';

-- Appends a line to a run's note.
CREATE OR REPLACE FUNCTION warren.wp_note(old text, line text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN old IS NULL OR old = '' THEN line ELSE old || E'\n' || line END
$$;

-- Writes the event run.<kind>.<job> to the outbox (published after commit by the relay).
-- plpgsql rather than sql: its plan is cached (an SQL function's is not).
CREATE OR REPLACE FUNCTION warren.wp_event(r warren.runs, kind text, err text, worker text)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
    VALUES ('warren.events', 'run.' || kind || '.' || r.job, r.run_key, r.job,
            jsonb_build_object('x-warren-job', r.job,
                               'x-warren-scheduled-at', warren.wp_utc(r.scheduled_at),
                               'x-warren-attempt', r.attempt::text,
                               'x-warren-event', kind,
                               'x-warren-state', r.state),
            jsonb_strip_nulls(jsonb_build_object(
                'event', kind, 'run_key', r.run_key, 'job', r.job,
                'scheduled_at', warren.wp_utc(r.scheduled_at),
                'due_at', warren.wp_utc_ms(r.due_at),
                'attempt', r.attempt, 'state', r.state, 'worker', worker,
                'error', err, 'at', warren.wp_utc_ms(clock_timestamp()))));
END
$$;

-- Writes the dead letter of a run that just became dead to the outbox
-- (exchange warren.dead, fanout; routing key = the job queue).
CREATE OR REPLACE FUNCTION warren.wp_dead_letter(r warren.runs, j warren.jobs, err text)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
    VALUES ('warren.dead', j.queue, r.run_key, r.job,
            jsonb_strip_nulls(jsonb_build_object(
                'x-warren-job', r.job,
                'x-warren-scheduled-at', warren.wp_utc(r.scheduled_at),
                'x-warren-attempt', r.attempt::text,
                'x-warren-queue', j.queue,
                'x-warren-error', left(coalesce(err, 'dead'), 1000))),
            jsonb_build_object(
                'run_key', r.run_key, 'job', r.job,
                'scheduled_at', warren.wp_utc(r.scheduled_at),
                'due_at', warren.wp_utc_ms(r.due_at),
                'attempt', r.attempt,
                'attempts', r.attempt - r.attempt_base,
                'payload', coalesce(r.payload, j.payload),
                'last_error', err,
                'dead_at', warren.wp_utc_ms(clock_timestamp())));
END
$$;

-- After a failed attempt of the locked run r (outcome retry / lease_lost) or a
-- permanent failure (failed): schedule the next attempt with backoff while the
-- budget lasts, otherwise make it dead with a dead letter. Writes the events.
-- Returns the new state.
CREATE OR REPLACE FUNCTION warren.wp_after_failure(k text, outcome text, err text, worker text,
                                                   why text)
RETURNS text LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
    delay_ms float8;
BEGIN
    SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k;
    SELECT * INTO j FROM warren.jobs jb WHERE jb.name = r.job;
    IF outcome <> 'failed' AND r.attempt - r.attempt_base < j.retry_max_attempts THEN
        delay_ms := warren.wp_backoff_ms(j.retry_base_ms, j.retry_cap_ms, r.attempt - r.attempt_base);
        UPDATE warren.runs rr
           SET state = 'retrying',
               due_at = now() + make_interval(secs => delay_ms / 1000.0),
               lease_owner = NULL, lease_until = NULL,
               last_error = coalesce(err, rr.last_error),
               note = CASE WHEN why IS NULL THEN rr.note ELSE warren.wp_note(rr.note, why) END
         WHERE rr.run_key = k
        RETURNING * INTO r;
        PERFORM warren.wp_event(r, outcome, err, worker);
        RETURN 'retrying';
    END IF;
    UPDATE warren.runs rr
       SET state = 'dead', finished_at = now(),
           lease_owner = NULL, lease_until = NULL,
           last_error = coalesce(err, rr.last_error),
           note = warren.wp_note(rr.note, coalesce(why || '; ', '') ||
                  CASE WHEN outcome = 'failed' THEN 'dead: permanent failure'
                       ELSE format('dead: %s attempts used (max_attempts %s)',
                                   r.attempt - r.attempt_base, j.retry_max_attempts) END)
     WHERE rr.run_key = k
    RETURNING * INTO r;
    PERFORM warren.wp_event(r, outcome, err, worker);
    PERFORM warren.wp_event(r, 'dead', err, worker);
    PERFORM warren.wp_dead_letter(r, j, coalesce(err, r.last_error, outcome));
    RETURN 'dead';
END
$fn$;

-- ------------------------------------------------------------------ claim

CREATE OR REPLACE FUNCTION warren.claim(run_key text, worker text)
RETURNS TABLE(attempt int, job text, scheduled_at timestamptz, payload jsonb, lease_seconds int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := claim.run_key;
    w text := claim.worker;
    r warren.runs%ROWTYPE;
    j warren.jobs%ROWTYPE;
    pol text;
    both_ record;
    b record;
    newer_key text;
    line text;
BEGIN
    IF k IS NULL OR w IS NULL OR w = '' THEN
        RAISE EXCEPTION 'warren.claim: run_key and worker are required' USING ERRCODE = '22023';
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
    pol := j.overlap;
    -- Claims of one job's runs serialise so the overlap check (a statement
    -- after the lock, so with a fresh snapshot) sees every committed claim.
    -- An advisory lock: the planner's FOR UPDATE SKIP LOCKED on warren.jobs
    -- is not disturbed. Taken after the run's row lock, in every claim alike.
    IF pol <> 'allow' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('warren.overlap:' || j.name, 0));
    END IF;

    IF r.state = 'running' THEN
        IF r.lease_until >= now() THEN
            RETURN; -- leased by a live worker (a duplicate delivery)
        END IF;
        -- The holder's lease ran out: it is presumed dead; take over within the budget.
        UPDATE warren.attempts a SET finished_at = now(), outcome = 'lease_lost',
               error = format('lease expired at %s; taken over by %s', warren.wp_utc_ms(r.lease_until), w)
         WHERE a.run_key = k AND a.attempt = r.attempt AND a.finished_at IS NULL;
        IF r.attempt - r.attempt_base >= j.retry_max_attempts THEN
            PERFORM warren.wp_after_failure(k, 'lease_lost', r.last_error, w,
                format('lease of attempt %s (worker %s) expired at %s', r.attempt,
                       r.lease_owner, warren.wp_utc_ms(r.lease_until)));
            RETURN;
        END IF;
        PERFORM warren.wp_event(r, 'lease_lost', NULL, r.lease_owner);
    ELSIF r.state = 'retrying' THEN
        -- A stale message for a run waiting for its retry time: the relay
        -- publishes it again when due (a second of slack for clock rounding).
        IF r.due_at > now() + interval '1 second' THEN
            RETURN;
        END IF;
    ELSIF r.state NOT IN ('planned', 'published') THEN
        RETURN; -- finished (succeeded, dead, skipped, cancelled)
    END IF;

    IF pol <> 'allow' THEN
        newer_key := NULL;
        FOR b IN SELECT * FROM warren.runs o
                  WHERE o.job = r.job AND o.run_key <> k AND o.state = 'running'
                    AND o.lease_until >= now()
                  ORDER BY o.scheduled_at
                  FOR UPDATE
        LOOP
            IF pol = 'cancel_previous' AND b.scheduled_at < r.scheduled_at THEN
                UPDATE warren.runs o
                   SET state = 'cancelled', finished_at = now(), lease_owner = NULL,
                       lease_until = NULL,
                       note = warren.wp_note(o.note, format(
                           'cancelled by overlap policy cancel_previous at %s: newer run %s claimed by %s',
                           warren.wp_utc_ms(now()), k, w))
                 WHERE o.run_key = b.run_key;
                UPDATE warren.attempts a SET finished_at = now(), outcome = 'cancelled',
                       error = format('cancelled: newer run %s started', k)
                 WHERE a.run_key = b.run_key AND a.attempt = b.attempt AND a.finished_at IS NULL;
                PERFORM warren.wp_event(o, 'cancelled', NULL, b.lease_owner)
                   FROM warren.runs o WHERE o.run_key = b.run_key;
            ELSE
                newer_key := b.run_key;
                EXIT;
            END IF;
        END LOOP;

        IF newer_key IS NOT NULL THEN
            IF pol = 'queue' THEN
                line := format('held back by overlap policy queue: %s was still running', newer_key);
                UPDATE warren.runs rr
                   SET state = 'retrying', due_at = now() + interval '1 second',
                       note = CASE WHEN rr.note LIKE '%held back by overlap policy queue%'
                                   THEN rr.note ELSE warren.wp_note(rr.note, line) END
                 WHERE rr.run_key = k;
            ELSE
                -- skip, or cancel_previous with a newer run already running
                line := format('skipped by overlap policy %s at %s: %s was still running',
                               pol, warren.wp_utc_ms(now()), newer_key);
                UPDATE warren.runs rr
                   SET state = 'skipped', finished_at = now(), note = warren.wp_note(rr.note, line)
                 WHERE rr.run_key = k
                RETURNING * INTO r;
                PERFORM warren.wp_event(r, 'skipped', NULL, w);
            END IF;
            RETURN;
        END IF;
    END IF;

    UPDATE warren.runs rr
       SET state = 'running', attempt = rr.attempt + 1, lease_owner = w,
           lease_until = now() + make_interval(secs => j.lease_ms / 1000.0),
           started_at = now()
     WHERE rr.run_key = k
    RETURNING * INTO r;
    INSERT INTO warren.attempts (run_key, attempt, worker, started_at)
    VALUES (k, r.attempt, w, now())
    ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
        SET worker = EXCLUDED.worker, started_at = EXCLUDED.started_at,
            finished_at = NULL, outcome = NULL, error = NULL;

    attempt := r.attempt;
    job := r.job;
    scheduled_at := r.scheduled_at;
    payload := coalesce(r.payload, j.payload);
    lease_seconds := greatest(1, ceil(j.lease_ms / 1000.0))::int;
    RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION warren.claim(text, text) IS
    'Claims a run for worker: one row (attempt = fencing token, lease from now()) or none when '
    'the run is finished, unknown, leased by a live worker, waiting for its retry time, or held '
    'back by the job''s overlap policy (skip, queue, cancel_previous)';

-- ------------------------------------------------------------------ heartbeat

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

-- ------------------------------------------------------------------ complete

CREATE OR REPLACE FUNCTION warren.complete(run_key text, attempt int, outcome text,
                                           error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := complete.run_key;
    fence int := complete.attempt;
    o text := complete.outcome;
    err text := left(complete.error, 4000);
    r warren.runs%ROWTYPE;
BEGIN
    IF o IS NULL OR o NOT IN ('succeeded', 'retry', 'failed') THEN
        RAISE EXCEPTION 'warren.complete: outcome must be succeeded, retry or failed, not %',
            coalesce(o, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF o = 'succeeded' THEN
        UPDATE warren.runs rr
           SET state = 'succeeded', finished_at = now(), lease_until = NULL
         WHERE rr.run_key = k AND rr.state = 'running' AND rr.attempt = fence
        RETURNING * INTO r;
        IF NOT FOUND THEN
            RETURN false; -- stale token: another attempt holds (or finished) the run
        END IF;
        UPDATE warren.attempts a SET finished_at = now(), outcome = o, error = err
         WHERE a.run_key = k AND a.attempt = fence;
        PERFORM warren.wp_event(r, 'succeeded', err, r.lease_owner);
        RETURN true;
    END IF;
    SELECT * INTO r FROM warren.runs rr WHERE rr.run_key = k FOR UPDATE;
    IF NOT FOUND OR r.state <> 'running' OR r.attempt IS DISTINCT FROM fence THEN
        RETURN false;
    END IF;
    UPDATE warren.attempts a SET finished_at = now(), outcome = o, error = err
     WHERE a.run_key = k AND a.attempt = fence;
    PERFORM warren.wp_after_failure(k, o, coalesce(err, o), r.lease_owner, NULL);
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.complete(text, int, text, text) IS
    'Records the outcome (succeeded, retry, failed) of the caller''s attempt with its retry '
    'schedule or dead letter and events as outbox rows, in the caller''s transaction; false: stale token';

-- ------------------------------------------------------------------ batch forms
-- The same protocol for many runs in one call (the C worker claims and
-- completes the messages it has in batches). Rows a set-based statement can
-- settle are settled in one statement; everything else goes through
-- warren.claim / warren.complete one by one, so there is one set of rules.

CREATE OR REPLACE FUNCTION warren.claim_many(run_keys text[], worker text)
RETURNS TABLE(run_key text, attempt int, job text, scheduled_at timestamptz, payload jsonb,
              lease_seconds int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Key lookups only: keep the planner on index probes even when the table's
-- statistics are stale (right after a large backfill, a plan cached for a
-- tiny table would scan the whole table once per batch).
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
    w text := claim_many.worker;
    keys text[] := claim_many.run_keys;
    done_ text[];
    nfast bigint;
BEGIN
    IF w IS NULL OR w = '' THEN
        RAISE EXCEPTION 'warren.claim_many: worker is required' USING ERRCODE = '22023';
    END IF;
    -- Fast path: fresh runs of jobs without an overlap check (keys sorted, so
    -- concurrent batches lock rows in one order).
    RETURN QUERY
    WITH c AS (
        UPDATE warren.runs rr
           SET state = 'running', attempt = rr.attempt + 1, lease_owner = w,
               lease_until = now() + make_interval(secs => jb.lease_ms / 1000.0),
               started_at = now()
          FROM (SELECT DISTINCT x AS k FROM unnest(keys) x ORDER BY 1) t, warren.jobs jb
         WHERE rr.run_key = t.k -- driven by the keys: one index probe each
           AND jb.name = rr.job AND jb.overlap = 'allow'
           AND (rr.state IN ('planned', 'published')
                OR (rr.state = 'retrying' AND rr.due_at <= now() + interval '1 second'))
        RETURNING rr.run_key, rr.attempt, rr.job, rr.scheduled_at,
                  coalesce(rr.payload, jb.payload) AS payload,
                  greatest(1, ceil(jb.lease_ms / 1000.0))::int AS lease_seconds
    ), a AS (
        INSERT INTO warren.attempts (run_key, attempt, worker, started_at)
        SELECT c.run_key, c.attempt, w, now() FROM c
        ON CONFLICT ON CONSTRAINT attempts_pkey DO UPDATE
            SET worker = EXCLUDED.worker, started_at = EXCLUDED.started_at,
                finished_at = NULL, outcome = NULL, error = NULL
    )
    SELECT c.run_key, c.attempt, c.job, c.scheduled_at, c.payload, c.lease_seconds FROM c;
    -- The common case (a burst of fresh runs): the fast path claimed every key.
    GET DIAGNOSTICS nfast = ROW_COUNT;
    -- (a NULL key counts: the full path below rejects it, as warren.claim does)
    IF nfast >= (SELECT count(*) FROM (SELECT DISTINCT x FROM unnest(keys) x) d) THEN
        RETURN;
    END IF;
    -- What this transaction claimed above (started_at = now(): this transaction).
    -- `state || ''` keeps the planner off the partial index runs_running_job
    -- (whose statistics say "a handful of rows"): scanning every running run
    -- once per key cost milliseconds per batch during a burst.
    SELECT array_agg(rr.run_key) INTO done_
      FROM (SELECT DISTINCT x AS k FROM unnest(keys) x ORDER BY 1) t
      JOIN warren.runs rr ON rr.run_key = t.k
     WHERE rr.state || '' = 'running' AND rr.lease_owner = w AND rr.started_at = now();
    -- The rest, by the full rules.
    RETURN QUERY
    SELECT t.k, cl.attempt, cl.job, cl.scheduled_at, cl.payload, cl.lease_seconds
      FROM (SELECT DISTINCT x AS k FROM unnest(keys) x
             WHERE done_ IS NULL OR NOT (x = ANY (done_)) ORDER BY 1) t
     CROSS JOIN LATERAL warren.claim(t.k, w) cl;
END
$fn$;
COMMENT ON FUNCTION warren.claim_many(text[], text) IS
    'warren.claim for many run keys: one row per claimed run (run_key first); the others gave no row';

CREATE OR REPLACE FUNCTION warren.complete_many(run_keys text[], attempts int[])
RETURNS TABLE(run_key text, recorded boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Key lookups only: keep the planner on index probes even when the table's
-- statistics are stale (right after a large backfill, a plan cached for a
-- tiny table would scan the whole table once per batch).
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
BEGIN
    IF coalesce(array_length(complete_many.run_keys, 1), 0)
       <> coalesce(array_length(complete_many.attempts, 1), 0) THEN
        RAISE EXCEPTION 'warren.complete_many: run_keys and attempts differ in length'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH t AS (
        SELECT * FROM unnest(complete_many.run_keys, complete_many.attempts) AS t(k, a)
    ), u AS (
        -- Driven by the keys, one runs_run_key probe each. `state || ''`
        -- keeps the planner off the partial index runs_running_job: its
        -- statistics say "a handful of rows", and scanning every running run
        -- against every key (a nested loop: hash and merge joins are off
        -- here) cost 5 ms per 100-run batch with 200 runs running.
        UPDATE warren.runs rr
           SET state = 'succeeded', finished_at = now(), lease_until = NULL
          FROM (SELECT k, a FROM t ORDER BY k) tk
         WHERE rr.run_key = tk.k AND rr.attempt = tk.a AND rr.state || '' = 'running'
        RETURNING rr.run_key, rr.job, rr.attempt, rr.scheduled_at, rr.due_at, rr.lease_owner
    ), at AS (
        UPDATE warren.attempts x SET finished_at = now(), outcome = 'succeeded', error = NULL
          FROM u WHERE x.run_key = u.run_key AND x.attempt = u.attempt
    ), ev AS (
        INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
        SELECT 'warren.events', 'run.succeeded.' || u.job, u.run_key, u.job,
               jsonb_build_object('x-warren-job', u.job,
                                  'x-warren-scheduled-at', u.sched,
                                  'x-warren-attempt', u.attempt::text,
                                  'x-warren-event', 'succeeded',
                                  'x-warren-state', 'succeeded'),
               jsonb_strip_nulls(jsonb_build_object(
                   'event', 'succeeded', 'run_key', u.run_key, 'job', u.job,
                   'scheduled_at', u.sched,
                   'due_at', to_char(u.due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                   'attempt', u.attempt, 'state', 'succeeded', 'worker', u.lease_owner,
                   'at', to_char(clock_timestamp() AT TIME ZONE 'UTC',
                                 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
          -- the formats of wp_utc / wp_utc_ms written out: those SQL functions
          -- are not inlined (auto_explain logged each of their 4 calls per run)
          FROM (SELECT u.*, to_char(u.scheduled_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS sched FROM u) u
         ORDER BY u.run_key
    )
    SELECT t.k, EXISTS (SELECT 1 FROM u WHERE u.run_key = t.k) FROM t;
END
$fn$;
COMMENT ON FUNCTION warren.complete_many(text[], int[]) IS
    'warren.complete(key, attempt, ''succeeded'') for many runs in one statement; recorded per key';

-- ------------------------------------------------------------------ reaper

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

-- ------------------------------------------------------------------ replay

CREATE OR REPLACE FUNCTION warren.replay(run_key text, who text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    k text := replay.run_key;
BEGIN
    UPDATE warren.runs rr
       SET state = 'planned', due_at = now(), finished_at = NULL, lease_owner = NULL,
           lease_until = NULL, attempt_base = rr.attempt,
           note = warren.wp_note(rr.note, format('replayed at %s%s after %s attempts',
                  warren.wp_utc_ms(now()), coalesce(' by ' || replay.who, ''),
                  rr.attempt - rr.attempt_base))
     WHERE rr.run_key = k AND rr.state = 'dead';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('warren_jobs', 'replay');
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.replay(text, text) IS
    'A dead run goes back to planned, due now, under the same run key; history kept; false if not dead';

-- ------------------------------------------------------------------ privileges

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'warren_worker') THEN
        BEGIN
            CREATE ROLE warren_worker NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- created concurrently by a migration of another database
        END;
    END IF;
END
$$;
COMMENT ON ROLE warren_worker IS
    'May execute warren.claim, warren.heartbeat and warren.complete (and their batch forms) only; grant it to worker logins';

REVOKE ALL ON FUNCTION warren.wp_utc(timestamptz), warren.wp_utc_ms(timestamptz),
    warren.wp_backoff_ms(bigint, bigint, int), warren.wp_note(text, text),
    warren.wp_event(warren.runs, text, text, text),
    warren.wp_dead_letter(warren.runs, warren.jobs, text),
    warren.wp_after_failure(text, text, text, text, text),
    warren.claim(text, text), warren.heartbeat(text, int),
    warren.complete(text, int, text, text), warren.reap_expired_leases(int),
    warren.replay(text, text), warren.claim_many(text[], text),
    warren.complete_many(text[], int[]) FROM PUBLIC;
GRANT USAGE ON SCHEMA warren TO warren_worker;
GRANT EXECUTE ON FUNCTION warren.claim(text, text), warren.heartbeat(text, int),
    warren.complete(text, int, text, text), warren.claim_many(text[], text),
    warren.complete_many(text[], int[]) TO warren_worker;

INSERT INTO warren.schema_migrations (version, name) VALUES (2, '002_worker_protocol')
ON CONFLICT (version) DO NOTHING;
