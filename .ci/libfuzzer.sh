#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/libfuzzer, CMake option
# KILN_LIBFUZZER, clang 16+, build dir build-fuzz) and runs each one for
# SECONDS (default 600) from its seed corpus, one at a time, at low priority,
# with the limits of issue 11: no input may take 10 s or allocate over 1 GiB.
# New inputs go to build-fuzz/work/<target>/ (the checked-in seeds are only
# read); crashes, leaks, timeouts and OOMs to build-fuzz/artifacts/<target>/.
# Usage: .ci/libfuzzer.sh [SECONDS] [target ...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-600}
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(safetensors checkpoint kernel_cache kiln_dialect digits artifact)
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/kiln-ccache}
CC=${KILN_FUZZ_CC:-clang-19}
CXX=${KILN_FUZZ_CXX:-clang++-19}
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_LIBFUZZER=ON \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
cmake --build build-fuzz --target kiln-fuzzers --parallel "${KILN_JOBS:-2}"
status=0
for t in "${TARGETS[@]}"; do
  mkdir -p "build-fuzz/work/$t" "build-fuzz/artifacts/$t"
  echo "== kiln-fuzz-$t: ${SECONDS_PER_TARGET}s"
  nice -n 19 "build-fuzz/tests/fuzz/libfuzzer/kiln-fuzz-$t" -max_total_time="$SECONDS_PER_TARGET" \
    -rss_limit_mb=1024 -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/artifacts/$t/" "build-fuzz/work/$t" "tests/fuzz/corpus/$t" \
    2>"build-fuzz/artifacts/$t/log.txt" || status=1
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done|SUMMARY" "build-fuzz/artifacts/$t/log.txt" || true
done
exit $status
