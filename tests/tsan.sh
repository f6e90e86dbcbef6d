#!/usr/bin/env bash
# ThreadSanitizer over warren's threads: the worker's handler pool (in-process
# C and sql handlers on pool threads, sharing their handler contexts with the
# loop thread), the planner's materialising helper thread (its second
# connection) and `warren run` (a planner thread beside the worker).
#   tests/tsan.sh [TREE]
# Configures TREE (default build-tsan) with -DWARREN_TSAN=ON -DWARREN_WERROR=ON,
# builds only warren, check_worker and check_planner, and runs the Check cases
# below under TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1. Every
# process (the runners, Check's forked tests, the warren programs they start)
# writes its reports to TREE/tsan-logs/; any report fails the run, and so does
# a failed case. Needs the servers (WARREN_TEST_PG_URL, WARREN_TEST_AMQP_URL:
# eval "$(bash tests/servers.sh env)"). The ctest test `tsan` runs it with
# TREE = <build dir>/tsan.
#
# The cases (CK_RUN_SUITE/CK_RUN_CASE: Check runs one case per process) are
# the ones whose threads share state, chosen to keep this under ~10 minutes
# (TSan makes warren 5-15x slower):
#   check_worker end_to_end   C handlers on pool threads, sql handlers and their
#                             connections, exec spawns, handlers left running at
#                             shutdown, `warren run` (planner thread + worker)
#   check_worker throughput   sql batches over several pool threads, the shared
#                             statement cost table, sql take
#   check_worker shutdown     SIGTERM while handlers run on pool threads
#   check_planner materialise the helper thread and its second connection
# About 4-5 minutes on two cores, plus the first build (~1 minute). Left out
# (no threads beyond the ones above, or waits timed for an uninstrumented
# build that TSan's slowdown breaks, e.g. check_planner planners: planner
# processes racing a deadline, and check_worker loop_bounds): check_worker
# leases/retries/bad_messages/loop_bounds/database_frozen, check_planner
# schedules/release/planners/misfire/commands/floor/broken.
# WARREN_TSAN_CASES="runner:case ..." runs others instead.
#
# Suppressions: tests/tsan.supp (each with the report it stands for).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=${1:-$src/build-tsan}
jobs=${WARREN_JOBS:-2}
cases=${WARREN_TSAN_CASES:-"check_worker:end_to_end check_worker:throughput check_worker:shutdown
    check_planner:materialise"}

for v in WARREN_TEST_PG_URL WARREN_TEST_AMQP_URL; do
    if [ -z "${!v:-}" ]; then
        echo "tsan.sh: $v is not set: start the servers (eval \"\$(bash tests/servers.sh env)\")" >&2
        exit 1
    fi
done

start=$SECONDS
echo "tsan.sh: building $tree (-DWARREN_TSAN=ON)" >&2
cmake -S "$src" -B "$tree" -DWARREN_TSAN=ON -DWARREN_SANITIZE=OFF -DWARREN_WERROR=ON \
    ${CC:+-DCMAKE_C_COMPILER="$CC"} >/dev/null
cmake --build "$tree" -j"$jobs" --target warren check_worker check_planner warren_test_tzdata \
    >"$tree/tsan-build.log" 2>&1 || {
    tail -50 "$tree/tsan-build.log" >&2
    echo "tsan.sh: the TSan build failed ($tree/tsan-build.log)" >&2
    exit 1
}
echo "tsan.sh: built in $((SECONDS - start)) s" >&2
# A build without the option (a cached WARREN_TSAN=OFF, a compiler ignoring
# the flag) would pass every case and prove nothing.
for b in warren tests/check_worker tests/check_planner; do
    syms=$(nm "$tree/$b" 2>/dev/null || true) # (not piped into grep -q: pipefail, SIGPIPE)
    if ! grep -q __tsan_func_entry <<<"$syms"; then
        echo "tsan.sh: $tree/$b is not built with ThreadSanitizer" >&2
        exit 1
    fi
done

logs=$tree/tsan-logs
rm -rf "$logs"
mkdir -p "$logs"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$logs/tsan:suppressions=$src/tests/tsan.supp${WARREN_TSAN_OPTIONS:+:$WARREN_TSAN_OPTIONS}"
export TZDIR=$tree/tzdata-2026f
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120}
# TSan slows warren down; the cases' own timeouts (tcase_set_timeout) too.
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-2}
unset ASAN_OPTIONS UBSAN_OPTIONS

failed=0
for rc_case in $cases; do
    runner=${rc_case%%:*}
    tc=${rc_case#*:}
    t0=$SECONDS
    set +e
    CK_RUN_CASE=$tc "$tree/tests/$runner" >"$logs/$runner-$tc.out" 2>&1
    rc=$?
    set -e
    summary=$(grep -E '^[0-9]+%: Checks' "$logs/$runner-$tc.out" | tail -1 || true)
    echo "tsan.sh: $runner $tc: exit $rc, ${summary:-no summary}, $((SECONDS - t0)) s" >&2
    if [ $rc != 0 ] || [ -z "$summary" ]; then
        failed=1
        grep -E ':[EF]:' "$logs/$runner-$tc.out" >&2 || tail -30 "$logs/$runner-$tc.out" >&2
    fi
done

reports=$(find "$logs" -name 'tsan.*' -type f | sort)
if [ -n "$reports" ]; then
    failed=1
    echo "tsan.sh: ThreadSanitizer reports:" >&2
    for f in $reports; do
        echo "---- $f" >&2
        cat "$f" >&2
    done
fi
echo "tsan.sh: $((SECONDS - start)) s in all" >&2
if [ $failed != 0 ]; then
    echo "tsan.sh: FAILED" >&2
    exit 1
fi
echo "tsan.sh: clean"
