#!/usr/bin/env bash
# warren's whole test suite, the README's test command (and what .ci/run runs):
#   installs missing Debian packages (scripts/deps.sh), builds with -Werror,
#   AddressSanitizer and UndefinedBehaviorSanitizer in build-ci/, starts the
#   private PostgreSQL and RabbitMQ (tests/servers.sh), runs every ctest test
#   one at a time, and fails if any test failed, was skipped or did not run.
# The last line is "N passed, N failed". Servers this script started are
# stopped at the end unless WARREN_KEEP_SERVERS=1; servers that already ran
# are left running.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
BUILD=${WARREN_BUILD_DIR:-$REPO/build-ci}
JOBS=${WARREN_JOBS:-2}

say() { printf '\n== %s\n' "$*" >&2; }

started_pg=0
started_rabbit=0
stop_started() {
    [ "${WARREN_KEEP_SERVERS:-0}" = 1 ] && return 0
    [ $started_rabbit = 1 ] && bash tests/servers.sh stop-rabbit || true
    [ $started_pg = 1 ] && bash tests/servers.sh stop-pg || true
    started_pg=0 started_rabbit=0
}
trap 'stop_started' EXIT
trap 'exit 130' INT TERM

say "dependencies"
bash scripts/deps.sh

say "build ($BUILD: -Werror, ASan+UBSan)"
build_ok=1
# The same flags engineers use in their own build directories (no build
# type: no -DNDEBUG, so assert() stays on).
cmake -S "$REPO" -B "$BUILD" -DWARREN_WERROR=ON -DWARREN_SANITIZE=ON >/dev/null || build_ok=0
if [ $build_ok = 1 ]; then
    # Keep going past a broken target so the other tests still run; the
    # missing ones count as failed (ctest: "Not Run").
    cmake --build "$BUILD" -j"$JOBS" -- -k || build_ok=0
fi

say "servers"
bash tests/servers.sh status-pg >/dev/null 2>&1 || started_pg=1
bash tests/servers.sh status-rabbit >/dev/null 2>&1 || started_rabbit=1
servers_ok=1
if exports=$(bash tests/servers.sh start); then
    eval "$exports"
    bash tests/servers.sh clean 60 || true
else
    # Run the tests anyway: unit tests still report, and every test that
    # needs a server fails (testenv fails without WARREN_TEST_*_URL).
    servers_ok=0
    unset WARREN_TEST_PG_URL WARREN_TEST_AMQP_URL WARREN_TEST_MGMT_URL
fi

# LeakSanitizer works here as root (checked: a leak aborts the program).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

say "tests"
junit="$BUILD/ctest-results.xml"
rm -f "$junit"
ctest_rc=0
if [ -f "$BUILD/CTestTestfile.cmake" ]; then
    # One at a time: fault tests restart the shared servers. CI allows 90
    # minutes in all: the tests get what the build left of 85 (each test also
    # has its own TIMEOUT property).
    budget=$((85 * 60 - SECONDS))
    [ $budget -gt 300 ] || budget=300
    budget=${WARREN_TEST_BUDGET:-$budget} # seconds
    set +e
    timeout -k 30 "$budget" ctest --test-dir "$BUILD" --output-on-failure --no-tests=error \
        --output-junit "$junit" 2>&1 | tee "$BUILD/ctest-output.log"
    ctest_rc=${PIPESTATUS[0]}
    set -e
    [ $ctest_rc != 124 ] || echo "run-all.sh: the tests ran out of time (${budget}s)" >&2
else
    echo "run-all.sh: no ctest tree in $BUILD (configure failed)" >&2
fi

# Count from ctest's own record: passed = status "run"; everything else
# (failed, not run, skipped, disabled) is a failure. A test that prints a
# Python unittest "skipped=" summary or a line starting with SKIP counts as
# skipped too, because tests needing servers must never skip.
read -r passed failed <<<"$(python3 - "$junit" "$BUILD/ctest-output.log" "$ctest_rc" <<'PY'
import re, sys, xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError):
    # No XML (ctest killed by the time limit): count ctest's progress lines.
    try:
        lines = open(sys.argv[2], errors="replace").read()
    except OSError:
        lines = ""
    done = re.findall(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.*\s*(\*+)?(\w[\w ]*)", lines, re.M)
    ok = sum(1 for _, _, st in done if st.startswith("Passed"))
    # The test cut off by the time limit never printed its line: one more failure.
    print(ok, len(done) - ok + (1 if sys.argv[3] != "0" or not done else 0))
    sys.exit()
passed = failed = 0
skip = re.compile(r"\(skipped=\d+\)|^(SKIP|SKIPPED)\b", re.M)
for c in cases:
    status = c.get("status", "")
    out = "".join(e.text or "" for e in c.iter("system-out"))
    if status == "run" and not skip.search(out):
        passed += 1
    else:
        failed += 1
        why = {"run": "skipped part of itself", "fail": "failed",
               "notrun": "did not run (not built?)", "disabled": "disabled"}.get(status, status)
        print(f"run-all.sh: {c.get('name')}: {why}", file=sys.stderr)
print(passed, failed)
PY
)"

rc=0
[ $build_ok = 1 ] || { echo "run-all.sh: the build failed" >&2; rc=1; }
[ $servers_ok = 1 ] || { echo "run-all.sh: the servers did not start (see above)" >&2; rc=1; }
[ $ctest_rc = 0 ] || rc=1
[ "$failed" = 0 ] || rc=1
[ "$passed" -gt 0 ] || { echo "run-all.sh: no test ran" >&2; rc=1; }

stop_started
trap - EXIT
echo "$passed passed, $failed failed"
exit $rc
