-- enqueue.sql: one-shot runs from application code (README, "Jobs from
-- application code: the SQL API"): warren.enqueue and warren.enqueue_many,
-- for the warren_producer role, in the caller's transaction. The one current
-- definition; `warren migrate` re-applies it.
--
-- An enqueued run is a row of warren.runs like any other: run_key JOB@KEY
-- (the caller's idempotency key), origin 'enqueue', state 'planned',
-- scheduled_at = due_at = run_at (milliseconds, no jitter: the caller chose
-- the instant), the payload override and the tenant. The planner's relay
-- publishes it after commit (a NOTIFY, delivered at commit, wakes it at
-- once); a rollback leaves no row and so sends nothing. The primary key on
-- run_key makes a second enqueue of the same key a no-op (INSERT ... ON
-- CONFLICT DO NOTHING), for as long as the run's row exists.
--
-- Decisions:
-- - run_at NULL is now (the database's clock at the call). run_at is rounded
--   UP to the next millisecond when it has finer digits: runs are due at
--   milliseconds, and rounding up means a run never starts before the
--   instant asked for. A run_at in the past is due at once (not an error:
--   a late caller still wants its run). 'infinity' is refused.
-- - A paused job still gets its enqueued runs, and they run: pause stops a
--   job's schedule (as `warren trigger` on a paused job runs), and
--   `warren pause` cancels only scheduled runs. To stop enqueued runs, do
--   not enqueue them (or cancel them).
-- - A removed job (gone from the config, or deleted through the API) takes
--   no new runs.
-- - The job may be a config job, an API job or a template (then the run's
--   job is the template itself).

-- ------------------------------------------------------------ checks

-- Internal (wp_): plain SQL, no SET clause, so that the planner inlines them
-- into enqueue_many's set-based statements. NULL = fine, else what is wrong
-- and the fix (the caller prefixes the function and the field's place).

CREATE OR REPLACE FUNCTION warren.wp_enqueue_key_problem(job text, key text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        -- the common case first, in two patterns
        -- (a bounded repetition {0,199} costs PostgreSQL's regex engine 15 us
        -- a key: the length is checked apart)
        WHEN length(key) <= 200 AND key ~ '^[A-Za-z0-9][A-Za-z0-9._:/=+@-]*$'
             AND key !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}'
             AND octet_length(job) + 1 + octet_length(key) <= 255 THEN NULL
        WHEN key IS NULL OR key = '' THEN
            'key is required: an idempotency key you choose, e.g. ''welcome:user-42'' (a second '
            'enqueue with the same job and key creates nothing)'
        WHEN length(key) > 200 THEN
            'key is ' || length(key) || ' characters long; at most 200'
        WHEN key !~ '^[A-Za-z0-9]' THEN
            'key "' || left(key, 80) || '" must start with a letter or a digit'
        WHEN key !~ '^[A-Za-z0-9._:/=+@-]*$' THEN
            'key "' || left(key, 80) || '" has a character outside [A-Za-z0-9._:/=+@-] (at '
            'position ' || length(substring(key FROM '^[A-Za-z0-9._:/=+@-]*')) + 1 || ')'
        WHEN key ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}' THEN
            'key "' || key || '" begins with a time of the form YYYY-MM-DDTHH:MM:SS, which is '
            'kept for scheduled runs'' keys (JOB@YYYY-MM-DDTHH:MM:SSZ); add a prefix, e.g. ''at:'
            || key || ''''
        WHEN octet_length(job) + 1 + octet_length(key) > 255 THEN
            'the run key "' || left(job, 40) || '@' || left(key, 40) || '..." would be '
            || (octet_length(job) + 1 + octet_length(key)) || ' bytes; job name, ''@'' and key '
            'together are at most 255 (the AMQP message_id); use a shorter key'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_key_problem(text, text) IS
    'What is wrong with an enqueue key (NULL: nothing): 1-200 of [A-Za-z0-9._:/=+@-], first a '
    'letter or digit, not beginning with YYYY-MM-DDTHH:MM:SS, JOB@KEY at most 255 bytes';

CREATE OR REPLACE FUNCTION warren.wp_enqueue_tenant_problem(tenant text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN tenant IS NOT NULL
                     AND (length(tenant) > 200 OR tenant !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$') THEN
        'tenant "' || left(tenant, 80) || '" is not a tenant name: 1-200 of [A-Za-z0-9._:@-], '
        'first a letter or digit (or NULL: the job''s tenant)'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_tenant_problem(text) IS
    'What is wrong with a tenant name (NULL: nothing): [A-Za-z0-9][A-Za-z0-9._:@-]{0,199}';

-- found: the job row exists; removed: its removed flag.
CREATE OR REPLACE FUNCTION warren.wp_enqueue_job_problem(job text, found boolean, removed boolean)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN job IS NULL OR job = '' THEN 'job is required (the name of a config job, an API '
                                          'job or a template)'
        WHEN NOT found THEN
            'job "' || left(job, 200) || '" does not exist (create it with warren.upsert_job, or '
            'add it to the config and run `warren sync`)'
        WHEN removed THEN
            'job "' || left(job, 200) || '" was removed (from the config, or by '
            'warren.delete_job): it takes no new runs'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_job_problem(text, boolean, boolean) IS
    'What is wrong with the job of an enqueue (NULL: nothing): it must exist and not be removed';

CREATE OR REPLACE FUNCTION warren.wp_enqueue_payload_problem(payload jsonb)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN payload IS NULL THEN NULL
        WHEN jsonb_typeof(payload) <> 'object' THEN
            'payload must be a JSON object ({...}) or NULL (the job''s payload), not a JSON '
            || jsonb_typeof(payload)
        WHEN octet_length(payload::text) > 1000000 THEN
            'payload is ' || octet_length(payload::text) || ' bytes as JSON text; at most '
            '1000000 (a run message is at most 1 MiB)'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_payload_problem(jsonb) IS
    'What is wrong with an enqueue payload (NULL: nothing): a JSON object of at most 1000000 '
    'bytes, or NULL';

-- The instant a run is due: run_at rounded up to the millisecond, or t0 (the
-- call's clock) for NULL.
CREATE OR REPLACE FUNCTION warren.wp_enqueue_at(run_at timestamptz, t0 timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- One expression (no FROM): inlined into enqueue_many's INSERT.
    SELECT date_trunc('milliseconds', coalesce(run_at, t0) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
           + CASE WHEN date_trunc('milliseconds', coalesce(run_at, t0) AT TIME ZONE 'UTC')
                       = coalesce(run_at, t0) AT TIME ZONE 'UTC'
                  THEN interval '0' ELSE interval '1 millisecond' END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_at(timestamptz, timestamptz) IS
    'An enqueued run''s instant: run_at (t0 when NULL) rounded up to the millisecond';

CREATE OR REPLACE FUNCTION warren.wp_enqueue_fail(fn text, what text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '%: %', fn, what USING ERRCODE = '22023';
END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_fail(text, text) IS
    'Raises invalid_parameter_value (22023) "FN: WHAT" (enqueue input errors)';

-- ------------------------------------------------------------ enqueue

CREATE OR REPLACE FUNCTION warren.enqueue(job text, key text, run_at timestamptz DEFAULT NULL,
                                          payload jsonb DEFAULT NULL, tenant text DEFAULT NULL)
RETURNS TABLE(run_key text, created boolean, state text, scheduled_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    j text := enqueue.job;
    k text := enqueue.key;
    pl jsonb := nullif(enqueue.payload, 'null'::jsonb); -- JSON null: the job's, as NULL
    rk text;
    at timestamptz;
    p text;
    found_ boolean;
    removed_ boolean;
BEGIN
    SELECT true, jb.removed INTO found_, removed_ FROM warren.jobs jb WHERE jb.name = j;
    p := coalesce(warren.wp_enqueue_job_problem(j, coalesce(found_, false), removed_),
                  warren.wp_enqueue_key_problem(j, k),
                  CASE WHEN run_at IS NOT NULL AND NOT isfinite(run_at) THEN
                      'run_at must be a finite instant (or NULL: now), not ' || run_at::text END,
                  warren.wp_enqueue_payload_problem(pl),
                  warren.wp_enqueue_tenant_problem(tenant));
    IF p IS NOT NULL THEN
        PERFORM warren.wp_enqueue_fail('warren.enqueue', p);
    END IF;
    rk := j || '@' || k;
    at := warren.wp_enqueue_at(run_at, clock_timestamp());
    INSERT INTO warren.runs AS rr (run_key, job, scheduled_at, due_at, state, origin, payload,
                                   tenant)
    VALUES (rk, j, at, at, 'planned', 'enqueue', pl, tenant)
    ON CONFLICT ON CONSTRAINT runs_run_key DO NOTHING;
    IF FOUND THEN
        -- Delivered at commit (nothing on rollback); one per transaction.
        PERFORM pg_notify('warren_jobs', 'enqueue');
        run_key := rk;
        created := true;
        state := 'planned';
        scheduled_at := at;
        RETURN NEXT;
        RETURN;
    END IF;
    -- The key is taken: say by which run (a new statement: it sees a row a
    -- concurrent transaction committed while this INSERT waited for it).
    RETURN QUERY SELECT rr.run_key, false, rr.state, rr.scheduled_at
                   FROM warren.runs rr WHERE rr.run_key = rk;
END
$fn$;
COMMENT ON FUNCTION warren.enqueue(text, text, timestamptz, jsonb, text) IS
    'Enqueues a one-shot run of job with the caller''s idempotency key (run key JOB@KEY) at '
    'run_at (NULL: now; milliseconds, rounded up), with an optional payload override and tenant, '
    'in the caller''s transaction. One row: the run key, created (false: a run already holds '
    'the key; state and scheduled_at are that run''s). Errors 22023 name the field and the fix';

-- ------------------------------------------------------------ enqueue_many

CREATE OR REPLACE FUNCTION warren.wp_enqueue_max_batch()
RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 100000 $$;
COMMENT ON FUNCTION warren.wp_enqueue_max_batch() IS
    'Most runs one warren.enqueue_many call takes';

-- The first element of runs whose run_at string is not a timestamptz (the
-- slow path after a cast error in the set-based statement), as a problem.
CREATE OR REPLACE FUNCTION warren.wp_enqueue_bad_run_at(runs jsonb)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    e record;
    t timestamptz;
BEGIN
    FOR e IN SELECT o.ord - 1 AS i, o.v->>'run_at' AS s
               FROM jsonb_array_elements(runs) WITH ORDINALITY o(v, ord)
              WHERE jsonb_typeof(o.v->'run_at') = 'string' ORDER BY o.ord
    LOOP
        BEGIN
            t := e.s::timestamptz;
        EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR
                       invalid_time_zone_displacement_value OR data_exception THEN
            RETURN format('runs[%s].run_at "%s" is not a valid instant (%s)', e.i,
                          left(e.s, 80), SQLERRM);
        END;
        IF NOT isfinite(t) THEN
            RETURN format('runs[%s].run_at must be a finite instant, not "%s"', e.i, e.s);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_bad_run_at(jsonb) IS
    'The first element of an enqueue_many array whose run_at is not a finite timestamptz, as a '
    'problem text (NULL: none)';

-- runs: a JSON array of {job, key, run_at, payload, tenant} (job and key
-- required; run_at an RFC 3339 string with a UTC offset, or null/absent for
-- now; payload an object or null; tenant a string or null). Every element is
-- checked before anything is written; the first problem (in array order)
-- raises 22023 naming runs[i] and the field. Then one INSERT ... ON CONFLICT
-- DO NOTHING for the whole array. One row per element, in array order: its
-- index (0-based, as in the error messages), the run key, whether this
-- element created it (false: an earlier element of the same array, or a run
-- before, holds the key) and that run's state and scheduled_at.
CREATE OR REPLACE FUNCTION warren.enqueue_many(runs jsonb)
RETURNS TABLE(idx int, run_key text, created boolean, state text, scheduled_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    a jsonb := enqueue_many.runs;
    n int;
    p text;
    t0 timestamptz := clock_timestamp();
    made text[];
BEGIN
    IF a IS NULL OR jsonb_typeof(a) <> 'array' THEN
        PERFORM warren.wp_enqueue_fail('warren.enqueue_many', format(
            'runs must be a JSON array of objects {"job": ..., "key": ..., "run_at": ..., '
            '"payload": ..., "tenant": ...}, not %s', coalesce('a JSON ' || jsonb_typeof(a),
                                                               'NULL')));
    END IF;
    n := jsonb_array_length(a);
    IF n > warren.wp_enqueue_max_batch() THEN
        PERFORM warren.wp_enqueue_fail('warren.enqueue_many', format(
            'runs has %s elements; at most %s per call (split the array)', n,
            warren.wp_enqueue_max_batch()));
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;
    -- Shapes and types, then the values, element by element in one pass:
    -- the first problem in array order.
    SELECT format('runs[%s]%s', x.i, x.problem) INTO p
      FROM (SELECT o.ord - 1 AS i, CASE
              WHEN jsonb_typeof(o.v) <> 'object' THEN
                  format(' is a JSON %s; each element is an object {"job", "key", "run_at", '
                         '"payload", "tenant"}', jsonb_typeof(o.v))
              WHEN NOT (o.v ?& ARRAY['job', 'key']) THEN
                  format(': "%s" is missing (every element needs "job" and "key")',
                         CASE WHEN o.v ? 'job' THEN 'key' ELSE 'job' END)
              WHEN o.v - ARRAY['job', 'key', 'run_at', 'payload', 'tenant'] <> '{}' THEN
                  format(' has the unknown field "%s" (allowed: job, key, run_at, payload, '
                         'tenant)', (SELECT min(f) FROM jsonb_object_keys(o.v) f
                                      WHERE f NOT IN ('job', 'key', 'run_at', 'payload',
                                                      'tenant')))
              WHEN jsonb_typeof(o.v->'job') <> 'string' THEN
                  format('.job must be a string, not a JSON %s', jsonb_typeof(o.v->'job'))
              WHEN jsonb_typeof(o.v->'key') <> 'string' THEN
                  format('.key must be a string, not a JSON %s', jsonb_typeof(o.v->'key'))
              WHEN coalesce(jsonb_typeof(o.v->'run_at'), 'null') NOT IN ('string', 'null') THEN
                  format('.run_at must be an RFC 3339 string (e.g. "2026-12-01T09:00:00.250Z") '
                         'or null (now), not a JSON %s', jsonb_typeof(o.v->'run_at'))
              WHEN jsonb_typeof(o.v->'run_at') = 'string' AND o.v->>'run_at' !~
                   '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?([Zz]|[+-][0-9]{2}:[0-9]{2})$' THEN
                  format('.run_at "%s" is not an RFC 3339 instant with a UTC offset (e.g. '
                         '"2026-12-01T09:00:00.250Z" or "2026-12-01T10:00:00+01:00")',
                         left(o.v->>'run_at', 80))
              WHEN coalesce(jsonb_typeof(o.v->'tenant'), 'null') NOT IN ('string', 'null') THEN
                  format('.tenant must be a string or null, not a JSON %s',
                         jsonb_typeof(o.v->'tenant'))
              WHEN coalesce(jsonb_typeof(o.v->'payload'), 'null') NOT IN ('object', 'null') THEN
                  format('.payload must be a JSON object or null (the job''s payload), not a '
                         'JSON %s', jsonb_typeof(o.v->'payload'))
              ELSE ': ' || coalesce(
                  warren.wp_enqueue_job_problem(o.v->>'job', jb.name IS NOT NULL, jb.removed),
                  warren.wp_enqueue_key_problem(o.v->>'job', o.v->>'key'),
                  warren.wp_enqueue_payload_problem(nullif(o.v->'payload', 'null')),
                  warren.wp_enqueue_tenant_problem(o.v->>'tenant'))
              END AS problem
              FROM jsonb_array_elements(a) WITH ORDINALITY o(v, ord)
              LEFT JOIN warren.jobs jb
                ON jsonb_typeof(o.v) = 'object' AND jb.name = o.v->>'job') x
     WHERE x.problem IS NOT NULL
     ORDER BY x.i LIMIT 1;
    IF p IS NOT NULL THEN
        PERFORM warren.wp_enqueue_fail('warren.enqueue_many', p);
    END IF;
    -- The strings the pattern let through may still not be dates (Feb 30):
    -- the cast fails the statement before anything is written, and the slow
    -- path finds the element. Rows go in in array order, so of two elements
    -- with one key the first creates the run and the second meets it as a
    -- conflict (DO NOTHING sees rows of its own statement).
    BEGIN
        WITH e AS (
            SELECT x.ord - 1 AS i, x.job, x.key, x.run_at::timestamptz AS at, x.payload,
                   x.tenant
              FROM ROWS FROM (jsonb_to_recordset(a) AS (job text, key text, run_at text,
                                                        payload jsonb, tenant text))
                   WITH ORDINALITY AS x(job, key, run_at, payload, tenant, ord)
        ), ins AS (
            INSERT INTO warren.runs AS rr (run_key, job, scheduled_at, due_at, state, origin,
                                           payload, tenant)
            SELECT e.job || '@' || e.key, e.job, warren.wp_enqueue_at(e.at, t0),
                   warren.wp_enqueue_at(e.at, t0), 'planned', 'enqueue', nullif(e.payload, 'null'),
                   e.tenant
              FROM e ORDER BY e.i
            ON CONFLICT ON CONSTRAINT runs_run_key DO NOTHING
            RETURNING rr.run_key
        )
        SELECT array_agg(ins.run_key) INTO made FROM ins;
    EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR
                   invalid_time_zone_displacement_value THEN
        p := warren.wp_enqueue_bad_run_at(a);
        PERFORM warren.wp_enqueue_fail('warren.enqueue_many', coalesce(p, SQLERRM));
    END;
    IF made IS NOT NULL THEN
        PERFORM pg_notify('warren_jobs', 'enqueue'); -- at commit; nothing on rollback
    END IF;
    -- A new statement: it sees the rows just inserted, and those a concurrent
    -- transaction committed while the INSERT waited for them.
    -- Created rows are known (planned, at their instant); the others are
    -- looked up. Every element created (the common case): no lookup at all.
    IF cardinality(made) = n THEN
        RETURN QUERY
        SELECT (x.ord - 1)::int, x.job || '@' || x.key, true, 'planned'::text,
               warren.wp_enqueue_at(x.run_at::timestamptz, t0)
          FROM ROWS FROM (jsonb_to_recordset(a) AS (job text, key text, run_at text))
               WITH ORDINALITY AS x(job, key, run_at, ord)
         ORDER BY x.ord;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT y.i, y.rk, y.made_here,
           CASE WHEN y.made_here THEN 'planned'
                ELSE (SELECT rr.state FROM warren.runs rr WHERE rr.run_key = y.rk) END,
           CASE WHEN y.made_here THEN y.at
                ELSE (SELECT rr.scheduled_at FROM warren.runs rr WHERE rr.run_key = y.rk) END
      FROM (SELECT (x.ord - 1)::int AS i, x.job || '@' || x.key AS rk,
                   warren.wp_enqueue_at(x.run_at::timestamptz, t0) AS at,
                   m.k IS NOT NULL AND x.ord = min(x.ord) OVER (PARTITION BY m.k) AS made_here
              FROM ROWS FROM (jsonb_to_recordset(a) AS (job text, key text, run_at text))
                   WITH ORDINALITY AS x(job, key, run_at, ord)
              LEFT JOIN unnest(made) m(k) ON m.k = x.job || '@' || x.key) y
     ORDER BY y.i;
END
$fn$;
COMMENT ON FUNCTION warren.enqueue_many(jsonb) IS
    'warren.enqueue for a JSON array of {job, key, run_at, payload, tenant}, set-based: every '
    'element checked first (22023 naming runs[i] and the field; nothing written), then one '
    'INSERT. One row per element in array order: idx (0-based), run_key, created, the holding '
    'run''s state and scheduled_at';
