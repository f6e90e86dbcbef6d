# lib_e2e.sh: what the end-to-end tests of the example workers share (sourced
# by tests/e2e_*_worker.sh after they define fail()): a fresh database and
# vhost on the test servers, warren migrated and synced for a config, the
# real planner, and a malformed message published to a ready queue.
#
#   e2e_init NAME       DB, AMQP (URLs), WORK (a temporary directory), SRC,
#                       BIN; stops every pid in PIDS on exit
#   e2e_warren CONFIG   writes $WORK/warren.cfg (the servers first, then
#                       CONFIG), runs migrate, topology and sync
#   e2e_planner         starts `warren planner` (its pid is PIDS[0])
#   q SQL               one psql query on DB, unaligned
#   e2e_malformed QUEUE publishes "not json at all" to warren.ready/QUEUE and
#                       waits for it in warren.dead (the worker rejected it)

PY=/usr/bin/python3 # Debian's: python3-pika and python3-psycopg2 live there
[ -x "$PY" ] || PY=python3
PIDS=()

e2e_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}

e2e_init() {
    [ -n "${WARREN_TEST_PG_URL:-}" ] ||
        fail "WARREN_TEST_PG_URL is not set (eval \"\$(tests/servers.sh start)\")"
    [ -n "${WARREN_TEST_AMQP_URL:-}" ] || fail "WARREN_TEST_AMQP_URL is not set"
    SRC=${WARREN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
    BIN=${WARREN_BIN:-$SRC/build/warren}
    [ -x "$BIN" ] || fail "no warren binary at $BIN (set WARREN_BIN)"
    "$PY" -c 'import pika' || fail "python3-pika missing (scripts/deps.sh)"
    local name="warren_t_$1_$(date +%s)_$$" mgmt user hostport creds host
    WORK=$(mktemp -d "/tmp/warren-e2e-$1-XXXXXX")
    trap e2e_cleanup EXIT
    psql -qX "$WARREN_TEST_PG_URL" -c "CREATE DATABASE $name" >/dev/null
    DB="${WARREN_TEST_PG_URL%/*}/$name"
    mgmt=${WARREN_TEST_MGMT_URL:-}
    if [ -z "$mgmt" ]; then
        hostport=${WARREN_TEST_AMQP_URL#amqp://}
        creds=${hostport%%@*}
        host=${hostport#*@}
        host=${host%%:*}
        mgmt="http://$creds@$host:55673"
    fi
    user=$(printf '%s' "${WARREN_TEST_AMQP_URL#amqp://}" | cut -d: -f1)
    curl -sf -X PUT "$mgmt/api/vhosts/$name" >/dev/null || fail "cannot create vhost $name via $mgmt"
    curl -sf -X PUT -H 'content-type: application/json' \
        -d '{"configure":".*","write":".*","read":".*"}' \
        "$mgmt/api/permissions/$name/$user" >/dev/null || fail "cannot grant vhost permissions"
    AMQP="${WARREN_TEST_AMQP_URL%/*}/$name"
    unset WARREN_DATABASE_URL WARREN_AMQP_URL
}

e2e_warren() {
    printf 'database = { url = "%s"; };\nbroker = { url = "%s"; };\n%s\n' "$DB" "$AMQP" "$1" \
        >"$WORK/warren.cfg"
    local step
    for step in migrate topology sync; do
        "$BIN" "$step" -c "$WORK/warren.cfg" >"$WORK/$step.log" 2>&1 ||
            { cat "$WORK/$step.log" >&2; fail "warren $step"; }
    done
}

e2e_planner() {
    "$BIN" planner -c "$WORK/warren.cfg" 2>"$WORK/planner.log" &
    PIDS+=($!)
}

q() { psql -qXAt "$DB" -c "$1"; }

e2e_malformed() {
    "$PY" - "$AMQP" "$1" <<'EOF' || fail "malformed message did not reach warren.dead"
import sys, time, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.confirm_delivery()
ch.basic_publish("warren.ready", sys.argv[2], b"not json at all",
                 pika.BasicProperties(message_id="junk-1", headers={"x-warren-queue": sys.argv[2]},
                                      delivery_mode=2))
for _ in range(50):
    m, p, body = ch.basic_get("warren.dead", auto_ack=True)
    if m is not None and body == b"not json at all":
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
EOF
}
