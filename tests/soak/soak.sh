#!/usr/bin/env bash
# Soak: about 10 minutes of mixed load on a local cluster — ordinary jobs,
# sessions, event streams, and hostile clients (slowloris, never-read
# streams, deep JSON, oversized chunked bodies, bad heads, native connection
# floods) — reporting the broker's, the workers' and Redis's memory and open
# descriptors once the load has warmed up ("start") and at its end ("end"),
# and before and after the load, idle. Fails when memory grew from start to
# end by more than 10% (+ 2 MiB), when a process holds more descriptors idle
# after the load than idle before it (+10%, +16: descriptors under load
# follow the connections open at that instant), when health failed once, or
# when the ordinary jobs stopped succeeding. Not in tests/run.sh: ~12 minutes.
#
#   sudo tests/soak/soak.sh [--seconds 600] [--warmup 60] [--no-build]
#
# Builds Release into <repo>/build-soak (kiln-broker, kiln-worker), starts its
# own redis-server, one broker and two workers on loopback, and stops
# everything it started (by pid). KILN_KEEP_SOAK_DIR=1 keeps logs and samples.
set -euo pipefail

SECONDS_TOTAL=600
WARMUP=120
BUILD=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECONDS_TOTAL="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
[[ "$SECONDS_TOTAL" =~ ^[0-9]+$ && "$WARMUP" =~ ^[0-9]+$ ]] || { echo "soak.sh: numbers, please" >&2; exit 2; }
((SECONDS_TOTAL > WARMUP + 20)) || { echo "soak.sh: --seconds must exceed --warmup by 20" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "soak.sh: must run as root (workers create namespaces and cgroups)" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR="$ROOT/build-soak"
BIN=${KILN_SOAK_BIN:-$BUILD_DIR/bin}  # KILN_SOAK_BIN=dir with --no-build: binaries built elsewhere
if [[ $BUILD -eq 1 ]]; then
  echo "== building (Release) in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BUILD_DIR" kiln-broker kiln-worker
fi

TMP=$(mktemp -d /tmp/kiln-soak.XXXXXX)
SUFFIX=${TMP##*.}
PIDS=()
cleanup() {
  local rc=$?
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    for _ in $(seq 100); do kill -0 "${PIDS[i]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${PIDS[i]}" 2>/dev/null || true
    wait "${PIDS[i]}" 2>/dev/null || true
  done
  find /sys/fs/cgroup -maxdepth 4 -depth -type d -name "kiln-soak-$SUFFIX-w*" \
    -exec rmdir {} \; 2>/dev/null || true
  if [[ $rc -ne 0 || -n "${KILN_KEEP_SOAK_DIR:-}" ]]; then
    echo "soak.sh: logs and samples kept in $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  local p
  while :; do
    # Below the ephemeral range (32768+), and in use by no socket at all.
    p=$((20000 + RANDOM % 12000))
    [[ -z $(ss -Htan "sport = :$p") ]] && { echo "$p"; return; }
  done
}
wait_for() {
  local secs=$1; shift
  for _ in $(seq $((secs * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "soak.sh: not ready: $*" >&2; return 1
}

REDIS_PORT=$(free_port); HTTP_PORT=$(free_port); ZMQ_PORT=$(free_port); CLIENT_PORT=$(free_port)
TOKEN="soak-a-$SUFFIX"; OTHER="soak-b-$SUFFIX"; ADMIN="soak-admin-$SUFFIX"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$TMP" --save "" --appendonly no \
  >"$TMP/redis.log" 2>&1 &
PIDS+=($!); REDIS_PID=$!
wait_for 10 redis-cli -p "$REDIS_PORT" ping
cat >"$TMP/broker.yaml" <<EOF
broker:
  id: soak-broker
  job_ttl_s: 60
  http: {listen: "127.0.0.1:$HTTP_PORT", header_timeout_ms: 5000}
  workers: {endpoint: "tcp://127.0.0.1:$ZMQ_PORT"}
  clients: {endpoint: "tcp://127.0.0.1:$CLIENT_PORT", auth_timeout_ms: 2000}
  redis: {url: "redis://127.0.0.1:$REDIS_PORT"}
limits:
  max: {max_output_bytes: 10485760}
scheduling: {session_ttl_s: 30}
# What Redis keeps grows with the jobs until these bound it: records live
# job_ttl_s, the audit stream keeps max_entries (docs/security.md).
audit: {max_entries: 5000}
tenants:
  - {name: soak-a, tokens: ["$TOKEN"], enabled: true, auto_approve: true}
  - {name: soak-b, tokens: ["$OTHER"], enabled: true, auto_approve: true}
admin_tokens: ["$ADMIN"]
log: {level: warn}
EOF
"$BIN/kiln-broker" --config "$TMP/broker.yaml" >"$TMP/broker.log" 2>&1 &
PIDS+=($!); BROKER_PID=$!
wait_for 15 curl -sf "http://127.0.0.1:$HTTP_PORT/v1/health"
WORKER_PIDS=()
for i in 0 1; do
  cat >"$TMP/worker$i.yaml" <<EOF
worker:
  id: soak-w$i-$SUFFIX
  brokers: ["tcp://127.0.0.1:$ZMQ_PORT"]
  slots: 4
  warm_per_runtime: 1
sandbox:
  state_dir: $TMP/w$i
  cgroup_prefix: kiln-soak-$SUFFIX-w$i
  uid_base: $((450000 + 10000 * i))
  uid_count: 10000
log: {level: warn}
EOF
  "$BIN/kiln-worker" --config "$TMP/worker$i.yaml" >"$TMP/worker$i.log" 2>&1 &
  PIDS+=($!); WORKER_PIDS+=($!)
done
workers_up() {
  [[ $(curl -sf -H "Authorization: Bearer $ADMIN" "http://127.0.0.1:$HTTP_PORT/v1/workers" |
    grep -o '"id"' | wc -l) -ge 2 ]]
}
wait_for 30 workers_up

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
sample() {  # sample NAME: one line per process, "name rss_kb fds"
  {
    echo "broker $(rss_kb "$BROKER_PID") $(fds "$BROKER_PID")"
    for i in "${!WORKER_PIDS[@]}"; do
      echo "worker$i $(rss_kb "${WORKER_PIDS[i]}") $(fds "${WORKER_PIDS[i]}")"
    done
    echo "redis $(rss_kb "$REDIS_PID") $(fds "$REDIS_PID")"
    echo "redis_used_kb $(( $(redis-cli -p "$REDIS_PORT" info memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r') / 1024 )) 0"
  } >"$TMP/$1.txt"
}

echo "== soak: ${SECONDS_TOTAL}s of mixed load (warm-up ${WARMUP}s) on $TMP"
sample idle
python3 "$ROOT/tests/soak/soak_load.py" --url "http://127.0.0.1:$HTTP_PORT" \
  --native "127.0.0.1:$CLIENT_PORT" --token "$TOKEN" --other-token "$OTHER" \
  --seconds "$SECONDS_TOTAL" --report "$TMP/counts.json" &
LOAD=$!
sleep "$WARMUP"; sample start
sleep $((SECONDS_TOTAL - WARMUP - 10)); sample end
wait "$LOAD"
# Idle sessions end after session_ttl_s (30 s) and the broker's next tick.
sleep 45; sample after

echo
printf '%-14s %12s %12s %12s %12s   %s\n' process 'idle' 'start' 'end' 'after' 'fds idle/start/end/after'
fail=0
while read -r name rss0 fd0; do
  read -r _ rss1 fd1 < <(grep "^$name " "$TMP/start.txt")
  read -r _ rss2 fd2 < <(grep "^$name " "$TMP/end.txt")
  read -r _ rss3 fd3 < <(grep "^$name " "$TMP/after.txt")
  verdict=ok
  if ((rss2 > rss1 * 110 / 100 + 2048)); then verdict="GREW"; fail=1; fi
  if [[ $name != redis_used_kb ]] && ((fd3 > fd0 * 110 / 100 + 16)); then verdict="FDS GREW"; fail=1; fi
  printf '%-14s %9s kB %9s kB %9s kB %9s kB   %s/%s/%s/%s  %s\n' "$name" "$rss0" "$rss1" "$rss2" \
    "$rss3" "$fd0" "$fd1" "$fd2" "$fd3" "$verdict"
done <"$TMP/idle.txt"
echo
echo "== what the clients saw:"
python3 -c 'import json,sys; [print("   %-28s %s" % kv) for kv in sorted(json.load(open(sys.argv[1])).items())]' "$TMP/counts.json"
ok=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("job_ok", 0))' "$TMP/counts.json")
bad_health=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(sum(v for k,v in c.items() if k.startswith("health_") and k not in ("health_200","health_worst_ms")))' "$TMP/counts.json")
if ((ok < 100)); then echo "== only $ok ordinary jobs succeeded"; fail=1; fi
if ((bad_health > 0)); then echo "== health failed $bad_health times"; fail=1; fi
for p in "$BROKER_PID" "${WORKER_PIDS[@]}" "$REDIS_PID"; do
  kill -0 "$p" 2>/dev/null || { echo "== pid $p is gone"; fail=1; }
done
if ((fail)); then echo "== soak FAILED"; exit 1; fi
echo "== soak passed: memory and descriptors flat within 10%"
