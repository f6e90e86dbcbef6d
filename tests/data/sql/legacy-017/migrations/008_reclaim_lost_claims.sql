-- 008_reclaim_lost_claims.sql: no schema change. It added
-- warren.reclaim_many, which lets a worker whose claim answer was lost take
-- its runs again at once: the function and why are in sql/functions/claim.sql,
-- its grant in sql/functions/grants.sql. The version stays recorded.
-- Never edit this file once landed: add NNN_*.sql instead.

INSERT INTO warren.schema_migrations (version, name) VALUES (8, '008_reclaim_lost_claims')
ON CONFLICT (version) DO NOTHING;
