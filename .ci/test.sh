#!/usr/bin/env bash
# Set-up, build and the whole test suite (GoogleTest + lit). README's test command.
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
cmake --build build --target kiln-tests
ctest --test-dir build --output-on-failure -j2
