#!/bin/sh
# Entrypoint of the kiln-worker image: readies the cgroup v2 hierarchy of a
# private cgroup namespace, then execs kiln-worker with the container's
# arguments.
#
# In a private cgroup namespace (Docker's default on cgroup v2, and
# Kubernetes') the container's cgroup is "/" and holds our process. The
# worker creates its cgroup_prefix there and needs memory, pids and cpu
# enabled for it, but a non-root cgroup that holds processes cannot enable
# controllers for its children ("no internal processes"). So move every
# process of "/" into the leaf /kiln-entrypoint, then enable the controllers.
# With the host's cgroup namespace, or on cgroup v1, there is nothing to do.
set -eu
cg=/sys/fs/cgroup
if [ "$(stat -fc %T "$cg" 2>/dev/null || true)" = cgroup2fs ] && [ "$(cat /proc/self/cgroup)" = "0::/" ]; then
  if ! [ -w "$cg/cgroup.subtree_control" ]; then
    echo "kiln-worker-entrypoint: $cg is read-only: run the container privileged or mount a writable cgroup2 (deploy/docker/worker.Dockerfile)" >&2
    exit 1
  fi
  mkdir -p "$cg/kiln-entrypoint"
  while read -r pid; do
    echo "$pid" > "$cg/kiln-entrypoint/cgroup.procs" 2>/dev/null || true
  done < "$cg/cgroup.procs"
  for c in memory pids cpu; do
    if ! grep -qw "$c" "$cg/cgroup.controllers"; then
      echo "kiln-worker-entrypoint: the cgroup2 hierarchy lacks the $c controller (has: $(cat "$cg/cgroup.controllers"))" >&2
      exit 1
    fi
  done
  echo "+memory +pids +cpu" > "$cg/cgroup.subtree_control"
fi
exec /usr/local/bin/kiln-worker "$@"
