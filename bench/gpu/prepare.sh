#!/usr/bin/env bash
# Prepares what bench/gpu/run_checks.sh needs on the H200 machine, which has
# CUDA 13, PyTorch and cmake but no LLVM/MLIR 19, no oneDNN and no network:
# a Release build of the CUDA test binaries, the eager CUDA benchmark, the
# GPT step benchmark (kiln-bench-gpt-cuda) and
# kiln-train-digits, stripped and packed into .gpu/kiln-gpu.tar.xz, beside
# the Debian packages of the shared libraries they load (unpacked there with
# dpkg -x). .gpu/ is git-ignored; name it in the device tool's `carry`
# (what travels is capped at 64 MiB; this prints the size).
#   bench/gpu/prepare.sh            # then: run carry=[".gpu"] command="bench/gpu/run_checks.sh"
set -euo pipefail
cd "$(dirname "$0")/../.."
export CCACHE_BASEDIR=$PWD CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/kiln-ccache} OMP_WAIT_POLICY=passive
BUILD=build-gpu
TARGETS="kiln-cuda-loader-tests kiln-cuda-driver-tests kiln-cuda-tests kiln-cuda-op-conformance-test
         kiln-nccl-tests kiln-ddp-cuda-tests kiln-cuda-info kiln-bench-cuda-eager kiln-bench-gpt-cuda kiln-train-digits kilnrun"
if [ ! -f "$BUILD/build.ninja" ]; then
  .ci/setup.sh "$BUILD" >/dev/null
  cmake "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $TARGETS --parallel "${KILN_JOBS:-2}"
rm -rf .gpu && mkdir -p .gpu/bin .gpu/debs
for t in $TARGETS; do
  f=$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] || { echo "prepare: $t not built" >&2; exit 1; }
  strip -o ".gpu/bin/$t" "$f"
done
# The packages owning the non-system libraries the binaries load.
libs=$(for b in .gpu/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
       grep -E 'llvm|mlir|dnnl|libomp|libgomp|libLLVM|libMLIR|libz3|libxml2|libedit|libffi' || true)
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null | cut -d: -f1; done | sort -u)
(cd .gpu/debs && apt-get download $pkgs >/dev/null)
tar -C .gpu -cJf .gpu/kiln-gpu.tar.xz bin && rm -rf .gpu/bin
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
echo "prepare: packages: $pkgs"
du -sh .gpu .gpu/* | sed 's/^/prepare: /'
