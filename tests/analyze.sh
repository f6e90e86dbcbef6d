#!/usr/bin/env bash
# The static analyzer of the suite: cppcheck (Debian's cppcheck package,
# scripts/deps.sh) over src/ (with include/), the fuzz harnesses and
# check_fuzz_regressions.c. Any finding fails (exit 1), printed as
# FILE:LINE: SEVERITY: MESSAGE [ID].
#   tests/analyze.sh [CACHE_DIR]
# CACHE_DIR (the ctest test `cppcheck` passes <build dir>/cppcheck) keeps
# cppcheck's per-file results: a second run re-analyzes only changed files
# (~1 s instead of ~10 s).
#
# Checks: warning, style, performance, portability, with the POSIX library
# model, in the one configuration the build uses (-D below; cppcheck would
# otherwise try every #ifdef combination). Off everywhere:
#   variableScope  the code declares at the head of a block on purpose
#   readdirCalled  readdir_r is deprecated (glibc); readdir on a DIR of one's
#                  own is thread-safe
# A false positive in a file is suppressed on its line with the reason:
#   /* cppcheck-suppress ID ; why */
# Suppressions by file, for files whose owner has yet to act on them, are in
# tests/analyze.supp (each with its reason).
# The other tests/*.c are not analyzed: cppcheck cannot see that Check's
# ck_assert* ends a test and reports dozens of impossible paths there.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$src"
if ! command -v cppcheck >/dev/null 2>&1; then
    echo "analyze.sh: cppcheck is not installed (scripts/deps.sh installs it)" >&2
    exit 1
fi
args=(--quiet --error-exitcode=1 --std=c11 --language=c --library=posix
    --enable=warning,style,performance,portability --inline-suppr
    --suppress=variableScope --suppress=readdirCalled --suppressions-list=tests/analyze.supp
    -j"${WARREN_JOBS:-2}" -I include -I src -I tests
    -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
    -DWARREN_SQL_DIR='"sql"' -DWARREN_VERSION='"0"' -DWARREN_SOURCE_DIR='"."'
    -DWARREN_TEST_DATA='"tests/data"' -DWARREN_BINARY='"warren"' -DWARREN_TZ_RELEASE='"0"'
    --template='{file}:{line}: {severity}: {message} [{id}]')
if [ $# -ge 1 ]; then
    mkdir -p "$1"
    args+=(--cppcheck-build-dir="$1")
fi
start=$SECONDS
rc=0
cppcheck "${args[@]}" src tests/fuzz tests/check_fuzz_regressions.c || rc=$?
if [ $rc != 0 ]; then
    echo "analyze.sh: cppcheck found the above (fix it, or suppress a false positive on its line: /* cppcheck-suppress ID ; why */)" >&2
    exit 1
fi
echo "analyze.sh: cppcheck $(cppcheck --version | sed 's/^Cppcheck //'): no finding ($((SECONDS - start)) s)"
