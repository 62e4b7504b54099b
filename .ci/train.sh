#!/usr/bin/env bash
# Set-up, build and run the main job (compiled MLP on the digits). README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
# libgomp (used by oneDNN and the eager kernels) spin-waits by default, which
# costs a core per idle thread on a busy 2-core machine; sleep instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
.ci/setup.sh build
cmake --build build --target kiln-train-digits
./build/examples/kiln-train-digits "$@"
