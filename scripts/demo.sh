#!/usr/bin/env bash
# warren's main job, the README's first command: installs missing packages,
# builds warren, starts the private PostgreSQL and RabbitMQ
# (tests/servers.sh), then
#   warren migrate   -c CFG   creates/updates the schema
#   warren topology  -c CFG   declares the queues and exchanges
#   warren sync      -c CFG   loads the config's jobs into the database
#   warren run       -c CFG   planner + workers, in the foreground (Ctrl-C stops)
# CFG is the first argument, default examples/warren.cfg. It points warren at
# the private servers through WARREN_DATABASE_URL / WARREN_AMQP_URL unless you
# set those yourself. The servers keep running afterwards: tests/servers.sh stop.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
CFG=${1:-examples/warren.cfg}
BUILD=${WARREN_BUILD_DIR:-$REPO/build}
WARREN="$BUILD/warren"

say() { printf '== %s\n' "$*" >&2; }
die() {
    printf 'demo.sh: %s\n' "$*" >&2
    exit 1
}

[ -f "$CFG" ] || die "no configuration file $CFG"

say "dependencies"
bash scripts/deps.sh

say "build ($BUILD)"
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null ||
    die "cmake configure failed"
cmake --build "$BUILD" -j"${WARREN_JOBS:-2}" --target warren || die "the build failed"

say "servers"
eval "$(bash tests/servers.sh start)"
# The demo database on the private server (the default URL names "warren").
export WARREN_DATABASE_URL=${WARREN_DATABASE_URL:-${WARREN_TEST_PG_URL%/*}/warren}
export WARREN_AMQP_URL=${WARREN_AMQP_URL:-$WARREN_TEST_AMQP_URL}
db=${WARREN_DATABASE_URL##*/}
db=${db%%\?*}
if [ "${WARREN_DATABASE_URL%/*}" = "${WARREN_TEST_PG_URL%/*}" ] &&
    [ -z "$(psql "$WARREN_TEST_PG_URL" -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]; then
    psql -q "$WARREN_TEST_PG_URL" -c "CREATE DATABASE \"$db\"" || die "could not create database $db"
fi
echo "database $WARREN_DATABASE_URL" >&2
echo "broker   $WARREN_AMQP_URL (management UI http://127.0.0.1:55673, guest/guest)" >&2

step() { # name, then the warren arguments
    local name=$1 rc=0
    shift
    say "warren $*"
    "$WARREN" "$@" || rc=$?
    [ $rc = 0 ] || die "step '$name' failed: \`warren $*\` exited with status $rc"
}

step migrate migrate -c "$CFG"
# The example's sql job (ticks-sql) writes here, inside its completion transaction.
psql -q "$WARREN_DATABASE_URL" -c "CREATE TABLE IF NOT EXISTS warren_demo_ticks (
    run_key text PRIMARY KEY, scheduled_at timestamptz NOT NULL, payload jsonb NOT NULL)" ||
    die "could not create the demo table warren_demo_ticks"
step topology topology -c "$CFG"
step sync sync -c "$CFG"
say "warren run -c $CFG (Ctrl-C stops it; the servers keep running)"
exec "$WARREN" run -c "$CFG"
