-- 001_schema.sql: warren's tables: jobs, runs, attempts, outbox, planner leases.
-- Plain SQL, appliable with psql; `warren migrate` applies the same file under
-- an advisory lock and the file records its own version, so a psql run counts.
-- Migrations hold tables, columns, indexes and drops only and are never edited
-- once landed: add NNN_*.sql instead. Functions live in sql/functions/ (one
-- current definition each, re-applied by every migrate), except run_key below.

CREATE SCHEMA IF NOT EXISTS warren;
COMMENT ON SCHEMA warren IS 'warren job scheduler: jobs, runs, outbox, planner leases';

CREATE TABLE IF NOT EXISTS warren.schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE warren.schema_migrations IS 'Which sql/NNN_*.sql files have been applied';
COMMENT ON COLUMN warren.schema_migrations.version IS 'The NNN of the file';
COMMENT ON COLUMN warren.schema_migrations.name IS 'The file name without .sql';
COMMENT ON COLUMN warren.schema_migrations.applied_at IS 'When it was applied (database clock)';

-- The run key JOB@YYYY-MM-DDTHH:MM:SSZ. to_char is only STABLE because some
-- patterns depend on the locale; these patterns do not, so IMMUTABLE holds.
-- The one function a migration defines: runs.run_key is a stored column
-- generated from it, so it is part of the table (a new key format would be a
-- migration rewriting every run). Its grants are in sql/functions/grants.sql.
CREATE OR REPLACE FUNCTION warren.run_key(job text, scheduled_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT job || '@' || to_char(scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;
COMMENT ON FUNCTION warren.run_key(text, timestamptz) IS
    'The run key of a run: JOB@scheduled_at as RFC 3339 UTC with whole seconds';

CREATE TABLE IF NOT EXISTS warren.jobs (
    name               text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    schedule_kind      text NOT NULL CHECK (schedule_kind IN ('cron', 'every', 'at')),
    expression         text NOT NULL,
    timezone           text NOT NULL DEFAULT 'UTC',
    queue              text NOT NULL CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    payload            jsonb NOT NULL DEFAULT '{}',
    handler            jsonb NOT NULL DEFAULT '{}',
    misfire            text NOT NULL DEFAULT 'run_once'
                       CHECK (misfire IN ('run_once', 'skip', 'catch_up')),
    max_catch_up       int NOT NULL DEFAULT 0 CHECK (max_catch_up >= 0),
    overlap            text NOT NULL DEFAULT 'skip'
                       CHECK (overlap IN ('skip', 'allow', 'queue', 'cancel_previous')),
    retry_max_attempts int NOT NULL DEFAULT 5 CHECK (retry_max_attempts >= 1),
    retry_base_ms      bigint NOT NULL DEFAULT 10000 CHECK (retry_base_ms >= 0),
    retry_cap_ms       bigint NOT NULL DEFAULT 600000 CHECK (retry_cap_ms >= 0),
    lease_ms           bigint NOT NULL DEFAULT 30000 CHECK (lease_ms > 0),
    timeout_ms         bigint NOT NULL DEFAULT 1800000 CHECK (timeout_ms > 0),
    jitter_ms          bigint NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
    paused             boolean NOT NULL DEFAULT false,
    paused_at          timestamptz,
    removed            boolean NOT NULL DEFAULT false,
    partition          int NOT NULL DEFAULT 0 CHECK (partition >= 0),
    next_fire_at       timestamptz,
    config_hash        text NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE warren.jobs IS 'Job definitions, upserted from the config file by `warren sync`';
COMMENT ON COLUMN warren.jobs.name IS 'The config''s job name; a queue and run-key component';
COMMENT ON COLUMN warren.jobs.schedule_kind IS 'cron, every (fixed interval) or at (one shot)';
COMMENT ON COLUMN warren.jobs.expression IS 'The cron expression, interval ("90s") or RFC 3339 instant as written';
COMMENT ON COLUMN warren.jobs.timezone IS 'IANA zone in which cron fire times are local wall-clock times';
COMMENT ON COLUMN warren.jobs.queue IS 'Job queue: runs are released into warren.ready.<queue>';
COMMENT ON COLUMN warren.jobs.payload IS 'JSON payload handed to every run (a trigger may override it)';
COMMENT ON COLUMN warren.jobs.handler IS 'The handler as configured (informational; workers read their config)';
COMMENT ON COLUMN warren.jobs.misfire IS 'What the planner does with fire times older than the misfire threshold';
COMMENT ON COLUMN warren.jobs.max_catch_up IS 'catch_up: at most this many missed runs (0 = all)';
COMMENT ON COLUMN warren.jobs.overlap IS 'What warren.claim does when an earlier run of the job is still running';
COMMENT ON COLUMN warren.jobs.retry_max_attempts IS 'Attempts before a run is dead';
COMMENT ON COLUMN warren.jobs.retry_base_ms IS 'Backoff base: retry delay = random(0, min(cap, base * 2^attempt))';
COMMENT ON COLUMN warren.jobs.retry_cap_ms IS 'Backoff cap in milliseconds';
COMMENT ON COLUMN warren.jobs.lease_ms IS 'Claim lease; a worker heartbeats every third of it';
COMMENT ON COLUMN warren.jobs.timeout_ms IS 'Handler timeout; a timed-out attempt counts as a retry';
COMMENT ON COLUMN warren.jobs.jitter_ms IS 'due_at = scheduled_at + a stable offset in [0, jitter) from the job name';
COMMENT ON COLUMN warren.jobs.paused IS 'No runs are planned while paused';
COMMENT ON COLUMN warren.jobs.paused_at IS 'When it was paused (database clock)';
COMMENT ON COLUMN warren.jobs.removed IS 'Removed from the config: kept (its runs are history) and paused';
COMMENT ON COLUMN warren.jobs.partition IS 'Planner partition: hash of the name modulo the partition count';
COMMENT ON COLUMN warren.jobs.next_fire_at IS 'Planner cursor: the first fire time not yet materialised (NULL: start from now)';
COMMENT ON COLUMN warren.jobs.config_hash IS 'md5 of the job''s settings as synced, to report changes';
COMMENT ON COLUMN warren.jobs.created_at IS 'First synced';
COMMENT ON COLUMN warren.jobs.updated_at IS 'Last changed by sync, pause or resume';


CREATE TABLE IF NOT EXISTS warren.runs (
    job          text NOT NULL REFERENCES warren.jobs (name) ON UPDATE CASCADE,
    scheduled_at timestamptz NOT NULL
                 CHECK (scheduled_at = date_trunc('second', scheduled_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'),
    run_key      text GENERATED ALWAYS AS (warren.run_key(job, scheduled_at)) STORED,
    due_at       timestamptz NOT NULL,
    state        text NOT NULL DEFAULT 'planned'
                 CHECK (state IN ('planned', 'published', 'running', 'retrying', 'succeeded',
                                  'dead', 'skipped', 'cancelled')),
    attempt      int NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    origin       text NOT NULL DEFAULT 'schedule'
                 CHECK (origin IN ('schedule', 'trigger', 'backfill', 'misfire')),
    payload      jsonb,
    lease_owner  text,
    lease_until  timestamptz,
    published_at timestamptz,
    publish_count int NOT NULL DEFAULT 0,
    started_at   timestamptz,
    finished_at  timestamptz,
    last_error   text,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, scheduled_at)
);
COMMENT ON TABLE warren.runs IS 'One row per (job, scheduled time): the unique key makes a second planner''s insert a no-op';
COMMENT ON COLUMN warren.runs.job IS 'The job';
COMMENT ON COLUMN warren.runs.scheduled_at IS 'The fire time (whole seconds), before jitter';
COMMENT ON COLUMN warren.runs.run_key IS 'JOB@SCHEDULED_AT: message_id, idempotency key for handlers';
COMMENT ON COLUMN warren.runs.due_at IS 'When it is released: scheduled_at + jitter, or the retry time';
COMMENT ON COLUMN warren.runs.state IS 'planned, published, running, retrying, succeeded, dead, skipped, cancelled';
COMMENT ON COLUMN warren.runs.attempt IS 'Fencing token: bumped by every successful claim';
COMMENT ON COLUMN warren.runs.origin IS 'schedule, trigger, backfill or misfire (what created the row)';
COMMENT ON COLUMN warren.runs.payload IS 'Payload override (trigger --payload); NULL = the job''s payload';
COMMENT ON COLUMN warren.runs.lease_owner IS 'The worker holding the claim';
COMMENT ON COLUMN warren.runs.lease_until IS 'The claim lease ends here (database clock)';
COMMENT ON COLUMN warren.runs.published_at IS 'Last confirmed publish to RabbitMQ';
COMMENT ON COLUMN warren.runs.publish_count IS 'Confirmed publishes (more than one: the reconciler republished)';
COMMENT ON COLUMN warren.runs.started_at IS 'First claim of the current attempt';
COMMENT ON COLUMN warren.runs.finished_at IS 'When it reached succeeded, dead, skipped or cancelled';
COMMENT ON COLUMN warren.runs.last_error IS 'The last attempt''s error, or a publish error';
COMMENT ON COLUMN warren.runs.note IS 'What a misfire, overlap or DST rule, the reconciler or an operator did';
COMMENT ON COLUMN warren.runs.created_at IS 'When the row was materialised';

CREATE UNIQUE INDEX IF NOT EXISTS runs_run_key ON warren.runs (run_key);
CREATE INDEX IF NOT EXISTS runs_relay ON warren.runs (due_at) WHERE state IN ('planned', 'retrying');
CREATE INDEX IF NOT EXISTS runs_reconcile_published ON warren.runs (due_at) WHERE state = 'published';
CREATE INDEX IF NOT EXISTS runs_reconcile_lease ON warren.runs (lease_until) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS runs_history ON warren.runs (state, job, scheduled_at DESC);

CREATE TABLE IF NOT EXISTS warren.attempts (
    run_key     text NOT NULL,
    attempt     int NOT NULL,
    worker      text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    outcome     text CHECK (outcome IN ('succeeded', 'retry', 'failed', 'lease_lost', 'cancelled')),
    error       text,
    PRIMARY KEY (run_key, attempt)
);
COMMENT ON TABLE warren.attempts IS 'History: one row per claim of a run (kept across replays)';
COMMENT ON COLUMN warren.attempts.run_key IS 'The run';
COMMENT ON COLUMN warren.attempts.attempt IS 'The fencing token of this claim';
COMMENT ON COLUMN warren.attempts.worker IS 'Who claimed it';
COMMENT ON COLUMN warren.attempts.started_at IS 'Claim time (database clock)';
COMMENT ON COLUMN warren.attempts.finished_at IS 'Completion time, if it completed';
COMMENT ON COLUMN warren.attempts.outcome IS 'succeeded, retry, failed, lease_lost or cancelled';
COMMENT ON COLUMN warren.attempts.error IS 'The handler''s error text';

CREATE TABLE IF NOT EXISTS warren.outbox (
    id          bigserial PRIMARY KEY,
    exchange    text NOT NULL,
    routing_key text NOT NULL,
    message_id  text,
    type        text,
    headers     jsonb NOT NULL DEFAULT '{}',
    body        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE warren.outbox IS 'Messages committed with a state change, published (and deleted) by the relay afterwards';
COMMENT ON COLUMN warren.outbox.id IS 'Publish order';
COMMENT ON COLUMN warren.outbox.exchange IS 'Target exchange (warren.events, warren.dead, ...)';
COMMENT ON COLUMN warren.outbox.routing_key IS 'Routing key, e.g. run.succeeded.<job>';
COMMENT ON COLUMN warren.outbox.message_id IS 'AMQP message_id (the run key)';
COMMENT ON COLUMN warren.outbox.type IS 'AMQP type property (the job name)';
COMMENT ON COLUMN warren.outbox.headers IS 'AMQP headers (string values)';
COMMENT ON COLUMN warren.outbox.body IS 'Message body (JSON)';
COMMENT ON COLUMN warren.outbox.created_at IS 'When the transaction that wrote it ran';

CREATE TABLE IF NOT EXISTS warren.planner_leases (
    partition   int PRIMARY KEY CHECK (partition >= 0),
    owner       text NOT NULL,
    lease_until timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE warren.planner_leases IS 'Which planner owns which job partition, until when';
COMMENT ON COLUMN warren.planner_leases.partition IS 'Partition number (jobs.partition)';
COMMENT ON COLUMN warren.planner_leases.owner IS 'Planner id (host:pid:start)';
COMMENT ON COLUMN warren.planner_leases.lease_until IS 'Ownership ends here unless renewed (database clock)';
COMMENT ON COLUMN warren.planner_leases.renewed_at IS 'Last renewal';

INSERT INTO warren.schema_migrations (version, name) VALUES (1, '001_schema')
ON CONFLICT (version) DO NOTHING;
