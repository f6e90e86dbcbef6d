-- 005_outbox_urgent.sql: an index over the outbox rows that are not events
-- (dead letters), so that the relay can publish them ahead of a backlog of
-- events. Never edit this file once landed: add 00N_*.sql instead.
--
-- Why: in a burst (50,000 runs completing within seconds) publishing the
-- run.succeeded events competed with the runs themselves for RabbitMQ and
-- the relay: they cost about 20 % of the burst's CPU on two cores. When a
-- relay pass meets 1,000 events or more, the relay now holds back the events
-- younger than planner.event_defer (dead letters never wait) and publishes
-- them once they are that old or fewer than 1,000 wait
-- (docs/worker-protocol.md, "Events wait during a burst"). Events are rows
-- with exchange 'warren.events'; an event row adds no entry to this index.

CREATE INDEX IF NOT EXISTS outbox_urgent ON warren.outbox (id)
    WHERE exchange <> 'warren.events';
COMMENT ON INDEX warren.outbox_urgent IS
    'Outbox rows other than events (dead letters): published first, never held back';

INSERT INTO warren.schema_migrations (version, name) VALUES (5, '005_outbox_urgent')
ON CONFLICT (version) DO NOTHING;
