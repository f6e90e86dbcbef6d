-- status.sql: what an application can see (docs/api-jobs.md): the state of
-- its jobs and runs, scoped by its producer grants. The one current
-- definition; `warren migrate` re-applies it.
DO $$ BEGIN NULL; END $$; -- (placeholder until the status functions land)
