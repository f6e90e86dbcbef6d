#!/usr/bin/env bash
# e2e_node_worker.sh: the Node.js example worker (examples/workers/node, amqplib
# and pg from npm) against the real servers and the real planner, as
# e2e_python_worker.sh does for the Python one: a job without a C handler fires
# every second; the Node worker claims, heartbeats and completes its runs
# through the SQL functions (the first attempt of each fails on purpose, so
# every run also goes through a retry with backoff); its effect table, keyed
# by run key, ends with exactly one row per succeeded run; a malformed message
# is rejected into warren.dead; a second Node worker runs one job whose work
# (4 s) outlasts its lease (3 s) on heartbeats alone; both exit 0 on SIGTERM.
#
# The npm packages are installed with `npm ci` (package-lock.json) into
# examples/workers/node/node_modules when they are missing: the npm registry
# must be reachable then. Fails (never skips) without node, npm, the packages
# or the servers.
set -euo pipefail

fail() {
    echo "e2e_node_worker: FAIL: $*" >&2
    exit 1
}
# shellcheck source=tests/lib_e2e.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib_e2e.sh"
e2e_init node
NODE_DIR="$SRC/examples/workers/node"
command -v node >/dev/null 2>&1 || fail "node not found: install nodejs (scripts/deps.sh)"
have_packages() { (cd "$NODE_DIR" && node -e "require('amqplib'); require('pg')") 2>/dev/null; }
if ! have_packages; then
    command -v npm >/dev/null 2>&1 || fail "npm not found: it comes with Node.js (nodejs or npm)"
    for try in 1 2 3; do
        (cd "$NODE_DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) && break
        echo "e2e_node_worker: npm ci failed (try $try of 3)" >&2
        sleep $((try * 5))
    done
    have_packages || fail "amqplib and pg are not installed in $NODE_DIR: npm ci failed (is the npm registry reachable?)"
fi
echo "e2e_node_worker: node $(node --version), amqplib $(cd "$NODE_DIR" && node -p "require('amqplib/package.json').version"), pg $(cd "$NODE_DIR" && node -p "require('pg/package.json').version")"

e2e_warren 'planner = { tick = "200ms"; horizon = "10s"; reconcile_grace = "5s"; };
worker = { heartbeat_margin = "1s"; }; # lets nodeslow have a 3 s lease
jobs = (
  { name = "nodejob"; every = "1s"; queue = "node"; payload = { lang = "node"; };
    overlap = "allow"; lease = "6s"; retry = { base = "100ms"; cap = "200ms"; }; },
  # heartbeats: one run whose work (4 s) outlasts its lease (3 s)
  { name = "nodeslow"; at = "2099-01-01T00:00:00Z"; queue = "nodeslow"; lease = "3s";
    retry = { max_attempts = 1; }; }
);'
e2e_planner
node "$NODE_DIR/worker.js" --queue node --database-url "$DB" --amqp-url "$AMQP" \
    --worker-id node-e2e --table node_effects --fail-first 1 --concurrency 4 2>"$WORK/worker.log" &
WORKER=$!
PIDS+=($WORKER)
node "$NODE_DIR/worker.js" --queue nodeslow --database-url "$DB" --amqp-url "$AMQP" \
    --worker-id node-slow --table node_slow_effects --work-ms 4000 2>"$WORK/slow.log" &
SLOW=$!
PIDS+=($SLOW)
q "INSERT INTO warren.runs (job, scheduled_at, due_at, origin)
   VALUES ('nodeslow', date_trunc('second', now()) - interval '1 minute', now(), 'trigger');
   NOTIFY warren_jobs" >/dev/null

sleep 8
paused_at=$(q "UPDATE warren.jobs SET paused = true; SELECT now()")

for _ in $(seq 1 100); do
    left=$(q "SELECT count(*) FROM warren.runs WHERE state NOT IN ('succeeded','skipped') AND due_at < now() - interval '2 seconds'")
    [ "$left" = 0 ] && break
    sleep 0.3
done
[ "$left" = 0 ] || {
    tail -20 "$WORK/worker.log" >&2
    q "SELECT run_key, state, attempt FROM warren.runs ORDER BY 1" >&2
    fail "$left run(s) did not finish"
}

# A malformed message: rejected without requeue, it dead-letters to warren.dead.
e2e_malformed node

# The slow run: 4 s of work under a 3 s lease, kept by heartbeats alone.
for _ in $(seq 1 60); do
    slow=$(q "SELECT state FROM warren.runs WHERE job = 'nodeslow'")
    [ "$slow" = succeeded ] && break
    sleep 0.3
done
[ "$slow" = succeeded ] || { tail -20 "$WORK/slow.log" >&2; fail "the 4 s run under a 3 s lease ended $slow"; }
slowok=$(q "SELECT r.attempt = 1 AND r.finished_at - r.started_at >= interval '4 seconds'
              AND (SELECT count(*) FROM node_slow_effects) = 1
            FROM warren.runs r WHERE r.job = 'nodeslow'")
[ "$slowok" = t ] || fail "the slow run was not one 4 s attempt with one effect"
grep -q "heartbeat refused" "$WORK/slow.log" && fail "the slow run lost its lease"

for p in "$SLOW" "$WORKER"; do
    kill -TERM "$p"
    wait "$p" || fail "a Node worker did not exit 0 on SIGTERM (logs in $WORK)"
done
kill -TERM "${PIDS[0]}"
wait "${PIDS[0]}" || true
PIDS=()

succeeded=$(q "SELECT count(*) FROM warren.runs WHERE state = 'succeeded' AND job = 'nodejob'")
due=$(q "SELECT count(*) FROM warren.runs WHERE job = 'nodejob' AND due_at < '$paused_at'")
[ "$due" -ge 1 ] || fail "no nodejob run was due in the 8 s before the pause"
unfinished=$(q "SELECT count(*) FROM warren.runs WHERE job = 'nodejob' AND due_at < '$paused_at'
                AND state <> 'succeeded'")
[ "$unfinished" = 0 ] || fail "$unfinished of $due run(s) due before the pause did not succeed"
# Exactly one effect per succeeded run, none for anything else, all from attempt 2.
mismatch=$(q "SELECT count(*) FROM (SELECT * FROM warren.runs WHERE job = 'nodejob') r
              FULL JOIN node_effects e USING (run_key)
              WHERE (r.state = 'succeeded') IS DISTINCT FROM (e.run_key IS NOT NULL)")
[ "$mismatch" = 0 ] || fail "$mismatch run(s) without exactly one effect"
bad=$(q "SELECT count(*) FROM node_effects WHERE attempt <> 2 OR payload->>'lang' <> 'node'")
[ "$bad" = 0 ] || fail "$bad effect(s) not from attempt 2 with the job's payload"
hist=$(q "SELECT count(*) FROM warren.runs r WHERE r.state = 'succeeded' AND r.job = 'nodejob' AND
          (SELECT string_agg(outcome, ',' ORDER BY attempt) FROM warren.attempts a
            WHERE a.run_key = r.run_key) IS DISTINCT FROM 'retry,succeeded'")
[ "$hist" = 0 ] || fail "$hist run(s) without the history retry,succeeded"
grep -q "rejecting malformed message" "$WORK/worker.log" || fail "worker did not log the rejection"
echo "e2e_node_worker: $succeeded runs, each with one effect (attempt 2 after a retry); malformed message dead-lettered; a 4 s run kept its 3 s lease by heartbeats"
echo "1 passed, 0 failed"
