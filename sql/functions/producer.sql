-- producer.sql: least privilege for producers (docs/api-jobs.md, "Producer
-- grants"): what a producer login may do through the Job API in this
-- database, and the operator's functions that grant it. The one current
-- definition; `warren migrate` re-applies it.
--
-- The model:
-- - A login may call the API in a database only if it is privileged (a
--   superuser or a member of the schema's owner: not limited) or listed in
--   warren.producer_logins there (`warren grant-producer`). Membership in
--   the cluster-wide role warren_producer only allows EXECUTE; the grants
--   are per database, so a login granted in one warren database can do
--   nothing in another.
-- - Templates granted (kind 'template'): the login creates and changes API
--   jobs from them, and enqueues on the template itself. Config jobs granted
--   (kind 'job'): the login enqueues runs of them. None by default: the
--   operator's sql/exec handlers trust their payloads.
-- - API jobs: a login acts on (changes, pauses, resumes, deletes, enqueues
--   on, reads) an API job when its template is granted to it, its tenant is
--   within the login's prefix, and the job is owned: it was created by this
--   login, or by a login with exactly the same producer grants (templates,
--   jobs and tenant prefix). So the instances of one application, or a
--   rotated login given the same grants, share their jobs; another
--   application never touches them, even one granted the same template.
-- - A tenant prefix binds a login to its tenants: every job it makes and
--   every run it enqueues has a tenant starting with the prefix (a tenant is
--   then required), and it acts only on jobs and runs of such tenants.
-- Checked inside each SECURITY DEFINER API function against session_user
-- (SET ROLE does not change it). Refusals are 42501. session_user is a
-- name, collation "C": compared as text in the database's collation so that
-- the lookups use the tables' indexes (a filter over every grant otherwise).

-- ------------------------------------------------------------ who

-- ----------------------------------------------------------------------------
-- Function: warren.wp_producer_require(fn text)
--     Raises 42501 unless the session is privileged or a producer login of this database.
-- Parameters:
--     fn - the calling function
-- Returns: void
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_producer_require(fn text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF warren.wp_privileged()
       OR EXISTS (SELECT 1 FROM warren.producer_logins l WHERE l.login = (session_user::text COLLATE "default")) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION '%: login "%" has no producer grants in database "%": an operator grants '
                    'them with `warren grant-producer % --template TEMPLATE` (docs/api-jobs.md, '
                    '"Producer grants")', fn, session_user, current_database(), session_user
        USING ERRCODE = '42501';
END
$$;
COMMENT ON FUNCTION warren.wp_producer_require(text) IS
    'Raises 42501 unless the session is privileged or a producer login of this database';

-- The login's grants as one comparable text (NULL: not a producer login
-- here): two logins with the same text own each other's API jobs.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_producer_grant_key(login text)
--     A producer login's grants as one comparable text (tenant prefix, templates, jobs).
-- Parameters:
--     login - the login
-- Returns: text; NULL: not a producer login here
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_producer_grant_key(login text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT coalesce(l.tenant_prefix, '') || '|'
                   || coalesce((SELECT string_agg(g.kind || ':' || g.name, ',' ORDER BY g.kind, g.name)
                                  FROM warren.producer_grants g WHERE g.login = l.login), '')
              FROM warren.producer_logins l WHERE l.login = wp_producer_grant_key.login);
END
$$;
COMMENT ON FUNCTION warren.wp_producer_grant_key(text) IS
    'A producer login''s grants (tenant prefix, templates, jobs) as one text; NULL if none';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_producer_template_ok(template text)
--     May the session create API jobs from this template and enqueue on it?
-- Parameters:
--     template - the template's name
-- Returns: boolean
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_producer_template_ok(template text)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN warren.wp_privileged()
        OR EXISTS (SELECT 1 FROM warren.producer_grants g
                    WHERE g.login = (session_user::text COLLATE "default") AND g.kind = 'template'
                      AND g.name = wp_producer_template_ok.template);
END
$$;
COMMENT ON FUNCTION warren.wp_producer_template_ok(text) IS
    'May the session create and change API jobs from this template and enqueue on it?';

-- ----------------------------------------------------------------------------
-- Function: warren.wp_producer_tenant_ok(tenant text)
--     Is the tenant within the session's tenant prefix (a NULL tenant is outside every prefix)?
-- Parameters:
--     tenant - the tenant
-- Returns: boolean
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_producer_tenant_ok(tenant text)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    p text;
    found_ boolean;
BEGIN
    IF warren.wp_privileged() THEN
        RETURN true;
    END IF;
    SELECT true, l.tenant_prefix INTO found_, p
      FROM warren.producer_logins l WHERE l.login = (session_user::text COLLATE "default");
    IF found_ IS NULL THEN
        RETURN false;
    END IF;
    RETURN p IS NULL OR starts_with(coalesce(wp_producer_tenant_ok.tenant, ''), p);
END
$$;
COMMENT ON FUNCTION warren.wp_producer_tenant_ok(text) IS
    'Is the tenant within the session''s tenant prefix (true without a prefix; a NULL tenant is '
    'outside every prefix)?';

-- May the session act on (change, pause, resume, delete, enqueue on, read)
-- job j? See the model above.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_producer_job_ok(j warren.jobs)
--     May the session act on job j (change, pause, resume, delete, enqueue on, read)?
-- Parameters:
--     j - the job's row
-- Returns: boolean
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_producer_job_ok(j warren.jobs)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF j.name IS NULL THEN
        RETURN false;
    ELSIF warren.wp_privileged() THEN
        RETURN true;
    ELSIF j.origin = 'api' THEN
        -- coalesce: a job created by a privileged login (no grants) or
        -- before migration 012 (created_by NULL) is no producer's
        RETURN coalesce(warren.wp_producer_template_ok(j.template)
                        AND warren.wp_producer_tenant_ok(j.tenant)
                        AND (j.created_by = (session_user::text COLLATE "default")
                             OR warren.wp_producer_grant_key(j.created_by)
                                = warren.wp_producer_grant_key(session_user)), false);
    ELSIF j.is_template THEN
        RETURN warren.wp_producer_template_ok(j.name);
    END IF;
    RETURN EXISTS (SELECT 1 FROM warren.producer_grants g
                    WHERE g.login = (session_user::text COLLATE "default") AND g.kind = 'job' AND g.name = j.name);
END
$$;
COMMENT ON FUNCTION warren.wp_producer_job_ok(warren.jobs) IS
    'May the session act on job j (privileged; a granted config job or template; an owned API '
    'job of a granted template within the tenant prefix)?';

-- The text of a refusal: FN: login "L" WHAT (the fix). Raise it with 42501.
-- ----------------------------------------------------------------------------
-- Function: warren.wp_producer_refusal(fn text, what text)
--     The message of a producer scope refusal (raised as 42501 by the caller).
-- Parameters:
--     fn   - the calling function
--     what - what the login may not do
-- Returns: text
-- Locks:   none
-- Writes:  nothing (reads only)
CREATE OR REPLACE FUNCTION warren.wp_producer_refusal(fn text, what text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    p text;
BEGIN
    SELECT l.tenant_prefix INTO p FROM warren.producer_logins l WHERE l.login = (session_user::text COLLATE "default");
    RETURN format('%s: login "%s" %s (its producer grants in database "%s": `warren '
                  'grant-producer %s` lists them%s; an operator changes them with `warren '
                  'grant-producer`, docs/api-jobs.md "Producer grants")', fn, session_user, what,
                  current_database(), session_user,
                  CASE WHEN p IS NOT NULL THEN format('; tenants must start with "%s"', p)
                       ELSE '' END);
END
$$;
COMMENT ON FUNCTION warren.wp_producer_refusal(text, text) IS
    'The message of a producer scope refusal (42501): the function, the login, what it may not '
    'do, and where the grants are changed';

-- ------------------------------------------------------------ the operator's

-- Grants a producer login templates and config jobs in this database, and
-- sets its tenant prefix (NULL: leave it as it is; '': remove it). Owner
-- only (no EXECUTE for anyone else). Names that exist must be of the right
-- kind; a name not synced yet is granted with a WARNING (a grant may come
-- before the config that adds it).
-- ----------------------------------------------------------------------------
-- Function: warren.grant_producer(login text, templates text[], jobs text[], tenant_prefix text)
--     Operator: grants a producer login templates and config jobs (`warren grant-producer`).
-- Parameters:
--     login         - an existing role
--     templates     - templates it may use
--     jobs          - config jobs it may enqueue on
--     tenant_prefix - binds it to tenants (NULL: unchanged; '': none)
-- Returns: void; 22023 / 42704 for a bad name
-- Locks:   the login's rows (upsert)
-- Writes:  warren.producer_logins, warren.producer_grants
CREATE OR REPLACE FUNCTION warren.grant_producer(login text, templates text[], jobs text[],
                                                 tenant_prefix text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l text := grant_producer.login;
    x record;
BEGIN
    IF l IS NULL OR length(l) NOT BETWEEN 1 AND 63 THEN
        RAISE EXCEPTION 'warren.grant_producer: a login name has 1 to 63 characters'
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = l) THEN
        RAISE EXCEPTION 'warren.grant_producer: no role "%" in this cluster: create it first '
                        '(CREATE ROLE % LOGIN PASSWORD ''...'' IN ROLE warren_producer)',
            left(l, 63), quote_ident(l) USING ERRCODE = '42704';
    END IF;
    IF tenant_prefix IS NOT NULL AND tenant_prefix <> ''
       AND (length(tenant_prefix) > 200 OR tenant_prefix !~ '^[A-Za-z0-9._:@-]+$') THEN
        RAISE EXCEPTION 'warren.grant_producer: tenant prefix "%" can never start a tenant name '
                        '(tenants are [A-Za-z0-9][A-Za-z0-9._:@-]{0,199})', left(tenant_prefix, 80)
            USING ERRCODE = '22023';
    END IF;
    FOR x IN SELECT t.kind, t.name, j.name AS found, j.is_template, j.origin
               FROM (SELECT 'template' AS kind, unnest(templates) AS name
                     UNION ALL SELECT 'job', unnest(jobs)) t
               LEFT JOIN warren.jobs j ON j.name = t.name
              ORDER BY t.kind, t.name
    LOOP
        IF x.name IS NULL OR x.name !~ '^[A-Za-z0-9]' OR x.name ~ '[^A-Za-z0-9._-]'
           OR length(x.name) > 200 THEN
            RAISE EXCEPTION 'warren.grant_producer: % "%" cannot be a job name', x.kind,
                left(coalesce(x.name, 'NULL'), 80) USING ERRCODE = '22023';
        ELSIF x.found IS NULL THEN
            RAISE WARNING 'warren.grant_producer: no % "%" in this database yet: granted anyway '
                          '(run `warren sync` with the config that defines it)', x.kind, x.name;
        ELSIF x.kind = 'template' AND NOT x.is_template THEN
            RAISE EXCEPTION 'warren.grant_producer: "%" is not a template (template = true in the '
                            'config): grant it with --job to let the login enqueue on it', x.name
                USING ERRCODE = '22023';
        ELSIF x.kind = 'job' AND x.is_template THEN
            RAISE EXCEPTION 'warren.grant_producer: "%" is a template: grant it with --template',
                x.name USING ERRCODE = '22023';
        ELSIF x.kind = 'job' AND x.origin = 'api' THEN
            RAISE EXCEPTION 'warren.grant_producer: "%" is an API job: API jobs belong to the '
                            'logins that made them (grant their template with --template)',
                x.name USING ERRCODE = '22023';
        END IF;
    END LOOP;
    INSERT INTO warren.producer_logins AS p (login, tenant_prefix)
    VALUES (l, nullif(tenant_prefix, ''))
    ON CONFLICT ON CONSTRAINT producer_logins_pkey DO UPDATE
        SET tenant_prefix = CASE WHEN grant_producer.tenant_prefix IS NULL THEN p.tenant_prefix
                                 ELSE nullif(grant_producer.tenant_prefix, '') END;
    INSERT INTO warren.producer_grants (login, kind, name)
    SELECT l, t.kind, t.name
      FROM (SELECT 'template' AS kind, unnest(templates) AS name
            UNION ALL SELECT 'job', unnest(jobs)) t
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION warren.grant_producer(text, text[], text[], text) IS
    'Operator: lets a producer login use templates (create API jobs, enqueue) and config jobs '
    '(enqueue) in this database; tenant_prefix binds it to tenants (NULL: unchanged, '''': none)';

-- ----------------------------------------------------------------------------
-- Function: warren.revoke_producer(login text, templates text[], jobs text[])
--     Operator: takes templates and config jobs away from a producer login (both NULL: all).
-- Parameters:
--     login     - the login
--     templates - templates to take away
--     jobs      - config jobs
-- Returns: void
-- Locks:   the rows it deletes
-- Writes:  warren.producer_logins or warren.producer_grants
CREATE OR REPLACE FUNCTION warren.revoke_producer(login text, templates text[], jobs text[])
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF templates IS NULL AND jobs IS NULL THEN
        DELETE FROM warren.producer_logins l WHERE l.login = revoke_producer.login;
        RETURN;
    END IF;
    DELETE FROM warren.producer_grants g
     WHERE g.login = revoke_producer.login
       AND ((g.kind = 'template' AND g.name = ANY (templates))
            OR (g.kind = 'job' AND g.name = ANY (jobs)));
END
$$;
COMMENT ON FUNCTION warren.revoke_producer(text, text[], text[]) IS
    'Operator: takes templates and config jobs away from a producer login (both NULL: all its '
    'grants in this database)';
