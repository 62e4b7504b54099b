#!/usr/bin/env bash
# find_package(Kiln) end to end: install the package, move it (relocatable),
# build tests/install/app against it and run it; the app must load libkiln.so
# from the moved prefix and print "kiln-user-app: ok".
# Usage: find_package_test.sh <kiln build dir> <kiln source dir>
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
work=$build/install-test   # fixed path, so ccache reuses the app's object
rm -rf "$work/prefix" "$work/moved"
cmake --install "$build" --prefix "$work/prefix" --component kiln >/dev/null
mv "$work/prefix" "$work/moved"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/install/app" -B "$work/app" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/moved" "${launcher[@]}" >/dev/null
cmake --build "$work/app" >/dev/null
lib=$(ldd "$work/app/kiln-user-app" | awk '/libkiln\.so/ {print $3}')
if [ "$lib" != "$work/moved/lib/libkiln.so" ]; then
  echo "find_package_test: kiln-user-app loads libkiln.so from '$lib', expected $work/moved/lib/libkiln.so" >&2
  exit 1
fi
"$work/app/kiln-user-app"
