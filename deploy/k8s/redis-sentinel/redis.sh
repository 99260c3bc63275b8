#!/bin/sh
# Starts one Redis of the replicated set (kustomization.yaml). Its role comes
# from the sentinels, never from itself: after a failover the master is
# whichever pod they promoted, and an old master that restarts must come back
# as a replica. So: ask them for the master (waiting up to a minute for one to
# answer), then start as the master if they name this pod, else as its replica.
#   redis.sh BASE_CONF      env: SENTINELS ("host:port ..."), DOMAIN, [ME, PORT, DATA]
set -eu
base=$1
me=${ME:-$(cat /proc/sys/kernel/hostname).$DOMAIN}
port=${PORT:-6379}
data=${DATA:-/data}
tries=0
while :; do
  for s in $SENTINELS; do
    # shellcheck disable=SC2046 # split "host\nport" into $1 $2
    set -- $(timeout 3 redis-cli -h "${s%:*}" -p "${s##*:}" --raw \
      SENTINEL get-master-addr-by-name kiln 2>/dev/null || true)
    if [ $# -eq 2 ]; then
      case $2 in ''|*[!0-9]*) ;; *) break 2 ;; esac
    fi
  done
  tries=$((tries + 1))
  if [ "$tries" -ge 30 ]; then
    echo "redis.sh: no sentinel named the master of kiln ($SENTINELS)" >&2
    exit 1
  fi
  echo "redis.sh: waiting for a sentinel to name the master of kiln" >&2
  sleep 2
done
{
  cat "$base"
  echo "port $port"
  # Announce the DNS name, not the pod IP, which changes when a pod moves.
  echo "replica-announce-ip $me"
  echo "replica-announce-port $port"
  if [ "$1" != "$me" ] || [ "$2" != "$port" ]; then echo "replicaof $1 $2"; fi
} >"$data/redis.conf.new"
mv "$data/redis.conf.new" "$data/redis.conf"
if [ "$1" = "$me" ] && [ "$2" = "$port" ]; then role=master; else role="replica of $1:$2"; fi
echo "redis.sh: starting as $role" >&2
exec redis-server "$data/redis.conf"
