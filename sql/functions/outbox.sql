-- outbox.sql: the rows the worker protocol writes to warren.outbox (events
-- and dead letters), published after commit by the relay (docs/delivery.md).
-- The one current definition; `warren migrate` re-applies it.
--
-- Events go to exchange warren.events; everything else (dead letters) is
-- found by the index outbox_urgent and published ahead of a backlog of
-- events (sql/migrations/005_outbox_urgent.sql says why).

-- plpgsql rather than sql: its plan is cached (an SQL function's is not).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_event(r warren.runs, kind text, err text, worker text)
--     Writes the event run.<kind>.<job> of run r to the outbox (also src/store_plan.c).
-- Parameters:
--     r      - the run's row, as it is now
--     kind   - the event (succeeded, retry, dead, ...)
--     err    - the error, if any
--     worker - the worker, if any
-- Returns: void
-- Locks:   none
-- Writes:  warren.outbox (exchange warren.events)
CREATE OR REPLACE FUNCTION warren.wp_event(r warren.runs, kind text, err text, worker text)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
    VALUES ('warren.events', 'run.' || kind || '.' || r.job, r.run_key, r.job,
            jsonb_build_object('x-warren-job', r.job,
                               'x-warren-scheduled-at', warren.wp_utc_run(r.scheduled_at),
                               'x-warren-attempt', r.attempt::text,
                               'x-warren-event', kind,
                               'x-warren-state', r.state),
            jsonb_strip_nulls(jsonb_build_object(
                'event', kind, 'run_key', r.run_key, 'job', r.job,
                'scheduled_at', warren.wp_utc_run(r.scheduled_at),
                'due_at', warren.wp_utc_ms(r.due_at),
                'attempt', r.attempt, 'state', r.state, 'worker', worker,
                'error', err, 'at', warren.wp_utc_ms(clock_timestamp()))));
END
$$;
COMMENT ON FUNCTION warren.wp_event(warren.runs, text, text, text) IS
    'Writes the event run.<kind>.<job> of run r to the outbox (exchange warren.events)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_dead_letter(r warren.runs, j warren.jobs, err text)
--     Writes the dead letter of run r, just dead, to the outbox (also src/store_plan.c).
-- Parameters:
--     r   - the run's row
--     j   - its job's row
--     err - the last error
-- Returns: void
-- Locks:   none
-- Writes:  warren.outbox (exchange warren.dead, routing key the job's queue)
CREATE OR REPLACE FUNCTION warren.wp_dead_letter(r warren.runs, j warren.jobs, err text)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO warren.outbox (exchange, routing_key, message_id, type, headers, body)
    VALUES ('warren.dead', j.queue, r.run_key, r.job,
            jsonb_strip_nulls(jsonb_build_object(
                'x-warren-job', r.job,
                'x-warren-scheduled-at', warren.wp_utc_run(r.scheduled_at),
                'x-warren-attempt', r.attempt::text,
                'x-warren-queue', j.queue,
                'x-warren-error', left(coalesce(err, 'dead'), 1000))),
            jsonb_build_object(
                'run_key', r.run_key, 'job', r.job,
                'scheduled_at', warren.wp_utc_run(r.scheduled_at),
                'due_at', warren.wp_utc_ms(r.due_at),
                'attempt', r.attempt,
                'attempts', r.attempt - r.attempt_base,
                'payload', coalesce(r.payload, j.payload),
                'last_error', err,
                'dead_at', warren.wp_utc_ms(clock_timestamp())));
END
$$;
COMMENT ON FUNCTION warren.wp_dead_letter(warren.runs, warren.jobs, text) IS
    'Writes the dead letter of run r, just dead, to the outbox (exchange warren.dead)';
