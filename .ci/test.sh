#!/usr/bin/env bash
# Set-up, build and the whole test suite (GoogleTest + lit). README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/setup.sh build
cmake --build build --target kiln-tests
ctest --test-dir build --output-on-failure -j2
