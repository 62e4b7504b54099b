#!/usr/bin/env bash
# The device checks on an H200 (issue 14, item 8): one call of the device
# tool, under 8 minutes, no network. Needs .gpu/ from bench/gpu/prepare.sh
# (carried). Writes to $OUT (or /tmp/kiln-gpu-out): nvidia-smi.txt, the
# CUDA tests' gtest JSON, kiln.json and torch.json (the same eager cases in
# Kiln and PyTorch on this GPU) and report.json (each number as a ratio:
# Kiln vs PyTorch, pointwise vs the copy kernel and vs 4.8 TB/s, the bf16
# GEMM vs 600 TFLOP/s). Copy report.json into bench/results/ with the date.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kiln-gpu-out}
mkdir -p "$OUT"
root=/tmp/kiln-root
mkdir -p "$root/bin"
for d in .gpu/debs/*.deb; do dpkg -x "$d" "$root"; done
tar -C "$root" -xJf .gpu/kiln-gpu.tar.xz
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/llvm-19/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KILN_TEST_REAL_CUDA=1 OMP_WAIT_POLICY=passive KILN_CACHE_DIR=/tmp/kiln-cache
B=$root/bin
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
"$B/kiln-cuda-info" | tee "$OUT/cuda-info.txt"
status=0
for t in kiln-cuda-loader-tests kiln-cuda-driver-tests kiln-cuda-tests kiln-cuda-op-conformance-test; do
  echo "== $t"
  timeout 150 "$B/$t" --gtest_brief=1 --gtest_output="json:$OUT/$t.json" > "$OUT/$t.log" 2>&1
  rc=$?
  tail -n 25 "$OUT/$t.log"
  [ $rc -eq 0 ] || status=1
done
# NCCL on one rank (runtime/src/distributed/NcclProcessGroup.cpp): the
# one-rank collectives on CUDA tensors; a few seconds (communicator init).
# With KILN_TEST_REAL_CUDA=1 a missing NCCL fails them instead of skipping.
echo "== kiln-nccl-tests"
timeout 60 "$B/kiln-nccl-tests" --gtest_brief=1 --gtest_output="json:$OUT/kiln-nccl-tests.json" > "$OUT/kiln-nccl-tests.log" 2>&1
rc=$?
tail -n 25 "$OUT/kiln-nccl-tests.log"
[ $rc -eq 0 ] || status=1
# DDP on a CUDA model (tests/frontend/ddp_cuda_test.cpp): backend "nccl" with
# one rank per GPU, at most 2 (one H200: one rank; NCCL refuses two ranks of
# one communicator on one GPU), 20 momentum-SGD steps of an MLP against one
# cpu process on the global batch (1e-4 relative: cuBLASLt sums in another
# order than the cpu), and again with KILN_DISTRIBUTED_DEBUG=DETAIL (each
# collective's fingerprint all-gathered through device memory first); the
# same over Gloo staging with 2 and 3 ranks sharing the GPU; the eager CUDA
# copy_ bit for bit against the cpu. Under a minute (NVRTC compiles each
# rank's kernels once, then KILN_CACHE_DIR).
echo "== kiln-ddp-cuda-tests (DDP over NCCL and Gloo, copy_)"
timeout 150 "$B/kiln-ddp-cuda-tests" --gtest_brief=1 --gtest_filter='DDPCuda.Nccl*:DDPCuda.Eager*:CudaCopy.*' \
  --gtest_output="json:$OUT/kiln-ddp-cuda-tests.json" > "$OUT/kiln-ddp-cuda-tests.log" 2>&1
rc=$?
grep -E "parameters within|Skipped|Failure|FAILED|PASSED" "$OUT/kiln-ddp-cuda-tests.log" | tail -n 25
[ $rc -eq 0 ] || status=1
# The digits main job under kilnrun with NCCL DDP on the GPU (one rank, 16
# AdamW steps) against the same training on the cpu; AdamW's normalized
# steps amplify the GEMMs' rounding differences, hence 2e-3 of each
# tensor's scale (tests/tools/compare_safetensors.py).
echo "== digits: kilnrun, DDP over NCCL on the GPU vs the cpu"
digits=(--epochs 1 --train-size 256 --batch-size 16)
timeout 90 "$B/kilnrun" --nproc-per-node 1 "$B/kiln-train-digits" --ddp --backend nccl --device cuda "${digits[@]}" \
  --save "$OUT/digits_nccl.safetensors" 2>&1 | tail -n 3 | tee "$OUT/digits_nccl.txt"
timeout 60 "$B/kiln-train-digits" --eager "${digits[@]}" --save "$OUT/digits_cpu.safetensors" > /dev/null 2>&1
python3 tests/tools/compare_safetensors.py "$OUT/digits_nccl.safetensors" "$OUT/digits_cpu.safetensors" --rtol 2e-3 |
  tee -a "$OUT/digits_nccl.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== digits on the GPU (2 epochs)"
timeout 90 "$B/kiln-train-digits" --device cuda --epochs 2 2>&1 | tail -n 4 | tee "$OUT/digits.txt"
echo "== eager benchmarks"
timeout 120 "$B/kiln-bench-cuda-eager" --out "$OUT/kiln.json" || status=1
timeout 90 python3 bench/gpu/torch_peer.py --out "$OUT/torch.json" || status=1
python3 bench/gpu/report.py "$OUT/kiln.json" "$OUT/torch.json" | tee "$OUT/report.json"
exit $status
