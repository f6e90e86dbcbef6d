-- api_jobs.sql: API jobs from application code (docs/api-jobs.md): create,
-- change, pause, resume and delete jobs made from a config template, inside
-- the caller's transaction, for the warren_producer role. The one current
-- definition; `warren migrate` re-applies it.
--
-- What these calls check themselves (exactly, and cheaply): the JSON shape
-- and field names, the name and tenant grammar, that the template exists and
-- is a template, the zone is one PostgreSQL knows (pg_timezone_names), the
-- cron expression's field count and characters (and macros), `every` and
-- `jitter` as durations in the config's syntax, `at` as an RFC 3339 instant
-- with whole seconds, payload a JSON object of at most 64 KiB. The planner's
-- C engine stays the one judge of what a cron expression means: an
-- expression that passes here but that it cannot parse (a field out of
-- range, a step of 0, ...) marks the job broken (jobs.broken_reason,
-- docs/delivery.md "Broken jobs") and nothing of it is planned until fixed.
-- Errors: SQLSTATE 22023, a message naming the function, the element, the
-- field and the fix; nothing is written (the call raises).

-- ------------------------------------------------------------ helpers

-- An API job's planner partition, from the partition count the last
-- `warren sync` recorded (warren.sync_state): a deterministic function of the
-- name, so every planner owns the job exactly as it owns a config job.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_job_partition(name text, partitions int)
--     The planner partition of an API job (also src/store_sync.c).
-- Parameters:
--     name       - the job's name
--     partitions - the partition count (warren.sync_state)
-- Returns: mod(hashtext(name) + 2^31, partitions)
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_job_partition(name text, partitions int)
RETURNS int LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT mod(hashtext(name)::bigint + 2147483648, greatest(partitions, 1))::int
$$;
COMMENT ON FUNCTION warren.wp_job_partition(text, int) IS
    'The partition of an API job: mod(hashtext(name) + 2^31, partitions)';

-- A duration in the config's syntax ("90s", "1h30m", "0"; units d h m s ms,
-- largest first, each at most once) in milliseconds; NULL when it is not one.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_duration_ms(t text)
--     A duration in the config's syntax ("90s", "1h30m") in milliseconds.
-- Parameters:
--     t - the text
-- Returns: bigint; NULL when t is not a duration
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_duration_ms(t text)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN t = '0' THEN 0::bigint
        WHEN t <> '' AND t ~ '^([0-9]{1,6}d)?([0-9]{1,8}h)?([0-9]{1,9}m)?([0-9]{1,11}s)?([0-9]{1,14}ms)?$'
        THEN coalesce(substring(t FROM '([0-9]+)d')::bigint, 0) * 86400000
           + coalesce(substring(t FROM '([0-9]+)h')::bigint, 0) * 3600000
           + coalesce(substring(t FROM '([0-9]+)m(?!s)')::bigint, 0) * 60000
           + coalesce(substring(t FROM '([0-9]+)s')::bigint, 0) * 1000
           + coalesce(substring(t FROM '([0-9]+)ms')::bigint, 0)
    END
$$;
COMMENT ON FUNCTION warren.wp_duration_ms(text) IS
    'A duration ("90s", "1h30m") in milliseconds, NULL if it is not one (config syntax)';

-- Is zone one PostgreSQL knows? The copy in warren.timezones first (an
-- index probe); a miss is looked up in pg_timezone_names itself (a scan of
-- the zone directory: tens of milliseconds). upsert checks an array's zones
-- with wp_zones_unknown instead, whatever their number.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_zone_known(zone text)
--     Is zone one PostgreSQL knows (warren.timezones, else pg_timezone_names)?
-- Parameters:
--     zone - an IANA zone name
-- Returns: boolean
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_zone_known(zone text)
RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- plpgsql, not an inlined SQL expression: the planner would otherwise
    -- hash all of pg_timezone_names for the fallback on every call
    IF EXISTS (SELECT 1 FROM warren.timezones z WHERE z.name = zone) THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = zone);
END
$$;
COMMENT ON FUNCTION warren.wp_zone_known(text) IS
    'true if the zone is in pg_timezone_names (through the warren.timezones copy)';

-- The zones of an array that PostgreSQL does not know (empty: all known):
-- the ones missing from the warren.timezones copy (one index probe each),
-- then those against pg_timezone_names in one pass, so that the cost does
-- not grow with the number of unknown zones (each pg_timezone_names lookup
-- reads the zone directory).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_zones_unknown(zones text[])
--     The zones of an array PostgreSQL does not know (one scan of pg_timezone_names at most).
-- Parameters:
--     zones - zone names (NULLs ignored)
-- Returns: text[]; empty when all are known
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_zones_unknown(zones text[])
RETURNS text[] LANGUAGE plpgsql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    missing text[];
BEGIN
    SELECT array_agg(DISTINCT z.tz) INTO missing
      FROM unnest(zones) AS z(tz)
     WHERE z.tz IS NOT NULL AND NOT EXISTS (SELECT 1 FROM warren.timezones t WHERE t.name = z.tz);
    IF missing IS NULL THEN
        RETURN '{}';
    END IF;
    RETURN coalesce((SELECT array_agg(m.tz) FROM (SELECT unnest(missing) EXCEPT
                                                  SELECT n.name FROM pg_catalog.pg_timezone_names n)
                                                 AS m(tz)), '{}');
END
$$;
COMMENT ON FUNCTION warren.wp_zones_unknown(text[]) IS
    'The zones of an array not in pg_timezone_names (through the warren.timezones copy; one '
    'scan of pg_timezone_names at most)';

-- A bad value as an error message shows it: JSON-quoted (control
-- characters escaped), at most its first 80 characters, then how long it is.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_echo(t text)
--     A bad value as the Job API's errors show it: JSON-quoted, at most 80 characters.
-- Parameters:
--     t - the value
-- Returns: text ('null' for NULL)
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_echo(t text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t IS NULL THEN 'null'
                WHEN length(t) <= 80 THEN to_json(translate(t, U&'\007F', '?'))::text
                ELSE to_json(translate(left(t, 80), U&'\007F', '?'))::text
                     || format('... (%s characters)', length(t)) END
$$;
COMMENT ON FUNCTION warren.wp_echo(text) IS
    'A value as errors show it: JSON-quoted, control characters escaped, at most 80 characters';

-- The most characters each text field of an API job takes (the C parser's
-- 256 for cron, src/cron.c; a duration, an RFC 3339 instant and a zone are
-- far shorter than their bound).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_api_job_max_len(field text)
--     The most characters of an API job's text field.
-- Parameters:
--     field - cron, every, jitter, at, timezone; anything else: 200
-- Returns: int
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_api_job_max_len(field text)
RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE field WHEN 'cron' THEN 256 WHEN 'every' THEN 32 WHEN 'jitter' THEN 32
                      WHEN 'at' THEN 40 WHEN 'timezone' THEN 100 ELSE 200 END
$$;
COMMENT ON FUNCTION warren.wp_api_job_max_len(text) IS
    'The most characters of an API job text field (cron 256, every/jitter 32, at 40, timezone '
    '100, name/template/tenant 200)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_upsert_max_batch()
--     The most jobs one warren.upsert_jobs call takes (10000).
-- Parameters: none
-- Returns: int
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_upsert_max_batch()
RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 10000 $$;
COMMENT ON FUNCTION warren.wp_upsert_max_batch() IS
    'Most jobs one warren.upsert_jobs call takes';

-- What is wrong with a cron expression as far as SQL can tell exactly (NULL:
-- nothing): at most 256 characters (the C parser's bound), no control
-- characters, a macro, else 5 or 6 fields of the characters cron uses,
-- separated by spaces.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_cron_error(expr text)
--     What is wrong with a cron expression's shape (the planner judges the rest).
-- Parameters:
--     expr - the expression
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_cron_error(expr text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN length(expr) > warren.wp_api_job_max_len('cron') THEN
            format('%s is longer than %s characters (a cron expression is 5 or 6 short fields)',
                   warren.wp_echo(expr), warren.wp_api_job_max_len('cron'))
        WHEN expr ~ '[\x01-\x1f\x7f]' THEN
            format('%s contains a control character: separate the fields with spaces',
                   warren.wp_echo(expr))
        WHEN btrim(expr) = '' THEN 'is empty (e.g. "0 9 * * *")'
        WHEN btrim(expr) LIKE '@%' THEN
            CASE WHEN lower(btrim(expr)) IN ('@yearly', '@annually', '@monthly', '@weekly',
                                             '@daily', '@midnight', '@hourly') THEN NULL
                 ELSE format('%s: unknown macro (known: @yearly @annually @monthly @weekly '
                             '@daily @midnight @hourly)', warren.wp_echo(expr)) END
        WHEN cardinality(regexp_split_to_array(btrim(expr), ' +')) NOT IN (5, 6) THEN
            format('%s has %s fields: expected 5 (minute hour day-of-month month day-of-week) '
                   'or 6 (a leading seconds field)', warren.wp_echo(expr),
                   cardinality(regexp_split_to_array(btrim(expr), ' +')))
        WHEN btrim(expr) !~ '^[0-9A-Za-z*?,/#() -]+$' THEN
            format('%s contains %s, which no cron field uses (digits, names, * ? , - / # L W H)',
                   warren.wp_echo(expr),
                   warren.wp_echo(substring(btrim(expr) FROM '[^0-9A-Za-z*?,/#() -]')))
    END
$$;
COMMENT ON FUNCTION warren.wp_cron_error(text) IS
    'What is wrong with a cron expression''s shape (NULL: nothing; the planner judges the rest)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_at_error(t text)
--     What is wrong with an `at` instant (RFC 3339, whole seconds, years 1-9999).
-- Parameters:
--     t - the text
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_at_error(t text)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    why text;
BEGIN
    IF length(t) > warren.wp_api_job_max_len('at') THEN
        RETURN format('%s is longer than %s characters: it is not an RFC 3339 instant (e.g. '
                      '"2026-12-24T18:00:00Z")', warren.wp_echo(t), warren.wp_api_job_max_len('at'));
    END IF;
    IF t ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+(Z|[+-][0-9]{2}:[0-9]{2})$' THEN
        RETURN format('%s must be whole seconds (run keys are JOB@TIME to the second)',
                      warren.wp_echo(t));
    END IF;
    IF t !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2})$' THEN
        RETURN format('%s is not an RFC 3339 instant with a UTC offset (e.g. '
                      '"2026-12-24T18:00:00Z" or "2026-12-24T18:00:00+01:00")', warren.wp_echo(t));
    END IF;
    -- what a run message can carry (years 1-9999 UTC: sql/functions/validate.sql)
    why := warren.wp_instant_problem(t::timestamptz);
    IF why IS NOT NULL THEN
        RETURN format('%s %s', warren.wp_echo(t), regexp_replace(why, '^.* is outside', 'is outside'));
    END IF;
    RETURN NULL;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR invalid_time_zone_displacement_value THEN
    RETURN format('%s is not a real instant (%s)', warren.wp_echo(t), left(SQLERRM, 120));
END
$$;
COMMENT ON FUNCTION warren.wp_at_error(text) IS
    'What is wrong with an `at` instant (NULL: a whole-second RFC 3339 instant)';

-- Everything wrong with one element that needs no table (NULL: nothing); the
-- first problem, as "field \"F\": what; the fix". Template, zone and name
-- clashes are checked set-based by the caller.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_api_job_error(e jsonb)
--     The first problem of one upsert element that needs no table.
-- Parameters:
--     e - the element
-- Returns: text "field ...: what; the fix"; NULL: none
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_api_job_error(e jsonb)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k text;
    ms bigint;
    why text;
BEGIN
    IF jsonb_typeof(e) IS DISTINCT FROM 'object' THEN
        RETURN format('is %s, not a JSON object {"name": ..., "template": ..., "cron": ...}',
                      coalesce(jsonb_typeof(e), 'SQL NULL'));
    END IF;
    FOR k IN SELECT jsonb_object_keys(e) LOOP
        IF k NOT IN ('name', 'template', 'cron', 'timezone', 'every', 'at', 'payload', 'jitter',
                     'tenant', 'paused') THEN
            RETURN format('unknown field %s (the fields: name, template, cron, timezone, every, '
                          'at, payload, jitter, tenant, paused)', warren.wp_echo(k));
        END IF;
        IF k IN ('name', 'template', 'cron', 'every', 'at', 'timezone', 'jitter', 'tenant')
           AND jsonb_typeof(e -> k) <> 'string' THEN
            RETURN format('field %s must be a string', to_json(k));
        END IF;
        -- bounded and free of control characters (line breaks would forge
        -- lines in the CLI's output and in logs), before any other check
        -- echoes a prefix of it
        IF k NOT IN ('payload', 'paused') THEN
            IF length(e ->> k) > warren.wp_api_job_max_len(k) THEN
                RETURN format('field %s: %s is longer than %s characters', to_json(k),
                              warren.wp_echo(e ->> k), warren.wp_api_job_max_len(k));
            ELSIF (e ->> k) ~ '[\x01-\x1f\x7f]' THEN
                RETURN format('field %s: %s contains a control character (a line break, a tab, '
                              '...): remove it', to_json(k), warren.wp_echo(e ->> k));
            END IF;
        END IF;
    END LOOP;
    IF NOT e ? 'name' THEN
        RETURN 'field "name" is missing: give the job''s name';
    END IF;
    IF NOT (e ->> 'name') ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$' THEN
        RETURN format('field "name": %s cannot be a job name (allowed: letters, digits, ''.'', '
                      '''_'' and ''-'', starting with a letter or digit, at most 200 characters)',
                      warren.wp_echo(e ->> 'name'));
    END IF;
    IF NOT e ? 'template' THEN
        RETURN 'field "template" is missing: name a config job with template = true';
    END IF;
    IF NOT (e ->> 'template') ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$' THEN
        RETURN format('field "template": %s cannot be a job name: name a config job with '
                      'template = true', warren.wp_echo(e ->> 'template'));
    END IF;
    IF (e ? 'cron')::int + (e ? 'every')::int + (e ? 'at')::int = 0 THEN
        RETURN 'needs a schedule: one of "cron" (with "timezone"), "every" or "at"';
    ELSIF (e ? 'cron')::int + (e ? 'every')::int + (e ? 'at')::int > 1 THEN
        RETURN 'has more than one schedule: keep exactly one of "cron", "every" or "at"';
    END IF;
    IF e ? 'cron' THEN
        why := warren.wp_cron_error(e ->> 'cron');
        IF why IS NOT NULL THEN
            RETURN 'field "cron": ' || why;
        END IF;
    ELSIF e ? 'every' THEN
        ms := warren.wp_duration_ms(e ->> 'every');
        IF ms IS NULL THEN
            RETURN format('field "every": %s is not a duration (e.g. "90s", "15m", "1h30m"; '
                          'units d h m s, largest first)', warren.wp_echo(e ->> 'every'));
        ELSIF ms < 1000 OR ms % 1000 <> 0 OR ms > 36500::bigint * 86400000 THEN
            RETURN format('field "every": %s must be whole seconds, at least 1s and at most '
                          '36500d', warren.wp_echo(e ->> 'every'));
        END IF;
    ELSE
        why := warren.wp_at_error(e ->> 'at');
        IF why IS NOT NULL THEN
            RETURN 'field "at": ' || why;
        END IF;
    END IF;
    IF e ? 'timezone' AND NOT (e ->> 'timezone') ~ '^[A-Za-z][A-Za-z0-9_+/-]{0,99}$' THEN
        RETURN format('field "timezone": %s is not an IANA zone name (e.g. "Europe/Berlin")',
                      warren.wp_echo(e ->> 'timezone'));
    END IF;
    IF e ? 'jitter' THEN
        ms := warren.wp_duration_ms(e ->> 'jitter');
        IF ms IS NULL THEN
            RETURN format('field "jitter": %s is not a duration (e.g. "30s", "5m")',
                          warren.wp_echo(e ->> 'jitter'));
        ELSIF ms % 1000 <> 0 OR ms > 36500::bigint * 86400000 THEN
            RETURN format('field "jitter": %s must be whole seconds, at most 36500d',
                          warren.wp_echo(e ->> 'jitter'));
        END IF;
    END IF;
    IF e ? 'payload' THEN
        IF jsonb_typeof(e -> 'payload') <> 'object' THEN
            RETURN format('field "payload" is %s: it must be a JSON object {...} (it is the '
                          'message''s "payload")', jsonb_typeof(e -> 'payload'));
        ELSIF octet_length((e -> 'payload')::text) > 65536 THEN
            RETURN format('field "payload" is %s bytes as JSON (limit 65536)',
                          octet_length((e -> 'payload')::text));
        END IF;
        -- what a run message can carry (sql/functions/validate.sql)
        why := warren.wp_payload_problem(e -> 'payload');
        IF why IS NOT NULL THEN
            RETURN 'field "payload" ' || why;
        END IF;
    END IF;
    IF e ? 'tenant' AND NOT (e ->> 'tenant') ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$' THEN
        RETURN format('field "tenant": %s cannot be a tenant (allowed: letters, digits, ''.'', '
                      '''_'', '':'', ''@'' and ''-'', starting with a letter or digit, at most '
                      '200 characters)', warren.wp_echo(e ->> 'tenant'));
    END IF;
    IF e ? 'paused' AND jsonb_typeof(e -> 'paused') <> 'boolean' THEN
        RETURN 'field "paused" must be true or false';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION warren.wp_api_job_error(jsonb) IS
    'The first problem of one upsert element that needs no table (NULL: none)';

-- The common case of wp_api_job_error as one inlined expression: true when
-- the element is certainly valid (false: ask wp_api_job_error why, which
-- may still find it valid, e.g. "every": "2000ms"). Keeps a bulk upsert from
-- calling a plpgsql function per element.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_api_job_ok(e jsonb)
--     The common case of wp_api_job_error as one inlined expression.
-- Parameters:
--     e - the element
-- Returns: true: certainly valid; false: ask wp_api_job_error
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_api_job_ok(e jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- Negated character classes and plain string functions only: PostgreSQL
    -- matches a bounded repetition such as {0,199} tens of times slower
    -- (measured: 54 us against 3 us a name).
    SELECT jsonb_typeof(e) = 'object'
       AND (e - ARRAY['name', 'template', 'cron', 'timezone', 'every', 'at', 'payload', 'jitter',
                      'tenant', 'paused']) = '{}'::jsonb
       AND jsonb_typeof(e -> 'name') = 'string'
       AND (e ->> 'name') !~ '[^A-Za-z0-9._-]' AND (e ->> 'name') ~ '^[A-Za-z0-9]'
       AND length(e ->> 'name') <= 200
       AND jsonb_typeof(e -> 'template') = 'string'
       AND (e ->> 'template') !~ '[^A-Za-z0-9._-]' AND (e ->> 'template') ~ '^[A-Za-z0-9]'
       AND length(e ->> 'template') <= 200
       AND (e ? 'cron')::int + (e ? 'every')::int + (e ? 'at')::int = 1
       AND (NOT e ? 'cron' OR (jsonb_typeof(e -> 'cron') = 'string'
            AND (e ->> 'cron') !~ '[^0-9A-Za-z*?,/#() -]' AND length(e ->> 'cron') <= 256
            AND strpos(e ->> 'cron', '  ') = 0 AND left(e ->> 'cron', 1) <> ' '
            AND right(e ->> 'cron', 1) <> ' '
            AND cardinality(string_to_array(e ->> 'cron', ' ')) IN (5, 6)))
       AND (NOT e ? 'every' OR (jsonb_typeof(e -> 'every') = 'string'
            AND (e ->> 'every') ~ '^([0-9]{1,4}d)?([0-9]{1,5}h)?([0-9]{1,7}m)?([0-9]{1,9}s)?$'
            AND (e ->> 'every') ~ '[1-9]'))
       AND NOT e ? 'at'
       AND (NOT e ? 'timezone' OR (jsonb_typeof(e -> 'timezone') = 'string'
            AND (e ->> 'timezone') !~ '[^0-9A-Za-z_+/-]' AND (e ->> 'timezone') ~ '^[A-Za-z]'
            AND length(e ->> 'timezone') <= 100))
       AND (NOT e ? 'jitter' OR (jsonb_typeof(e -> 'jitter') = 'string'
            AND (e ->> 'jitter') ~ '^(0|([0-9]{1,4}d)?([0-9]{1,5}h)?([0-9]{1,7}m)?([0-9]{1,9}s)?)$'
            AND (e ->> 'jitter') <> ''))
       AND (NOT e ? 'payload' OR (jsonb_typeof(e -> 'payload') = 'object'
            AND octet_length((e -> 'payload')::text) <= 65536
            AND warren.wp_payload_problem(e -> 'payload') IS NULL))
       AND (NOT e ? 'tenant' OR (jsonb_typeof(e -> 'tenant') = 'string'
            AND (e ->> 'tenant') !~ '[^A-Za-z0-9._:@-]' AND (e ->> 'tenant') ~ '^[A-Za-z0-9]'
            AND length(e ->> 'tenant') <= 200))
       AND (NOT e ? 'paused' OR jsonb_typeof(e -> 'paused') = 'boolean')
$$;
COMMENT ON FUNCTION warren.wp_api_job_ok(jsonb) IS
    'true if an upsert element is certainly valid without a table (the fast path of '
    'wp_api_job_error)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_job_note(old text, line text)
--     Appends a line to a job's note, keeping its last 8000 characters.
-- Parameters:
--     old  - the note (NULL or '' for none)
--     line - the line
-- Returns: text
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_job_note(old text, line text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN length(n) > 8000 THEN '...' || right(n, 7997) ELSE n END
      FROM (SELECT CASE WHEN old IS NULL OR old = '' THEN line ELSE old || E'\n' || line END) x(n)
$$;
COMMENT ON FUNCTION warren.wp_job_note(text, text) IS
    'Appends a line to a job note (the last 8000 characters kept)';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_sched_text(kind text, expr text, zone text)
--     A schedule as a note shows it: cron "0 9 * * *" (Europe/Berlin).
-- Parameters:
--     kind - cron, every or at
--     expr - the expression
--     zone - its zone (cron only)
-- Returns: text
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_sched_text(kind text, expr text, zone text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT kind || ' ' || to_json(expr)::text || CASE WHEN kind = 'cron' THEN ' (' || zone || ')'
                                                      ELSE '' END
$$;
COMMENT ON FUNCTION warren.wp_sched_text(text, text, text) IS 'A schedule as a note shows it';

-- ------------------------------------------------------------ upsert

-- How an error names an element: `job "NAME"` for upsert_job, `jobs[i]
-- ("NAME")` (i from 0) for upsert_jobs; the name as wp_echo shows it.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_upsert_label(single boolean, i bigint, name text)
--     How an upsert error names an element: job "NAME", or jobs[i] ("NAME").
-- Parameters:
--     single - upsert_job's one job
--     i      - the element, 1-based
--     name   - its name
-- Returns: text
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_upsert_label(single boolean, i bigint, name text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN single THEN 'job ' || warren.wp_echo(name)
                ELSE format('jobs[%s]%s', i - 1, coalesce(' (' || warren.wp_echo(name) || ')', ''))
           END
$$;
COMMENT ON FUNCTION warren.wp_upsert_label(boolean, bigint, text) IS
    'How an upsert error names element i (1-based) of an array, or the one job';

-- The one implementation behind upsert_job and upsert_jobs. fn names the
-- caller in messages; single: the elements are labelled `job "NAME"` (else
-- `jobs[i] ("NAME")`, i from 0). The caller has passed
-- wp_producer_require.
--
-- Concurrency (docs/api-jobs.md, "Concurrency"): every job row the call
-- writes is locked or inserted by ONE statement in one canonical order (the
-- names sorted, COLLATE "C"): an INSERT ... ON CONFLICT DO UPDATE ... WHERE
-- false inserts each new name and locks each existing row (waiting for a
-- transaction that inserted or locked it). Two calls thus take their row
-- locks in the same order and cannot deadlock, whatever the order of their
-- arrays. What a name's outcome is (created / changed / unchanged) is
-- decided after that: `created` only for the rows this call inserted; the
-- others are read again, locked and as the other transaction committed
-- them, and compared with the element.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_upsert_jobs(jobs jsonb, fn text, single boolean)
--     The implementation of upsert_job and upsert_jobs; the caller passed wp_producer_require.
-- Parameters:
--     jobs   - a JSON array of job specs
--     fn     - the caller, for messages
--     single - label elements as upsert_job does
-- Returns: one row (ord, name, created | changed | unchanged) per element; raises 22023 / 42501,
--          writing nothing
-- Locks:   warren.sync_state FOR SHARE; the templates' rows FOR SHARE, in name order; every named
--          job's row (inserted, or locked by one INSERT ... ON CONFLICT), in name order (C)
-- Writes:  warren.jobs (new and changed jobs); warren.runs (a changed schedule's future unclaimed
--          runs deleted, a pause's cancelled, a resume's deleted to be planned again); NOTIFY
--          warren_jobs
CREATE OR REPLACE FUNCTION warren.wp_upsert_jobs(jobs jsonb, fn text, single boolean)
RETURNS TABLE (ord int, name text, result text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    bad record;
    nparts int;
    nel int;
    nmade int;
    priv boolean := warren.wp_privileged();
    unknown text[];
    made text[];
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION '%: jobs must be a JSON array of objects {"name", "template", "cron" | '
                        '"every" | "at", ...}, not %', fn, coalesce(jsonb_typeof(jobs), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    nel := jsonb_array_length(jobs);
    IF nel > warren.wp_upsert_max_batch() THEN
        RAISE EXCEPTION '%: jobs has % elements; at most % per call: split the array into calls '
                        'of at most % (one transaction may make several calls)', fn, nel,
            warren.wp_upsert_max_batch(), warren.wp_upsert_max_batch() USING ERRCODE = '22023';
    END IF;
    IF nel = 0 THEN
        RETURN;
    END IF;

    -- 1. Each element on its own.
    SELECT v.i, v.e, v.why INTO bad
      FROM (SELECT x.i, x.e, warren.wp_api_job_error(x.e) AS why
              FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
             WHERE NOT coalesce(warren.wp_api_job_ok(x.e), false) OFFSET 0) v
     WHERE v.why IS NOT NULL ORDER BY v.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: %: %', fn,
            warren.wp_upsert_label(single, bad.i,
                                   CASE WHEN jsonb_typeof(bad.e -> 'name') = 'string'
                                        THEN bad.e ->> 'name' END), bad.why
            USING ERRCODE = '22023';
    END IF;

    -- 2. Across elements and against the tables.
    SELECT d.n, min(d.i) AS first, max(d.i) AS second INTO bad
      FROM (SELECT x.e ->> 'name' AS n, x.i FROM jsonb_array_elements(jobs) WITH ORDINALITY
            AS x(e, i)) d GROUP BY d.n HAVING count(*) > 1 ORDER BY min(d.i) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: jobs[%] and jobs[%] are both named %: give each job once', fn,
            bad.first - 1, bad.second - 1, warren.wp_echo(bad.n) USING ERRCODE = '22023';
    END IF;

    -- The producer's scope (docs/api-jobs.md, "Producer grants"), before any
    -- row is locked: the templates granted, the tenants within its prefix
    -- (each distinct one asked once). The jobs that exist are checked once
    -- they are locked, below. A privileged session skips all of it.
    IF NOT priv THEN
        SELECT x.i, x.e ->> 'name' AS n, x.e ->> 'template' AS t INTO bad
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
         WHERE x.e ->> 'template' IN (SELECT d.t FROM (SELECT DISTINCT y.e ->> 'template' AS t
                                                         FROM jsonb_array_elements(jobs) AS y(e)
                                                       OFFSET 0) d
                                       WHERE NOT warren.wp_producer_template_ok(d.t))
         ORDER BY x.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '%', warren.wp_producer_refusal(fn, format(
                'may not create or change API jobs from template %s (%s): it is not granted to '
                'this login', warren.wp_echo(bad.t), warren.wp_upsert_label(single, bad.i, bad.n)))
                USING ERRCODE = '42501';
        END IF;
        SELECT x.i, x.e ->> 'name' AS n, x.e ->> 'tenant' AS t INTO bad
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
         WHERE coalesce(x.e ->> 'tenant', '') IN (
                   SELECT d.t FROM (SELECT DISTINCT coalesce(y.e ->> 'tenant', '') AS t
                                      FROM jsonb_array_elements(jobs) AS y(e) OFFSET 0) d
                    WHERE NOT warren.wp_producer_tenant_ok(nullif(d.t, '')))
         ORDER BY x.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '%', warren.wp_producer_refusal(fn, format(
                'may not make %s with %s', warren.wp_upsert_label(single, bad.i, bad.n),
                CASE WHEN bad.t IS NULL THEN 'no tenant' ELSE 'the tenant ' || warren.wp_echo(bad.t)
                END)) USING ERRCODE = '42501';
        END IF;
    END IF;

    -- The partition count first (FOR SHARE: a sync changing it waits for
    -- this transaction, and its repartitioning then sees these jobs; a sync
    -- holding it, FOR UPDATE from its start, is waited for, and its count
    -- read after), then templates FOR SHARE (a sync changing them waits), in
    -- name order; the jobs themselves below. The same order as sync's:
    -- sync_state, then jobs.
    PERFORM 1 FROM warren.sync_state s FOR SHARE;
    PERFORM 1 FROM warren.jobs t
     WHERE t.name IN (SELECT DISTINCT x.e ->> 'template' FROM jsonb_array_elements(jobs) AS x(e))
     ORDER BY t.name FOR SHARE;

    SELECT x.i, x.e ->> 'name' AS n, x.e ->> 'template' AS t, t.name IS NOT NULL AS found,
           coalesce(t.is_template, false) AS is_t, coalesce(t.removed, false) AS gone INTO bad
      FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
      LEFT JOIN warren.jobs t ON t.name = x.e ->> 'template'
     WHERE t.name IS NULL OR NOT t.is_template OR t.removed ORDER BY x.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: %: field "template": %', fn, warren.wp_upsert_label(single, bad.i, bad.n),
            CASE WHEN NOT bad.found THEN format('no job %s: name a config job with template = '
                                                'true (and run `warren sync`)', warren.wp_echo(bad.t))
                 WHEN bad.gone THEN format('template %s was removed from the config: add it '
                                           'back (and run `warren sync`) or use another',
                                           warren.wp_echo(bad.t))
                 ELSE format('job %s is not a template: set template = true on it in the config '
                             '(and run `warren sync`) or name a template', warren.wp_echo(bad.t))
            END
            USING ERRCODE = '22023';
    END IF;

    -- The zones: all distinct ones at once (wp_zones_unknown reads
    -- pg_timezone_names at most once, however many are unknown); the first
    -- element with an unknown one is named.
    SELECT warren.wp_zones_unknown(array_agg(DISTINCT x.e ->> 'timezone')) INTO unknown
      FROM jsonb_array_elements(jobs) AS x(e) WHERE x.e ? 'timezone';
    IF cardinality(unknown) > 0 THEN
        SELECT x.i, x.e ->> 'name' AS n, x.e ->> 'timezone' AS z INTO bad
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
         WHERE x.e ->> 'timezone' = ANY (unknown) ORDER BY x.i LIMIT 1;
        RAISE EXCEPTION '%: %: field "timezone": %', fn, warren.wp_upsert_label(single, bad.i, bad.n),
            format('%s is not a time zone PostgreSQL knows (an IANA name from pg_timezone_names, '
                   'e.g. "America/New_York")', warren.wp_echo(bad.z))
            USING ERRCODE = '22023';
    END IF;

    -- a config job's name (config jobs change only with a sync, which waits
    -- for the sync_state lock this transaction holds)
    SELECT x.i, j.name AS n INTO bad
      FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
      JOIN warren.jobs j ON j.name = x.e ->> 'name'
     WHERE j.origin = 'config' ORDER BY x.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: %: field "name": job % is a config job (from the config file): '
                        'choose another name for the API job', fn,
            warren.wp_upsert_label(single, bad.i, bad.n), warren.wp_echo(bad.n)
            USING ERRCODE = '22023';
    END IF;

    SELECT s.partitions INTO nparts FROM warren.sync_state s;
    nparts := coalesce(nparts, 64);

    -- 3. The job rows, in one statement in name order: each new name
    -- inserted as a new job (these, and only these, are `created`), each
    -- existing row locked (WHERE false: not written here), waiting for a
    -- transaction that holds it. Settings from the template (payload and
    -- jitter default to the template's).
    WITH p AS (
        SELECT x.e ->> 'name' AS name, x.e ->> 'template' AS template,
               CASE WHEN x.e ? 'cron' THEN 'cron' WHEN x.e ? 'every' THEN 'every' ELSE 'at' END
                   AS kind,
               coalesce(x.e ->> 'cron', x.e ->> 'every', x.e ->> 'at') AS expr,
               coalesce(x.e ->> 'timezone', 'UTC') AS tz, x.e -> 'payload' AS payload,
               warren.wp_duration_ms(x.e ->> 'jitter') AS jitter_ms, x.e ->> 'tenant' AS tenant,
               coalesce((x.e -> 'paused')::boolean, false) AS paused
          FROM jsonb_array_elements(jobs) AS x(e)
    ), ins AS (
        INSERT INTO warren.jobs AS j (name, schedule_kind, expression, timezone, queue, payload,
            handler, misfire, max_catch_up, overlap, retry_max_attempts, retry_base_ms,
            retry_cap_ms, lease_ms, timeout_ms, jitter_ms, paused, paused_at, partition,
            config_hash, origin, template, tenant, created_by, note)
        SELECT p.name, p.kind, p.expr, p.tz, t.queue, coalesce(p.payload, t.payload), t.handler,
               t.misfire, t.max_catch_up, t.overlap, t.retry_max_attempts, t.retry_base_ms,
               t.retry_cap_ms, t.lease_ms, t.timeout_ms, coalesce(p.jitter_ms, t.jitter_ms),
               p.paused, CASE WHEN p.paused THEN now() END,
               warren.wp_job_partition(p.name, nparts),
               md5(jsonb_build_object('template', p.template, 'kind', p.kind, 'expr', p.expr,
                                      'tz', p.tz, 'payload', coalesce(p.payload, t.payload),
                                      'jitter_ms', coalesce(p.jitter_ms, t.jitter_ms),
                                      'tenant', p.tenant)::text),
               'api', p.template, p.tenant, session_user, NULL
          FROM p JOIN warren.jobs t ON t.name = p.template
         ORDER BY p.name COLLATE "C"
        ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE false
        RETURNING j.name
    )
    SELECT array_agg(ins.name) INTO made FROM ins;
    nmade := coalesce(cardinality(made), 0);

    IF nmade = nel THEN
        -- all new (a bulk import's common case): nothing else to do;
        -- delivered at commit, the planners plan the new jobs at once
        PERFORM pg_notify('warren_jobs', 'upsert');
        RETURN QUERY SELECT x.i::int, x.e ->> 'name', 'created'::text
                       FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i) ORDER BY x.i;
        RETURN;
    END IF;

    -- The rows that existed, now locked and read as they are: the
    -- producer may act only on its own (an existing job outside its scope
    -- answers with a refusal, never its state).
    IF NOT priv THEN
        SELECT x.i, x.e ->> 'name' AS n INTO bad
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
          JOIN warren.jobs o ON o.name = x.e ->> 'name'
         WHERE NOT EXISTS (SELECT 1 FROM unnest(made) AS m(name) WHERE m.name = o.name)
           AND NOT coalesce(warren.wp_producer_job_ok(o), false)
         ORDER BY x.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '%', warren.wp_producer_refusal(fn, format(
                'may not change API job %s: it belongs to a producer login with other grants (a '
                'job belongs to the login that created it and to the logins with exactly its '
                'grants) or lies outside this login''s templates or tenants',
                warren.wp_upsert_label(single, bad.i, bad.n))) USING ERRCODE = '42501';
        END IF;
    END IF;

    -- 4. The rows that existed, in one statement. n: each element resolved
    -- against its template and the job as it is now (locked); `what` is the
    -- outcome. A changed schedule (or a deleted job made again) replaces the
    -- job's future unclaimed scheduled runs and restarts its cursor from
    -- now, as `warren sync` does; a pause cancels them and a resume plans
    -- them again, as `warren pause`/`resume` do.
    RETURN QUERY
    WITH el AS (
        SELECT x.i::int AS i, x.e FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, i)
    ), p AS (
        SELECT x.i, x.e ->> 'name' AS name, x.e ->> 'template' AS template,
               CASE WHEN x.e ? 'cron' THEN 'cron' WHEN x.e ? 'every' THEN 'every' ELSE 'at' END
                   AS kind,
               coalesce(x.e ->> 'cron', x.e ->> 'every', x.e ->> 'at') AS expr,
               coalesce(x.e ->> 'timezone', 'UTC') AS tz, x.e -> 'payload' AS payload,
               warren.wp_duration_ms(x.e ->> 'jitter') AS jitter_ms, x.e ->> 'tenant' AS tenant,
               (x.e -> 'paused')::boolean AS paused
          FROM el x
         WHERE NOT EXISTS (SELECT 1 FROM unnest(made) AS m(name) WHERE m.name = x.e ->> 'name')
    ), n AS (
        SELECT p.i, p.name, p.template, p.kind, p.expr, p.tz, p.tenant,
               coalesce(p.payload, t.payload) AS payload,
               coalesce(p.jitter_ms, t.jitter_ms) AS jitter_ms,
               coalesce(p.paused, CASE WHEN o.removed THEN false ELSE o.paused END, false)
                   AS paused,
               t.queue, t.handler, t.misfire, t.max_catch_up, t.overlap, t.retry_max_attempts,
               t.retry_base_ms, t.retry_cap_ms, t.lease_ms, t.timeout_ms,
               md5(jsonb_build_object('template', p.template, 'kind', p.kind, 'expr', p.expr,
                                      'tz', p.tz, 'payload', coalesce(p.payload, t.payload),
                                      'jitter_ms', coalesce(p.jitter_ms, t.jitter_ms),
                                      'tenant', p.tenant)::text) AS hash,
               o.removed AS old_removed, o.paused AS old_paused, o.config_hash AS old_hash,
               (o.schedule_kind, o.expression, o.timezone)
                   IS DISTINCT FROM (p.kind, p.expr, p.tz) AS resched,
               (o.queue, o.handler, o.misfire, o.max_catch_up, o.overlap, o.retry_max_attempts,
                o.retry_base_ms, o.retry_cap_ms, o.lease_ms, o.timeout_ms)
                   IS DISTINCT FROM (t.queue, t.handler, t.misfire, t.max_catch_up, t.overlap,
                                     t.retry_max_attempts, t.retry_base_ms, t.retry_cap_ms,
                                     t.lease_ms, t.timeout_ms) AS tdiff
          FROM p JOIN warren.jobs t ON t.name = p.template
          JOIN warren.jobs o ON o.name = p.name
    ), r AS (
        SELECT n.*,
               CASE WHEN n.old_removed THEN 'created'
                    WHEN n.old_hash IS DISTINCT FROM n.hash OR n.old_paused IS DISTINCT FROM n.paused
                         OR n.tdiff THEN 'changed'
                    ELSE 'unchanged' END AS what,
               NOT n.old_removed AND NOT n.resched AND NOT n.old_paused AND n.paused AS pausing,
               NOT n.old_removed AND NOT n.resched AND n.old_paused AND NOT n.paused AS resuming,
               n.resched OR n.old_removed AS replan
          FROM n
    ), up AS (
        UPDATE warren.jobs j SET
            schedule_kind = r.kind, expression = r.expr, timezone = r.tz, queue = r.queue,
            payload = r.payload, handler = r.handler, misfire = r.misfire,
            max_catch_up = r.max_catch_up, overlap = r.overlap,
            retry_max_attempts = r.retry_max_attempts, retry_base_ms = r.retry_base_ms,
            retry_cap_ms = r.retry_cap_ms, lease_ms = r.lease_ms, timeout_ms = r.timeout_ms,
            jitter_ms = r.jitter_ms, paused = r.paused,
            paused_at = CASE WHEN NOT r.paused THEN NULL
                             WHEN j.paused AND NOT j.removed THEN j.paused_at ELSE now() END,
            paused_by_template = false, removed = false, config_hash = r.hash,
            template = r.template, tenant = r.tenant,
            partition = CASE WHEN j.removed THEN warren.wp_job_partition(j.name, nparts)
                             ELSE j.partition END,
            next_fire_at = CASE
                WHEN r.replan THEN NULL
                WHEN r.resuming THEN
                    LEAST(j.next_fire_at,
                          (SELECT min(c.scheduled_at) FROM warren.runs c
                            WHERE c.job = j.name AND c.state = 'cancelled'
                              AND c.origin IN ('schedule', 'misfire') AND c.attempt = 0
                              AND c.note LIKE '%cancelled: job paused at %'))
                ELSE j.next_fire_at END,
            note = CASE
                WHEN j.removed THEN warren.wp_job_note(j.note, format(
                    'created again at %s by %s (%s) after it was deleted: %s',
                    warren.plan_utc(now()), session_user, fn,
                    warren.wp_sched_text(r.kind, r.expr, r.tz)))
                ELSE warren.wp_job_note(j.note, concat_ws('; ',
                    CASE WHEN r.resched
                         THEN format('schedule changed at %s by %s: %s -> %s; its future '
                                     'unclaimed runs replaced', warren.plan_utc(now()),
                                     session_user,
                                     warren.wp_sched_text(j.schedule_kind, j.expression,
                                                          j.timezone),
                                     warren.wp_sched_text(r.kind, r.expr, r.tz)) END,
                    CASE WHEN NOT j.paused AND r.paused
                         THEN format('paused at %s by %s (%s)', warren.plan_utc(now()),
                                     session_user, fn)
                         WHEN j.paused AND NOT r.paused
                         THEN format('resumed at %s by %s (%s)', warren.plan_utc(now()),
                                     session_user, fn) END,
                    CASE WHEN j.template IS DISTINCT FROM r.template
                         THEN format('template changed at %s by %s: %s -> %s',
                                     warren.plan_utc(now()), session_user, j.template,
                                     r.template) END,
                    CASE WHEN j.tenant IS DISTINCT FROM r.tenant
                         THEN format('tenant changed at %s by %s: %s -> %s',
                                     warren.plan_utc(now()), session_user,
                                     coalesce(j.tenant, '(none)'), coalesce(r.tenant, '(none)'))
                         END)) END,
            updated_at = now()
          FROM r
         WHERE j.name = r.name AND r.what <> 'unchanged'
        RETURNING j.name
    ), rp AS (
        -- job = ANY (ARRAY(...)): an index probe per job that needs it, whatever
        -- plan was cached while warren.runs was small (a join here once
        -- became a scan of all runs per element)
        DELETE FROM warren.runs x
         WHERE x.job = ANY (ARRAY(SELECT r.name FROM r WHERE r.replan))
           AND x.origin IN ('schedule', 'misfire')
           AND x.attempt = 0 AND x.due_at > now()
           AND (x.state IN ('planned', 'published')
                OR (x.state = 'cancelled' AND x.note LIKE '%cancelled: job paused at %'))
        RETURNING x.run_key
    ), pz AS (
        UPDATE warren.runs x SET state = 'cancelled', finished_at = now(),
               note = warren.plan_note(x.note, format('cancelled: job paused at %s (%s)',
                                                      warren.plan_utc(now()), fn))
         WHERE x.job = ANY (ARRAY(SELECT r.name FROM r WHERE r.pausing))
           AND x.origin IN ('schedule', 'misfire')
           AND x.state IN ('planned', 'published') AND x.due_at > now()
        RETURNING x.run_key
    ), rs AS (
        DELETE FROM warren.runs x
         WHERE x.job = ANY (ARRAY(SELECT r.name FROM r WHERE r.resuming))
           AND x.state = 'cancelled'
           AND x.origin IN ('schedule', 'misfire') AND x.attempt = 0
           AND x.note LIKE '%cancelled: job paused at %'
        RETURNING x.run_key
    ), nt AS (
        -- delivered at commit: the planners plan the new definitions at once
        SELECT pg_notify('warren_jobs', 'upsert')
         WHERE nmade > 0 OR EXISTS (SELECT 1 FROM up)
    ), cnt AS (
        SELECT (SELECT count(*) FROM nt) + (SELECT count(*) FROM rp) + (SELECT count(*) FROM pz)
               + (SELECT count(*) FROM rs) AS n
    )
    SELECT x.i, x.e ->> 'name', coalesce(r.what, 'created')
      FROM el x LEFT JOIN r ON r.i = x.i
     WHERE (SELECT cnt.n FROM cnt) >= 0 ORDER BY x.i;
END
$fn$;
COMMENT ON FUNCTION warren.wp_upsert_jobs(jsonb, text, boolean) IS
    'The implementation of warren.upsert_job and warren.upsert_jobs';

-- ----------------------------------------------------------------------------
-- Function: warren.upsert_jobs(jobs jsonb)
--     Creates or changes API jobs from a JSON array (docs/api-jobs.md).
-- Parameters:
--     jobs - [{name, template, cron|every|at, timezone, payload, jitter, tenant, paused}]
-- Returns: one row (name, created | changed | unchanged) per element, in order
-- Locks:   as wp_upsert_jobs
-- Writes:  as wp_upsert_jobs
CREATE OR REPLACE FUNCTION warren.upsert_jobs(jobs jsonb)
RETURNS TABLE (name text, result text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM warren.wp_producer_require('warren.upsert_jobs');
    RETURN QUERY SELECT u.name, u.result
                   FROM warren.wp_upsert_jobs(upsert_jobs.jobs, 'warren.upsert_jobs', false) u
                  ORDER BY u.ord;
END
$fn$;
COMMENT ON FUNCTION warren.upsert_jobs(jsonb) IS
    'Creates or changes API jobs from a JSON array of {name, template, cron|every|at, timezone, '
    'payload, jitter, tenant, paused}; one row (name, created|changed|unchanged) per element, in '
    'order';

-- ----------------------------------------------------------------------------
-- Function: warren.upsert_job(name text, template text, spec jsonb)
--     Creates or changes one API job from a template (docs/api-jobs.md).
-- Parameters:
--     name     - the job's name
--     template - a config job with template = true
--     spec     - {cron+timezone | every | at, payload, jitter, tenant, paused}
-- Returns: created, changed or unchanged
-- Locks:   as wp_upsert_jobs
-- Writes:  as wp_upsert_jobs
CREATE OR REPLACE FUNCTION warren.upsert_job(name text, template text, spec jsonb)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    res text;
BEGIN
    PERFORM warren.wp_producer_require('warren.upsert_job');
    IF name IS NULL OR template IS NULL THEN
        RAISE EXCEPTION 'warren.upsert_job: % is NULL: give the job''s name and its template',
            CASE WHEN name IS NULL THEN 'name' ELSE 'template' END USING ERRCODE = '22023';
    END IF;
    IF spec IS NULL OR jsonb_typeof(spec) <> 'object' THEN
        RAISE EXCEPTION 'warren.upsert_job: job %: spec must be a JSON object {"cron": ..., '
                        '"timezone": ...} (or "every", "at"), not %', warren.wp_echo(name),
            coalesce(jsonb_typeof(spec), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF spec ? 'name' OR spec ? 'template' THEN
        RAISE EXCEPTION 'warren.upsert_job: job %: spec field % is an argument of its own: '
                        'leave it out of spec', warren.wp_echo(name),
            CASE WHEN spec ? 'name' THEN '"name"' ELSE '"template"' END USING ERRCODE = '22023';
    END IF;
    SELECT u.result INTO res
      FROM warren.wp_upsert_jobs(jsonb_build_array(spec || jsonb_build_object('name', name,
                                                                              'template', template)),
                                 'warren.upsert_job', true) u;
    RETURN res;
END
$fn$;
COMMENT ON FUNCTION warren.upsert_job(text, text, jsonb) IS
    'Creates or changes one API job from a template; spec {cron+timezone | every | at, payload, '
    'jitter, tenant, paused}; returns created, changed or unchanged';

-- ------------------------------------------------------------ pause, resume, delete

-- The refusal of a job outside the producer's scope (it says nothing of the
-- job's state).
-- ----------------------------------------------------------------------------
-- Function: warren.wp_api_job_refusal(fn text, job text)
--     The 42501 message for a job outside the producer's scope.
-- Parameters:
--     fn  - the calling function
--     job - the job's name
-- Returns: text
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_api_job_refusal(fn text, job text)
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT warren.wp_producer_refusal(fn, format(
        'may not act on job %s: an API job belongs to the login that created it and to the logins '
        'with exactly its producer grants, within their templates and tenant prefix; config jobs '
        'are the operator''s', warren.wp_echo(job)))
$$;
COMMENT ON FUNCTION warren.wp_api_job_refusal(text, text) IS
    'The 42501 message for a job outside the producer''s scope';

-- The API job name (an API job, not deleted unless allow_removed), locked;
-- raises a clear error otherwise. Returns the row. A producer's scope is
-- checked before the lock (an outsider neither waits for the row nor
-- learns its state) and again on the locked row.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_api_job(fn text, job text, allow_removed boolean)
--     The API job pause_job, resume_job and delete_job act on, within the producer's scope; raises
--     22023 / 42501 otherwise.
-- Parameters:
--     fn            - the calling function
--     job           - the job's name
--     allow_removed - a deleted job is accepted (delete_job)
-- Returns: the job's row
-- Locks:   the job's row FOR UPDATE (the scope checked before and after)
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_api_job(fn text, job text, allow_removed boolean)
RETURNS warren.jobs
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    j warren.jobs;
    priv boolean := warren.wp_privileged();
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION '%: name is NULL: give the API job''s name', fn USING ERRCODE = '22023';
    END IF;
    IF NOT priv THEN
        SELECT * INTO j FROM warren.jobs x WHERE x.name = job;
        IF FOUND AND NOT coalesce(warren.wp_producer_job_ok(j), false) THEN
            RAISE EXCEPTION '%', warren.wp_api_job_refusal(fn, job) USING ERRCODE = '42501';
        END IF;
    END IF;
    SELECT * INTO j FROM warren.jobs x WHERE x.name = job FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: no job % (API jobs are made with warren.upsert_job)', fn,
            warren.wp_echo(job) USING ERRCODE = '22023';
    END IF;
    IF NOT priv AND NOT coalesce(warren.wp_producer_job_ok(j), false) THEN
        RAISE EXCEPTION '%', warren.wp_api_job_refusal(fn, job) USING ERRCODE = '42501';
    END IF;
    IF j.origin <> 'api' THEN
        RAISE EXCEPTION '%: job % is a % from the config file, not an API job: the operator '
                        'changes it (`warren pause`, `warren resume`, the config and `warren sync`)',
            fn, warren.wp_echo(job), CASE WHEN j.is_template THEN 'template' ELSE 'job' END
            USING ERRCODE = '22023';
    END IF;
    IF j.removed AND NOT allow_removed THEN
        RAISE EXCEPTION '%: API job % was deleted: create it again with warren.upsert_job', fn,
            warren.wp_echo(job) USING ERRCODE = '22023';
    END IF;
    RETURN j;
END
$fn$;
COMMENT ON FUNCTION warren.wp_api_job(text, text, boolean) IS
    'Locks and returns an API job for pause_job, resume_job, delete_job (within the producer''s '
    'scope), or raises';

-- ----------------------------------------------------------------------------
-- Function: warren.pause_job(name text)
--     Pauses an API job as `warren pause` does.
-- Parameters:
--     name - the API job
-- Returns: true; false when it was paused already
-- Locks:   the job's row FOR UPDATE (wp_api_job); the runs it cancels
-- Writes:  warren.jobs (paused, note); warren.runs (future unclaimed scheduled runs cancelled);
--          NOTIFY warren_jobs
CREATE OR REPLACE FUNCTION warren.pause_job(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    j warren.jobs;
BEGIN
    PERFORM warren.wp_producer_require('warren.pause_job');
    j := warren.wp_api_job('warren.pause_job', pause_job.name, false);
    IF j.paused THEN
        -- already paused; the application's pause now owns it: a template
        -- coming back does not resume it
        UPDATE warren.jobs x SET paused_by_template = false WHERE x.name = j.name
           AND x.paused_by_template;
        RETURN false;
    END IF;
    UPDATE warren.jobs x SET paused = true, paused_at = now(), updated_at = now(),
           note = warren.wp_job_note(x.note, format('paused at %s by %s (warren.pause_job)',
                                                    warren.plan_utc(now()), session_user))
     WHERE x.name = j.name;
    UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),
           note = warren.plan_note(r.note, format('cancelled: job paused at %s (warren.pause_job)',
                                                  warren.plan_utc(now())))
     WHERE r.job = j.name AND r.origin IN ('schedule', 'misfire')
       AND r.state IN ('planned', 'published') AND r.due_at > now();
    PERFORM pg_notify('warren_jobs', 'pause');
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.pause_job(text) IS
    'Pauses an API job as `warren pause` does (its future unclaimed runs cancelled); false if it '
    'was paused already';

-- ----------------------------------------------------------------------------
-- Function: warren.resume_job(name text)
--     Resumes an API job as `warren resume` does (the runs its pause cancelled are planned again).
-- Parameters:
--     name - the API job
-- Returns: true; false when it was not paused; 22023 when its template is gone
-- Locks:   the job's row FOR UPDATE (wp_api_job); its template's row FOR SHARE
-- Writes:  warren.jobs (paused, cursor, note); warren.runs (the pause's cancelled runs deleted);
--          NOTIFY warren_jobs
CREATE OR REPLACE FUNCTION warren.resume_job(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    j warren.jobs;
    t warren.jobs;
BEGIN
    PERFORM warren.wp_producer_require('warren.resume_job');
    j := warren.wp_api_job('warren.resume_job', resume_job.name, false);
    SELECT * INTO t FROM warren.jobs x WHERE x.name = j.template FOR SHARE;
    IF t.removed OR NOT t.is_template THEN
        RAISE EXCEPTION 'warren.resume_job: API job %: its template % was removed from the '
                        'config (the job stays paused until it is back): add the template back '
                        'and run `warren sync`, or move the job to another template with '
                        'warren.upsert_job', warren.wp_echo(j.name), warren.wp_echo(j.template)
            USING ERRCODE = '22023';
    END IF;
    IF NOT j.paused THEN
        RETURN false;
    END IF;
    -- as `warren resume`: the runs the pause cancelled are planned again
    -- (the cursor moves back to the first; the misfire policy applies)
    WITH c AS (
        DELETE FROM warren.runs r
         WHERE r.job = j.name AND r.state = 'cancelled' AND r.origin IN ('schedule', 'misfire')
           AND r.attempt = 0 AND r.note LIKE '%cancelled: job paused at %'
        RETURNING r.scheduled_at
    )
    UPDATE warren.jobs x SET paused = false, paused_at = NULL, paused_by_template = false,
           updated_at = now(),
           next_fire_at = LEAST(x.next_fire_at, (SELECT min(c.scheduled_at) FROM c)),
           note = warren.wp_job_note(x.note, format('resumed at %s by %s (warren.resume_job)',
                                                    warren.plan_utc(now()), session_user))
     WHERE x.name = j.name;
    PERFORM pg_notify('warren_jobs', 'resume');
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.resume_job(text) IS
    'Resumes an API job as `warren resume` does (the runs the pause cancelled planned again); '
    'false if it was not paused';

-- ----------------------------------------------------------------------------
-- Function: warren.delete_job(name text)
--     Deletes an API job, keeping it and its runs as history (removed, paused).
-- Parameters:
--     name - the API job
-- Returns: true; false when it was deleted already
-- Locks:   the job's row FOR UPDATE (wp_api_job); the runs it cancels
-- Writes:  warren.jobs (removed, paused, note); warren.runs (future unclaimed scheduled runs
--          cancelled); NOTIFY warren_jobs
CREATE OR REPLACE FUNCTION warren.delete_job(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    j warren.jobs;
BEGIN
    PERFORM warren.wp_producer_require('warren.delete_job');
    j := warren.wp_api_job('warren.delete_job', delete_job.name, true);
    IF j.removed THEN
        RETURN false;
    END IF;
    -- kept (its runs are history), as sync keeps a job removed from the
    -- config: removed and paused, its future unclaimed runs cancelled;
    -- runs already claimed finish
    UPDATE warren.jobs x SET removed = true, paused = true, paused_by_template = false,
           paused_at = CASE WHEN x.paused THEN x.paused_at ELSE now() END, updated_at = now(),
           note = warren.wp_job_note(x.note, format('deleted at %s by %s (warren.delete_job); '
                                                    'kept for its history', warren.plan_utc(now()),
                                                    session_user))
     WHERE x.name = j.name;
    UPDATE warren.runs r SET state = 'cancelled', finished_at = now(),
           note = warren.plan_note(r.note, format('cancelled: job paused at %s (deleted; '
                                                  'warren.delete_job)', warren.plan_utc(now())))
     WHERE r.job = j.name AND r.origin IN ('schedule', 'misfire')
       AND r.state IN ('planned', 'published') AND r.due_at > now();
    PERFORM pg_notify('warren_jobs', 'delete');
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION warren.delete_job(text) IS
    'Deletes an API job, keeping it and its runs as history (removed, paused, future unclaimed '
    'runs cancelled); false if it was deleted already';
