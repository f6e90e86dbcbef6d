#!/usr/bin/env bash
# e2e_node_worker.sh: the Node.js example worker (examples/workers/node, amqplib
# and pg from npm) against the real servers and the real planner: the
# scenario of e2e_example in tests/lib_e2e.sh (runs retried once then
# succeeded with exactly one effect each, a malformed message dead-lettered, a
# 4 s run kept under its 3 s lease by heartbeats, exit 0 on SIGTERM).
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
command -v node >/dev/null 2>&1 || fail "node not found: install nodejs (scripts/deps.sh)"
NODE_DIR="${WARREN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}/examples/workers/node"
have_packages() { (cd "$NODE_DIR" && node -e "require('amqplib'); require('pg')") 2>/dev/null; }
if ! have_packages; then
    command -v npm >/dev/null 2>&1 || fail "npm not found: it comes with Node.js (nodejs or npm)"
    for try in 1 2 3; do
        # 3 tries of at most 120 s: well inside ctest's 900 s for this test
        (cd "$NODE_DIR" && timeout 120 npm ci --no-audit --no-fund --loglevel=error) && break
        echo "e2e_node_worker: npm ci failed (try $try of 3)" >&2
        sleep $((try * 5))
    done
    have_packages || fail "amqplib and pg are not installed in $NODE_DIR: npm ci failed (is the npm registry reachable?)"
fi
echo "e2e_node_worker: node $(node --version), amqplib $(cd "$NODE_DIR" && node -p "require('amqplib/package.json').version"), pg $(cd "$NODE_DIR" && node -p "require('pg/package.json').version")"
e2e_init node

start_node() { # QUEUE ID TABLE MODE
    local extra=(--fail-first 1 --concurrency 4)
    [ "$4" = slow ] && extra=(--work-ms 4000)
    node "$NODE_DIR/worker.js" --queue "$1" --database-url "$WDB" --amqp-url "$AMQP" \
        --worker-id "$2" --table "$3" "${extra[@]}" 2>"$WORK/$2.log" &
}

e2e_example node node start_node
echo "e2e_node_worker: $E2E_SUCCEEDED runs, each with one effect (attempt 2 after a retry); malformed message dead-lettered; a 4 s run kept its 3 s lease by heartbeats"
echo "1 passed, 0 failed"
