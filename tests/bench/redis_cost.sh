#!/usr/bin/env bash
# What jobs cost Redis: commands (INFO stats total_commands_processed, minus
# the idle rate of the broker's own ticks) and output stream entries for
#   1. 50 small python jobs (print(1)), one after another;
#   2. one job writing one byte per write() for 3 s;
#   3. one output flood (`while True: print(...)`, max_output_bytes 10 MiB, 5 s);
#   4. 2,000 statements (`x = 1`) in one session, one client, over HTTP
#      (`wait: true`) and over the native protocol (submit with subscribe),
#      with kiln-bench from BIN (the first statement creates the session).
# Starts its own redis-server, one kiln-broker and one kiln-worker from BIN
# (default <repo>/build-bench/bin: build it with tests/bench/run_bench.sh) and
# stops them (by pid). Run as root (the worker creates namespaces).
#   sudo tests/bench/redis_cost.sh [BIN]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/build-bench/bin}
for b in kiln-broker kiln-worker; do
  [[ -x "$BIN/$b" ]] || { echo "redis_cost.sh: $BIN/$b missing" >&2; exit 2; }
done
TMP=$(mktemp -d /tmp/kiln-rcost.XXXXXX)
SUFFIX=${TMP##*.}
PIDS=()
cleanup() {
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do wait "${PIDS[i]}" 2>/dev/null || true; done
  find /sys/fs/cgroup -maxdepth 4 -depth -type d -name "kiln-rcost-$SUFFIX*" -exec rmdir {} \; \
    2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port); HP=$(port); ZP=$(port); NP=$(port)
redis-server --port "$RP" --bind 127.0.0.1 --dir "$TMP" --save "" --appendonly no >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
cat >"$TMP/broker.yaml" <<EOF
broker:
  id: rcost-broker
  http: {listen: "127.0.0.1:$HP"}
  workers: {endpoint: "tcp://127.0.0.1:$ZP"}
  clients: {endpoint: "tcp://127.0.0.1:$NP"}
  redis: {url: "redis://127.0.0.1:$RP"}
tenants:
  - {name: bench, tokens: ["t-$SUFFIX"], enabled: true, auto_approve: true}
log: {level: warn}
EOF
cat >"$TMP/worker.yaml" <<EOF
worker: {id: rcost-w-$SUFFIX, brokers: ["tcp://127.0.0.1:$ZP"], slots: 2, warm_per_runtime: 1}
sandbox: {state_dir: $TMP/w, cgroup_prefix: kiln-rcost-$SUFFIX, uid_base: 470000, uid_count: 10000}
log: {level: warn}
EOF
"$BIN/kiln-broker" --config "$TMP/broker.yaml" >"$TMP/broker.log" 2>&1 &
PIDS+=($!)
"$BIN/kiln-worker" --config "$TMP/worker.yaml" >"$TMP/worker.log" 2>&1 &
PIDS+=($!)
submit() {  # submit JSON: waits for the job's end
  curl -sf -H "Authorization: Bearer t-$SUFFIX" -H 'Content-Type: application/json' \
    -d "$1" "http://127.0.0.1:$HP/v1/executions"
}
for _ in $(seq 150); do submit '{"language":"python","code":"print(1)"}' >/dev/null 2>&1 && break; sleep 0.2; done
commands() { redis-cli -p "$RP" info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'; }
entries() { redis-cli -p "$RP" eval "local n=0 for _,k in ipairs(redis.call('KEYS','{kiln}:out:*')) do n=n+redis.call('XLEN',k) end return n" 0; }
# The broker's own background (ticks, pump) per second, measured idle.
c0=$(commands); sleep 3; c1=$(commands)
idle=$(( (c1 - c0) / 3 ))
measure() {  # measure NAME JOBS CMD...: commands and entries the jobs cost
  local name=$1 jobs=$2; shift 2
  local e0 t0 c_0 c_1 e1 secs
  e0=$(entries); c_0=$(commands); t0=$(date +%s.%N)
  "$@"
  c_1=$(commands); e1=$(entries)
  secs=$(python3 -c "import time; print(max(1, round(time.time() - $t0)))")
  local used=$(( c_1 - c_0 - idle * secs ))
  printf '%-34s %8d redis commands (%d per job), %6d output entries\n' "$name" "$used" \
    $(( used / jobs )) $(( e1 - e0 ))
}
small() { for _ in $(seq 50); do submit '{"language":"python","code":"print(1)"}' >/dev/null; done; }
bytewise() {
  submit '{"language":"python","code":"import os, time\nend = time.time() + 3\nwhile time.time() < end:\n    os.write(1, b\"x\")","limits":{"timeout_ms":10000}}' >/dev/null
}
flood() {
  submit '{"language":"python","code":"while True: print(\"line of output text 0123456789\")","limits":{"timeout_ms":5000,"max_output_bytes":10485760}}' >/dev/null
}
echo "== $BIN; broker background: $idle commands/s (subtracted)"
measure "50 x print(1)" 50 small
measure "1-byte writes for 3 s" 1 bytewise
measure "output flood, 10 MiB cap, 5 s" 1 flood
if [[ -x "$BIN/kiln-bench" ]]; then
  statements() {  # statements PROTOCOL-ARGS...: 2,000 of one client in a fresh session
    "$BIN/kiln-bench" "$@" --token "t-$SUFFIX" -c 1 --jobs 2000 --warmup 0 --session rc >/dev/null
  }
  measure "2000 session statements, HTTP" 2000 statements --url "http://127.0.0.1:$HP"
  measure "2000 session statements, native" 2000 \
    statements --protocol native --endpoint "tcp://127.0.0.1:$NP"
else
  echo "(no $BIN/kiln-bench: session statements not measured)"
fi
