-- grants.sql: who may execute what in schema warren. Applied after every
-- other function file (sql/functions.sql), at every `warren migrate`, so a
-- function added to any file is covered the next time.
--
-- Nothing in schema warren is executable by PUBLIC (CREATE FUNCTION grants
-- it by default): EXECUTE is revoked from PUBLIC and from warren_worker on
-- every function of the schema, then granted to warren_worker on the worker
-- protocol only. Every SECURITY DEFINER function sets search_path (its own
-- file's definition does). The owner (the role that migrates) keeps EXECUTE
-- on everything: the planner, relay and CLI connect as it.
-- tests/check_roles.c walks every function of the schema against its
-- expected grants: a new function must be classified there.

-- The role and its comment are written only when missing or different:
-- both need CREATEROLE, which the role that migrates may no longer have once
-- they exist (roles belong to the cluster, not to this database).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('warren_worker',
         'May execute warren.claim, warren.heartbeat and warren.complete (their batch forms, '
         'warren.reclaim_many after a lost claim answer, and warren.take_many/finish_many for '
         'an effect in the same transaction) only; grant it to worker logins'),
        ('warren_producer',
         'May create, change, pause, resume and delete API jobs and enqueue runs (warren.upsert_job(s), '
         'warren.delete_job, warren.pause_job, warren.resume_job, warren.enqueue(_many)) only; grant '
         'it to application logins')) AS v(rolname, note)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.rolname) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r.rolname);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- created concurrently by a migration of another database
            END;
        END IF;
        IF shobj_description((SELECT oid FROM pg_roles WHERE rolname = r.rolname),
                             'pg_authid') IS DISTINCT FROM r.note THEN
            EXECUTE format('COMMENT ON ROLE %I IS %L', r.rolname, r.note);
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA warren TO warren_worker, warren_producer;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'warren'::regnamespace ORDER BY p.oid
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, warren_worker, warren_producer', f);
    END LOOP;
END
$$;

-- The worker protocol (docs/worker-protocol.md): claim, heartbeat, complete,
-- their batch forms, and what a worker asks about deliveries it does not claim
-- (run_states, refuse). Which runs a warren_worker login may work on with
-- them (the queues in warren.worker_grants, its own claims) is checked inside
-- each (access.sql); the table itself is the owner's (`warren grant`).
GRANT EXECUTE ON FUNCTION warren.claim(text, text), warren.heartbeat(text, int),
    warren.complete(text, int, text, text), warren.claim_many(text[], text),
    warren.complete_many(text[], int[]), warren.reclaim_many(text[], text, int),
    warren.run_states(text[]), warren.refuse(text, text, text),
    warren.take_many(text[], text), warren.finish_many(text[], text, timestamptz)
    TO warren_worker;

-- The application API, enqueue part (issue 16; sql/functions/enqueue.sql,
-- README "Jobs from application code: the SQL API"): one-shot runs with the
-- caller's idempotency key, in the caller's transaction.
GRANT EXECUTE ON FUNCTION warren.enqueue(text, text, timestamptz, jsonb, text),
    warren.enqueue_many(jsonb)
    TO warren_producer;

-- API jobs (docs/api-jobs.md, sql/functions/api_jobs.sql): an application
-- creates, changes, pauses, resumes and deletes jobs made from a config
-- template. Which jobs it may touch is checked inside each (API jobs only,
-- never a config job or a template).
GRANT EXECUTE ON FUNCTION warren.upsert_job(text, text, jsonb), warren.upsert_jobs(jsonb),
    warren.delete_job(text), warren.pause_job(text), warren.resume_job(text)
    TO warren_producer;

-- What an application can see (docs/api-jobs.md, "What an application can
-- see"; sql/functions/status.sql): its jobs' and runs' states, scoped by its
-- producer grants inside each. Producers only: a worker learns what it needs
-- from its claims (warren.run_states), and the operator reads the tables.
GRANT EXECUTE ON FUNCTION warren.job_status(text), warren.job_statuses(text[]),
    warren.run_status(text, text), warren.run_statuses(text[])
    TO warren_producer;
