-- 020_tenant_caps.sql: the operator's cap on one tenant's running runs
-- (`warren tenant-cap TENANT N`, warren.set_tenant_cap; docs/delivery.md,
-- "Caps"): per tenant, not per pricing-tier template. In every cap group
-- (a template, or a config job) the tenant's runs are counted as under
-- max_running_per_tenant, with this value instead of the group's (higher
-- or lower); a group without caps gets one for this tenant. The functions
-- are in sql/functions/caps.sql (wp_tenant_cap, set_tenant_cap).
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

CREATE TABLE IF NOT EXISTS warren.tenant_caps (
    tenant      text PRIMARY KEY CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$'),
    max_running int NOT NULL CHECK (max_running BETWEEN 1 AND 1000000),
    set_at      timestamptz NOT NULL DEFAULT now(),
    set_by      text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE warren.tenant_caps IS
    'The operator''s per-tenant caps (`warren tenant-cap`, warren.set_tenant_cap): in every cap '
    'group, at most max_running runs of the tenant run at once, in place of the group''s '
    'max_running_per_tenant';
COMMENT ON COLUMN warren.tenant_caps.tenant IS 'The tenant (runs.tenant, else jobs.tenant)';
COMMENT ON COLUMN warren.tenant_caps.max_running IS
    'How many of the tenant''s runs of one cap group may run at once';
COMMENT ON COLUMN warren.tenant_caps.set_at IS 'When it was last set (database clock)';
COMMENT ON COLUMN warren.tenant_caps.set_by IS 'The login that set it';

INSERT INTO warren.schema_migrations (version, name) VALUES (20, '020_tenant_caps')
ON CONFLICT (version) DO NOTHING;
