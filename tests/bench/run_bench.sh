#!/usr/bin/env bash
# Reproducible Kiln benchmark: builds (Release, <repo>/build-bench), starts its own
# redis-server, N kiln-brokers (default 1) and two kiln-workers on loopback (each
# worker connects to every broker; clients spread over every broker), runs
# kiln-bench for each language plus a python concurrency sweep, prints every
# figure with its exact command line, and stops everything it started (by pid).
#
#   sudo tests/bench/run_bench.sh [--jobs N] [--slots N] [--warm N] [--brokers N] [--no-build]
#        [--only RUN,...] [--worker-bin PATH] [--broker-bin PATH] [--cpu-weight]
#        [--isolation standard|gvisor]
#        [--no-zygote] [--protocol http|native] [--preload MODULES]
#
# --protocol native: every kiln-bench run speaks the brokers' native ZeroMQ
# client protocol (each broker's broker.clients.endpoint is enabled on a free
# port) instead of HTTP; same jobs, same figures, so runs compare.
# Must run as root: the workers create namespaces and cgroups. Figures on a small
# shared VM are noisy: compare medians and ratios, not single runs.
# KILN_KEEP_BENCH_DIR=1 keeps the temp dir (configs, logs, JSON results).
set -euo pipefail

JOBS=200
SLOTS=4
WARM=1
BROKERS=1
BUILD=1
ONLY=""
WORKER_BIN=""
BROKER_BIN=""
CPU_WEIGHT=0
ISOLATION=standard
ZYGOTE=true
PAUSE_MS=100
PROTOCOL=http
PRELOAD="-"  # "-": the worker's default
usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  echo "flags: --jobs N (measured jobs per run, default $JOBS), --slots N (per worker, default $SLOTS),"
  echo "       --warm N (warm sandboxes per runtime per worker, default $WARM),"
  echo "       --brokers N (brokers sharing the Redis, default $BROKERS), --no-build,"
  echo "       --only RUN,... (just these runs, e.g. python-paced,shell-c1),"
  echo "       --worker-bin PATH (this kiln-worker instead of the built one: A/B against a saved binary;"
  echo "         it runs the kiln-init (and libkiln-zygote.so, libkiln-gvisor-compat.so) found next to it,"
  echo "         so copy them too),"
  echo "       --broker-bin PATH (this kiln-broker instead of the built one: A/B of the broker),"
  echo "       --cpu-weight (cgroup v1 hosts: the cluster and its sandboxes run in a cpu cgroup"
  echo "       weighted 256x the default, so other load on a shared host yields to them),"
  echo "       --isolation LEVEL (standard or gvisor: both workers and the tenant at that level),"
  echo "       --no-zygote (sandbox.zygote: false: python one-shot sandboxes exec their interpreter),"
  echo "       --preload M,M (packages.preload.python of the workers; \"\" for none; default: the worker's),"
  echo "       --pause-ms N (pause between the paced runs' jobs, default $PAUSE_MS),"
  echo "       --protocol P (http or native: how kiln-bench talks to the brokers, default $PROTOCOL)"
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) JOBS="$2"; shift 2 ;;
    --slots) SLOTS="$2"; shift 2 ;;
    --warm) WARM="$2"; shift 2 ;;
    --brokers) BROKERS="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --only) ONLY=",$2,"; shift 2 ;;
    --worker-bin) WORKER_BIN="$2"; shift 2 ;;
    --broker-bin) BROKER_BIN="$2"; shift 2 ;;
    --cpu-weight) CPU_WEIGHT=1; shift ;;
    --isolation) ISOLATION="$2"; shift 2 ;;
    --no-zygote) ZYGOTE=false; shift ;;
    --preload) PRELOAD="$2"; shift 2 ;;
    --pause-ms) PAUSE_MS="$2"; shift 2 ;;
    --protocol) PROTOCOL="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_bench.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$ISOLATION" == standard || "$ISOLATION" == gvisor ]] ||
  { echo "run_bench.sh: --isolation is standard or gvisor" >&2; exit 2; }
[[ "$PROTOCOL" == http || "$PROTOCOL" == native ]] ||
  { echo "run_bench.sh: --protocol is http or native" >&2; exit 2; }
PRELOAD_YAML=""
if [[ "$PRELOAD" != "-" ]]; then
  [[ "$PRELOAD" =~ ^[A-Za-z0-9_.,]*$ ]] || { echo "run_bench.sh: --preload takes module names" >&2; exit 2; }
  PRELOAD_YAML="packages: {preload: {python: [${PRELOAD}]}}"$'\n'
fi
for v in JOBS SLOTS WARM BROKERS PAUSE_MS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "run_bench.sh: --${v,,} needs a number" >&2; exit 2; }
done
[[ $(id -u) -eq 0 ]] || { echo "run_bench.sh: must run as root (workers create namespaces and cgroups)" >&2; exit 2; }
for tool in curl redis-server redis-cli ss; do
  command -v "$tool" >/dev/null || { echo "run_bench.sh: $tool not found" >&2; exit 2; }
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR="$ROOT/build-bench"
BIN="$BUILD_DIR/bin"

if [[ $BUILD -eq 1 ]]; then
  # kiln-bench lives under tests/, so the tests' CMake files are configured,
  # but only the three binaries are built (no test is compiled).
  echo "== building (Release) in $BUILD_DIR"
  mkdir -p "$BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON \
    >"$BUILD_DIR/configure.log" 2>&1 || { cat "$BUILD_DIR/configure.log" >&2; exit 2; }
  ninja -C "$BUILD_DIR" kiln-broker kiln-worker kiln-bench
fi
for b in kiln-broker kiln-worker kiln-bench; do
  [[ -x "$BIN/$b" ]] || { echo "run_bench.sh: $BIN/$b missing (drop --no-build)" >&2; exit 2; }
done
WORKER_BIN=${WORKER_BIN:-$BIN/kiln-worker}
[[ -x "$WORKER_BIN" ]] || { echo "run_bench.sh: --worker-bin $WORKER_BIN is not executable" >&2; exit 2; }
BROKER_BIN=${BROKER_BIN:-$BIN/kiln-broker}
[[ -x "$BROKER_BIN" ]] || { echo "run_bench.sh: --broker-bin $BROKER_BIN is not executable" >&2; exit 2; }

TMP=$(mktemp -d /tmp/kiln-bench.XXXXXX)
SUFFIX=${TMP##*.}
PIDS=()  # everything we started, in start order
cleanup() {
  local rc=$?
  # Stop in reverse order: workers, broker, redis. SIGTERM, then SIGKILL after 10 s.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${PIDS[i]}" 2>/dev/null || true
  done
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    for _ in $(seq 100); do kill -0 "${PIDS[i]}" 2>/dev/null || break; sleep 0.1; done
    if kill -KILL "${PIDS[i]}" 2>/dev/null; then
      echo "run_bench.sh: pid ${PIDS[i]} ignored SIGTERM for 10 s; killed" >&2
    fi
    wait "${PIDS[i]}" 2>/dev/null || true
  done
  # The workers leave their (empty) cgroup prefix directories behind: remove ours
  # (and the --cpu-weight cgroup, once this shell has left it).
  if [[ -n "${SUFFIX:-}" ]]; then
    [[ $CPU_WEIGHT -eq 1 ]] && echo $$ >/sys/fs/cgroup/cpu/cgroup.procs 2>/dev/null
    find /sys/fs/cgroup -maxdepth 4 -depth -type d -name "kiln-bench-$SUFFIX-*" \
      -exec rmdir {} \; 2>/dev/null || true
  fi
  if [[ $rc -ne 0 || -n "${KILN_KEEP_BENCH_DIR:-}" ]]; then
    echo "run_bench.sh: logs, configs and results kept in $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --cpu-weight: everything started from here on (redis, brokers, workers,
# kiln-bench) inherits this shell's cpu cgroup, and the workers' cgroup prefix
# (hence every sandbox) lies below it in each v1 hierarchy.
CGROUP_PARENT=""
if [[ $CPU_WEIGHT -eq 1 ]]; then
  [[ -f /sys/fs/cgroup/cpu/cpu.shares ]] ||
    { echo "run_bench.sh: --cpu-weight needs the cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu" >&2; exit 2; }
  for h in cpu cpuacct memory pids; do
    [[ -d /sys/fs/cgroup/$h ]] && mkdir -p "/sys/fs/cgroup/$h/kiln-bench-$SUFFIX-cluster"
  done
  echo 262144 >"/sys/fs/cgroup/cpu/kiln-bench-$SUFFIX-cluster/cpu.shares"
  echo $$ >"/sys/fs/cgroup/cpu/kiln-bench-$SUFFIX-cluster/cgroup.procs"
  CGROUP_PARENT="kiln-bench-$SUFFIX-cluster/"
fi

USED_PORTS=" "
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    [[ "$USED_PORTS" == *" $p "* ]] && continue
    if [[ -z $(ss -Hltn "sport = :$p") ]]; then USED_PORTS+="$p "; echo "$p"; return; fi
  done
}
wait_for() {  # wait_for SECONDS WHAT CMD...: polls CMD every 0.1 s
  local secs=$1 what=$2; shift 2
  for _ in $(seq $((secs * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "run_bench.sh: $what not ready after ${secs}s; logs in $TMP" >&2
  tail -n 20 "$TMP"/*.log >&2 || true
  return 1
}

REDIS_PORT=$(free_port)
TOKEN="bench-token-$SUFFIX"
ADMIN="bench-admin-$SUFFIX"
HTTP_PORTS=()
ZMQ_PORTS=()
CLIENT_ENDPOINTS=()  # --protocol native: each broker's native client endpoint, else ""
for ((b = 0; b < BROKERS; b++)); do
  HTTP_PORTS+=("$(free_port)")
  ZMQ_PORTS+=("$(free_port)")
  if [[ $PROTOCOL == native ]]; then
    CLIENT_ENDPOINTS+=("tcp://127.0.0.1:$(free_port)")
  else
    CLIENT_ENDPOINTS+=("")
  fi
done

echo "== cluster in $TMP: redis :$REDIS_PORT, $BROKERS broker(s) http :${HTTP_PORTS[*]}" \
  "zmq :${ZMQ_PORTS[*]}${CLIENT_ENDPOINTS[0]:+ native ${CLIENT_ENDPOINTS[*]}}, 2 workers x $SLOTS slots, warm $WARM per runtime"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$TMP" --save "" --appendonly no \
  --daemonize no >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
REDIS_PID=$!
wait_for 10 redis-server redis-cli -p "$REDIS_PORT" ping

TARGET_ARGS=()  # kiln-bench's --url (or --protocol native --endpoint) arguments
[[ $PROTOCOL == native ]] && TARGET_ARGS+=(--protocol native)
BROKER_ENDPOINTS=""
for ((b = 0; b < BROKERS; b++)); do
  cat >"$TMP/broker$b.yaml" <<EOF
broker:
  id: bench-broker-$b
  http: {listen: "127.0.0.1:${HTTP_PORTS[b]}", threads: 64}
  workers: {endpoint: "tcp://127.0.0.1:${ZMQ_PORTS[b]}"}
  clients: {endpoint: "${CLIENT_ENDPOINTS[b]}"}
  redis: {url: "redis://127.0.0.1:$REDIS_PORT"}
tenants:
  - {name: bench, tokens: ["$TOKEN"], enabled: true, auto_approve: true, isolation: $ISOLATION}
admin_tokens: ["$ADMIN"]
log: {level: warn}
EOF
  "$BROKER_BIN" --config "$TMP/broker$b.yaml" >"$TMP/broker$b.log" 2>&1 &
  PIDS+=($!)
  BROKER_PIDS+=($!)
  wait_for 15 "kiln-broker $b" curl -sf "http://127.0.0.1:${HTTP_PORTS[b]}/v1/health"
  if [[ $PROTOCOL == native ]]; then
    TARGET_ARGS+=(--endpoint "${CLIENT_ENDPOINTS[b]}")
  else
    TARGET_ARGS+=(--url "http://127.0.0.1:${HTTP_PORTS[b]}")
  fi
  BROKER_ENDPOINTS+="${BROKER_ENDPOINTS:+, }\"tcp://127.0.0.1:${ZMQ_PORTS[b]}\""
done

WORKER_IDS=()
WORKER_PIDS=()
for i in 0 1; do
  id="bench-w$i-$SUFFIX"
  WORKER_IDS+=("$id")
  cat >"$TMP/worker$i.yaml" <<EOF
worker:
  id: $id
  brokers: [$BROKER_ENDPOINTS]
  slots: $SLOTS
  warm_per_runtime: $WARM
  drain_timeout_ms: 5000
sandbox:
  state_dir: $TMP/w$i
  cgroup_prefix: ${CGROUP_PARENT}kiln-bench-$SUFFIX-w$i
  uid_base: $((400000 + 10000 * i))
  uid_count: 10000
  isolation: $ISOLATION
  zygote: $ZYGOTE
${PRELOAD_YAML}log: {level: warn}
EOF
  "$WORKER_BIN" --config "$TMP/worker$i.yaml" >"$TMP/worker$i.log" 2>&1 &
  PIDS+=($!)
  WORKER_PIDS+=($!)
done
workers_listed() {  # on every broker
  local body port
  for port in "${HTTP_PORTS[@]}"; do
    body=$(curl -sf -H "Authorization: Bearer $ADMIN" "http://127.0.0.1:$port/v1/workers") ||
      return 1
    for id in "${WORKER_IDS[@]}"; do [[ "$body" == *"\"$id\""* ]] || return 1; done
  done
}
wait_for 30 "both workers in GET /v1/workers" workers_listed
echo "== workers registered: ${WORKER_IDS[*]}"
echo "== host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== isolation level: $ISOLATION, zygote: $ZYGOTE, client protocol: $PROTOCOL"
echo "== broker binary: $BROKER_BIN"
echo "== worker binary: $WORKER_BIN${CGROUP_PARENT:+, cluster in cpu cgroup ${CGROUP_PARENT%/} (cpu.shares 262144)}"

FAILED_RUNS=()
RESULTS=()
cpu_ticks() {  # cpu_ticks PID...: user + system CPU time of the processes, in clock ticks
  local t=0 p
  for p in "$@"; do t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") )); done
  echo "$t"
}
# The machine's busy CPU time in clock ticks (user, nice, system, irq, softirq
# of every core): the bench client, the sandboxes and the kernel included.
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
run() {  # run NAME ARGS...: one kiln-bench run, printed with its command line
  local name=$1; shift
  [[ -z "$ONLY" || "$ONLY" == *",$name,"* ]] || return 0
  local cmd=("$BIN/kiln-bench" "${TARGET_ARGS[@]}" --token "$TOKEN" "$@")
  echo
  echo "\$ ${cmd[*]}"
  local r0 b0 w0 m0
  r0=$(cpu_ticks "$REDIS_PID"); b0=$(cpu_ticks "${BROKER_PIDS[@]}")
  w0=$(cpu_ticks "${WORKER_PIDS[@]}"); m0=$(machine_ticks)
  if ! "${cmd[@]}" --json-file "$TMP/$name.json"; then FAILED_RUNS+=("$name"); fi
  # Redis's, the brokers', the workers' (their sandboxes not included) and
  # the whole machine's CPU over the run (warmup jobs included).
  echo "$(( $(cpu_ticks "$REDIS_PID") - r0 )) $(( $(cpu_ticks "${BROKER_PIDS[@]}") - b0 ))" \
    "$(( $(cpu_ticks "${WORKER_PIDS[@]}") - w0 )) $(( $(machine_ticks) - m0 ))" \
    >"$TMP/$name.cpu"
  RESULTS+=("$name")
}

# Latency of a job that finds a warm sandbox ready (the pool refills during
# the pause): what an agent sees when it is not saturating the cluster.
PACED=$(( JOBS < 100 ? JOBS : 100 ))
run python-paced --lang python --concurrency 1 --jobs "$PACED" --pause-ms "$PAUSE_MS"
run javascript-paced --lang javascript --concurrency 1 --jobs "$PACED" --pause-ms "$PAUSE_MS"
run shell-paced --lang shell --concurrency 1 --jobs "$PACED" --pause-ms "$PAUSE_MS"
# A small data job: import pandas and sum a DataFrame (issue 17's target
# compares its p50 with a bare `python3 -c 'import pandas'`,
# tests/bench/interpreter_starts.py). The zygote preloads pandas by default.
PANDAS_CODE=$'import pandas as pd\nresult = int(pd.DataFrame({"a": [1, 2, 3]})["a"].sum())'
run python-pandas-paced --lang python --concurrency 1 --jobs "$PACED" --pause-ms "$PAUSE_MS" \
  --code "$PANDAS_CODE"
run python-pandas-c4 --lang python --concurrency 4 --jobs "$PACED" --code "$PANDAS_CODE"
# Sessions: a trivial statement in a live interpreter (no sandbox is built;
# the warmup jobs create the sessions).
run python-session --lang python --concurrency 1 --jobs "$JOBS" --session bench-py
# A statement now and then in a live session, as an agent that thinks between them.
run python-session-paced --lang python --concurrency 1 --jobs "$PACED" --pause-ms "$PAUSE_MS" \
  --session bench-pyp
run javascript-session --lang javascript --concurrency 1 --jobs "$JOBS" --session bench-js
run shell-session --lang shell --concurrency 1 --jobs "$JOBS" --session bench-sh
run python-session-c4 --lang python --concurrency 4 --jobs "$JOBS" --session bench-py4
run python-session-c8 --lang python --concurrency 8 --jobs "$JOBS" --session bench-py8
# Back to back: throughput is bounded by how fast fresh sandboxes are built
# (every job gets a new one).
run python-c4 --lang python --concurrency 4 --jobs "$JOBS"
run javascript-c4 --lang javascript --concurrency 4 --jobs "$JOBS"
run shell-c4 --lang shell --concurrency 4 --jobs "$JOBS"
run python-c1 --lang python --concurrency 1 --jobs "$JOBS"
run python-c8 --lang python --concurrency 8 --jobs "$JOBS"
# The cheapest job at concurrency 1, over keep-alive and over a fresh connection
# per job: the difference is per-connection cost (e.g. Nagle + delayed ACK).
run shell-c1 --lang shell --concurrency 1 --jobs "$JOBS"
run shell-c1-newconn --lang shell --concurrency 1 --jobs "$JOBS" --new-connection

if command -v jq >/dev/null; then
  echo
  echo "== summary (ms; e2e = client end to end over succeeded jobs; dur/queued = server medians;"
  echo "   redis/broker/worker = their CPU µs per job over the run, warmup jobs counted, ±1 clock"
  echo "   tick; all = the machine's, the client, the sandboxes and the kernel included)"
  printf '%-17s %5s %5s %8s %8s %8s %8s %8s %8s %8s %9s %6s %6s %6s %6s\n' run ok fail 'jobs/s' \
    'e2e p50' 'e2e p90' 'e2e p99' 'e2e max' 'dur p50' 'que p50' 'overhead' redis broker worker all
  TICK_US=$(( 1000000 / $(getconf CLK_TCK) ))
  for name in "${RESULTS[@]}"; do
    read -r rticks bticks wticks mticks <"$TMP/$name.cpu"
    jq -r --arg n "$name" '[$n, .succeeded, .failed, .throughput_jobs_per_s, .latency_ms.p50,
        .latency_ms.p90, .latency_ms.p99, .latency_ms.max, .server_duration_ms.p50,
        .server_queued_ms.p50, .overhead_outside_sandbox_ms, .succeeded + .failed + .warmup] | @tsv' \
        "$TMP/$name.json" |
      while IFS=$'\t' read -r n ok fail tput p50 p90 p99 max dur que ovh all; do
        printf '%-17s %5s %5s %8.1f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %6d %6d %6d %6d\n' \
          "$n" "$ok" "$fail" "$tput" "$p50" "$p90" "$p99" "$max" "$dur" "$que" "$ovh" \
          $(( rticks * TICK_US / all )) $(( bticks * TICK_US / all )) \
          $(( wticks * TICK_US / all )) $(( mticks * TICK_US / all ))
      done
  done
fi

echo
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ ${#FAILED_RUNS[@]} -gt 0 ]]; then
  echo "== runs with failed jobs: ${FAILED_RUNS[*]}"
  exit 1
fi
echo "== all runs succeeded"
