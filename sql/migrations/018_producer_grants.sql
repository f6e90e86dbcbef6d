-- 018_producer_grants.sql: least privilege for producers (docs/api-jobs.md,
-- "Producer grants"): which templates and config jobs a producer login may
-- use in THIS database, and the tenants it is bound to. Membership in the
-- cluster-wide role warren_producer only lets a login execute the API
-- functions; what it may do with them in a database is what these tables
-- grant there (`warren grant-producer`). The checks are in
-- sql/functions/producer.sql, re-applied by every `warren migrate`.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

CREATE TABLE IF NOT EXISTS warren.producer_logins (
    login         text PRIMARY KEY CHECK (length(login) BETWEEN 1 AND 63),
    tenant_prefix text CHECK (length(tenant_prefix) BETWEEN 1 AND 200
                              AND tenant_prefix !~ '[^A-Za-z0-9._:@-]'),
    granted_at    timestamptz NOT NULL DEFAULT now(),
    granted_by    text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE warren.producer_logins IS
    'Producer logins of this database (`warren grant-producer`): a login not listed here (and '
    'not privileged) may call no API function in this database';
COMMENT ON COLUMN warren.producer_logins.login IS 'The login (session_user)';
COMMENT ON COLUMN warren.producer_logins.tenant_prefix IS
    'NULL: any tenant (or none); else every job and run the login makes or touches has a tenant '
    'starting with this prefix';
COMMENT ON COLUMN warren.producer_logins.granted_at IS 'When first granted (database clock)';
COMMENT ON COLUMN warren.producer_logins.granted_by IS 'The login that granted it';

CREATE TABLE IF NOT EXISTS warren.producer_grants (
    login      text NOT NULL REFERENCES warren.producer_logins (login) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('template', 'job')),
    name       text NOT NULL CHECK (name ~ '^[A-Za-z0-9]' AND name !~ '[^A-Za-z0-9._-]'
                                    AND length(name) <= 200),
    granted_at timestamptz NOT NULL DEFAULT now(),
    granted_by text NOT NULL DEFAULT session_user,
    PRIMARY KEY (login, kind, name)
);
COMMENT ON TABLE warren.producer_grants IS
    'What a producer login may use in this database: templates (create API jobs from them, '
    'enqueue on them) and config jobs (enqueue on them); set by `warren grant-producer`';
COMMENT ON COLUMN warren.producer_grants.login IS 'The login (warren.producer_logins)';
COMMENT ON COLUMN warren.producer_grants.kind IS 'template or job (a config job that is not a template)';
COMMENT ON COLUMN warren.producer_grants.name IS 'The template''s or config job''s name';
COMMENT ON COLUMN warren.producer_grants.granted_at IS 'When it was granted (database clock)';
COMMENT ON COLUMN warren.producer_grants.granted_by IS 'The login that granted it';

-- The upgrade: before this migration any member of warren_producer could do
-- anything through the API. Each login that created API jobs here keeps what
-- it used: its jobs' templates (so it still owns and changes its jobs). What
-- it enqueued on is not recorded per login, so those grants are the
-- operator's to give: a WARNING (printed by `warren migrate`) names every
-- member of warren_producer left without grants here and the command. Only
-- on the first application: a psql re-run must not undo a later revoke.
DO $$
DECLARE
    r record;
BEGIN
    IF EXISTS (SELECT 1 FROM warren.schema_migrations WHERE version = 18) THEN
        RETURN;
    END IF;
    INSERT INTO warren.producer_logins (login, granted_by)
    SELECT DISTINCT j.created_by, 'migration 018'
      FROM warren.jobs j JOIN pg_catalog.pg_roles ro ON ro.rolname = j.created_by
     WHERE j.origin = 'api' AND length(j.created_by) BETWEEN 1 AND 63
    ON CONFLICT (login) DO NOTHING;
    INSERT INTO warren.producer_grants (login, kind, name, granted_by)
    SELECT DISTINCT j.created_by, 'template', j.template, 'migration 018'
      FROM warren.jobs j JOIN warren.producer_logins l ON l.login = j.created_by
     WHERE j.origin = 'api'
    ON CONFLICT DO NOTHING;
    FOR r IN SELECT l.login, string_agg(g.name, ' --template ' ORDER BY g.name) AS templates
               FROM warren.producer_logins l
               LEFT JOIN warren.producer_grants g ON g.login = l.login
              GROUP BY l.login ORDER BY l.login
    LOOP
        RAISE WARNING 'migration 018: producer login "%" was granted the templates of the API jobs '
                     'it created (--template %); grant what else it enqueues on with '
                     '`warren grant-producer % --template T --job J`', r.login, r.templates, r.login;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'warren_producer') THEN
        FOR r IN SELECT m.rolname AS login
                   FROM pg_catalog.pg_auth_members am
                   JOIN pg_catalog.pg_roles p ON p.oid = am.roleid AND p.rolname = 'warren_producer'
                   JOIN pg_catalog.pg_roles m ON m.oid = am.member
                  WHERE m.rolcanlogin
                    AND NOT EXISTS (SELECT 1 FROM warren.producer_logins l WHERE l.login = m.rolname)
                  ORDER BY m.rolname
        LOOP
            RAISE WARNING 'migration 018: login "%" is a member of warren_producer but has no '
                         'producer grants in this database: its API calls here are refused until '
                         'an operator runs `warren grant-producer % --template T --job J`',
                         r.login, r.login;
        END LOOP;
    END IF;
END
$$;

INSERT INTO warren.schema_migrations (version, name) VALUES (18, '018_producer_grants')
ON CONFLICT (version) DO NOTHING;
