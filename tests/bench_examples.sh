#!/usr/bin/env bash
# bench_examples.sh: start lateness of the example workers (examples/workers/node and
# examples/workers/python) at the settings users run: one `warren planner` and 2 worker
# processes x --concurrency 50, a no-op handler (--work-ms 0 / --work-seconds 0) whose
# effect row is written inside the completion transaction, the planner's defaults but
# tick 100 ms, horizon 2m30s and publish batch 500 (as bench_worker). Not part of ctest.
#
#   tests/bench_examples.sh [--lang node|python|both] [--burst N] [--rate R] [--seconds S]
#                           [--spread] [--concurrency C] [--prefetch P] [--workers W] [--lead D]
#                           [--dir DIR] [--label L] [--timeout S]
#
# Defaults: --lang both --burst 10000 --rate 200 --seconds 60 --concurrency 50 --workers 2,
# prefetch = concurrency, the default release lead (3 s). --burst 0 or --seconds 0 leaves that scenario out.
# Burst: N runs of one `overlap = "allow"` job due at one instant 20 s after their insert.
# Steady: R runs due on each whole second (R at the same instant) for S seconds, starting
# 5 s ahead; --spread spaces their due times 1/R s apart instead. --dir DIR runs the
# workers of another copy of examples/workers (DIR/node/worker.js, DIR/python/worker.py:
# a "before" version for interleaved rounds; a worker.py without --concurrency runs with
# its own prefetch). --label names the variant in the output. Needs the servers'
# environment (eval "$(bash tests/servers.sh start)") and a warren binary
# (WARREN_BIN, default build-rel/warren, else build/warren).
#
# One JSON line per scenario on stdout: bench (example_burst / example_steady), lang,
# label, runs, workers, concurrency, prefetch, release_lead_ms, min/p50/p90/p99/max_start_lateness_ms
# (runs.started_at, the claim on the database's clock, minus runs.due_at; below 0 would be a
# run started early), all_started_after_due_s, all_completed_after_due_s, succeeded,
# executions (rows of an execution log without a unique key, written by a trigger on the
# effect table) and not_once (succeeded runs whose log count is not 1; 0 is exactly once),
# worker_peak_rss_kb, loadavg, complete (every run succeeded within --timeout).
# BENCH_RESTART_RABBIT=1 restarts RabbitMQ before each burst (a clean broker node);
# BENCH_KEEP_LOGS=DIR copies the workers' and the planner's logs there.
set -euo pipefail

fail() {
    echo "bench_examples: FAIL: $*" >&2
    exit 1
}
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=${WARREN_SOURCE_DIR:-$(cd "$SELF_DIR/.." && pwd)}
if [ -z "${WARREN_BIN:-}" ]; then
    WARREN_BIN=$SRC/build-rel/warren
    [ -x "$WARREN_BIN" ] || WARREN_BIN=$SRC/build/warren
fi
export WARREN_BIN WARREN_SOURCE_DIR=$SRC
# shellcheck source=tests/lib_e2e.sh
. "$SELF_DIR/lib_e2e.sh"

LANGS=both BURST=10000 RATE=200 SECONDS_=60 SPREAD=0 CONC=50 NWORKERS=2 LEAD= LABEL= PREFETCH=0
DIR=$SRC/examples/workers TIMEOUT=300
while [ $# -gt 0 ]; do
    case $1 in
    --lang) LANGS=$2; shift ;;
    --burst) BURST=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --seconds) SECONDS_=$2; shift ;;
    --spread) SPREAD=1 ;;
    --concurrency) CONC=$2; shift ;;
    --prefetch) PREFETCH=$2; shift ;;
    --workers) NWORKERS=$2; shift ;;
    --lead) LEAD=$2; shift ;;
    --dir) DIR=$(cd "$2" && pwd); shift ;;
    --label) LABEL=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    *) fail "unknown argument $1 (see the header of $0)" ;;
    esac
    shift
done
case $LANGS in
both) LANGS="node python" ;;
node | python) ;;
*) fail "--lang is node, python or both, not $LANGS" ;;
esac
[ -n "$LABEL" ] || LABEL=$([ "$DIR" = "$SRC/examples/workers" ] && echo current || basename "$DIR")

# Waits until N runs are succeeded (one query a second) or the timeout; 0 when all did.
wait_all() {
    local n=$1 deadline=$((SECONDS + TIMEOUT)) got
    while [ $SECONDS -lt $deadline ]; do
        got=$(q "SELECT count(*) FROM warren.runs WHERE state = 'succeeded'")
        [ "$got" -ge "$n" ] && return 0
        sleep 1
    done
    return 1
}

peak_rss() { # pid -> VmHWM in kB
    awk '/^VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

# One scenario in a subshell: its own database and vhost, dropped on exit (lib_e2e.sh).
scenario() { # LANG KIND(burst|steady) N
    local lang=$1 kind=$2 n=$3
    [ "${BENCH_RESTART_RABBIT:-0}" = 1 ] && [ "$kind" = burst ] && bash "$SRC/tests/servers.sh" restart-rabbit >/dev/null 2>&1
    e2e_init "bench_$lang"
    local lead_opt=
    [ -z "$LEAD" ] || lead_opt=" release_lead = \"$LEAD\";"
    e2e_warren "planner = { tick = \"100ms\"; horizon = \"2m30s\"; publish_batch = 500;$lead_opt };
jobs = ( { name = \"bench\"; at = \"2099-01-01T00:00:00Z\"; queue = \"bench\"; overlap = \"allow\"; } );"
    e2e_execlog bench_effects
    e2e_planner
    local i wpids=() args wconc=$CONC pf=()
    [ "$PREFETCH" = 0 ] || pf=(--prefetch "$PREFETCH")
    # a worker.py without --concurrency (the version before batching) runs one at a time
    [ "$lang" = python ] && ! grep -q -- "--concurrency" "$DIR/python/worker.py" && wconc=1
    for i in $(seq 1 "$NWORKERS"); do
        if [ "$lang" = node ]; then
            node "$DIR/node/worker.js" --queue bench --database-url "$DB" --amqp-url "$AMQP" \
                --worker-id "bench-node-$i" --table bench_effects --concurrency "$CONC" \
                --work-ms 0 "${pf[@]}" 2>"$WORK/w$i.log" &
        else
            args=(--work-seconds 0)
            grep -q -- "--concurrency" "$DIR/python/worker.py" && args+=(--concurrency "$CONC")
            args+=("${pf[@]}")
            "$PY" "$DIR/python/worker.py" --queue bench --database-url "$DB" --amqp-url "$AMQP" \
                --worker-id "bench-py-$i" --table bench_effects "${args[@]}" 2>"$WORK/w$i.log" &
        fi
        wpids+=($!)
        PIDS+=($!)
    done
    # Every worker consuming before the runs are inserted.
    for _ in $(seq 1 100); do
        [ "$(grep -l "consuming" "$WORK"/w*.log 2>/dev/null | wc -l)" -ge "$NWORKERS" ] && break
        sleep 0.2
    done
    [ "$(grep -l "consuming" "$WORK"/w*.log 2>/dev/null | wc -l)" -ge "$NWORKERS" ] ||
        { tail -5 "$WORK"/w*.log >&2; fail "the $lang workers did not start"; }
    local lead_ms=3000 # the default planner.release_lead
    case $LEAD in
    "") ;;
    *ms) lead_ms=${LEAD%ms} ;;
    *s) lead_ms=$((${LEAD%s} * 1000)) ;;
    *) fail "--lead is like 3s or 500ms, not $LEAD" ;;
    esac
    if [ "$kind" = burst ]; then
        q "INSERT INTO warren.runs (job, scheduled_at, due_at, origin)
           SELECT 'bench', date_trunc('second', now()) - make_interval(secs => g),
                  date_trunc('second', now()) + interval '20 seconds', 'backfill'
           FROM generate_series(1, $n) g; NOTIFY warren_jobs" >/dev/null
    else
        local due="date_trunc('second', now()) + interval '5 seconds' + make_interval(secs => (g - 1) / $RATE)"
        [ "$SPREAD" = 1 ] && due="now() + interval '5 seconds' + make_interval(secs => g / $RATE.0)"
        q "INSERT INTO warren.runs (job, scheduled_at, due_at, origin)
           SELECT 'bench', date_trunc('second', now()) - interval '1 day' - make_interval(secs => g),
                  $due, 'backfill'
           FROM generate_series(1, $n) g; NOTIFY warren_jobs" >/dev/null
    fi
    local complete=true
    wait_all "$n" || complete=false
    local rss=()
    for i in "${wpids[@]}"; do rss+=("$(peak_rss "$i")"); done
    local rss_json
    rss_json=$(IFS=,; echo "[${rss[*]}]")
    local extra=
    [ "$kind" = steady ] && extra="\"rate_per_s\":$RATE,\"seconds\":$SECONDS_,\"due\":\"$([ "$SPREAD" = 1 ] && echo spread || echo whole-second)\","
    q "SELECT json_build_object('bench', 'example_$kind', 'lang', '$lang', 'label', '$LABEL',
              'runs', $n, 'workers', $NWORKERS, 'concurrency', $wconc,
              'prefetch', $([ "$PREFETCH" = 0 ] && echo $wconc || echo "$PREFETCH"),
              'release_lead_ms', $lead_ms,
              'min_start_lateness_ms', round(min(l)::numeric, 1),
              'p50_start_lateness_ms', round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::numeric, 1),
              'p90_start_lateness_ms', round(percentile_cont(0.9) WITHIN GROUP (ORDER BY l)::numeric, 1),
              'p99_start_lateness_ms', round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l)::numeric, 1),
              'max_start_lateness_ms', round(max(l)::numeric, 1),
              'all_started_after_due_s', round(max(l)::numeric / 1000, 3),
              'all_completed_after_due_s', round(max(c)::numeric / 1000, 3),
              'succeeded', count(*) FILTER (WHERE state = 'succeeded'),
              'executions', (SELECT count(*) FROM e2e_execlog),
              'not_once', (SELECT count(*) FROM warren.runs r
                             LEFT JOIN (SELECT run_key, count(*) AS n FROM e2e_execlog GROUP BY 1) x
                             USING (run_key)
                            WHERE r.state = 'succeeded' AND x.n IS DISTINCT FROM 1))::text
       FROM (SELECT state, extract(epoch FROM started_at - due_at) * 1000 AS l,
                    extract(epoch FROM finished_at - due_at) * 1000 AS c FROM warren.runs) r" |
        sed -e "s/}\$/, $extra\"worker_peak_rss_kb\" : $rss_json, \"loadavg\" : \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"complete\" : $complete}/" \
            -e 's/ : /:/g; s/, "/,"/g'
    for i in "${wpids[@]}"; do kill -TERM "$i" 2>/dev/null || true; done
    for i in "${wpids[@]}"; do wait "$i" 2>/dev/null || true; done
    [ -z "${BENCH_KEEP_LOGS:-}" ] || cp "$WORK"/*.log "$BENCH_KEEP_LOGS"/ 2>/dev/null || true
    [ "$complete" = true ] || {
        tail -5 "$WORK"/w*.log >&2
        echo "bench_examples: $lang $kind: not every run succeeded within ${TIMEOUT}s" >&2
    }
}

for lang in $LANGS; do
    if [ "$lang" = node ]; then
        (cd "$DIR/node" && node -e "require('amqplib'); require('pg')") 2>/dev/null ||
            fail "amqplib and pg are not installed in $DIR/node (npm ci there)"
    fi
    [ "$BURST" -gt 0 ] && (scenario "$lang" burst "$BURST")
    [ "$SECONDS_" -gt 0 ] && [ "$RATE" -gt 0 ] && (scenario "$lang" steady $((RATE * SECONDS_)))
done
exit 0
