#!/usr/bin/env bash
# Set-up, build and run the main job (compiled MLP on the digits). README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/setup.sh build
cmake --build build --target kiln-train-digits
./build/examples/kiln-train-digits "$@"
