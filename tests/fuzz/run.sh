#!/bin/sh
# Builds the libFuzzer harnesses (clang) in build-fuzz/ and runs each for
# SECONDS (default 300).
#   tests/fuzz/run.sh [SECONDS] [HARNESS...]     HARNESS: codec, cron, tzif (default all)
# Each harness starts from seeds generated here and the checked-in inputs:
#   codec  tests/fuzz/seeds/codec/ (message bodies, run keys, UTF-8) and
#          tests/fuzz/regressions/codec/
#   cron   the expressions of tests/data/cron/{valid,invalid}.txt and
#          tests/fuzz/regressions/cron/
#   tzif   real zone files (TZDIR, else /usr/share/zoneinfo) and
#          tests/fuzz/regressions/tzif/
# The working corpus (build-fuzz/corpus/HARNESS/) grows run after run and
# stays out of the repository. Crashes land in build-fuzz/crash-*: fix the
# bug, then add the input as a regression case under
# tests/fuzz/regressions/HARNESS/, which the suite replays on every run
# (check_fuzz_regressions, no libFuzzer needed), and, for cron, as a
# data-driven case in tests/data/cron/ when it has an expected answer.
set -eu
secs=${1:-300}
[ $# -gt 0 ] && shift
harnesses=${*:-codec cron tzif}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${WARREN_FUZZ_BUILD:-$src/build-fuzz}
CC=clang cmake -S "$src" -B "$build" -DWARREN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=
for h in $harnesses; do
    case $h in
    codec | cron | tzif) targets="$targets fuzz_$h" ;;
    *)
        echo "run.sh: no harness \"$h\" (codec, cron, tzif)" >&2
        exit 2
        ;;
    esac
done
# shellcheck disable=SC2086 # a list of targets
cmake --build "$build" -j2 --target $targets
fz="$build/tests/fuzz"
for h in $harnesses; do
    mkdir -p "$build/corpus/$h"
    # The checked-in regressions (and seeds) first; `|| true`: an empty directory.
    cp "$src/tests/fuzz/regressions/$h"/* "$build/corpus/$h/" 2>/dev/null || true
    if [ -d "$src/tests/fuzz/seeds/$h" ]; then
        cp "$src/tests/fuzz/seeds/$h"/* "$build/corpus/$h/"
    fi
done
case " $harnesses " in *" cron "*)
    for f in "$src"/tests/data/cron/valid.txt "$src"/tests/data/cron/invalid.txt; do
        [ -f "$f" ] || continue
        i=0
        while IFS= read -r line; do
            i=$((i + 1))
            printf '%s' "${line%%	*}" >"$build/corpus/cron/seed-$(basename "$f" .txt)-$i"
        done <"$f"
    done
    ;;
esac
case " $harnesses " in *" tzif "*)
    for z in UTC Europe/Berlin America/New_York Australia/Lord_Howe Pacific/Apia Europe/Dublin \
        America/Santiago Asia/Kathmandu Pacific/Chatham America/Havana; do
        cp "${TZDIR:-/usr/share/zoneinfo}/$z" "$build/corpus/tzif/$(echo "$z" | tr / _)"
    done
    ;;
esac
cd "$build"
status=0
for h in $harnesses; do
    case $h in
    codec) opts="-max_len=4096 -dict=$src/tests/fuzz/codec.dict" ;;
    cron) opts="-max_len=600 -dict=$src/tests/fuzz/cron.dict" ;;
    tzif) opts="-max_len=8192" ;;
    esac
    # shellcheck disable=SC2086 # options
    "$fz/fuzz_$h" -max_total_time="$secs" $opts "$build/corpus/$h" || status=1
done
exit $status
