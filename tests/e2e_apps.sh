#!/usr/bin/env bash
# e2e_apps.sh: the example applications (examples/apps/python/app.py and
# examples/apps/node/app.js) against the real servers, the real planner and
# the C worker (docs/api-jobs.md):
# - each signs up customers: in ONE transaction of the application, its own
#   row in app_customers, two API jobs from the templates usage-report and
#   account-sync (tenant-scoped names, the customer's zone) and a one-shot
#   welcome run enqueued under the key welcome:TENANT:EMAIL due 1 s later;
# - the welcome runs are delivered once: the worker's sql handler appends
#   to app_welcome_log, which has no unique key, so a second execution of a
#   run would show as a second row;
# - a sign-up repeated with the same key creates nothing new;
# - a sign-up that fails after its calls rolls back: no customer, no job, no
#   run, and no welcome is ever executed for it;
# - cancel pauses the report job and deletes the sync job (kept, removed);
# - the application connects as a login that is a member of warren_producer
#   only (plus its own table): it cannot claim or complete runs.
# Fails (never skips) without the servers, python3-psycopg2, node or the npm
# package pg (installed with npm ci into examples/apps/node when missing).
set -euo pipefail

fail() {
    echo "e2e_apps: FAIL: $*" >&2
    exit 1
}
# shellcheck source=tests/lib_e2e.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib_e2e.sh"
"$PY" -c 'import psycopg2' || fail "python3-psycopg2 missing (scripts/deps.sh)"
command -v node >/dev/null 2>&1 || fail "node not found: install nodejs (scripts/deps.sh)"
APP_NODE="${WARREN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}/examples/apps/node"
have_pg() { (cd "$APP_NODE" && node -e "require('pg')") 2>/dev/null; }
if ! have_pg; then
    command -v npm >/dev/null 2>&1 || fail "npm not found: it comes with Node.js (nodejs or npm)"
    for try in 1 2 3; do
        (cd "$APP_NODE" && timeout 120 npm ci --no-audit --no-fund --loglevel=error) && break
        echo "e2e_apps: npm ci failed (try $try of 3)" >&2
        sleep $((try * 5))
    done
    have_pg || fail "pg is not installed in $APP_NODE: npm ci failed (is the npm registry reachable?)"
fi
e2e_init apps

e2e_warren "planner = { tick = \"200ms\"; horizon = \"10s\"; };
jobs = (
  { name = \"usage-report\"; template = true; queue = \"reports\";
    handler = { sql = \"SELECT 1\"; }; max_running_per_tenant = 1; },
  { name = \"account-sync\"; template = true; queue = \"sync\"; handler = { sql = \"SELECT 1\"; }; },
  { name = \"welcome\"; template = true; queue = \"welcome\"; overlap = \"allow\";
    handler = { sql = \"INSERT INTO app_welcome_log (run_key, payload) VALUES (\$1, \$3)\"; }; }
);"
q "CREATE TABLE app_customers (id bigserial PRIMARY KEY, tenant text NOT NULL UNIQUE,
     email text NOT NULL, zone text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
   CREATE TABLE app_welcome_log (run_key text NOT NULL, payload jsonb,
     at timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null ||
    fail "cannot create the application's tables"

# The application's login: warren_producer and its own table, nothing else.
APP_LOGIN="${E2E_NAME}_app"
psql -qX "$WARREN_TEST_PG_URL" -c "CREATE ROLE $APP_LOGIN LOGIN IN ROLE warren_producer" >/dev/null ||
    fail "cannot create the application login"
drop_app_login() {
    e2e_cleanup
    psql -qX "$WARREN_TEST_PG_URL" -c "DROP ROLE IF EXISTS $APP_LOGIN" >/dev/null 2>&1 || true
}
trap drop_app_login EXIT
# Its producer grants in this database: the three templates, nothing else
# (docs/api-jobs.md, "Producer grants").
out=$("$BIN" grant-producer -c "$WORK/warren.cfg" "$APP_LOGIN" --template usage-report \
    --template account-sync --template welcome 2>&1) || fail "warren grant-producer: $out"
q "GRANT SELECT, INSERT ON app_customers TO $APP_LOGIN;
   GRANT USAGE ON SEQUENCE app_customers_id_seq TO $APP_LOGIN" >/dev/null
ADB=$(printf '%s' "$DB" | sed -E "s#^([a-z]+://)[^@/]*@#\1$APP_LOGIN@#")

# The worker (the C worker, connecting as the owner here: its grants are
# tested elsewhere) runs the welcome runs' sql handler.
e2e_planner
"$BIN" worker -c "$WORK/warren.cfg" --queue welcome 2>"$WORK/worker.log" &
PIDS+=($!)

py() { "$PY" "$SRC/examples/apps/python/app.py" --database-url "$ADB" "$@"; }
nd() { node "$APP_NODE/app.js" --database-url "$ADB" "$@"; }

py signup t-py-1 ana@example.com Europe/Berlin --welcome-in 1 2>>"$WORK/apps.log" ||
    fail "python signup: $(cat "$WORK/apps.log")"
py signup t-py-2 bo@example.com America/New_York --welcome-in 1 2>>"$WORK/apps.log" ||
    fail "python signup 2: $(cat "$WORK/apps.log")"
nd signup t-js-1 cy@example.com Asia/Tokyo --welcome-in 1 2>>"$WORK/apps.log" ||
    fail "node signup: $(cat "$WORK/apps.log")"
nd signup t-js-2 di@example.com Australia/Sydney --welcome-in 1 2>>"$WORK/apps.log" ||
    fail "node signup 2: $(cat "$WORK/apps.log")"
py signup-fails t-py-ghost gh@example.com Europe/Paris --welcome-in 1 2>>"$WORK/apps.log" ||
    fail "python signup-fails: $(cat "$WORK/apps.log")"
nd signup-fails t-js-ghost gj@example.com Europe/Paris --welcome-in 1 2>>"$WORK/apps.log" ||
    fail "node signup-fails: $(cat "$WORK/apps.log")"
grep -q "rolled back" "$WORK/apps.log" || fail "no rollback reported: $(cat "$WORK/apps.log")"

# What committed: 4 customers, 8 API jobs in their zones, 4 welcome runs.
[ "$(q "SELECT count(*) FROM app_customers")" = 4 ] || fail "customers: $(q "SELECT tenant FROM app_customers")"
got=$(q "SELECT string_agg(name || ' ' || origin || ' ' || template || ' ' || tenant || ' ' ||
                           coalesce(timezone, ''), ',' ORDER BY name)
           FROM warren.jobs WHERE origin = 'api'")
want="account-sync.t-js-1 api account-sync t-js-1 UTC,account-sync.t-js-2 api account-sync t-js-2 UTC,"
want+="account-sync.t-py-1 api account-sync t-py-1 UTC,account-sync.t-py-2 api account-sync t-py-2 UTC,"
want+="usage-report.t-js-1 api usage-report t-js-1 Asia/Tokyo,usage-report.t-js-2 api usage-report t-js-2 Australia/Sydney,"
want+="usage-report.t-py-1 api usage-report t-py-1 Europe/Berlin,usage-report.t-py-2 api usage-report t-py-2 America/New_York"
[ "$got" = "$want" ] || fail "API jobs: got $got, want $want"
# The rolled-back sign-ups left nothing.
[ "$(q "SELECT count(*) FROM warren.jobs WHERE name LIKE '%ghost%'")" = 0 ] || fail "a rolled-back job exists"
[ "$(q "SELECT count(*) FROM warren.runs WHERE run_key LIKE '%ghost%'")" = 0 ] || fail "a rolled-back run exists"

# Every welcome run is executed once (the log has no unique key).
for _ in $(seq 1 150); do
    n=$(q "SELECT count(*) FROM warren.runs WHERE job = 'welcome' AND state = 'succeeded'")
    [ "$n" -ge 4 ] && break
    sleep 0.2
done
[ "$n" = 4 ] || fail "$n of 4 welcome runs succeeded: $(q "SELECT run_key, state, note FROM warren.runs WHERE job = 'welcome'"); worker: $(tail -5 "$WORK/worker.log")"
got=$(q "SELECT string_agg(run_key || '=' || n, ',' ORDER BY run_key) FROM
           (SELECT run_key, count(*) n FROM app_welcome_log GROUP BY run_key) l")
want="welcome@welcome:t-js-1:cy@example.com=1,welcome@welcome:t-js-2:di@example.com=1,"
want+="welcome@welcome:t-py-1:ana@example.com=1,welcome@welcome:t-py-2:bo@example.com=1"
[ "$got" = "$want" ] || fail "welcome executions: got $got, want $want"

# A repeated sign-up (the same customer again, e.g. a retried request)
# fails on the application's own unique tenant; the same enqueue key alone,
# called again, creates nothing and names the run that holds it.
out=$(psql -qXAt "$ADB" -c "SELECT * FROM warren.enqueue('welcome', 'welcome:t-py-1:ana@example.com')" 2>&1) ||
    fail "enqueue again: $out"
[ "$(q "SELECT count(*) FROM warren.runs WHERE job = 'welcome'")" = 4 ] || fail "a second enqueue created a run"
case "$out" in *'welcome@welcome:t-py-1:ana@example.com'*) ;; *) fail "second enqueue did not name the run: $out" ;; esac

# Cancel: report paused, sync job deleted (kept as removed, history kept).
py cancel t-py-2 2>>"$WORK/apps.log" || fail "python cancel: $(cat "$WORK/apps.log")"
nd cancel t-js-2 2>>"$WORK/apps.log" || fail "node cancel: $(cat "$WORK/apps.log")"
got=$(q "SELECT string_agg(name || ' ' || paused || ' ' || removed, ',' ORDER BY name) FROM warren.jobs
          WHERE tenant IN ('t-py-2', 't-js-2')")
want="account-sync.t-js-2 true true,account-sync.t-py-2 true true,usage-report.t-js-2 true false,usage-report.t-py-2 true false"
[ "$got" = "$want" ] || fail "after cancel: got $got, want $want"

# Least privilege: the application's login cannot claim or complete.
for stmt in "SELECT * FROM warren.claim('welcome@x', 'w')" "SELECT * FROM warren.complete('welcome@x', 1, 'succeeded', NULL)" \
    "SELECT count(*) FROM warren.runs"; do
    out=$(psql -qXAt "$ADB" -c "$stmt" 2>&1) && fail "the producer login could run: $stmt"
    case "$out" in *"permission denied"*) ;; *) fail "$stmt: $out" ;; esac
done

echo "e2e_apps: python and node sign-ups committed 4 customers, 8 API jobs and 4 welcome runs (each executed once); 2 failed sign-ups rolled back leaving nothing; a repeated key created nothing; cancel paused and deleted; the producer login cannot claim, complete or read runs"
echo "1 passed, 0 failed"
