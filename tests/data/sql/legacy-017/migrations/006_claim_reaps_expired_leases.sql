-- 006_claim_reaps_expired_leases.sql: no schema change. It replaced
-- warren.claim, which for a job with an overlap policy (skip, queue,
-- cancel_previous) first reaps the job's other runs whose lease ran out: the
-- function and why are in sql/functions/claim.sql (warren.wp_claim). The
-- version stays recorded.
-- Never edit this file once landed: add NNN_*.sql instead.

INSERT INTO warren.schema_migrations (version, name) VALUES (6, '006_claim_reaps_expired_leases')
ON CONFLICT (version) DO NOTHING;
