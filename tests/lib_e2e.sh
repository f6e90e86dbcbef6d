# lib_e2e.sh: what the end-to-end tests of the example workers share (sourced
# by tests/e2e_*_worker.sh after they define fail()): a fresh database and
# vhost on the test servers, warren migrated and synced for a config, the
# real planner, and a malformed message published to a ready queue.
#
#   e2e_init NAME       DB, AMQP (URLs), WORK (a temporary directory), SRC,
#                       BIN; on exit stops every pid in PIDS and drops the
#                       database and the vhost
#   e2e_warren CONFIG   writes $WORK/warren.cfg (the servers first, then
#                       CONFIG), runs migrate, topology and sync
#   e2e_planner         starts `warren planner` (its pid is PIDS[0])
#   e2e_login QUEUE...  creates the login E2E_LOGIN (a member of warren_worker,
#                       granted each QUEUE with `warren grant`, allowed the
#                       effect tables of schema public; dropped on exit) and
#                       sets WDB, the database URL as that login: the example
#                       workers connect with it, as least privilege has them
#   q SQL               one psql query on DB, unaligned
#   e2e_close_worker_connections
#                       closes every AMQP connection of the vhost but the
#                       planner's (rabbitmq-c) through the management API
#   e2e_malformed QUEUE publishes "not json at all" to warren.ready/QUEUE and
#                       waits for it in warren.dead, dead-lettered by the worker
#                       with the reason (x-warren-error "malformed message: ...",
#                       x-warren-source-queue warren.ready.QUEUE)
#   e2e_execlog TABLE   creates the example workers' effect table TABLE (as
#                       they would) with a trigger that logs every write to it
#                       into e2e_execlog, which has no unique key: the effect
#                       table's key (ON CONFLICT DO NOTHING) would hide a
#                       second committed execution of a run, the log shows it
#   e2e_example P LANG START
#                       the whole scenario of an example worker (below)

PY=/usr/bin/python3 # Debian's: python3-pika and python3-psycopg2 live there
[ -x "$PY" ] || PY=python3
PIDS=()

E2E_NAME=
E2E_MGMT=
E2E_LOGIN=
e2e_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "$E2E_NAME" ] || return 0
    psql -qX "$WARREN_TEST_PG_URL" -c "DROP DATABASE IF EXISTS $E2E_NAME WITH (FORCE)" \
        >/dev/null 2>&1 || true
    # After the database: its grants to the login went with it.
    [ -z "$E2E_LOGIN" ] || psql -qX "$WARREN_TEST_PG_URL" -c "DROP ROLE IF EXISTS $E2E_LOGIN" \
        >/dev/null 2>&1 || true
    curl -sf -X DELETE "$E2E_MGMT/api/vhosts/$E2E_NAME" >/dev/null 2>&1 || true
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
    E2E_NAME=$name
    DB="${WARREN_TEST_PG_URL%/*}/$name"
    mgmt=${WARREN_TEST_MGMT_URL:-}
    if [ -z "$mgmt" ]; then
        hostport=${WARREN_TEST_AMQP_URL#amqp://}
        creds=${hostport%%@*}
        host=${hostport#*@}
        host=${host%%:*}
        mgmt="http://$creds@$host:55673"
    fi
    E2E_MGMT=$mgmt
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

e2e_login() {
    local login="${E2E_NAME}_w" out
    psql -qX "$WARREN_TEST_PG_URL" -c "CREATE ROLE $login LOGIN IN ROLE warren_worker" >/dev/null ||
        fail "cannot create the worker login $login"
    E2E_LOGIN=$login
    out=$("$BIN" grant -c "$WORK/warren.cfg" "$login" "$@" 2>&1) || fail "warren grant: $out"
    # The example workers create their effect table if missing (it exists:
    # e2e_execlog made it) and write it and, through its trigger, e2e_execlog.
    q "GRANT USAGE, CREATE ON SCHEMA public TO $login;
       GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO $login" >/dev/null ||
        fail "cannot grant $login the effect tables"
    WDB=$(printf '%s' "$DB" | sed -E "s#^([a-z]+://)[^@/]*@#\1$login@#")
    [ "$WDB" != "$DB" ] || fail "cannot put the login into $DB"
}

e2e_execlog() {
    q "CREATE TABLE IF NOT EXISTS e2e_execlog (run_key text NOT NULL, attempt int, tbl text NOT NULL,
         at timestamptz NOT NULL DEFAULT clock_timestamp());
       CREATE OR REPLACE FUNCTION e2e_log_execution() RETURNS trigger LANGUAGE plpgsql AS \$\$
       BEGIN
         INSERT INTO e2e_execlog (run_key, attempt, tbl) VALUES (NEW.run_key, NEW.attempt, TG_TABLE_NAME);
         RETURN NEW;
       END \$\$;
       CREATE TABLE IF NOT EXISTS $1 (run_key text PRIMARY KEY, attempt int NOT NULL,
         worker text NOT NULL, payload jsonb, at timestamptz NOT NULL DEFAULT now());
       -- BEFORE: it fires for a row ON CONFLICT DO NOTHING then drops as well
       CREATE TRIGGER ${1}_execlog BEFORE INSERT ON $1 FOR EACH ROW EXECUTE FUNCTION e2e_log_execution()" \
        >/dev/null || fail "cannot create the execution log for $1"
}

e2e_close_worker_connections() {
    local names c i
    # The management API lists a connection only once its statistics have
    # been collected (every 5 s by default): a connection opened a moment ago
    # may not be listed yet, so ask again for up to 20 s.
    for i in $(seq 1 40); do
        names=$(curl -sf "$E2E_MGMT/api/vhosts/$E2E_NAME/connections" | "$PY" -c '
import json, sys, urllib.parse
for c in json.load(sys.stdin):
    if (c.get("client_properties") or {}).get("product") != "rabbitmq-c":  # not the planner
        print(urllib.parse.quote(c["name"], safe=""))') || fail "cannot list the vhost's connections"
        [ -n "$names" ] && break
        sleep 0.5
    done
    [ -n "$names" ] || fail "no worker connection to close in vhost $E2E_NAME after $i tries (20 s)"
    for c in $names; do
        curl -sf -X DELETE "$E2E_MGMT/api/connections/$c" >/dev/null ||
            fail "cannot close connection $c through the management API"
    done
}

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
        # The worker's copy names the reason (its queue's own dead-lettering, the
        # fallback when that publish fails, would carry none).
        why = (p.headers or {}).get("x-warren-error", b"")
        why = why.decode() if isinstance(why, bytes) else str(why)
        src = (p.headers or {}).get("x-warren-source-queue", b"")
        src = src.decode() if isinstance(src, bytes) else str(src)
        if not why.startswith("malformed message:") or src != "warren.ready." + sys.argv[2]:
            print("dead letter without the reason: x-warren-error %r, x-warren-source-queue %r"
                  % (why, src), file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
EOF
}

# The scenario every example worker passes, P naming its jobs, queues and
# tables, LANG the payload's "lang":
# - job ${P}job fires every second on queue P, without a C handler; the
#   planner releases its runs into warren.ready.P; the worker claims,
#   heartbeats and completes them through the SQL functions, failing the
#   first attempt of each on purpose (every run also goes through a retry
#   with backoff); its effect table ${P}_effects, keyed by run key, ends with
#   exactly one row per succeeded run, all from attempt 2;
# - the broker closes the workers' connections mid-run: they reconnect and
#   their runs go on, each still executed once;
# - no attempt starts before its due time (messages arrive planner.release_lead,
#   3 s, early: the worker holds them, then claims them in batches);
# - a malformed message is dead-lettered into warren.dead with the reason;
# - a second worker runs one ${P}slow run whose work (4 s) outlasts its lease
#   (3 s): it succeeds in one attempt only because its heartbeats extend the
#   lease;
# - both workers exit 0 on SIGTERM;
# - the workers connect as a login of their own ($WDB, e2e_login), a member
#   of warren_worker granted their two queues: every attempt records it.
# START QUEUE ID TABLE MODE starts one worker in the background (stderr to
# $WORK/ID.log) and prints nothing; MODE is "fail-first" (report retry for
# attempt 1) or "slow" (work 4 s).
e2e_example() {
    local P=$1 lang=$2 start=$3 worker slow left st ok due unfinished succeeded n
    e2e_warren "planner = { tick = \"200ms\"; horizon = \"10s\"; reconcile_grace = \"5s\"; };
worker = { heartbeat_margin = \"1s\"; }; # lets ${P}slow have a 3 s lease
jobs = (
  { name = \"${P}job\"; every = \"1s\"; queue = \"$P\"; payload = { lang = \"$lang\"; };
    overlap = \"allow\"; lease = \"6s\"; retry = { base = \"100ms\"; cap = \"200ms\"; }; },
  { name = \"${P}slow\"; at = \"2099-01-01T00:00:00Z\"; queue = \"${P}slow\"; lease = \"3s\";
    retry = { max_attempts = 1; }; }
);"
    e2e_execlog "${P}_effects"
    e2e_execlog "${P}_slow_effects"
    e2e_login "$P" "${P}slow"
    e2e_planner
    "$start" "$P" "$P-e2e" "${P}_effects" fail-first
    worker=$!
    PIDS+=($worker)
    "$start" "${P}slow" "$P-slow" "${P}_slow_effects" slow
    slow=$!
    PIDS+=($slow)
    q "INSERT INTO warren.runs (job, scheduled_at, due_at, origin)
       VALUES ('${P}slow', date_trunc('second', now()) - interval '1 minute', now(), 'trigger');
       NOTIFY warren_jobs" >/dev/null

    # Let the job fire until a few of its runs are done (not a fixed time).
    for _ in $(seq 1 200); do
        n=$(q "SELECT count(*) FROM warren.runs WHERE job = '${P}job' AND state = 'succeeded'")
        [ "$n" -ge 5 ] && break
        sleep 0.3
    done
    [ "$n" -ge 5 ] || fail "only $n ${P}job run(s) succeeded within 60 s"
    # The broker drops the workers' connections (closed through the management
    # API, as when a node restarts): they reconnect and go on, and their runs
    # are still executed exactly once (checked below).
    e2e_close_worker_connections
    local before_close=$n
    for _ in $(seq 1 100); do
        n=$(q "SELECT count(*) FROM warren.runs WHERE job = '${P}job' AND state = 'succeeded'")
        [ "$n" -ge $((before_close + 3)) ] && break
        sleep 0.3
    done
    [ "$n" -ge $((before_close + 3)) ] || {
        tail -20 "$WORK/$P-e2e.log" >&2
        fail "no ${P}job run succeeded after the broker closed the worker's connection"
    }
    local paused_at
    paused_at=$(q "UPDATE warren.jobs SET paused = true; SELECT now()")
    for _ in $(seq 1 100); do
        left=$(q "SELECT count(*) FROM warren.runs WHERE state NOT IN ('succeeded','skipped')
                  AND due_at < now() - interval '2 seconds'")
        [ "$left" = 0 ] && break
        sleep 0.3
    done
    [ "$left" = 0 ] || {
        tail -20 "$WORK/$P-e2e.log" >&2
        q "SELECT run_key, state, attempt FROM warren.runs ORDER BY 1" >&2
        fail "$left run(s) did not finish"
    }

    # Never early: a succeeded run's last attempt was claimed at or after its
    # due_at (the retry's due time; a run still retrying keeps the start of the
    # attempt before it), and every attempt at or after the scheduled time (the
    # jobs have no jitter: the first due time).
    n=$(q "SELECT count(*) FROM warren.runs r WHERE r.job = '${P}job' AND r.state = 'succeeded'
           AND r.started_at < r.due_at")
    [ "$n" = 0 ] || fail "$n run(s) claimed before their due time"
    n=$(q "SELECT count(*) FROM warren.attempts a JOIN warren.runs r USING (run_key)
           WHERE r.job = '${P}job' AND a.started_at < r.scheduled_at")
    [ "$n" = 0 ] || fail "$n attempt(s) started before their run's scheduled time"

    # A malformed message: dead-lettered by the worker, with the reason.
    e2e_malformed "$P"

    # The slow run: its 4 s of work outlasted its 3 s lease on heartbeats alone
    # (without them the worker stops it after 2 s and the reaper takes the run).
    for _ in $(seq 1 60); do
        st=$(q "SELECT state FROM warren.runs WHERE job = '${P}slow'")
        [ "$st" = succeeded ] && break
        sleep 0.3
    done
    [ "$st" = succeeded ] || { tail -20 "$WORK/$P-slow.log" >&2; fail "the 4 s run under a 3 s lease ended $st"; }
    ok=$(q "SELECT r.attempt = 1 AND r.finished_at - r.started_at >= interval '4 seconds'
              AND (SELECT count(*) FROM ${P}_slow_effects) = 1
              AND (SELECT string_agg(outcome, ',') FROM warren.attempts a
                    WHERE a.run_key = r.run_key) = 'succeeded'
            FROM warren.runs r WHERE r.job = '${P}slow'")
    [ "$ok" = t ] || fail "the slow run was not one 4 s attempt with one effect"
    grep -qi "heartbeat refused\|no heartbeat for too long" "$WORK/$P-slow.log" &&
        fail "the slow run lost its lease"

    kill -TERM "$slow"
    wait "$slow" || fail "the slow worker did not exit 0 on SIGTERM (logs in $WORK)"
    kill -TERM "$worker"
    wait "$worker" || fail "the worker did not exit 0 on SIGTERM (logs in $WORK)"
    kill -TERM "${PIDS[0]}"
    wait "${PIDS[0]}" || true
    PIDS=()

    # Every run due before the pause succeeded (no count of runs per second:
    # the machine's speed is not what this test checks).
    succeeded=$(q "SELECT count(*) FROM warren.runs WHERE state = 'succeeded' AND job = '${P}job'")
    due=$(q "SELECT count(*) FROM warren.runs WHERE job = '${P}job' AND due_at < '$paused_at'")
    [ "$due" -ge 1 ] || fail "no ${P}job run was due before the pause"
    unfinished=$(q "SELECT count(*) FROM warren.runs WHERE job = '${P}job'
                    AND due_at < '$paused_at' AND state <> 'succeeded'")
    [ "$unfinished" = 0 ] || fail "$unfinished of $due run(s) due before the pause did not succeed"
    # Exactly one effect per succeeded run, none for anything else, all from
    # attempt 2 with the job's payload, each after the history retry,succeeded.
    n=$(q "SELECT count(*) FROM (SELECT * FROM warren.runs WHERE job = '${P}job') r
           FULL JOIN ${P}_effects e USING (run_key)
           WHERE (r.state = 'succeeded') IS DISTINCT FROM (e.run_key IS NOT NULL)")
    [ "$n" = 0 ] || fail "$n run(s) without exactly one effect"
    n=$(q "SELECT count(*) FROM ${P}_effects WHERE attempt <> 2 OR payload->>'lang' <> '$lang'")
    [ "$n" = 0 ] || fail "$n effect(s) not from attempt 2 with the job's payload"
    n=$(q "SELECT count(*) FROM warren.runs r WHERE r.state = 'succeeded' AND r.job = '${P}job' AND
           (SELECT string_agg(outcome, ',' ORDER BY attempt) FROM warren.attempts a
             WHERE a.run_key = r.run_key) IS DISTINCT FROM 'retry,succeeded'")
    [ "$n" = 0 ] || fail "$n run(s) without the history retry,succeeded"
    # Executions, from the log without a key: the effect of every succeeded
    # run written exactly once (a duplicate the effect table's key would have
    # swallowed shows here), by attempt 2, and nothing else written; the
    # slow run's once.
    n=$(q "SELECT count(*) FROM (SELECT run_key, count(*) AS n, min(attempt) AS a FROM e2e_execlog
             WHERE tbl = '${P}_effects' GROUP BY run_key) x
           FULL JOIN (SELECT run_key FROM warren.runs WHERE job = '${P}job' AND state = 'succeeded') r
           USING (run_key) WHERE x.n IS DISTINCT FROM 1 OR x.a IS DISTINCT FROM 2 OR r.run_key IS NULL")
    [ "$n" = 0 ] || {
        q "SELECT run_key, count(*) FROM e2e_execlog GROUP BY 1 HAVING count(*) > 1" >&2
        fail "$n run(s) not executed exactly once (e2e_execlog against the succeeded runs)"
    }
    n=$(q "SELECT count(*) FROM e2e_execlog WHERE tbl = '${P}_slow_effects'")
    [ "$n" = 1 ] || fail "the slow run's effect was written $n times, not once"
    grep -q "rejecting malformed message" "$WORK/$P-e2e.log" || fail "the worker did not log the rejection"
    grep -q "broker connection lost" "$WORK/$P-e2e.log" ||
        fail "the worker did not notice that the broker closed its connection"
    [ "$(grep -c "consuming warren.ready.$P\$" "$WORK/$P-e2e.log")" -ge 2 ] ||
        fail "the worker did not consume again after the broker closed its connection"
    # Every attempt was claimed by the workers' own login, granted its queues.
    n=$(q "SELECT count(*) FROM warren.attempts WHERE login IS DISTINCT FROM '$E2E_LOGIN'")
    [ "$n" = 0 ] || fail "$n attempt(s) not claimed by the worker login $E2E_LOGIN"
    E2E_SUCCEEDED=$succeeded
}
