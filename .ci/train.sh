#!/usr/bin/env bash
# Set-up, build and run the main job (compiled MLP on the digits). README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
# libgomp (used by oneDNN and the eager kernels) spin-waits by default, which
# costs a core per idle thread on a busy 2-core machine; sleep instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# ccache keys on absolute paths unless they are made relative to the checkout:
# with this, a fresh clone anywhere reuses the cache of another checkout.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/kiln-ccache}
.ci/setup.sh build
cmake --build build --target kiln-train-digits
./build/examples/kiln-train-digits "$@"
