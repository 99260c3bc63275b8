#!/usr/bin/env bash
# Installs missing dependencies, builds Kiln and runs every test with ctest.
# Exits non-zero on any failure; ends with ctest's summary line.
#   tests/run.sh                            # everything
#   KILN_TEST_ARGS="-L unit" tests/run.sh   # extra ctest arguments
#   KILN_SKIP_SANITIZERS=1 tests/run.sh     # skip the ASan/UBSan leg
#   KILN_SKIP_FUZZ=1 tests/run.sh           # skip the fuzzing leg (Clang, libFuzzer)
#   KILN_FUZZ_SECONDS=300 tests/run.sh      # fuzz each target longer (default 20 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

./deploy/install-deps.sh

# --- MCP test dependencies (tests/mcp) ---------------------------------------
# The official MCP TypeScript SDK client that tests/mcp/mcp_test.mjs drives
# `kiln mcp` with, pinned by tests/mcp/package-lock.json and installed into
# tests/mcp/node_modules (git-ignored). Reinstalled when the lock file is newer
# than the install. Without it, ctest reports mcp_sdk_test as skipped.
if [[ ! tests/mcp/node_modules/.package-lock.json -nt tests/mcp/package-lock.json ]]; then
  (cd tests/mcp && npm ci --no-audit --no-fund)
fi
# -----------------------------------------------------------------------------

# 1. The pure-logic tests (codec, parsers, config, secrets filter, CLI) again
#    under AddressSanitizer and UndefinedBehaviorSanitizer. The sandbox and
#    cluster tests are not: they clone processes that share the worker's
#    memory, which ASan does not model.
if [[ -z "${KILN_SKIP_SANITIZERS:-}" ]]; then
  asan=${KILN_ASAN_BUILD_DIR:-$root/build-asan}
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON \
    -DKILN_BUILD_TESTS=ON >/dev/null
  asan_tests=(common_unit_test protocol_codec_test protocol_client_codec_test protocol_fuzz_smoke
              fuzz_replay broker_unit_test cli_test secrets_test bench_test policy_test
              audit_chain_test logging_test protocol_golden_frames_test redis_endpoint_test)
  cmake --build "$asan" -j "$(nproc)" --target "${asan_tests[@]}"
  (cd "$asan" && ctest --output-on-failure -j 2 -R "^($(IFS='|'; echo "${asan_tests[*]}"))\$")
fi

# 2. Fuzzing: every decoder of client input (tests/fuzz/: the worker and client
#    codecs, the submit body and JSON, HTTP requests) under libFuzzer with
#    ASan/UBSan, for a bounded time each, in a Clang build of the fuzz targets
#    only. A crash fails the run and names the input to keep as a regression.
if [[ -z "${KILN_SKIP_FUZZ:-}" ]]; then
  tests/fuzz/fuzz.sh "${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}" "${KILN_FUZZ_SECONDS:-20}"
fi

# 3. Everything, in a normal build.
build=${KILN_BUILD_DIR:-$root/build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_BUILD_TESTS=ON
cmake --build "$build" -j "$(nproc)"

cd "$build"
# shellcheck disable=SC2086
ctest --output-on-failure -j 2 --timeout 900 ${KILN_TEST_ARGS:-}
