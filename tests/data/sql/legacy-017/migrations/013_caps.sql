-- 013_caps.sql: what the claim needs to enforce a template's (or config
-- job's) caps on running runs, max_running and max_running_per_tenant
-- (migration 012; docs/delivery.md, "Caps"), race-free and without scanning
-- every running run: the cap group and tenant a run was counted under, the
-- mark of a run released from 'waiting' that holds a slot until it is
-- claimed, and indexes for the counts and for releasing waiting runs in due
-- order. The functions are in sql/functions/ (claim.sql, caps.sql).
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

-- A run's tenant has the grammar of warren.jobs.tenant (migration 012): ''
-- would otherwise count as the same tenant as none (the claim counts
-- coalesce(tenant, '')), so one tenant could take another's slots.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'runs_tenant_grammar'
                      AND conrelid = 'warren.runs'::regclass) THEN
        ALTER TABLE warren.runs ADD CONSTRAINT runs_tenant_grammar
            CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$');
    END IF;
END
$$;

-- Set by the claim for runs of a capped group only (NULL for every other
-- run: the claim's fast path does not touch them).
ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS cap_group text;
ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS cap_tenant text;
ALTER TABLE warren.runs ADD COLUMN IF NOT EXISTS cap_released_at timestamptz;

COMMENT ON COLUMN warren.runs.cap_group IS
    'The cap group (coalesce(job.template, job.name)) the claim counted this run in when it '
    'started it or held it back as waiting; NULL: never claimed under a cap';
COMMENT ON COLUMN warren.runs.cap_tenant IS
    'The tenant the claim counted this run under (coalesce(runs.tenant, jobs.tenant), '''' for '
    'none); set with cap_group';
COMMENT ON COLUMN warren.runs.cap_released_at IS
    'When a slot was given to this waiting run (state back to planned): until its claim it holds '
    'that slot, so a newer run cannot take it first; cleared by the claim';

-- What a capped claim counts: the group's running runs and its released runs
-- not claimed yet (the same predicate as in sql/functions/caps.sql).
CREATE INDEX IF NOT EXISTS runs_cap_held ON warren.runs (cap_group, cap_tenant)
    WHERE cap_group IS NOT NULL
      AND (state = 'running'
           OR (cap_released_at IS NOT NULL AND state IN ('planned', 'published')));
-- Waiting runs in due order, per group and tenant (the release of a
-- per-tenant cap) and per group (the release of max_running).
CREATE INDEX IF NOT EXISTS runs_waiting_tenant ON warren.runs (cap_group, cap_tenant, due_at, run_key)
    WHERE state = 'waiting';
CREATE INDEX IF NOT EXISTS runs_waiting_group ON warren.runs (cap_group, due_at, run_key)
    WHERE state = 'waiting';

INSERT INTO warren.schema_migrations (version, name) VALUES (13, '013_caps')
ON CONFLICT (version) DO NOTHING;
