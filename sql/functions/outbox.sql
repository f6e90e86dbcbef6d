-- outbox.sql: the rows the worker protocol writes to warren.outbox (events
-- and dead letters), published after commit by the relay (docs/delivery.md).
-- The one current definition; `warren migrate` re-applies it.
--
-- Events go to exchange warren.events; everything else (dead letters) is
-- found by the index outbox_urgent and published ahead of a backlog of
-- events (sql/migrations/005_outbox_urgent.sql says why).

-- The event message, one definition: its headers and its body (the relay
-- publishes them as they are). Plain SQL expressions, no SET clause, so that
-- the planner inlines them into the statements that write events, set-based
-- (complete_many, finish_many) or one at a time (wp_event): the formats of
-- wp_utc_run and wp_utc_ms inlined with them, no function call per run.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_event_headers(job text, scheduled_at timestamptz, attempt int, kind text,
--           state text)
--     The AMQP headers of the event run.<kind>.<job> of a run.
-- Parameters:
--     job          - the run's job
--     scheduled_at - its scheduled_at (RFC 3339, milliseconds when it has them)
--     attempt      - its attempt
--     kind         - the event (succeeded, retry, failed, lease_lost, dead, ...)
--     state        - the run's state after it
-- Returns: jsonb: x-warren-job, x-warren-scheduled-at, x-warren-attempt, x-warren-event,
--          x-warren-state
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_event_headers(job text, scheduled_at timestamptz, attempt int,
                                                   kind text, state text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('x-warren-job', job,
                              'x-warren-scheduled-at', warren.wp_utc_run(scheduled_at),
                              'x-warren-attempt', attempt::text,
                              'x-warren-event', kind,
                              'x-warren-state', state)
$$;
COMMENT ON FUNCTION warren.wp_event_headers(text, timestamptz, int, text, text) IS
    'The AMQP headers of a run event (inlined into the statements that write events)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_event_body(kind text, run_key text, job text, scheduled_at timestamptz,
--           due_at timestamptz, attempt int, state text, worker text, err text)
--     The JSON body of the event run.<kind>.<job> of a run; its "at" is clock_timestamp().
-- Parameters:
--     kind         - the event
--     run_key      - the run
--     job          - its job
--     scheduled_at - its scheduled_at
--     due_at       - its due_at
--     attempt      - its attempt
--     state        - its state after the event
--     worker       - the worker, or NULL (left out)
--     err          - the error, or NULL (left out)
-- Returns: jsonb {event, run_key, job, scheduled_at, due_at, attempt, state, worker, error, at}
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_event_body(kind text, run_key text, job text,
                                                scheduled_at timestamptz, due_at timestamptz,
                                                attempt int, state text, worker text, err text)
RETURNS jsonb LANGUAGE sql VOLATILE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'event', kind, 'run_key', run_key, 'job', job,
               'scheduled_at', warren.wp_utc_run(scheduled_at),
               'due_at', warren.wp_utc_ms(due_at),
               'attempt', attempt, 'state', state, 'worker', worker,
               'error', err, 'at', warren.wp_utc_ms(clock_timestamp())))
$$;
COMMENT ON FUNCTION warren.wp_event_body(text, text, text, timestamptz, timestamptz, int, text,
                                         text, text) IS
    'The JSON body of a run event, "at" now (inlined into the statements that write events)';

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
            warren.wp_event_headers(r.job, r.scheduled_at, r.attempt, kind, r.state),
            warren.wp_event_body(kind, r.run_key, r.job, r.scheduled_at, r.due_at, r.attempt,
                                 r.state, worker, err));
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
