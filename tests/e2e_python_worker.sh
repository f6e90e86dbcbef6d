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
"$PY" -c 'import psycopg2, pika' || fail "python3-psycopg2 or python3-pika missing (scripts/deps.sh)"

# The worker's own bookkeeping first, with recording stand-ins for the channels
# (no broker delivers in a chosen order on cue): a delivery due later is held,
# the due ones are claimed in one batch with their keys sorted; acknowledgements
# are one multiple-ack for the settled head of the delivery order and single
# acks behind an open delivery, never an open one; a malformed message's dead
# letter carries the reason and the original is acked after it was published.
"$PY" - "$(dirname "${BASH_SOURCE[0]}")/../examples/workers/python" <<'PYEOF' ||
import sys, time, types
sys.path.insert(0, sys.argv[1])
import worker as W

w = W.Worker.__new__(W.Worker)
w.args = types.SimpleNamespace(concurrency=8, queue="q", fail_first=0, work_seconds=0)
w.worker_id, w.queue, w.gen = "w1", "warren.ready.q", 1
w.unacked, w.held, w.running, w.finished = W.collections.OrderedDict(), [], set(), []
w.clock = (W.parse_time("2030-01-01T00:00:00Z"), time.monotonic())
acks, published, claimed = [], [], []
w.ch = types.SimpleNamespace(
    basic_ack=lambda tag, multiple=False: acks.append((tag, multiple)),
    basic_reject=lambda tag, requeue: acks.append((tag, "reject")),
    basic_nack=lambda tag, requeue: acks.append((tag, "nack")))
w.dch = types.SimpleNamespace(basic_publish=lambda ex, rk, body, props: published.append(
    (ex, rk, body, props)))
w.claim = lambda keys: claimed.append(keys) or []
w.decide_unclaimed = lambda batch: None
M = types.SimpleNamespace


def deliver(tag, key, due):
    props = M(message_id=key, headers={"x-warren-due-at": due}, content_type="application/json")
    w.on_message(1, M(delivery_tag=tag), props,
                 ('{"run_key": "%s", "due_at": "%s"}' % (key, due)).encode())


W.log = lambda m: None
now, later = "2030-01-01T00:00:00.000Z", "2030-01-01T00:00:05.000Z"
for tag, key in ((1, "j@d"), (2, "j@b"), (3, "j@c"), (4, "j@a")):
    deliver(tag, key, now)
deliver(5, "j@later", later)
w.on_message(1, M(delivery_tag=6), M(message_id=None, headers={"keep": "me"}, content_type=None),
             b"not json")
assert len(published) == 1 and published[0][0] == "warren.dead", published
h = published[0][3].headers
assert h["x-warren-error"].startswith("malformed message: ") and h["keep"] == "me", h
assert h["x-warren-source-queue"] == "warren.ready.q", h
assert acks == [(6, False)], acks  # after the publish (pika raises if it is not confirmed)
w.claim_due()
assert claimed == [["j@a", "j@b", "j@c", "j@d"]], claimed
assert [d.run_key for d in w.held] == ["j@later"], w.held
d = {tag: v[0] for tag, v in w.unacked.items()}
w.settle([d[2], d[3]])
assert acks[1:] == [(2, False), (3, False)], acks
w.settle([d[4], d[1]])
assert acks[3:] == [(4, True)], acks
assert list(w.unacked) == [5], list(w.unacked)
w.settle([d[5]])
assert acks[4:] == [(5, True)], acks
print("e2e_python_worker: holding, batch claims, acknowledgements and dead letters as specified")
PYEOF
    fail "examples/workers/python/worker.py: holding, claim batches, acks or dead letters"
e2e_init py

start_python() { # QUEUE ID TABLE MODE
    local extra=(--fail-first 1)
    [ "$4" = slow ] && extra=(--work-seconds 4)
    "$PY" "$SRC/examples/workers/python/worker.py" --queue "$1" --database-url "$WDB" \
        --amqp-url "$AMQP" --worker-id "$2" --table "$3" "${extra[@]}" 2>"$WORK/$2.log" &
}

e2e_example py python start_python
echo "e2e_python_worker: $E2E_SUCCEEDED runs, each with one effect (attempt 2 after a retry); malformed message dead-lettered; a 4 s run kept its 3 s lease by heartbeats"
echo "1 passed, 0 failed"
