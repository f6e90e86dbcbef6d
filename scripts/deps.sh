#!/usr/bin/env bash
# Installs the Debian 12 packages warren needs to build, test and run, and
# only those that are missing (so a second run changes nothing and needs no
# network). Run as root. Installing postgresql/rabbitmq-server may start the
# system-wide services (or policy-rc.d may refuse to): warren never uses them;
# tests/servers.sh runs private servers on their own ports.
set -euo pipefail

PACKAGES=(
    build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
    cppcheck # the static analyzer of the suite (tests/analyze.sh, ctest test cppcheck)
    librabbitmq-dev libpq-dev libjansson-dev libconfig-dev check
    postgresql rabbitmq-server tzdata
    python3 python3-pika python3-psycopg2 curl
    nodejs # the Node example worker's tests (tests/e2e_node_worker.sh runs npm ci)
)

missing=()
for p in "${PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
        missing+=("$p")
    fi
done
# npm: a package of its own with Debian's nodejs; NodeSource's nodejs (on some
# machines already) bundles it and conflicts with Debian's npm package.
if ! command -v npm >/dev/null 2>&1 &&
    ! dpkg-query -W -f='${Version}' nodejs 2>/dev/null | grep -q nodesource; then
    missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
    echo "deps.sh: all ${#PACKAGES[@]} packages installed" >&2
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages: ${missing[*]}; run as root: scripts/deps.sh" >&2
    exit 1
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
