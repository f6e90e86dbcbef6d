-- functions.sql: every function of schema warren, one current definition
-- each, in the order they must be created (grants.sql last). `warren
-- migrate` applies the files listed here, in this order, after the pending
-- migrations, in the same transaction and under the same lock; it refuses a
-- file in functions/ that is not listed. psql runs it as well (\ir), after
-- the migrations: see install.sql. Only `\ir functions/NAME.sql` lines,
-- comments and blank lines belong here.

\ir functions/format.sql
\ir functions/validate.sql
\ir functions/access.sql
\ir functions/producer.sql
\ir functions/outbox.sql
\ir functions/retry.sql
\ir functions/locks.sql
\ir functions/caps.sql
\ir functions/claim.sql
\ir functions/lease.sql
\ir functions/complete.sql
\ir functions/take.sql
\ir functions/replay.sql
\ir functions/deliveries.sql
\ir functions/enqueue.sql
\ir functions/api_jobs.sql
\ir functions/status.sql
\ir functions/grants.sql
