#!/usr/bin/env bash
# Installs what Kiln needs on a fresh Debian 12 machine (as root) and configures
# the build directory. Idempotent: packages already present are skipped.
# Usage: .ci/setup.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

PKGS=(cmake ninja-build ccache g++ lld python3
      libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
      libdnnl-dev libgloo-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
      zlib1g-dev libdeflate-dev libsimdjson-dev libzstd-dev libedit-dev libcurl4-openssl-dev libxml2-dev
      libonnx-dev libprotobuf-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kiln setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/kiln-ccache}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
