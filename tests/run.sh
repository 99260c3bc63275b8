#!/usr/bin/env bash
# Installs missing dependencies, builds Kiln and runs every test with ctest.
# Exits non-zero on any failure; ends with ctest's summary line.
#   tests/run.sh                 # everything
#   KILN_TEST_ARGS="-L unit" tests/run.sh   # extra ctest arguments
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

./deploy/install-deps.sh

build=${KILN_BUILD_DIR:-$root/build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_BUILD_TESTS=ON
cmake --build "$build" -j "$(nproc)"

cd "$build"
# shellcheck disable=SC2086
ctest --output-on-failure -j 2 --timeout 900 ${KILN_TEST_ARGS:-}
