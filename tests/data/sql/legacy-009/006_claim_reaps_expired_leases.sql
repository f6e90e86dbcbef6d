-- 006_claim_reaps_expired_leases.sql: warren.claim, for a job with an overlap
-- policy (skip, queue, cancel_previous), first reaps the job's other runs
-- whose lease ran out. Never edit this file once landed: add 00N_*.sql instead.
--
-- Why: the overlap check counts only runs with a live lease, so a run whose
-- holder stopped heartbeating does not hold back the job's next run (a dead
-- worker must not block the job until the reconciler reaps it, up to 5 s
-- later). But until then the old run was still 'running' under its old
-- attempt: a holder that was only paused (SIGSTOP, a VM freeze) could resume,
-- heartbeat successfully and complete it while the next run ran, so two runs
-- of a `skip` job were recorded as overlapping. Reaping it in the claim that
-- lets the next run start closes that: the old attempt becomes lease_lost in
-- the same transaction, and the resumed holder's heartbeat returns false.

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
        -- Another run of this job whose lease ran out is reaped here, just as
        -- the reconciler would (attempt lease_lost; retrying with backoff or
        -- dead): this run does not wait for it, and its holder, if only
        -- paused, is fenced off now (its next heartbeat and its completion
        -- return false) instead of finishing it alongside this run.
        FOR b IN SELECT * FROM warren.runs o
                  WHERE o.job = r.job AND o.run_key <> k AND o.state = 'running'
                    AND o.lease_until < now()
                  ORDER BY o.scheduled_at
                  FOR UPDATE
        LOOP
            UPDATE warren.attempts a SET finished_at = now(), outcome = 'lease_lost',
                   error = format('lease expired at %s', warren.wp_utc_ms(b.lease_until))
             WHERE a.run_key = b.run_key AND a.attempt = b.attempt AND a.finished_at IS NULL;
            PERFORM warren.wp_after_failure(b.run_key, 'lease_lost',
                format('lease lost: worker %s stopped heartbeating', b.lease_owner), b.lease_owner,
                format('lease of attempt %s (worker %s) expired at %s; reaped at %s by the '
                       'overlap check of %s', b.attempt, b.lease_owner,
                       warren.wp_utc_ms(b.lease_until), warren.wp_utc_ms(now()), k));
        END LOOP;

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

INSERT INTO warren.schema_migrations (version, name) VALUES (6, '006_claim_reaps_expired_leases')
ON CONFLICT (version) DO NOTHING;
