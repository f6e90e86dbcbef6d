#!/bin/sh
# Builds the libFuzzer harnesses and runs each for SECONDS (default 300).
#   tests/fuzz/run.sh [SECONDS]
# Crashes land in build-fuzz/crash-*; add each as a regression case under
# tests/fuzz/regressions/cron/ or tests/fuzz/regressions/tzif/, which the
# suite replays on every run (check_fuzz_regressions, no libFuzzer needed),
# and, for cron, as a data-driven case in tests/data/cron/ when it has an
# expected answer.
set -eu
secs=${1:-300}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${WARREN_FUZZ_BUILD:-$src/build-fuzz}
CC=clang cmake -S "$src" -B "$build" -DWARREN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target fuzz_cron fuzz_tzif
fz="$build/tests/fuzz"
mkdir -p "$build/corpus/cron" "$build/corpus/tzif"
# Seeds: the checked-in corpora, the data-driven cases and real zone files.
cp "$src"/tests/fuzz/corpus/cron/* "$src"/tests/fuzz/regressions/cron/* "$build/corpus/cron/" 2>/dev/null || true
for f in "$src"/tests/data/cron/valid.txt "$src"/tests/data/cron/invalid.txt; do
    [ -f "$f" ] || continue
    i=0
    while IFS= read -r line; do
        i=$((i + 1))
        printf '%s' "${line%%	*}" > "$build/corpus/cron/seed-$(basename "$f" .txt)-$i"
    done < "$f"
done
for z in UTC Europe/Berlin America/New_York Australia/Lord_Howe Pacific/Apia Europe/Dublin \
         America/Santiago Asia/Kathmandu Pacific/Chatham America/Havana; do
    cp "${TZDIR:-/usr/share/zoneinfo}/$z" "$build/corpus/tzif/$(echo "$z" | tr / _)"
done
cp "$src"/tests/fuzz/corpus/tzif/* "$src"/tests/fuzz/regressions/tzif/* "$build/corpus/tzif/" 2>/dev/null || true
cd "$build"
status=0
"$fz/fuzz_cron" -max_total_time="$secs" -max_len=600 -dict="$src/tests/fuzz/cron.dict" \
    "$build/corpus/cron" || status=1
"$fz/fuzz_tzif" -max_total_time="$secs" -max_len=8192 "$build/corpus/tzif" || status=1
exit $status
