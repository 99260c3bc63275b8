#!/usr/bin/env bash
# Waits until the redis-server on 127.0.0.1:PORT serves: PING answers PONG,
# not LOADING (a large AOF or RDB takes a while to load). Prints a progress
# line every 5 s: the share loaded and Redis's own estimate of the time left.
# Exits 0 once Redis serves, 1 when its process (PIDFILE) is gone or BOUND_S
# seconds passed. Used by deploy/local/up.sh.
#   deploy/local/wait-redis.sh PORT PIDFILE [BOUND_S]   # BOUND_S: 1800
set -euo pipefail
port=$1
pidfile=$2
bound=${3:-1800}

start=$SECONDS
next_note=$((start + 5))
while :; do
  # A stopped or wedged Redis would hold redis-cli forever: bound each call.
  reply=$(timeout 5 redis-cli -p "$port" ping 2>&1 || true)
  if [[ $reply == PONG ]]; then
    (( SECONDS - start < 5 )) || echo "   redis serves after $((SECONDS - start)) s"
    exit 0
  fi
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile")
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "wait-redis: redis-server (pid $pid) exited; last answer: $reply" >&2
      exit 1
    fi
  elif (( SECONDS - start >= 10 )); then
    echo "wait-redis: redis-server wrote no pid file ($pidfile) in 10 s; last answer: $reply" >&2
    exit 1
  fi
  if (( SECONDS - start >= bound )); then
    echo "wait-redis: redis on port $port does not serve after $bound s; last answer: $reply" >&2
    exit 1
  fi
  if (( SECONDS >= next_note )); then
    if [[ $reply == LOADING* ]]; then
      info=$(timeout 5 redis-cli -p "$port" info persistence 2>/dev/null | tr -d '\r' || true)
      perc=$(sed -n 's/^loading_loaded_perc://p' <<<"$info")
      eta=$(sed -n 's/^loading_eta_seconds://p' <<<"$info")
      echo "   redis is loading its data: ${perc:-?}% done, about ${eta:-?} s left ($((SECONDS - start)) s so far)"
    else
      echo "   redis does not answer yet: ${reply:-no reply} ($((SECONDS - start)) s so far)"
    fi
    next_note=$((SECONDS + 5))
  fi
  sleep 0.2
done
