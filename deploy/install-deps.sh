#!/usr/bin/env bash
# Installs everything Kiln needs to build, test and run on Debian 12, from
# Debian packages only. Idempotent: installs only what is missing. Needs root
# (or sudo). Usage: deploy/install-deps.sh
set -euo pipefail

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
  # gVisor's runsc: the gvisor isolation level (docs/security.md)
  runsc
  # promtool, which the metrics test uses to check the exposition format
  prometheus
)
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
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: everything is installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
