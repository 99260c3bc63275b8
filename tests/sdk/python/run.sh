#!/usr/bin/env bash
# Installs the Python SDK (cli/sdk/python) offline into a fresh venv under
# <workdir> and runs its end-to-end test against the cluster named by
# KILN_URL, KILN_TOKEN (a tenant's) and KILN_ADMIN_TOKEN.
#   tests/sdk/python/run.sh <workdir>
# Exits with the test's status; 77 (skip) when Debian's python3 cannot make a
# venv or lacks httpx (the SDK's one dependency, installed system-wide).
set -euo pipefail

workdir=${1:?usage: run.sh <workdir>}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
python=/usr/bin/python3

if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "skip: $python has no venv/ensurepip module (apt install python3-venv)"
  exit 77
fi
if ! "$python" -c 'import httpx' 2>/dev/null; then
  echo "skip: $python has no httpx (apt install python3-httpx)"
  exit 77
fi

mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
rm -rf "$workdir/venv" "$workdir/src"
"$python" -m venv --system-site-packages "$workdir/venv"
# setuptools builds in the source tree (build/, *.egg-info): build a copy.
cp -r "$repo/cli/sdk/python" "$workdir/src"
"$workdir/venv/bin/pip" install --quiet --disable-pip-version-check \
  --no-build-isolation --no-deps --no-index "$workdir/src"

# From $workdir, so nothing of the repository is on sys.path but the test's folder.
cd "$workdir"
exec "$workdir/venv/bin/python" "$repo/tests/sdk/python/test_sdk.py"
