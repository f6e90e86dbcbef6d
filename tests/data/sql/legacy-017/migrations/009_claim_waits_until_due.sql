-- 009_claim_waits_until_due.sql: no schema change. It made warren.claim and
-- warren.claim_many wait until the run is due and time the claim from then
-- (warren.wp_claim, warren.wp_max_wait, warren.wp_wait_until): the functions
-- and why are in sql/functions/claim.sql. A planner releases runs early
-- (planner.release_lead) only on a database that has this version recorded.
-- Never edit this file once landed: add NNN_*.sql instead.

INSERT INTO warren.schema_migrations (version, name) VALUES (9, '009_claim_waits_until_due')
ON CONFLICT (version) DO NOTHING;
