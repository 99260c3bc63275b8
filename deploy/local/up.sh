#!/usr/bin/env bash
# Starts a local Kiln cluster on loopback and runs a short demo:
#   its own redis-server (AOF on, data under the build tree), one broker,
#   two workers. Installs missing dependencies and builds (Release) first.
# Running it again reuses a healthy cluster. Stop it with deploy/local/down.sh.
# Ports (override with env): KILN_HTTP_PORT=8080 KILN_ZMQ_PORT=5555 (workers)
# KILN_CLIENT_PORT=5556 (native client protocol) KILN_REDIS_PORT=6390
# Waits (override with env): KILN_REDIS_WAIT_S=1800 for Redis to load its AOF
# (a large one takes minutes), then KILN_START_WAIT_S=300 for the broker and
# both workers to be up; both print progress every 5 s.
# The workers create namespaces and cgroups: run as root (or with sudo).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build="$root/build-release"
state="$build/local"
bin="$build/bin"
http_port=${KILN_HTTP_PORT:-8080}
zmq_port=${KILN_ZMQ_PORT:-5555}
client_port=${KILN_CLIENT_PORT:-5556}
redis_port=${KILN_REDIS_PORT:-6390}
redis_wait=${KILN_REDIS_WAIT_S:-1800}
start_wait=${KILN_START_WAIT_S:-300}
envfile="$root/.kiln/local.env"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'up.sh: %s\n' "$*" >&2; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null && exec sudo -E "$0" "$@"
  die "the workers need root (namespaces, cgroups, mounts): run as root"
fi

say "installing missing dependencies"
./deploy/install-deps.sh

say "building (Release) in $build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)"

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
healthy() {
  [[ -f "$envfile" ]] || return 1
  # shellcheck disable=SC1090
  (source "$envfile" && curl -fsS -m 2 -H "Authorization: Bearer $KILN_ADMIN_TOKEN" \
     "$KILN_URL/v1/workers" | python3 -c 'import json,sys; sys.exit(0 if len(json.load(sys.stdin)["workers"]) >= 2 else 1)') 2>/dev/null
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

mkdir -p "$state/logs" "$state/redis" "$state/run" "$root/.kiln"
if alive "$state/run/broker.pid" && healthy; then
  say "a healthy cluster is already running; reusing it"
else
  # Stop leftovers of an unhealthy earlier run (only our own pids).
  "$root/deploy/local/down.sh" --quiet || true
  for p in "$http_port" "$zmq_port" "$client_port" "$redis_port"; do
    port_free "$p" || die "port $p is in use by another program; set KILN_HTTP_PORT / KILN_ZMQ_PORT / KILN_CLIENT_PORT / KILN_REDIS_PORT"
  done
  tenant_token="kiln-local-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  admin_token="kiln-admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

  say "starting redis-server on 127.0.0.1:$redis_port (AOF in $state/redis)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$state/redis" --appendonly yes \
    --save "" --daemonize yes --pidfile "$state/run/redis.pid" --logfile "$state/logs/redis.log"
  say "waiting for redis-server to load its data (up to ${redis_wait}s)"
  "$root/deploy/local/wait-redis.sh" "$redis_port" "$state/run/redis.pid" "$redis_wait" || {
    tail -n 20 "$state/logs/redis.log" >&2
    die "redis-server does not serve (its log above, in $state/logs/redis.log)"
  }

  cat > "$state/broker.yaml" <<YAML
broker:
  id: local-broker
  http: {listen: "127.0.0.1:$http_port"}
  workers: {endpoint: "tcp://127.0.0.1:$zmq_port"}
  clients: {endpoint: "tcp://127.0.0.1:$client_port"}
  redis: {url: "redis://127.0.0.1:$redis_port"}
tenants:
  - name: local
    tokens: ["$tenant_token"]
    enabled: true        # a local demo cluster: code execution on, no approval step
    auto_approve: true
admin_tokens: ["$admin_token"]
YAML
  for i in 1 2; do
    cat > "$state/worker$i.yaml" <<YAML
worker:
  id: local-worker-$i
  brokers: ["tcp://127.0.0.1:$zmq_port"]
  slots: 4
  warm_per_runtime: 1
sandbox:
  state_dir: $state/sandboxes/worker$i
  uid_base: $((200000 + i * 10000))
  uid_count: 10000
YAML
  done

  say "starting the broker on http://127.0.0.1:$http_port"
  nohup "$bin/kiln-broker" --config "$state/broker.yaml" >>"$state/logs/broker.log" 2>&1 &
  echo $! > "$state/run/broker.pid"
  for i in 1 2; do
    say "starting worker $i"
    nohup "$bin/kiln-worker" --config "$state/worker$i.yaml" >>"$state/logs/worker$i.log" 2>&1 &
    echo $! > "$state/run/worker$i.pid"
  done

  cat > "$envfile" <<ENV
# Written by deploy/local/up.sh: \`source .kiln/local.env\` readies a shell for kiln and curl.
export KILN_URL=http://127.0.0.1:$http_port
export KILN_NATIVE_ENDPOINT=tcp://127.0.0.1:$client_port
export KILN_TOKEN=$tenant_token
export KILN_ADMIN_TOKEN=$admin_token
export REDIS_URL=redis://127.0.0.1:$redis_port
export PATH="$bin:\$PATH"
ENV
  # The broker waits for Redis by itself (it logs why); workers retry until
  # it serves. No fixed sleeps: poll, say how it goes, give up at the bound.
  say "waiting for the cluster to be healthy (up to ${start_wait}s)"
  started=$SECONDS
  next_note=$((started + 5))
  until healthy; do
    for p in broker worker1 worker2; do
      alive "$state/run/$p.pid" ||
        { tail -n 30 "$state"/logs/*.log >&2; die "$p exited (logs above, all in $state/logs)"; }
    done
    (( SECONDS - started < start_wait )) ||
      { tail -n 30 "$state"/logs/*.log >&2; die "the cluster did not become healthy in ${start_wait}s (logs above, all in $state/logs)"; }
    if (( SECONDS >= next_note )); then
      health=$(curl -sS -m 2 "http://127.0.0.1:$http_port/v1/health" 2>&1 || true)
      echo "   broker health: ${health:-no answer} ($((SECONDS - started)) s so far)"
      next_note=$((SECONDS + 5))
    fi
    sleep 0.5
  done
fi

# shellcheck disable=SC1090
source "$envfile"
run() {  # run LANG CODE [INPUT_JSON]
  local body
  body=$(python3 -c 'import json,sys; d={"language":sys.argv[1],"code":sys.argv[2]}
if len(sys.argv)>3: d["input"]=json.loads(sys.argv[3])
print(json.dumps(d))' "$@")
  curl -fsS -H "Authorization: Bearer $KILN_TOKEN" -H 'Content-Type: application/json' \
    -d "$body" "$KILN_URL/v1/executions" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("   status=%s exit=%s duration=%.1fms worker=%s" % (r["status"], r["exit_code"], r["duration_ms"] or 0, r["worker"])); print("   stdout: %r" % r["stdout"]); r["result"] is not None and print("   result: %s" % json.dumps(r["result"]))'
}
say "demo: one job per language"
echo " python:";     run python 'import platform; print("hello from python", platform.python_version())'
echo " javascript:"; run javascript 'console.log("hello from node", process.version)'
echo " shell:";      run shell 'echo "hello from bash $BASH_VERSION"; uname -s'
say "demo: input and result"
echo " python:";     run python 'result = {"mean": sum(numbers) / len(numbers), "n": len(numbers)}' '{"numbers": [3, 5, 10]}'

cat <<TXT

Kiln is running. Logs: $state/logs   Stop: ./deploy/local/down.sh
Ready your shell:   source .kiln/local.env

  curl -s -H "Authorization: Bearer \$KILN_TOKEN" -d '{"language":"python","code":"print(6*7)"}' \$KILN_URL/v1/executions
  kiln run --lang python -c 'print(6*7)'
  kiln run -l shell -c 'echo \$greeting' --input greeting=hi
TXT
