#!/usr/bin/env bash
# Installs everything Kiln needs to build, test and run on Debian 12: Debian
# packages (the python package set of deploy/runtimes/python-packages.txt
# included) and the javascript package set from the npm registry, pinned by
# deploy/runtimes/javascript/package-lock.json. Idempotent: installs only what
# is missing or changed. Needs root (or sudo). Usage: deploy/install-deps.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  clang-format clang-tidy
  # the fuzzing leg of tests/run.sh: Clang, its libFuzzer and sanitizer
  # runtimes (libclang_rt.fuzzer-x86_64.a; only recommended by clang, so
  # named), and llvm-symbolizer for file:line in crash stacks
  clang libclang-rt-14-dev llvm
  # libraries (docs/architecture.md says why each one)
  libzmq3-dev cppzmq-dev libhiredis-dev libmsgpack-cxx-dev libboost-dev libseccomp-dev
  prometheus-cpp-dev libcpp-httplib-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  # services and runtimes the cluster and its tests use
  redis-server python3 procps iproute2
  # pip: the installer of python packages on request (docs/runtimes.md)
  python3-pip
  # the python SDK (cli/sdk/python): its one dependency, and the venv its
  # test installs it into as a user would (tests/sdk/python/run.sh)
  python3-httpx python3-venv python3-setuptools
  # the OpenAPI check (tests/openapi/check_openapi.py): a JSON Schema 2020-12
  # validator and a YAML parser
  python3-jsonschema python3-yaml
  # the WebSocket channel's test client (tests/integration/websocket_client.py):
  # a WebSocket implementation independent of the broker's (Beast)
  python3-websockets
  # gVisor's runsc: the gvisor isolation level (docs/security.md)
  runsc
  # promtool, which the metrics test uses to check the exposition format
  prometheus
)
# The python package set the sandboxes see (docs/runtimes.md, "Package sets").
read -r -a python_set <<<"$(sed 's/#.*//' "$here/runtimes/python-packages.txt" | tr '\n' ' ')"
packages+=("${python_set[@]}")
# Node.js: take Debian's unless a node is already installed (another vendor's
# nodejs package ships its own npm and conflicts with Debian's npm package).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: every Debian package is installed"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# valijson (JSON Schema, tool declarations): header-only, but its Debian
# package depends on every JSON library it has an adapter for (Qt 5, Poco,
# jsoncpp ...: hundreds of MB). Kiln uses only its nlohmann adapter, so the
# package's headers are unpacked into /usr/local/include instead.
if [[ -e /usr/include/valijson/validator.hpp || -e /usr/local/include/valijson/validator.hpp ]]; then
  echo "install-deps: valijson's headers are installed"
else
  echo "install-deps: unpacking valijson's headers (libvalijson-dev) into /usr/local/include"
  stage=$(mktemp -d)
  chmod 755 "$stage"  # apt's download runs as _apt when root
  if ! (cd "$stage" && apt-get download -qq libvalijson-dev 2>/dev/null); then
    $SUDO apt-get update -qq
    (cd "$stage" && apt-get download -qq libvalijson-dev)
  fi
  dpkg-deb -x "$stage"/libvalijson-dev_*.deb "$stage/root"
  $SUDO cp -r "$stage/root/usr/include/valijson" /usr/local/include/
  rm -rf "$stage"
fi

# The javascript package set, into KILN_JS_PACKAGES (default
# /usr/local/lib/kiln/javascript; the worker's packages.javascript names its
# node_modules). No package's install script runs (--ignore-scripts): the set
# is plain javascript. Reinstalled only when the lock file changed; the new
# tree replaces the old one whole, read-only for everyone but root.
js_src="$here/runtimes/javascript"
js_dir=${KILN_JS_PACKAGES:-/usr/local/lib/kiln/javascript}
if cmp -s "$js_src/package-lock.json" "$js_dir/package-lock.json" && [[ -d "$js_dir/node_modules" ]]; then
  echo "install-deps: the javascript package set is installed"
else
  echo "install-deps: installing the javascript package set into $js_dir"
  stage=$(mktemp -d)
  cp "$js_src/package.json" "$js_src/package-lock.json" "$stage/"
  (cd "$stage" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
  chmod -R u=rwX,go=rX "$stage"
  $SUDO mkdir -p "$(dirname "$js_dir")"
  $SUDO rm -rf "$js_dir.old"
  if [[ -e "$js_dir" ]]; then $SUDO mv "$js_dir" "$js_dir.old"; fi
  $SUDO mv "$stage" "$js_dir"
  $SUDO rm -rf "$js_dir.old"
fi
