-- 007_retry_wakes_the_relay.sql: no schema change. It replaced
-- warren.wp_after_failure, so that a run that goes to retrying wakes the
-- planners (NOTIFY warren_jobs, delivered at commit): the function and why are
-- in sql/functions/retry.sql. The version stays recorded.
-- Never edit this file once landed: add NNN_*.sql instead.

INSERT INTO warren.schema_migrations (version, name) VALUES (7, '007_retry_wakes_the_relay')
ON CONFLICT (version) DO NOTHING;
