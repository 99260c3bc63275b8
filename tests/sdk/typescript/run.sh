#!/usr/bin/env bash
# End-to-end test of the TypeScript SDK (@kiln/sdk) installed as a user would:
# `npm install <repo>/cli/sdk/typescript` into a scratch project (offline: the
# package has no dependencies), then test_sdk.mjs run from that project so
# `import '@kiln/sdk'` resolves through its node_modules.
#
#   KILN_URL=... KILN_TOKEN=... KILN_ADMIN_TOKEN=... tests/sdk/typescript/run.sh /tmp/tssdk-work
#
# Exits with the test's status; 77 (skip) when node is missing or older than 18.
set -euo pipefail

work=${1:?usage: run.sh <workdir>}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
pkg="$repo/cli/sdk/typescript"

if ! command -v node >/dev/null 2>&1; then
  echo "skip: node is not installed (the SDK needs Node >= 18)"
  exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "skip: node $(node --version) is older than 18 (the SDK needs global fetch)"
  exit 77
fi
: "${KILN_URL:?KILN_URL must name the broker}" "${KILN_TOKEN:?}" "${KILN_ADMIN_TOKEN:?}"

mkdir -p "$work"
cd "$work"
# Only what this script made is removed, so a rerun starts clean.
rm -rf node_modules package.json package-lock.json test_sdk.mjs
printf '{"name": "kiln-sdk-ts-test", "private": true, "type": "module"}\n' > package.json

if command -v npm >/dev/null 2>&1; then
  # --install-links: copy the package as packed (its `files`), not a symlink
  # to the source tree, as installing from a registry would.
  npm install --no-audit --no-fund --offline --install-links "$pkg"
else
  # No npm (Debian packages it apart from nodejs): lay it out as npm would.
  echo "note: npm not found; copying the package into node_modules by hand"
  mkdir -p node_modules/@kiln/sdk
  cp -R "$pkg/package.json" "$pkg/index.js" "$pkg/index.d.ts" "$pkg/src" node_modules/@kiln/sdk/
fi
test -f node_modules/@kiln/sdk/index.js || { echo "FAIL: @kiln/sdk was not installed"; exit 1; }

cp "$here/test_sdk.mjs" test_sdk.mjs
exec node --test test_sdk.mjs
