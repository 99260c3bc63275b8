#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/CMakeLists.txt) with Clang and runs
# each for a bounded time, as many at once as there are cores
# (KILN_FUZZ_JOBS); exits non-zero if any target found a crash, naming the
# input.
#   tests/fuzz/fuzz.sh [build-dir [seconds-per-target [target ...]]]
#   tests/fuzz/fuzz.sh build-fuzz 20              # what tests/run.sh does
#   tests/fuzz/fuzz.sh build-fuzz 3600 http_fuzz  # one target for an hour
# The corpus of <target> grows in <build-dir>/fuzz/corpus/<target> (its seeds,
# tests/fuzz/corpus/<target>, are copied in, so the repository is not
# touched); the regressions are read too. Crashing inputs are written to
# <build-dir>/fuzz/crashes/<target>/; once the bug is fixed, add the input to
# tests/fuzz/regressions/<target>/, where fuzz_replay runs it under ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath -m "${1:-$root/build-fuzz}")
seconds=${2:-20}
targets=("${@:3}")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(protocol_fuzz client_protocol_fuzz submit_fuzz http_fuzz tool_fuzz)
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=ON "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# Runs target $1; its one-paragraph report goes to <build-dir>/fuzz/<target>.report.
fuzz() {
  local t=$1
  local corpus=$build/fuzz/corpus/$t crashes=$build/fuzz/crashes/$t log=$build/fuzz/$t.log
  local report=$build/fuzz/$t.report
  mkdir -p "$corpus" "$crashes"
  cp "$root/tests/fuzz/corpus/$t/"* "$corpus/"
  local args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
              -artifact_prefix="$crashes/")
  local dict=$root/tests/fuzz/${t%_fuzz}.dict
  if [[ -f $dict ]]; then args+=(-dict="$dict"); fi
  local dirs=("$corpus")
  if [[ -d $root/tests/fuzz/regressions/$t ]]; then dirs+=("$root/tests/fuzz/regressions/$t"); fi

  local before
  before=$(find "$crashes" -type f | wc -l)
  if "$build/tests/fuzz/$t" "${args[@]}" "${dirs[@]}" >"$log" 2>&1; then
    # "#123456<TAB>DONE   cov: 1410 ft: 5558 corp: 1030/212Kb lim: 1071 exec/s: 7735 rss: 481Mb"
    echo "fuzz: $t ok: $(grep -m1 'DONE ' "$log" |
      sed -E 's/^#([0-9]+)\s+DONE\s+/\1 runs, /; s/ lim: [0-9]+//')" >"$report"
    return 0
  fi
  {
    # The fuzzer's report: the contract it broke or the sanitizer's, and the stack.
    grep -v -e '^#[0-9]' -e '^INFO:' -e '# Uses:' -e 'dictionary' "$log" | tail -n 60
    if [[ $(find "$crashes" -type f | wc -l) -gt $before ]]; then
      local input
      input=$(ls -t "$crashes" | head -n 1)
      echo "fuzz: $t FAILED on $crashes/$input (log: $log)"
      echo "  reproduce: $build/tests/fuzz/$t $crashes/$input"
      echo "  once fixed: cp $crashes/$input $root/tests/fuzz/regressions/$t/"
    else
      echo "fuzz: $t FAILED without leaving an input (log: $log)"
    fi
  } >"$report"
  return 1
}

# One fuzzer per core (each is single-threaded), reports in target order.
parallel=${KILN_FUZZ_JOBS:-$(nproc)}
declare -A pid_of
for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $parallel ]]; do wait -n || true; done
  fuzz "$t" &
  pid_of[$t]=$!
done
failed=0
for t in "${targets[@]}"; do
  if wait "${pid_of[$t]}"; then
    cat "$build/fuzz/$t.report"
  else
    failed=1
    cat "$build/fuzz/$t.report" >&2
  fi
done
exit "$failed"
