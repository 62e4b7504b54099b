#!/usr/bin/env bash
# Checks that each binary given (libkiln_runtime, kiln-run-compiled) has no
# MLIR or LLVM dependency: none in its DT_NEEDED entries (readelf), none in
# the libraries the loader resolves (ldd), no undefined mlir/llvm symbol.
set -euo pipefail
status=0
for f in "$@"; do
  needed=$(readelf -d "$f" | awk '/NEEDED/ {print $5}' | tr -d '[]')
  resolved=$(ldd "$f" | awk '{print $1}')
  echo "$f: needs $(echo $needed | tr '\n' ' ')"
  if echo "$needed $resolved" | grep -iE 'mlir|llvm' ; then
    echo "FAIL: $f depends on MLIR/LLVM" >&2
    status=1
  fi
  if nm -D --undefined-only "$f" | grep -iE 'mlir|llvm' ; then
    echo "FAIL: $f has undefined MLIR/LLVM symbols" >&2
    status=1
  fi
done
exit $status
