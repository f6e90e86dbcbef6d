#!/usr/bin/env bash
# Private PostgreSQL 15 and RabbitMQ 3.10 servers for warren's tests and demo.
#
#   tests/servers.sh start|stop|status|env|restart-pg|restart-rabbit
#
# Everything lives under <repo>/.dev (gitignored): nothing touches a system-wide
# PostgreSQL or RabbitMQ, and `stop` ends only the processes this script started
# (by their PID files). `start` and `env` print shell exports; use them as
#   eval "$(tests/servers.sh start)"
# Ports can be moved with WARREN_PG_PORT, WARREN_AMQP_PORT, WARREN_MGMT_PORT,
# WARREN_DIST_PORT and the node name with WARREN_RABBIT_NODE (e.g. to run a
# second checkout next to a running one); the defaults are the team's.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEV="$REPO/.dev"

PG_PORT=${WARREN_PG_PORT:-55432}
AMQP_PORT=${WARREN_AMQP_PORT:-55672}
MGMT_PORT=${WARREN_MGMT_PORT:-55673}
DIST_PORT=${WARREN_DIST_PORT:-55674}
NODE=${WARREN_RABBIT_NODE:-warren-test@localhost}
# Ports the rabbitmqctl CLI may use for its own distribution (the default
# 35672-35682 would collide with another checkout's CLI only, but keep ours near ours).
CTL_PORT_MIN=${WARREN_CTL_PORT_MIN:-$((DIST_PORT + 1))}
CTL_PORT_MAX=${WARREN_CTL_PORT_MAX:-$((DIST_PORT + 21))}

PG_BIN=/usr/lib/postgresql/15/bin # full paths: /usr/local/bin/pg_ctl may be something else
RMQ_BIN=/usr/lib/rabbitmq/bin     # not /usr/sbin: that wrapper switches user and resets HOME
RMQ="$DEV/rabbitmq"
START_DEADLINE=${WARREN_SERVERS_DEADLINE:-90} # seconds to wait for each server

log() { printf 'servers.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

die_log() { # message, log files: shows their ends (CI keeps no files)
    local msg=$1 f
    shift
    for f in "$@"; do
        [ -s "$f" ] || continue
        log "---- last lines of $f"
        tail -n 30 "$f" >&2
    done
    die "$msg"
}

port_open() { # port -> 0 if something accepts TCP connections on 127.0.0.1:port
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pid_alive() { # a zombie (exited, not yet reaped) counts as dead
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null &&
        ! awk '{ exit !($3 == "Z") }' "/proc/$1/stat" 2>/dev/null
}

read_pid() { # file -> pid or empty
    [ -f "$1" ] && head -n1 "$1" | tr -dc 0-9 || true
}

# ---------------------------------------------------------------- PostgreSQL

# The server runs as the `postgres` OS user (it refuses root), which must be
# able to reach its data directory. A checkout under a private directory such
# as /root is not reachable; then the cluster lives in /var/tmp under a name
# derived from the checkout path, and .dev/pg.location records where.
pg_base() {
    if [ -f "$DEV/pg.location" ]; then
        cat "$DEV/pg.location"
        return
    fi
    local base="$DEV/pg"
    # Also when the path is long (the socket path has a 107-byte limit) or
    # has blanks (pg_ctl -o splits on them).
    if ! (cd / && runuser -u postgres -- test -x "$DEV") 2>/dev/null || [ ${#base} -gt 80 ] ||
        [[ "$base" =~ [[:space:]] ]]; then
        base="/var/tmp/warren-pg-$(printf '%s' "$REPO" | cksum | cut -d' ' -f1)"
    fi
    printf '%s\n' "$base" >"$DEV/pg.location"
    printf '%s\n' "$base"
}

pg_paths() {
    PG_BASE=$(pg_base)
    PGDATA_DIR="$PG_BASE/data"
    PG_SOCK="$PG_BASE/run"
    PG_LOG="$PG_BASE/postgres.log"
}

# From / since the postgres user may not enter the working directory; fd 9 is
# our lock, not for daemons.
as_postgres() { (cd / && runuser -u postgres -- "$@" 9>&-); }

pg_running() {
    pg_paths
    [ -f "$PGDATA_DIR/PG_VERSION" ] || return 1
    as_postgres "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1
}

pg_ready() {
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 2
}

pg_start() {
    id postgres >/dev/null 2>&1 || die "no 'postgres' OS user; run scripts/deps.sh (installs postgresql)"
    [ -x "$PG_BIN/postgres" ] || die "$PG_BIN/postgres not found; run scripts/deps.sh"
    pg_paths
    if pg_running; then
        pg_wait
        return
    fi
    if port_open "$PG_PORT"; then
        die "port $PG_PORT is taken by another process (not our PostgreSQL in $PGDATA_DIR); set WARREN_PG_PORT"
    fi
    mkdir -p "$PG_BASE" "$PG_SOCK"
    chown postgres:postgres "$PG_BASE" "$PG_SOCK"
    chmod 700 "$PG_BASE"
    if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
        log "initdb $PGDATA_DIR"
        rm -rf "$PGDATA_DIR"
        # UTC so server-side timestamps print the same everywhere.
        TZ=UTC as_postgres "$PG_BIN/initdb" -D "$PGDATA_DIR" -A trust -U postgres -E UTF8 \
            --locale=C.UTF-8 >"$PG_BASE/initdb.log" 2>&1 ||
            die_log "initdb failed" "$PG_BASE/initdb.log"
        cat >>"$PGDATA_DIR/postgresql.conf" <<EOF

# warren test server (tests/servers.sh)
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCK'
max_connections = 200
timezone = 'UTC'
log_timezone = 'UTC'
EOF
    fi
    log "starting PostgreSQL on 127.0.0.1:$PG_PORT ($PGDATA_DIR)"
    # Settings on the command line too, so a moved port wins over postgresql.conf.
    as_postgres "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$PG_LOG" -w -t "$START_DEADLINE" \
        -o "-p $PG_PORT -k $PG_SOCK -c listen_addresses=127.0.0.1" start >/dev/null ||
        die_log "PostgreSQL did not start" "$PG_LOG"
    pg_wait
}

pg_wait() {
    local deadline=$((SECONDS + START_DEADLINE))
    until pg_ready; do
        [ $SECONDS -lt $deadline ] || die_log "PostgreSQL does not accept connections on port $PG_PORT" "$PG_LOG"
        sleep 0.2
    done
}

pg_stop() {
    pg_paths
    if pg_running; then
        log "stopping PostgreSQL ($PGDATA_DIR)"
        as_postgres "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 60 stop >/dev/null
    fi
}

# ---------------------------------------------------------------- RabbitMQ

rmq_env() { # the environment our node and its CLI tools need
    export HOME="$RMQ/home"
    export RABBITMQ_NODENAME="$NODE"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT="$AMQP_PORT"
    export RABBITMQ_DIST_PORT="$DIST_PORT"
    export RABBITMQ_CTL_DIST_PORT_MIN="$CTL_PORT_MIN"
    export RABBITMQ_CTL_DIST_PORT_MAX="$CTL_PORT_MAX"
    export RABBITMQ_MNESIA_BASE="$RMQ/mnesia"
    export RABBITMQ_LOG_BASE="$RMQ/log"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ/enabled_plugins"
    export RABBITMQ_PID_FILE="$RMQ/rabbitmq.pid"
    export RABBITMQ_CONFIG_FILE="$RMQ/rabbitmq.conf"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ/advanced.config"
    export RABBITMQ_CONF_ENV_FILE="$RMQ/rabbitmq-env.conf"
    # Erlang's epmd: on 4369 as usual; a system one is shared, which is fine.
    unset RABBITMQ_ALLOW_INPUT
}

rmq_ctl() { (rmq_env && "$RMQ_BIN/rabbitmqctl" -n "$NODE" "$@"); }

rmq_write_files() {
    mkdir -p "$RMQ/home" "$RMQ/mnesia" "$RMQ/log"
    chmod 700 "$RMQ/home"
    if [ ! -s "$RMQ/home/.erlang.cookie" ]; then
        (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -dc 0-9a-f | tr a-f A-F \
            >"$RMQ/home/.erlang.cookie")
    fi
    chmod 400 "$RMQ/home/.erlang.cookie"
    printf '[rabbitmq_management].\n' >"$RMQ/enabled_plugins"
    : >"$RMQ/rabbitmq-env.conf"
    [ -f "$RMQ/advanced.config" ] || printf '[].\n' >"$RMQ/advanced.config"
    cat >"$RMQ/rabbitmq.conf" <<EOF
# warren test node (tests/servers.sh); guest may log in from localhost only.
listeners.tcp.1 = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
# Queue statistics in the management API refresh every 500 ms (default 5 s).
collect_statistics_interval = 500
EOF
    # A ctl wrapper for tests and people: the CLI needs our cookie (HOME) and node name.
    cat >"$RMQ/rabbitmqctl" <<EOF
#!/bin/sh
# rabbitmqctl for the private node $NODE (written by tests/servers.sh)
export HOME='$RMQ/home' RABBITMQ_CONF_ENV_FILE='$RMQ/rabbitmq-env.conf'
export RABBITMQ_CTL_DIST_PORT_MIN=$CTL_PORT_MIN RABBITMQ_CTL_DIST_PORT_MAX=$CTL_PORT_MAX
exec $RMQ_BIN/rabbitmqctl -n '$NODE' "\$@"
EOF
    chmod 755 "$RMQ/rabbitmqctl"
}

rmq_pid() { # PID of our `rabbitmq-server` script, which runs the VM as its child
    local pid
    pid=$(read_pid "$RMQ/server.pid")
    # PIDs get reused: only a live rabbitmq-server process counts.
    if pid_alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q rabbitmq-server; then
        echo "$pid"
    fi
}

vm_pid() { # PID of our node's Erlang VM (the node writes RABBITMQ_PID_FILE)
    local pid
    pid=$(read_pid "$RMQ/rabbitmq.pid")
    if pid_alive "$pid" && grep -q beam "/proc/$pid/comm" 2>/dev/null; then
        echo "$pid"
    fi
}

epmd_up() { epmd -names >/dev/null 2>&1; }

rmq_start() {
    [ -x "$RMQ_BIN/rabbitmq-server" ] || die "$RMQ_BIN/rabbitmq-server not found; run scripts/deps.sh"
    rmq_write_files
    local pid
    pid=$(rmq_pid)
    [ -n "$pid" ] || pid=$(vm_pid)
    if [ -z "$pid" ]; then
        if port_open "$AMQP_PORT" || port_open "$MGMT_PORT" || port_open "$DIST_PORT"; then
            die "port $AMQP_PORT, $MGMT_PORT or $DIST_PORT is taken by a process that is not our node; set WARREN_AMQP_PORT etc."
        fi
        if ! epmd_up; then
            # Start epmd ourselves (foreground process in its own session) so
            # that `stop` knows its PID; otherwise the node would daemonize one.
            setsid epmd </dev/null >>"$RMQ/log/epmd.log" 2>&1 9>&- &
            echo $! >"$RMQ/epmd.pid"
            local t=0
            until epmd_up; do
                t=$((t + 1))
                [ $t -lt 50 ] || die "epmd did not start; see $RMQ/log/epmd.log"
                sleep 0.1
            done
        fi
        log "starting RabbitMQ node $NODE (AMQP 127.0.0.1:$AMQP_PORT, management $MGMT_PORT, dist $DIST_PORT)"
        (
            rmq_env
            cd "$RMQ"
            exec setsid "$RMQ_BIN/rabbitmq-server" </dev/null >>"$RMQ/log/console.log" 2>&1 9>&-
        ) &
        # Without a terminal the script stays as the VM's parent and turns
        # SIGTERM into a clean `rabbitmqctl stop`.
        echo $! >"$RMQ/server.pid"
    fi
    rmq_wait
    # Quorum queues and friends need these on a node whose data predates them.
    rmq_ctl enable_feature_flag all >/dev/null 2>&1 || log "warning: enable_feature_flag all failed"
}

rmq_wait() {
    local deadline=$((SECONDS + START_DEADLINE)) pid
    # await_startup fails at once until the node registers with epmd: retry.
    until rmq_ctl await_startup --timeout 10 >/dev/null 2>&1; do
        pid=$(rmq_pid)
        [ -n "$pid" ] || [ -n "$(vm_pid)" ] ||
            die_log "RabbitMQ node exited" "$RMQ/log/console.log" "$RMQ/log/$NODE.log"
        [ $SECONDS -lt $deadline ] ||
            die_log "RabbitMQ did not start in ${START_DEADLINE}s" "$RMQ/log/console.log" "$RMQ/log/$NODE.log"
        sleep 0.5
    done
    until port_open "$AMQP_PORT" && port_open "$MGMT_PORT"; do
        [ $SECONDS -lt $deadline ] || die "RabbitMQ started but ports $AMQP_PORT/$MGMT_PORT do not accept connections"
        sleep 0.2
    done
}

rmq_stop() {
    local pid vm t
    pid=$(rmq_pid)
    vm=$(vm_pid)
    if [ -n "$pid" ] || [ -n "$vm" ]; then
        log "stopping RabbitMQ node $NODE (pid ${pid:-none}, VM ${vm:-none})"
        rmq_ctl stop >/dev/null 2>&1 || { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; } || true
        t=0
        while pid_alive "$pid" || pid_alive "$vm"; do
            t=$((t + 1))
            if [ $t -eq 300 ]; then
                log "node ignores stop after 30 s; killing pids $pid $vm"
                for p in $vm $pid; do kill -KILL "$p" 2>/dev/null || true; done
            fi
            [ $t -lt 400 ] || die "could not stop RabbitMQ (pids $pid $vm)"
            sleep 0.1
        done
    fi
    rm -f "$RMQ/server.pid"
    # epmd only if we started it, and only when no other Erlang node uses it.
    pid=$(read_pid "$RMQ/epmd.pid")
    if pid_alive "$pid" && grep -q epmd "/proc/$pid/comm" 2>/dev/null; then
        if ! epmd -names 2>/dev/null | grep -q '^name '; then
            kill -TERM "$pid" 2>/dev/null || true
            rm -f "$RMQ/epmd.pid"
        else
            log "leaving epmd (pid $pid) running: other Erlang nodes use it"
        fi
    else
        rm -f "$RMQ/epmd.pid"
    fi
}

rmq_running() { [ -n "$(rmq_pid)" ] && rmq_ctl ping >/dev/null 2>&1; }

# ---------------------------------------------------------------- ports

# Our ports lie inside Linux's ephemeral range (32768-60999): while a server
# is down (the restart tests), a client that keeps connecting to it can be
# given that very port as its own source port and connect to itself (TCP
# simultaneous open), and the restarted server then fails with eaddrinuse
# (seen once in CI: RabbitMQ on 55672 after restart-rabbit). Reserving the
# ports keeps the kernel from handing them out; existing reservations stay.
reserve_ports() {
    local f=/proc/sys/net/ipv4/ip_local_reserved_ports cur want
    want="$PG_PORT,$AMQP_PORT,$MGMT_PORT,$DIST_PORT,$CTL_PORT_MIN-$CTL_PORT_MAX"
    [ -w "$f" ] || { log "warning: cannot write $f: ports $want stay in the ephemeral range"; return 0; }
    cur=$(cat "$f")
    printf '%s\n' "${cur:+$cur,}$want" >"$f" 2>/dev/null ||
        log "warning: could not reserve ports $want in $f"
}

# ---------------------------------------------------------------- clean

# Drops test databases and vhosts (named warren_t_<unix time>_... by
# tests/testenv.c) older than $1 minutes. A database still in use is left alone.
clean() {
    local age_s=$((${1:-60} * 60)) now n=0
    now=$(date +%s)
    if pg_running; then
        local db t
        while read -r db; do
            t=${db#warren_t_}
            t=${t%%_*}
            [ $((now - t)) -ge "$age_s" ] || continue
            "$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
                -c "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 && n=$((n + 1)) || true
        done < <("$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atc \
            "SELECT datname FROM pg_database WHERE datname ~ '^warren_t_[0-9]+_'")
        log "dropped $n test databases older than $((age_s / 60)) min"
    fi
    if rmq_running; then
        python3 - "$MGMT_PORT" "$age_s" <<'PY' || log "warning: could not clean vhosts"
import base64, json, re, sys, time, urllib.parse, urllib.request
port, age = sys.argv[1], int(sys.argv[2])
auth = "Basic " + base64.b64encode(b"guest:guest").decode()
def call(method, path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Authorization": auth})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()
now, n = time.time(), 0
for v in json.loads(call("GET", "/api/vhosts?columns=name")):
    m = re.match(r"warren_t_(\d+)_", v["name"])
    if m and now - int(m.group(1)) >= age:
        call("DELETE", "/api/vhosts/" + urllib.parse.quote(v["name"], safe=""))
        n += 1
print(f"servers.sh: deleted {n} test vhosts older than {age // 60} min", file=sys.stderr)
PY
    fi
}

# ---------------------------------------------------------------- commands

print_env() {
    cat <<EOF
export WARREN_TEST_PG_URL=postgresql://postgres@127.0.0.1:$PG_PORT/postgres
export WARREN_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f
export WARREN_TEST_MGMT_URL=http://guest:guest@127.0.0.1:$MGMT_PORT
export WARREN_TEST_RABBITMQCTL=$RMQ/rabbitmqctl
EOF
}

# Serialize concurrent start/stop calls from several shells.
lock() {
    mkdir -p "$DEV"
    exec 9>"$DEV/servers.lock"
    flock -w 300 9 || die "another servers.sh holds $DEV/servers.lock"
}

cmd=${1:-}
case "$cmd" in
start)
    [ "$(id -u)" = 0 ] || die "run as root (PostgreSQL runs as the postgres user; files are chowned)"
    lock
    reserve_ports
    pg_start
    rmq_start
    print_env
    ;;
stop)
    lock
    rmq_stop
    pg_stop
    ;;
stop-pg)
    lock
    pg_stop
    ;;
stop-rabbit)
    lock
    rmq_stop
    ;;
restart-pg)
    lock
    pg_stop
    pg_start
    ;;
restart-rabbit)
    lock
    rmq_stop
    rmq_start >/dev/null
    ;;
status-pg) pg_running && pg_ready ;;
status-rabbit) rmq_running ;;
status)
    rc=0
    if pg_running && pg_ready; then
        echo "postgresql: running on 127.0.0.1:$PG_PORT ($PGDATA_DIR)"
    else
        echo "postgresql: stopped"
        rc=1
    fi
    if rmq_running; then
        echo "rabbitmq: running as $NODE, pid $(rmq_pid), AMQP $AMQP_PORT, management $MGMT_PORT"
    else
        echo "rabbitmq: stopped"
        rc=1
    fi
    exit $rc
    ;;
env) print_env ;;
clean)
    lock
    clean "${2:-60}"
    ;;
*)
    cat >&2 <<EOF
usage: $0 COMMAND
  start           start both servers (idempotent) and print the exports
  stop            stop the servers this script started
  status          say what runs; exit 1 unless both run
  env             print the exports (WARREN_TEST_PG_URL, WARREN_TEST_AMQP_URL, ...)
  restart-pg      stop and start PostgreSQL (fault tests)
  restart-rabbit  stop and start RabbitMQ (fault tests)
  stop-pg | stop-rabbit | status-pg | status-rabbit
  clean [MIN]     drop test databases/vhosts (warren_t_*) older than MIN minutes (60)
EOF
    exit 2
    ;;
esac
