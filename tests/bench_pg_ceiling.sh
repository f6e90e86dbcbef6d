#!/usr/bin/env bash
# bench_pg_ceiling.sh: PostgreSQL's commit ceiling on this machine (issue 17), the limit a
# durable scheduler works against here: pgbench transactions of one single-row INSERT from
# 1, 10, 50 and 100 clients, and of one 100-row INSERT from 2 clients, against the servers of
# tests/servers.sh at their settings (fsync on, synchronous_commit on). Not part of ctest.
#
#   tests/bench_pg_ceiling.sh [--seconds S] [--clients "1 10 50 100"]
#
# Defaults: --seconds 10. Needs the servers' environment (eval "$(bash tests/servers.sh
# start)"). Uses a database of its own (warren_pg_ceiling, dropped at the end).
# One JSON line per setting on stdout: bench ("pg_ceiling"), statement ("insert_1_row" or
# "insert_100_rows"), clients, seconds, tps, rows_per_s, loadavg.
set -euo pipefail

fail() {
    echo "bench_pg_ceiling: FAIL: $*" >&2
    exit 1
}
SECONDS_RUN=10
CLIENTS="1 10 50 100"
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    *) fail "unknown argument '$1' (see the header of $0)" ;;
    esac
done
[ -n "${WARREN_TEST_PG_URL:-}" ] || fail "WARREN_TEST_PG_URL is not set: eval \"\$(bash tests/servers.sh start)\" first"
PGBENCH=$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)
[ -x "$PGBENCH" ] || fail "pgbench not found (Debian: postgresql-15 ships it in /usr/lib/postgresql/15/bin)"

DB=warren_pg_ceiling
BASE=${WARREN_TEST_PG_URL%/*}
URL="$BASE/$DB"
TMP=$(mktemp -d)
cleanup() {
    psql "$WARREN_TEST_PG_URL" -qAtc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
psql "$WARREN_TEST_PG_URL" -qAtc "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
    -c "CREATE DATABASE $DB" >/dev/null
psql "$URL" -qAtc "CREATE TABLE t (id bigserial PRIMARY KEY, v int NOT NULL)" >/dev/null
echo "INSERT INTO t (v) VALUES (1);" >"$TMP/one.sql"
echo "INSERT INTO t (v) SELECT g FROM generate_series(1, 100) g;" >"$TMP/hundred.sql"

run() { # statement-name file rows-per-transaction clients
    local out tps
    out=$("$PGBENCH" -n -f "$2" -c "$4" -j 2 -T "$SECONDS_RUN" "$URL" 2>&1) ||
        fail "pgbench: $out"
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
    [ -n "$tps" ] || fail "no tps in pgbench's output: $out"
    printf '{"bench":"pg_ceiling","statement":"%s","clients":%d,"seconds":%d,"tps":%.0f,"rows_per_s":%.0f,"loadavg":"%s"}\n' \
        "$1" "$4" "$SECONDS_RUN" "$tps" "$(awk -v t="$tps" -v r="$3" 'BEGIN { print t * r }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
    psql "$URL" -qAtc "TRUNCATE t" >/dev/null
}
for c in $CLIENTS; do
    run insert_1_row "$TMP/one.sql" 1 "$c"
done
run insert_100_rows "$TMP/hundred.sql" 100 2
