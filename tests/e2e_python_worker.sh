#!/usr/bin/env bash
# e2e_python_worker.sh: the Python example worker (examples/workers/python,
# pika and psycopg2 from Debian) against the real servers and the real
# planner: the scenario of e2e_example in tests/lib_e2e.sh (runs retried once
# then succeeded with exactly one effect each, a malformed message
# dead-lettered, a 4 s run kept under its 3 s lease by heartbeats, exit 0 on
# SIGTERM). Fails (never skips) without the servers or the Python packages.
set -euo pipefail

fail() {
    echo "e2e_python_worker: FAIL: $*" >&2
    exit 1
}
# shellcheck source=tests/lib_e2e.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib_e2e.sh"
e2e_init py
"$PY" -c 'import psycopg2' || fail "python3-psycopg2 missing (scripts/deps.sh)"

start_python() { # QUEUE ID TABLE MODE
    local extra=(--fail-first 1)
    [ "$4" = slow ] && extra=(--work-seconds 4)
    "$PY" "$SRC/examples/workers/python/worker.py" --queue "$1" --database-url "$WDB" \
        --amqp-url "$AMQP" --worker-id "$2" --table "$3" "${extra[@]}" 2>"$WORK/$2.log" &
}

e2e_example py python start_python
echo "e2e_python_worker: $E2E_SUCCEEDED runs, each with one effect (attempt 2 after a retry); malformed message dead-lettered; a 4 s run kept its 3 s lease by heartbeats"
echo "1 passed, 0 failed"
