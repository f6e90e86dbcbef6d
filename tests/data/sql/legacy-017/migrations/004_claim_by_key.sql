-- 004_claim_by_key.sql: no schema change. It replaced warren.claim_many,
-- which now finds its rows one run_key probe per key, whatever the planner
-- believes about warren.runs: the function and the measurements behind it
-- are in sql/functions/claim.sql. The version stays recorded.
-- Never edit this file once landed: add NNN_*.sql instead.

INSERT INTO warren.schema_migrations (version, name) VALUES (4, '004_claim_by_key')
ON CONFLICT (version) DO NOTHING;
