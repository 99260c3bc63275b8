#!/usr/bin/env bash
# Stops the local cluster started by deploy/local/up.sh (only its own pids).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
run="$root/build-release/local/run"
quiet=${1:-}
stop() {  # stop PIDFILE NAME
  [[ -f "$1" ]] || return 0
  local pid; pid=$(cat "$1")
  if kill -0 "$pid" 2>/dev/null; then
    [[ -n "$quiet" ]] || echo "stopping $2 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}
stop "$run/worker1.pid" worker1
stop "$run/worker2.pid" worker2
stop "$run/broker.pid" broker
stop "$run/redis.pid" redis-server
[[ -n "$quiet" ]] || echo "local cluster stopped"
