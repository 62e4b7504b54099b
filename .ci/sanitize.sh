#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer with
# LeakSanitizer (CMake option KILN_SANITIZE, build dir build-asan). Any report
# stops the test that made it. JIT-compiled kernels are not instrumented.
# Suppressions: .ci/lsan.supp (third-party code only, each explained there).
# Usage: .ci/sanitize.sh [ctest args...]   (e.g. -R Serialize)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/kiln-ccache}
BUILD_DIR=build-asan
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  .ci/setup.sh "$BUILD_DIR" >/dev/null # installs packages; configures a plain build dir...
  cmake "$BUILD_DIR" -DKILN_SANITIZE=ON  # ...which this turns into the sanitizer build
fi
cmake --build "$BUILD_DIR" --target kiln-tests --parallel "${KILN_JOBS:-2}"
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$PWD/.ci/lsan.supp:print_suppressions=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@"
