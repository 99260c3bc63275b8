#!/bin/sh
# Starts one sentinel. Sentinel keeps what it learns (the master, the epoch,
# the other sentinels) in its config, which lives on the pod's volume. On its
# first start it asks the other sentinels for the master, and when none
# answers (the whole set's first start) monitors FIRST_MASTER.
#   sentinel.sh    env: SENTINELS ("host:port ..."), DOMAIN, FIRST_MASTER ("host port"),
#                       [ME, PORT, DATA, DOWN_AFTER_MS]
set -eu
me=${ME:-$(cat /proc/sys/kernel/hostname).$DOMAIN}
port=${PORT:-26379}
data=${DATA:-/data}
conf=$data/sentinel.conf
if [ ! -s "$conf" ]; then
  master=$FIRST_MASTER
  for s in $SENTINELS; do
    [ "$s" = "$me:$port" ] && continue
    # shellcheck disable=SC2046 # split "host\nport" into $1 $2
    set -- $(timeout 3 redis-cli -h "${s%:*}" -p "${s##*:}" --raw \
      SENTINEL get-master-addr-by-name kiln 2>/dev/null || true)
    if [ $# -eq 2 ]; then
      case $2 in ''|*[!0-9]*) ;; *) master="$1 $2"; break ;; esac
    fi
  done
  # Hostnames throughout: pod IPs change, the StatefulSets' DNS names do not.
  cat >"$conf.new" <<CONF
port $port
dir $data
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $me
sentinel announce-port $port
sentinel monitor kiln $master 2
sentinel down-after-milliseconds kiln ${DOWN_AFTER_MS:-5000}
sentinel failover-timeout kiln 60000
sentinel parallel-syncs kiln 1
CONF
  mv "$conf.new" "$conf"
  echo "sentinel.sh: first start, monitoring kiln at $master" >&2
fi
exec redis-server "$conf" --sentinel
