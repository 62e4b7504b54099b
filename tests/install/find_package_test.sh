#!/usr/bin/env bash
# find_package(Kiln) end to end, as a user would:
#  1. install the "kiln" component, move the prefix (relocatable), build
#     tests/install/app against Kiln::kiln and run it: it trains, checks
#     compiled against eager, and exports its model;
#  2. install the "runtime" component alone into another prefix, build
#     tests/install/runtime_app against Kiln::runtime and run the exported
#     model: the output must equal kiln::compile's byte for byte, and the app
#     must need neither libkiln.so nor MLIR/LLVM.
# Usage: find_package_test.sh <kiln build dir> <kiln source dir>
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
work=$build/install-test   # fixed paths, so ccache reuses the apps' objects
rm -rf "$work/prefix" "$work/moved" "$work/runtime-prefix" "$work/export"
mkdir -p "$work/export"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

cmake --install "$build" --prefix "$work/prefix" --component kiln >/dev/null
mv "$work/prefix" "$work/moved"
cmake -S "$src/tests/install/app" -B "$work/app" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/moved" "${launcher[@]}" >/dev/null
cmake --build "$work/app" >/dev/null
lib=$(ldd "$work/app/kiln-user-app" | awk '/libkiln\.so/ {print $3}')
if [ "$lib" != "$work/moved/lib/libkiln.so" ]; then
  echo "find_package_test: kiln-user-app loads libkiln.so from '$lib', expected $work/moved/lib/libkiln.so" >&2
  exit 1
fi
"$work/app/kiln-user-app" "$work/export"

cmake --install "$build" --prefix "$work/runtime-prefix" --component runtime >/dev/null
cmake -S "$src/tests/install/runtime_app" -B "$work/runtime_app" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/runtime-prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/runtime_app" >/dev/null
if ldd "$work/runtime_app/kiln-runtime-app" | grep -E "libkiln\.so|libMLIR|libLLVM"; then
  echo "find_package_test: kiln-runtime-app needs the libraries above; expected libkiln_runtime.so alone" >&2
  exit 1
fi
"$work/runtime_app/kiln-runtime-app" "$work/export"
