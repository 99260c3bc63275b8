#!/usr/bin/env bash
# The systemd units in deploy/systemd, checked by `systemd-analyze verify`
# against the binaries just built (their ExecStart paths are rewritten to
# them). systemd-analyze reports unknown keys and bad values on stderr while
# still exiting 0, so any output fails the test. Exit 77 (skipped) without
# systemd-analyze.
#   verify_systemd_units.sh <source dir> <binary dir>
set -euo pipefail
src=$1 bin=$2
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for unit in kiln-broker kiln-worker; do
  [[ -x "$bin/$unit" ]] || { echo "$bin/$unit is not built"; exit 1; }
  sed "s#/usr/local/bin/$unit#$bin/$unit#g" "$src/deploy/systemd/$unit.service" >"$tmp/$unit.service"
done
out=$(cd "$tmp" && systemd-analyze verify --man=no ./kiln-broker.service ./kiln-worker.service 2>&1) ||
  { echo "$out"; exit 1; }
if [[ -n "$out" ]]; then
  echo "systemd-analyze verify found problems:"
  echo "$out"
  exit 1
fi
echo "kiln-broker.service and kiln-worker.service verify cleanly"
