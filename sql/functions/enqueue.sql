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
-- - Scope (issue 33; sql/functions/producer.sql): a login that is not
--   privileged must have producer grants in this database, may enqueue only
--   on jobs wp_producer_job_ok accepts (a granted config job or template, an
--   API job of its own), with an effective tenant (the given one, else the
--   job's) that wp_producer_tenant_ok accepts; and a key already held by a
--   run whose tenant is outside its prefix answers with the refusal, never
--   with that run's state. Refusals are 42501 (wp_producer_refusal's text).
--   A job that does not exist answers a non-privileged login with the same
--   refusal as a job outside its grants (no probing of other names).
-- - Locks: the job's row FOR SHARE before the decision reads it (exists,
--   removed, scope), so an enqueue racing warren.delete_job or a sync that
--   removes the job either commits before the removal (the removal waits
--   for it) or sees it (and is refused); enqueue_many locks its distinct
--   jobs in name order, once each (the lock order: jobs rows in name
--   order, then runs). The row lock is held to the caller's commit: a
--   `warren sync` or `warren pause` changing that job waits for the
--   producer's transaction (sync's wait is bounded), and the planner
--   (FOR UPDATE SKIP LOCKED) plans that job's schedule at its next tick, as
--   it already did for the key share lock of the runs' foreign key.
-- - Runs are inserted in one canonical order, run key (COLLATE "C") then
--   array index, so two calls (any arrays, any orders) never deadlock on
--   the runs' key: the second waits for the first and answers created =
--   false; rows are still answered in array order. A transaction that makes
--   several calls holds each call's keys to its end: two such transactions
--   can deadlock unless each one's keys ascend across its calls (one call
--   per transaction never does).
-- - Isolation: under READ COMMITTED (the default) a concurrent enqueue of
--   the same key waits and answers created = false. Under REPEATABLE READ or
--   SERIALIZABLE, a key enqueued by a transaction that committed after the
--   caller's snapshot, and a change of the job's row committed after it
--   (the planner moving a scheduled job's cursor, sync, pause, delete),
--   cannot be answered from that snapshot: the call raises 40001
--   (serialization_failure) naming the key or the job; the caller retries
--   the whole transaction, and the retry answers created = false for a key
--   a run now holds. (No subtransaction under READ COMMITTED: a caller
--   making thousands of calls in one transaction gets no sub-XIDs.)
-- - Values: a payload and an instant must be what a run message carries
--   (warren.wp_payload_problem, warren.wp_instant_problem: 64-bit integers,
--   doubles, depth; years 1-9999 UTC, after rounding); else 22023 naming
--   the field. Errors echo at most 80 characters of a bad value, with
--   control characters shown as '?' (warren.wp_enqueue_show).

-- ------------------------------------------------------------ checks

-- Internal (wp_): plain SQL, no SET clause, so that the planner inlines them
-- into enqueue_many's set-based statements. NULL = fine, else what is wrong
-- and the fix (the caller prefixes the function and the field's place).

-- A bad value as errors show it: quoted, at most 80 characters, control
-- characters as '?' (a newline must not start a line of a log or a CLI's
-- output), and the length when cut.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_show(v text)
--     A bad value as enqueue's errors echo it: quoted, at most 80 characters.
-- Parameters:
--     v - the value
-- Returns: text ('NULL' for NULL)
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_show(v text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN v IS NULL THEN 'NULL' ELSE
        '"' || regexp_replace(left(v, 80), '[[:cntrl:]]', '?', 'g') || '"'
        || CASE WHEN length(v) > 80 THEN '... (' || length(v) || ' characters)' ELSE '' END
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_show(text) IS
    'A value as enqueue''s errors echo it: quoted, at most 80 characters, control characters '
    'as ?';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_key_problem(job text, key text)
--     What is wrong with an enqueue key.
-- Parameters:
--     job - the job's name
--     key - the key
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
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
            'key ' || warren.wp_enqueue_show(key) || ' must start with a letter or a digit'
        WHEN key !~ '^[A-Za-z0-9._:/=+@-]*$' THEN
            'key ' || warren.wp_enqueue_show(key) || ' has a character outside [A-Za-z0-9._:/=+@-] (at '
            'position ' || length(substring(key FROM '^[A-Za-z0-9._:/=+@-]*')) + 1 || ')'
        WHEN key ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}' THEN
            'key ' || warren.wp_enqueue_show(key) || ' begins with a time of the form '
            'YYYY-MM-DDTHH:MM:SS, which is kept for scheduled runs'' keys '
            '(JOB@YYYY-MM-DDTHH:MM:SSZ); add a prefix, e.g. ''at:'' before it'
        WHEN octet_length(job) + 1 + octet_length(key) > 255 THEN
            'the run key ' || warren.wp_enqueue_show(left(job, 40) || '@' || left(key, 39)) || ' would be '
            || (octet_length(job) + 1 + octet_length(key)) || ' bytes; job name, ''@'' and key '
            'together are at most 255 (the AMQP message_id); use a shorter key'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_key_problem(text, text) IS
    'What is wrong with an enqueue key (NULL: nothing): 1-200 of [A-Za-z0-9._:/=+@-], first a '
    'letter or digit, not beginning with YYYY-MM-DDTHH:MM:SS, JOB@KEY at most 255 bytes';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_tenant_problem(tenant text)
--     What is wrong with a tenant name.
-- Parameters:
--     tenant - the tenant (NULL: the job's)
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_tenant_problem(tenant text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN tenant IS NOT NULL
                     AND (length(tenant) > 200 OR tenant !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$') THEN
        'tenant ' || warren.wp_enqueue_show(tenant) || ' is not a tenant name: 1-200 of [A-Za-z0-9._:@-], '
        'first a letter or digit (or NULL: the job''s tenant)'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_tenant_problem(text) IS
    'What is wrong with a tenant name (NULL: nothing): [A-Za-z0-9][A-Za-z0-9._:@-]{0,199}';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_job_problem(job text, found boolean, removed boolean)
--     What is wrong with the job of an enqueue: it must exist and not be removed.
-- Parameters:
--     job     - the job's name
--     found   - its row exists
--     removed - its removed flag
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_job_problem(job text, found boolean, removed boolean)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN job IS NULL OR job = '' THEN 'job is required (the name of a config job, an API '
                                          'job or a template)'
        WHEN NOT found THEN
            'job ' || warren.wp_enqueue_show(job) || ' does not exist (create it with warren.upsert_job, or '
            'add it to the config and run `warren sync`)'
        WHEN removed THEN
            'job ' || warren.wp_enqueue_show(job) || ' was removed (from the config, or by '
            'warren.delete_job): it takes no new runs'
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_job_problem(text, boolean, boolean) IS
    'What is wrong with the job of an enqueue (NULL: nothing): it must exist and not be removed';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_payload_problem(payload jsonb)
--     What is wrong with an enqueue payload (a JSON object of at most 1000000 bytes, or NULL).
-- Parameters:
--     payload - the payload
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
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
        ELSE 'payload ' || warren.wp_payload_problem(payload)
    END
$$;
-- enqueue_many's form: digits true when the array's text has a run of 19
-- digits somewhere (one scan of the whole array, '\d{19}': an integer
-- outside int64, or a number beyond a double, has at least 19 digits). A
-- payload of under 2000 bytes (jsonb, not text: nothing is printed) is at
-- most 12,000 bytes as text and nests fewer than 2000 deep; with no long
-- digit run in the array it needs no further look.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_payload_problem(payload jsonb, digits boolean)
--     wp_enqueue_payload_problem with enqueue_many's fast path.
-- Parameters:
--     payload - the payload
--     digits  - the array's text has a run of 19 digits
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_payload_problem(payload jsonb, digits boolean)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN payload IS NULL THEN NULL
        WHEN NOT digits AND jsonb_typeof(payload) = 'object' AND pg_column_size(payload) < 2000
            THEN NULL
        ELSE warren.wp_enqueue_payload_problem(payload)
    END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_payload_problem(jsonb, boolean) IS
    'warren.wp_enqueue_payload_problem with enqueue_many''s fast path (digits: the array has a '
    'run of 19 digits)';

COMMENT ON FUNCTION warren.wp_enqueue_payload_problem(jsonb) IS
    'What is wrong with an enqueue payload (NULL: nothing): a JSON object of at most 1000000 '
    'bytes, or NULL';

-- The instant a run is due: run_at rounded up to the millisecond, or t0 (the
-- call's clock) for NULL.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_at(run_at timestamptz, t0 timestamptz)
--     An enqueued run's instant: run_at rounded up to the millisecond.
-- Parameters:
--     run_at - the instant asked for (NULL: t0)
--     t0     - the call's clock
-- Returns: timestamptz
-- Locks:   none
-- Writes:  nothing
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

-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_fail(fn text, what text)
--     Raises 22023 "FN: WHAT" (enqueue input errors).
-- Parameters:
--     fn   - the calling function
--     what - the problem
-- Returns: never returns
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_fail(fn text, what text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '%: %', fn, what USING ERRCODE = '22023';
END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_fail(text, text) IS
    'Raises invalid_parameter_value (22023) "FN: WHAT" (enqueue input errors)';

-- ------------------------------------------------------------ enqueue

-- Raises 40001 for a call under REPEATABLE READ or SERIALIZABLE that its
-- snapshot cannot answer (see "Isolation" above): what, and the retry.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_retry(fn text, what text)
--     Raises 40001 for a call its REPEATABLE READ / SERIALIZABLE snapshot cannot answer.
-- Parameters:
--     fn   - the calling function
--     what - what changed
-- Returns: never returns
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_retry(fn text, what text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '%: %, after this % transaction''s snapshot: retry the whole transaction '
                    '(a retry answers created = false for a key a run holds)', fn, what,
                    upper(current_setting('transaction_isolation')) USING ERRCODE = '40001';
END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_retry(text, text) IS
    'Raises serialization_failure (40001) "FN: WHAT, after this ... transaction''s snapshot: '
    'retry the whole transaction"';

-- The first problem of an enqueue_many run_at string (NULL: none): not a
-- timestamptz, not finite, or (rounded up to the millisecond) outside what a
-- run message carries. Called for the strings of years 0001 and 9999 only
-- (an offset or the rounding moves only those out of years 1-9999) and by
-- the slow path.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_run_at_problem(s text, t0 timestamptz)
--     What is wrong with an enqueue_many run_at string.
-- Parameters:
--     s  - the string
--     t0 - the call's clock
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_run_at_problem(s text, t0 timestamptz)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t timestamptz;
BEGIN
    BEGIN
        t := s::timestamptz;
    EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR
                   invalid_time_zone_displacement_value OR data_exception THEN
        RETURN format('run_at %s is not a valid instant (%s)', warren.wp_enqueue_show(s),
                      left(SQLERRM, 120));
    END;
    RETURN 'run_at ' || warren.wp_instant_problem(warren.wp_enqueue_at(t, t0));
END
$$;
COMMENT ON FUNCTION warren.wp_enqueue_run_at_problem(text, timestamptz) IS
    'What is wrong with an enqueue_many run_at string (NULL: nothing): a valid instant within '
    'years 1-9999 UTC after rounding';

-- ----------------------------------------------------------------------------
-- Function: warren.enqueue(job text, key text, run_at timestamptz DEFAULT NULL, payload jsonb
--           DEFAULT NULL, tenant text DEFAULT NULL)
--     Enqueues a one-shot run JOB@KEY in the caller's transaction (docs/api-jobs.md).
-- Parameters:
--     job     - a config job, API job or template
--     key     - the caller's idempotency key
--     run_at  - when (NULL: now; rounded up to the millisecond)
--     payload - a JSON object (NULL: the job's)
--     tenant  - the run's tenant (NULL: the job's)
-- Returns: one row (run_key, created, state, scheduled_at); created false: a run holds the key
-- Locks:   the job's row FOR SHARE; the run key (a concurrent insert of it is waited for)
-- Writes:  warren.runs (a planned run); NOTIFY warren_jobs
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
    priv boolean := warren.wp_privileged();
    rc boolean := current_setting('transaction_isolation') = 'read committed';
    jr warren.jobs;
    rr warren.runs;
    rk text;
    at timestamptz;
    p text;
BEGIN
    IF NOT priv THEN
        PERFORM warren.wp_producer_require('warren.enqueue');
    END IF;
    -- The job's row, locked (see "Locks"): its removal either waits for this
    -- transaction or is seen here.
    IF rc THEN
        SELECT * INTO jr FROM warren.jobs jb WHERE jb.name = j FOR SHARE;
    ELSE
        BEGIN
            SELECT * INTO jr FROM warren.jobs jb WHERE jb.name = j FOR SHARE;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM warren.wp_enqueue_retry('warren.enqueue', format(
                'job %s was changed (by the planner, `warren sync`, a pause or a delete)',
                warren.wp_enqueue_show(j)));
        END;
    END IF;
    IF NOT priv AND (jr.name IS NULL OR NOT warren.wp_producer_job_ok(jr)) THEN
        RAISE EXCEPTION '%', warren.wp_producer_refusal('warren.enqueue', format(
            'may not enqueue on job %s: no such job, or not one it is granted (a config job needs '
            '--job, a template --template; an API job must be its own)',
            warren.wp_enqueue_show(j))) USING ERRCODE = '42501';
    END IF;
    at := CASE WHEN run_at IS NULL OR isfinite(run_at)
               THEN warren.wp_enqueue_at(run_at, clock_timestamp()) END;
    p := coalesce(warren.wp_enqueue_job_problem(j, jr.name IS NOT NULL, jr.removed),
                  warren.wp_enqueue_key_problem(j, k),
                  CASE WHEN run_at IS NOT NULL AND NOT isfinite(run_at) THEN
                      'run_at must be a finite instant (or NULL: now), not ' || run_at::text END,
                  'run_at ' || warren.wp_instant_problem(at),
                  warren.wp_enqueue_payload_problem(pl),
                  warren.wp_enqueue_tenant_problem(tenant));
    IF p IS NOT NULL THEN
        PERFORM warren.wp_enqueue_fail('warren.enqueue', p);
    END IF;
    IF NOT priv AND NOT warren.wp_producer_tenant_ok(coalesce(tenant, jr.tenant)) THEN
        RAISE EXCEPTION '%', warren.wp_producer_refusal('warren.enqueue', format(
            'may not enqueue runs of tenant %s on job %s (give a tenant within its prefix)',
            warren.wp_enqueue_show(coalesce(tenant, jr.tenant)), warren.wp_enqueue_show(j)))
            USING ERRCODE = '42501';
    END IF;
    rk := j || '@' || k;
    IF rc THEN
        INSERT INTO warren.runs AS rr (run_key, job, scheduled_at, due_at, state, origin, payload,
                                       tenant)
        VALUES (rk, j, at, at, 'planned', 'enqueue', pl, tenant)
        ON CONFLICT ON CONSTRAINT runs_run_key DO NOTHING;
    ELSE
        BEGIN
            INSERT INTO warren.runs AS rr (run_key, job, scheduled_at, due_at, state, origin,
                                           payload, tenant)
            VALUES (rk, j, at, at, 'planned', 'enqueue', pl, tenant)
            ON CONFLICT ON CONSTRAINT runs_run_key DO NOTHING;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM warren.wp_enqueue_retry('warren.enqueue', format(
                'run key %s was enqueued by a transaction that committed',
                warren.wp_enqueue_show(rk)));
        END;
    END IF;
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
    -- concurrent transaction committed while this INSERT waited for it),
    -- unless that run is outside the caller's tenants: then a refusal, never
    -- its state.
    SELECT * INTO rr FROM warren.runs x WHERE x.run_key = rk;
    IF rr.run_key IS NULL THEN
        RETURN; -- deleted meanwhile (retention)
    END IF;
    IF NOT priv AND NOT warren.wp_producer_tenant_ok(rr.tenant) THEN
        RAISE EXCEPTION '%', warren.wp_producer_refusal('warren.enqueue', format(
            'may not enqueue key %s on job %s: a run outside its tenants holds it (choose '
            'another key)', warren.wp_enqueue_show(k), warren.wp_enqueue_show(j)))
            USING ERRCODE = '42501';
    END IF;
    run_key := rr.run_key;
    created := false;
    state := rr.state;
    scheduled_at := rr.scheduled_at;
    RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION warren.enqueue(text, text, timestamptz, jsonb, text) IS
    'Enqueues a one-shot run of job with the caller''s idempotency key (run key JOB@KEY) at '
    'run_at (NULL: now; milliseconds, rounded up), with an optional payload override and tenant, '
    'in the caller''s transaction. One row: the run key, created (false: a run already holds '
    'the key; state and scheduled_at are that run''s). Errors 22023 name the field and the fix; '
    '42501 outside the login''s producer grants; 40001 under REPEATABLE READ/SERIALIZABLE when '
    'the snapshot cannot answer (retry the transaction)';

-- ------------------------------------------------------------ enqueue_many

-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_max_batch()
--     The most runs one enqueue_many call takes (100000).
-- Parameters: none
-- Returns: int
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_max_batch()
RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 100000 $$;
COMMENT ON FUNCTION warren.wp_enqueue_max_batch() IS
    'Most runs one warren.enqueue_many call takes';

-- The first element of runs whose run_at string is not a timestamptz (the
-- slow path after a cast error in the set-based statement), as a problem.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_enqueue_bad_run_at(runs jsonb)
--     The first element of an enqueue_many array whose run_at is not a finite timestamptz.
-- Parameters:
--     runs - the array
-- Returns: text "runs[i].run_at ..."; NULL: none
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_enqueue_bad_run_at(runs jsonb)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT format('runs[%s].%s', o.ord - 1,
                  warren.wp_enqueue_run_at_problem(o.v->>'run_at', clock_timestamp()))
      FROM jsonb_array_elements(runs) WITH ORDINALITY o(v, ord)
     WHERE jsonb_typeof(o.v->'run_at') = 'string'
       AND warren.wp_enqueue_run_at_problem(o.v->>'run_at', clock_timestamp()) IS NOT NULL
     ORDER BY o.ord LIMIT 1
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
-- ----------------------------------------------------------------------------
-- Function: warren.enqueue_many(runs jsonb)
--     warren.enqueue for a JSON array, set-based: every element checked first, then one INSERT.
-- Parameters:
--     runs - [{job, key, run_at, payload, tenant}], at most wp_enqueue_max_batch()
-- Returns: one row (idx, run_key, created, state, scheduled_at) per element, in array order
-- Locks:   the distinct jobs' rows FOR SHARE, in name order; the run keys in run key order (C)
-- Writes:  warren.runs (planned runs); NOTIFY warren_jobs
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
    priv boolean := warren.wp_privileged();
    rc boolean := current_setting('transaction_isolation') = 'read committed';
    digits boolean;
    okjobs text[];    -- not privileged: the distinct jobs of runs in its scope
    oktenants text[]; -- and the distinct effective tenants (not NULL) within it
    nullok boolean;   -- and whether a NULL tenant is
    pj text[];        -- the array's distinct (job, tenant) pairs, one pass
    pt text[];
    jobsok boolean;   -- not privileged: every job of the array is in its scope
BEGIN
    IF NOT priv THEN
        PERFORM warren.wp_producer_require('warren.enqueue_many');
    END IF;
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
    digits := a::text ~ '\d{19}'; -- see wp_enqueue_payload_problem(jsonb, boolean)
    -- The distinct (job, tenant) pairs of the array, in one pass over it:
    -- the job locks and a producer's scope below read these, not the array.
    SELECT array_agg(d.j), array_agg(d.t) INTO pj, pt
      FROM (SELECT DISTINCT o.v->>'job' AS j, o.v->>'tenant' AS t
              FROM jsonb_array_elements(a) o(v)
             WHERE jsonb_typeof(o.v) = 'object') d;
    -- The distinct jobs' rows, locked in name order (see "Locks"), before
    -- the pass below reads them (a new statement: it sees what a removal
    -- this lock waited for committed).
    IF rc THEN
        PERFORM 1 FROM warren.jobs jb
         WHERE jb.name = ANY (pj)
         ORDER BY jb.name FOR SHARE;
    ELSE
        BEGIN
            PERFORM 1 FROM warren.jobs jb
             WHERE jb.name = ANY (pj)
             ORDER BY jb.name FOR SHARE;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM warren.wp_enqueue_retry('warren.enqueue_many',
                'a job of runs was changed (by the planner, `warren sync`, a pause or a delete)');
        END;
    END IF;
    -- The scope, once per distinct job and tenant (not per element: each is a
    -- plpgsql call with its own lookups), joined below.
    IF NOT priv THEN
        SELECT coalesce(array_agg(jb.name), '{}') INTO okjobs
          FROM warren.jobs jb
         WHERE jb.name = ANY (pj) AND warren.wp_producer_job_ok(jb);
        -- The common case, every job in scope, needs no test per element
        -- (an array variable in a per-row test is read anew for each row).
        jobsok := NOT EXISTS (SELECT 1 FROM unnest(pj) j WHERE NOT (j = ANY (okjobs)));
        -- A NULL tenant is within scope only without a tenant prefix, and
        -- then every tenant is: no tenant to look at (nullok).
        nullok := warren.wp_producer_tenant_ok(NULL);
        IF NOT nullok THEN
            SELECT coalesce(array_agg(t.t), '{}') INTO oktenants
              FROM (SELECT DISTINCT coalesce(d.t, jb.tenant) AS t
                      FROM unnest(pj, pt) d(j, t)
                      LEFT JOIN warren.jobs jb ON jb.name = d.j) t
             WHERE t.t IS NOT NULL AND warren.wp_producer_tenant_ok(t.t);
        END IF;
    END IF;
    -- Shapes and types, then the values, element by element in one pass:
    -- the first problem in array order. A scope refusal (non-privileged
    -- logins only) is marked '!' and raised as 42501.
    SELECT CASE WHEN left(x.problem, 1) = '!'
                THEN format('!runs[%s]: %s', x.i, substr(x.problem, 2))
                ELSE format('runs[%s]%s', x.i, x.problem) END INTO p
      FROM (SELECT o.ord - 1 AS i, CASE
              WHEN jsonb_typeof(o.v) <> 'object' THEN
                  format(' is a JSON %s; each element is an object {"job", "key", "run_at", '
                         '"payload", "tenant"}', jsonb_typeof(o.v))
              WHEN NOT (o.v ?& ARRAY['job', 'key']) THEN
                  format(': "%s" is missing (every element needs "job" and "key")',
                         CASE WHEN o.v ? 'job' THEN 'key' ELSE 'job' END)
              WHEN o.v - ARRAY['job', 'key', 'run_at', 'payload', 'tenant'] <> '{}' THEN
                  format(' has the unknown field %s (allowed: job, key, run_at, payload, '
                         'tenant)', (SELECT warren.wp_enqueue_show(min(f)) FROM jsonb_object_keys(o.v) f
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
                  format('.run_at %s is not an RFC 3339 instant with a UTC offset (e.g. '
                         '"2026-12-01T09:00:00.250Z" or "2026-12-01T10:00:00+01:00")',
                         warren.wp_enqueue_show(o.v->>'run_at'))
              WHEN coalesce(jsonb_typeof(o.v->'tenant'), 'null') NOT IN ('string', 'null') THEN
                  format('.tenant must be a string or null, not a JSON %s',
                         jsonb_typeof(o.v->'tenant'))
              WHEN coalesce(jsonb_typeof(o.v->'payload'), 'null') NOT IN ('object', 'null') THEN
                  format('.payload must be a JSON object or null (the job''s payload), not a '
                         'JSON %s', jsonb_typeof(o.v->'payload'))
              WHEN NOT priv AND NOT jobsok AND NOT coalesce(jb.name = ANY (okjobs), false) THEN
                  format('!may not enqueue on job %s: no such job, or not one it is granted (a '
                         'config job needs --job, a template --template; an API job must be '
                         'its own)', warren.wp_enqueue_show(o.v->>'job'))
              ELSE coalesce(': ' || coalesce(
                  warren.wp_enqueue_job_problem(o.v->>'job', jb.name IS NOT NULL, jb.removed),
                  warren.wp_enqueue_key_problem(o.v->>'job', o.v->>'key'),
                  CASE WHEN left(o.v->>'run_at', 4) IN ('0001', '9999') THEN
                      warren.wp_enqueue_run_at_problem(o.v->>'run_at', t0) END,
                  warren.wp_enqueue_payload_problem(nullif(o.v->'payload', 'null'), digits),
                  warren.wp_enqueue_tenant_problem(o.v->>'tenant')),
                  CASE WHEN NOT priv AND NOT nullok AND NOT CASE
                          WHEN coalesce(o.v->>'tenant', jb.tenant) IS NULL THEN nullok
                          ELSE coalesce(o.v->>'tenant', jb.tenant) IN (SELECT unnest(oktenants))
                          END THEN
                      format('!may not enqueue runs of tenant %s on job %s (give a tenant within '
                             'its prefix)', warren.wp_enqueue_show(coalesce(o.v->>'tenant',
                                                                            jb.tenant)),
                             warren.wp_enqueue_show(o.v->>'job')) END)
              END AS problem
              FROM jsonb_array_elements(a) WITH ORDINALITY o(v, ord)
              LEFT JOIN warren.jobs jb
                ON jsonb_typeof(o.v) = 'object' AND jb.name = o.v->>'job'
) x
     WHERE x.problem IS NOT NULL
     ORDER BY x.i LIMIT 1;
    IF left(p, 1) = '!' THEN
        RAISE EXCEPTION '%', warren.wp_producer_refusal('warren.enqueue_many', substr(p, 2))
            USING ERRCODE = '42501';
    ELSIF p IS NOT NULL THEN
        PERFORM warren.wp_enqueue_fail('warren.enqueue_many', p);
    END IF;
    -- The strings the pattern let through may still not be dates (Feb 30):
    -- the cast fails the statement before anything is written, and the slow
    -- path finds the element. Rows go in in the canonical order (run key,
    -- then array index: see "Runs are inserted in one canonical order"), so
    -- of two elements with one key the first creates the run and the second
    -- meets it as a conflict (DO NOTHING sees rows of its own statement).
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
              FROM e ORDER BY (e.job || '@' || e.key) COLLATE "C", e.i
            ON CONFLICT ON CONSTRAINT runs_run_key DO NOTHING
            RETURNING rr.run_key
        )
        SELECT array_agg(ins.run_key) INTO made FROM ins;
    EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR
                   invalid_time_zone_displacement_value THEN
        p := warren.wp_enqueue_bad_run_at(a);
        PERFORM warren.wp_enqueue_fail('warren.enqueue_many', coalesce(p, left(SQLERRM, 200)));
    WHEN serialization_failure THEN
        PERFORM warren.wp_enqueue_retry('warren.enqueue_many',
            'a key of runs was enqueued by a transaction that committed');
    END;
    IF made IS NOT NULL THEN
        PERFORM pg_notify('warren_jobs', 'enqueue'); -- at commit; nothing on rollback
    END IF;
    -- A key held by a run outside the caller's tenants: a refusal naming the
    -- first such element, never that run's state.
    IF NOT priv AND coalesce(cardinality(made), 0) < n THEN
        SELECT format('runs[%s]: may not enqueue key %s on job %s: a run outside its tenants '
                      'holds it (choose another key)', x.ord - 1, warren.wp_enqueue_show(x.key),
                      warren.wp_enqueue_show(x.job)) INTO p
          FROM ROWS FROM (jsonb_to_recordset(a) AS (job text, key text))
               WITH ORDINALITY AS x(job, key, ord)
          JOIN warren.runs rr ON rr.run_key = x.job || '@' || x.key
          LEFT JOIN unnest(made) m(k) ON m.k = rr.run_key
          LEFT JOIN unnest(oktenants) okt(t) ON okt.t = rr.tenant
         WHERE m.k IS NULL AND okt.t IS NULL
           AND NOT (rr.tenant IS NULL AND nullok) AND NOT warren.wp_producer_tenant_ok(rr.tenant)
         ORDER BY x.ord LIMIT 1;
        IF p IS NOT NULL THEN
            RAISE EXCEPTION '%', warren.wp_producer_refusal('warren.enqueue_many', p)
                USING ERRCODE = '42501';
        END IF;
    END IF;
    -- A new statement: it sees the rows just inserted, and those a concurrent
    -- transaction committed while the INSERT waited for them.
    -- Created rows are known (planned, at their instant); the others are
    -- looked up. Every element created (the common case): no lookup at all.
    IF cardinality(made) = n THEN
        -- In array order without a sort: a function scan returns its rows in
        -- the function's order, which is the array's (about 1 % of a
        -- 20,000-run call, docs/benchmarks.md 2026-12-06).
        RETURN QUERY
        SELECT (x.ord - 1)::int, x.job || '@' || x.key, true, 'planned'::text,
               warren.wp_enqueue_at(x.run_at::timestamptz, t0)
          FROM ROWS FROM (jsonb_to_recordset(a) AS (job text, key text, run_at text))
               WITH ORDINALITY AS x(job, key, run_at, ord);
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
    'INSERT in run key order (no two calls deadlock). One row per element in array order: idx '
    '(0-based), run_key, created, the holding run''s state and scheduled_at. 42501 names the '
    'first element outside the login''s producer grants; 40001 as warren.enqueue';
