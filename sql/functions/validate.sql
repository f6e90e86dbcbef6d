-- validate.sql: what the Job API checks so that everything it accepts can be
-- carried to a worker (issue 33 item 14): a run message is JSON decoded by
-- jansson (src/codec.c), whose integers are int64, reals doubles, nesting at
-- most 2048 deep, and whose instants are years 1-9999 (what a run key
-- spells). A value past these would be accepted by PostgreSQL and then be
-- unpublishable: the relay would have to mark its run dead. The one current
-- definition; `warren migrate` re-applies it.

-- NULL: the payload can be carried; else what is wrong (the caller prefixes
-- the function and the field). Fast path: no run of 19 digits (an int64 has
-- at most 19, and jsonb prints every number in plain decimal notation, never
-- with an exponent) and fewer than 2000 brackets; the numbers and the depth
-- are looked at only otherwise.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_payload_problem(p jsonb)
--     What makes a payload impossible to carry in a run message: an integer outside int64, a
--     number beyond a double, nesting deeper than 2000.
-- Parameters:
--     p - the payload
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_payload_problem(p jsonb)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t text;
    v jsonb;
    s text;
    depth int;
BEGIN
    IF p IS NULL THEN
        RETURN NULL;
    END IF;
    t := p::text;
    IF t !~ '[0-9]{19}' AND length(t) - length(translate(t, '[{', '')) < 2000 THEN
        RETURN NULL;
    END IF;
    FOR v IN SELECT x FROM jsonb_path_query(p, 'strict $.**') x WHERE jsonb_typeof(x) = 'number'
    LOOP
        s := v::text;
        IF strpos(s, '.') = 0 THEN
            IF v::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
                RETURN format('has the integer %s%s, outside the 64-bit range a run message '
                              'carries (-9223372036854775808..9223372036854775807): send it as '
                              'a string', left(s, 40), CASE WHEN length(s) > 40 THEN '...' ELSE '' END);
            END IF;
        ELSIF abs(v::numeric) > 1.7976931348623157e308 THEN
            RETURN format('has the number %s..., beyond the largest double a run message carries '
                          '(1.8e308): send it as a string', left(s, 40));
        END IF;
    END LOOP;
    WITH RECURSIVE w(v, d) AS (
        SELECT p, 1
        UNION ALL
        SELECT c.v, w.d + 1
          FROM w, LATERAL (SELECT e.value FROM jsonb_array_elements(
                                CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) e
                           UNION ALL
                           SELECT e.value FROM jsonb_each(
                                CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) e) c(v)
         WHERE jsonb_typeof(c.v) IN ('array', 'object') AND w.d <= 2000
    )
    SELECT max(w.d) INTO depth FROM w;
    IF depth > 2000 THEN
        RETURN 'nests arrays and objects more than 2000 deep (a run message is decoded to at '
               'most 2048 levels)';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION warren.wp_payload_problem(jsonb) IS
    'What makes a payload impossible to carry in a run message (NULL: nothing): an integer '
    'outside int64, a number beyond a double, nesting deeper than 2000';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_instant_problem(t timestamptz)
--     What makes an instant impossible to carry in a run message: infinite, or outside years
--     1-9999 UTC.
-- Parameters:
--     t - the instant
-- Returns: text; NULL: nothing
-- Locks:   none
-- Writes:  nothing
CREATE OR REPLACE FUNCTION warren.wp_instant_problem(t timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN t IS NULL THEN NULL
        WHEN NOT isfinite(t) THEN 'must be a finite instant, not ' || t::text
        WHEN t < '0001-01-01 00:00:00+00'::timestamptz
             OR t >= '10000-01-01 00:00:00+00'::timestamptz THEN
            left(t::text, 40) || ' is outside years 1-9999 UTC (what a run message carries)'
    END
$$;
COMMENT ON FUNCTION warren.wp_instant_problem(timestamptz) IS
    'What makes an instant impossible to carry in a run message (NULL: nothing): infinite or '
    'outside years 1-9999 UTC';
