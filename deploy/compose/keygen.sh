#!/bin/sh
# The CURVE keys of the compose cluster, run by its one-shot service `keygen`
# (root, in the kiln-broker image, which holds the kiln CLI) before the broker
# and the worker start. Its volumes:
#   /keys/broker    broker.key (0600, owned by the broker's uid 10001) and broker.pub
#   /keys/worker    the worker's key (0600 root) and a copy of broker.pub
#   /keys/accepted  the broker's accepted_keys_dir: <worker-id>.pub
#
#   (no argument)   make what is missing; keys that exist are kept
#   pub             print broker.pub, for workers on other hosts
#   accept NAME     read NAME.pub from stdin into the accepted keys
#   revoke NAME     remove NAME.pub from them
# e.g. docker compose run --rm -T keygen accept worker-17 < worker-17.pub
set -eu
keys=${KILN_KEYS:-/keys}
kiln=${KILN:-kiln}
worker=${KILN_WORKER_ID:-compose-worker-1}   # worker.id in worker.yaml
broker_uid=${KILN_BROKER_UID:-10001}          # the USER of deploy/docker/broker.Dockerfile

# Copy $1 to $2 unless $2 holds the same: an unchanged file keeps its mtime,
# so the broker does not reread its accepted keys for nothing.
put() {
  cmp -s "$1" "$2" 2>/dev/null || { cp "$1" "$2.tmp" && chmod 0644 "$2.tmp" && mv -f "$2.tmp" "$2"; }
}

name_ok() {
  case $1 in
    ''|.*|*[!A-Za-z0-9._-]*) echo "keygen: '$1' is not a worker id ([A-Za-z0-9._-])" >&2; exit 2 ;;
  esac
}

case ${1:-} in
  '')
    umask 077
    if [ ! -e "$keys/broker/broker.key" ]; then
      "$kiln" keygen broker --dir "$keys/broker"
      chown "$broker_uid:$broker_uid" "$keys/broker/broker.key"
    fi
    [ -e "$keys/worker/$worker.key" ] || "$kiln" keygen "$worker" --dir "$keys/worker"
    put "$keys/broker/broker.pub" "$keys/worker/broker.pub"
    put "$keys/worker/$worker.pub" "$keys/accepted/$worker.pub"
    ;;
  pub)
    cat "$keys/broker/broker.pub"
    ;;
  accept)
    name_ok "${2:-}"
    cat >"$keys/accepted/.$2.pub.new"
    # The broker would skip a file that holds no key: refuse it here, loudly.
    grep -Eq '^[[:space:]]*[^#[:space:]].{39}[[:space:]]*$' "$keys/accepted/.$2.pub.new" || {
      rm -f "$keys/accepted/.$2.pub.new"
      echo "keygen: stdin holds no public key (a .pub written by kiln keygen)" >&2; exit 2; }
    chmod 0644 "$keys/accepted/.$2.pub.new"
    mv -f "$keys/accepted/.$2.pub.new" "$keys/accepted/$2.pub"
    echo "accepted $2 (the broker reads it within a second)"
    ;;
  revoke)
    name_ok "${2:-}"
    rm -f "$keys/accepted/$2.pub"
    echo "revoked $2"
    ;;
  *)
    echo "keygen: usage: keygen.sh [pub | accept NAME | revoke NAME]" >&2; exit 2 ;;
esac
