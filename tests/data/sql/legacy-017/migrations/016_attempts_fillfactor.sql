-- 016_attempts_fillfactor.sql: room on each page of warren.attempts for the
-- completion's update of the rows the claim inserted there, so that it is a
-- HOT update (no new attempts_pkey entry, no new index page touched).
--
-- Why: a claim inserts one attempts row per run and the completion updates
-- it (finished_at, outcome, error; no indexed column). With the default
-- fillfactor (100) the claims fill each page, the update finds no room on
-- it and writes the new version elsewhere, with a new attempts_pkey entry.
-- With 50 the updates of a page's rows fit on it: measured with
-- tests/bench_sql_cost.py, 87 % of the completions' updates were HOT and
-- complete_many's backend CPU fell by about 12 % (docs/benchmarks.md,
-- "Eleventh session: PostgreSQL's cost per run"). The table takes up to
-- twice the pages for the same history (an attempts row is about 100
-- bytes). Existing pages are not rewritten: only pages filled from now on
-- keep the room. warren.runs gets no such setting: its state column is
-- indexed (and in the partial indexes' predicates), so its updates are
-- never HOT whatever room its pages have.
-- Plain SQL, appliable with psql and safe to re-run; records its own version.
-- Never edit this file once landed: add NNN_*.sql instead.

ALTER TABLE warren.attempts SET (fillfactor = 50);

INSERT INTO warren.schema_migrations (version, name) VALUES (16, '016_attempts_fillfactor')
ON CONFLICT (version) DO NOTHING;
