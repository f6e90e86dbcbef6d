#!/usr/bin/env bash
# e2e_python_worker.sh: the Python example worker (examples/workers/python)
# against the real servers and the real planner: a job without a C handler
# fires every second, the planner releases its runs into warren.ready.py, the
# Python worker claims, heartbeats and completes them through the SQL
# functions (the first attempt of each run fails on purpose, so every run
# also goes through a retry with backoff), and its effect table, keyed by run
# key, ends with exactly one row per succeeded run. A malformed message is
# rejected into warren.dead. A second Python worker runs one job whose work
# (4 s) outlasts its lease (3 s): it succeeds in one attempt only because its
# heartbeats extend the lease. Fails (never skips) without the servers.
set -euo pipefail

fail() {
    echo "e2e_python_worker: FAIL: $*" >&2
    exit 1
}
# shellcheck source=tests/lib_e2e.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib_e2e.sh"
e2e_init py
"$PY" -c 'import psycopg2' || fail "python3-psycopg2 missing (scripts/deps.sh)"

e2e_warren 'planner = { tick = "200ms"; horizon = "10s"; reconcile_grace = "5s"; };
worker = { heartbeat_margin = "1s"; }; # lets pyslow have a 3 s lease
jobs = (
  { name = "pyjob"; every = "1s"; queue = "py"; payload = { lang = "python"; };
    overlap = "allow"; lease = "6s"; retry = { base = "100ms"; cap = "200ms"; }; },
  # heartbeats: one run whose work (4 s) outlasts its lease (3 s)
  { name = "pyslow"; at = "2099-01-01T00:00:00Z"; queue = "pyslow"; lease = "3s";
    retry = { max_attempts = 1; }; }
);'
e2e_planner
"$PY" "$SRC/examples/workers/python/worker.py" --queue py --database-url "$DB" --amqp-url "$AMQP" \
    --worker-id py-e2e --table py_effects --fail-first 1 2>"$WORK/worker.log" &
WORKER=$!
PIDS+=($WORKER)
"$PY" "$SRC/examples/workers/python/worker.py" --queue pyslow --database-url "$DB" --amqp-url "$AMQP" \
    --worker-id py-slow --table py_slow_effects --work-seconds 4 2>"$WORK/slow.log" &
SLOW=$!
PIDS+=($SLOW)
psql -qXAt "$DB" -c "INSERT INTO warren.runs (job, scheduled_at, due_at, origin)
    VALUES ('pyslow', date_trunc('second', now()) - interval '1 minute', now(), 'trigger');
    NOTIFY warren_jobs" >/dev/null

sleep 8
paused_at=$(psql -qXAt "$DB" -c "UPDATE warren.jobs SET paused = true; SELECT now()")

for _ in $(seq 1 100); do
    left=$(q "SELECT count(*) FROM warren.runs WHERE state NOT IN ('succeeded','skipped') AND due_at < now() - interval '2 seconds'")
    [ "$left" = 0 ] && break
    sleep 0.3
done
[ "$left" = 0 ] || { tail -20 "$WORK/worker.log"; q "SELECT run_key, state, attempt FROM warren.runs ORDER BY 1" >&2; fail "$left run(s) did not finish"; }

# A malformed message: rejected without requeue, it dead-letters to warren.dead.
e2e_malformed py

# The slow run: its 4 s of work outlasted its 3 s lease on heartbeats alone
# (without them the worker stops it after 2 s and the reaper takes the run).
for _ in $(seq 1 60); do
    slow=$(q "SELECT state FROM warren.runs WHERE job = 'pyslow'")
    [ "$slow" = succeeded ] && break
    sleep 0.3
done
[ "$slow" = succeeded ] || { tail -20 "$WORK/slow.log"; fail "the 4 s run under a 3 s lease ended $slow"; }
slowok=$(q "SELECT r.attempt = 1 AND r.finished_at - r.started_at >= interval '4 seconds'
              AND (SELECT count(*) FROM py_slow_effects) = 1
              AND (SELECT string_agg(outcome, ',') FROM warren.attempts) LIKE '%succeeded%'
            FROM warren.runs r WHERE r.job = 'pyslow'")
[ "$slowok" = t ] || fail "the slow run was not one 4 s attempt with one effect"
grep -q "heartbeat refused\|no heartbeat for too long" "$WORK/slow.log" && fail "the slow run lost its lease"
kill -TERM "$SLOW"
wait "$SLOW" || fail "the slow Python worker did not exit 0 on SIGTERM"
kill -TERM "$WORKER"
wait "$WORKER" || fail "the Python worker did not exit 0 on SIGTERM"
kill -TERM "${PIDS[0]}"
wait "${PIDS[0]}" || true
PIDS=()

succeeded=$(q "SELECT count(*) FROM warren.runs WHERE state = 'succeeded' AND job = 'pyjob'")
# Every run due before the pause succeeded (no count of runs per second: the
# machine's speed is not what this test checks).
due=$(q "SELECT count(*) FROM warren.runs WHERE job = 'pyjob' AND due_at < '$paused_at'")
[ "$due" -ge 1 ] || fail "no pyjob run was due in the 8 s before the pause"
unfinished=$(q "SELECT count(*) FROM warren.runs WHERE job = 'pyjob' AND due_at < '$paused_at'
                AND state <> 'succeeded'")
[ "$unfinished" = 0 ] || fail "$unfinished of $due run(s) due before the pause did not succeed"
[ "$succeeded" -ge "$due" ] || fail "$succeeded run(s) succeeded, $due were due"
# Exactly one effect per succeeded run, none for anything else, all from attempt 2.
mismatch=$(q "SELECT count(*) FROM (SELECT * FROM warren.runs WHERE job = 'pyjob') r
              FULL JOIN py_effects e USING (run_key)
              WHERE (r.state = 'succeeded') IS DISTINCT FROM (e.run_key IS NOT NULL)")
[ "$mismatch" = 0 ] || fail "$mismatch run(s) without exactly one effect"
effects=$(q "SELECT count(*) FROM py_effects")
[ "$effects" = "$succeeded" ] || fail "$effects effects for $succeeded runs"
bad=$(q "SELECT count(*) FROM py_effects WHERE attempt <> 2 OR payload->>'lang' <> 'python'")
[ "$bad" = 0 ] || fail "$bad effect(s) not from attempt 2 with the job's payload"
hist=$(q "SELECT count(*) FROM warren.runs r WHERE r.state = 'succeeded' AND r.job = 'pyjob' AND
          (SELECT string_agg(outcome, ',' ORDER BY attempt) FROM warren.attempts a
            WHERE a.run_key = r.run_key) IS DISTINCT FROM 'retry,succeeded'")
[ "$hist" = 0 ] || fail "$hist run(s) without the history retry,succeeded"

grep -q "rejecting malformed message" "$WORK/worker.log" || fail "worker did not log the rejection"
echo "e2e_python_worker: $succeeded runs, each with one effect (attempt 2 after a retry); malformed message dead-lettered; a 4 s run kept its 3 s lease by heartbeats"
echo "1 passed, 0 failed"
