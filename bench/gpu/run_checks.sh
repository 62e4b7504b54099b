#!/usr/bin/env bash
# The device checks on an H200 (issues 14 item 8, 16 item 7): one call of the
# device tool, under 8 minutes in all (KILN_GPU_BUDGET_S, default 450 s: each
# step's timeout is cut to what is left, a step with under 10 s left is
# skipped), no network; a failing step is recorded and the script goes on.
# Needs .gpu/ from bench/gpu/prepare.sh (carried). Writes to $OUT (or
# /tmp/kiln-gpu-out): steps.tsv (each step: rc, seconds), a log per step,
# nvidia-smi.txt, the CUDA tests' gtest JSON, gpt.json (kiln-bench-gpt-cuda:
# the GPT step eager / compiled / CUDA graphs / budget 0.5, MFU, peak memory,
# compile times, per-kernel bandwidth and GEMMs vs cuBLASLt alone),
# torch_gpt.json (the same GPT in PyTorch eager and torch.compile),
# report_gpt.json (the issue 16 acceptance ratios, report.py --gpt), kiln.json,
# torch.json and report.json (the eager cases). Copy the JSON into
# bench/results/ with the date.
#
# KILN_GPU_CHECKS_DRY=1: the same steps here on the CUDA-on-CPU simulator
# (KILN_CUDA_SIM=1) at tiny sizes, the binaries from the build tree
# (KILN_GPU_BUILD, default build/) instead of .gpu/; the gtest suites only
# list their tests (KILN_GPU_CHECKS_DRY_TESTS=1 runs them); steps whose
# binary or Python module (torch) is missing are recorded as skipped.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kiln-gpu-out}
mkdir -p "$OUT"
DRY=${KILN_GPU_CHECKS_DRY:-0}
START=$(date +%s)
BUDGET=${KILN_GPU_BUDGET_S:-450}
export OMP_WAIT_POLICY=passive
if [ "$DRY" = 1 ]; then
  export KILN_CUDA_SIM=1 KILN_CACHE_DIR=/tmp/kiln-dry-cache
  BUILD=${KILN_GPU_BUILD:-build}
  bin() { find "$BUILD" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }
  tiny=(--tiny --keep-cache) small=(--small)
else
  root=/tmp/kiln-root
  mkdir -p "$root/bin"
  for d in .gpu/debs/*.deb; do dpkg -x "$d" "$root"; done
  tar -C "$root" -xJf .gpu/kiln-gpu.tar.xz
  export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/llvm-19/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export KILN_TEST_REAL_CUDA=1 KILN_CACHE_DIR=/tmp/kiln-cache
  bin() { [ -x "$root/bin/$1" ] && echo "$root/bin/$1"; }
  tiny=() small=()
fi
status=0
printf 'step\trc\tseconds\n' > "$OUT/steps.tsv"
# step NAME TIMEOUT CMD...: runs CMD (its output to $OUT/NAME.log, the tail
# echoed), capped at the budget left; rc 124: timed out; "skipped": no time
# or no binary (a CMD naming an empty binary path).
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START)))
  echo "== $name (limit ${limit}s, ${left}s of the budget left)"
  if [ "$left" -lt 10 ]; then
    printf '%s\tskipped (budget)\t0\n' "$name" >> "$OUT/steps.tsv"; echo "   skipped: budget spent"; return
  fi
  if [ -z "$1" ]; then
    printf '%s\tskipped (not built)\t0\n' "$name" >> "$OUT/steps.tsv"; echo "   skipped: binary not built"; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0 rc
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >> "$OUT/steps.tsv"
  tail -n "${TAIL:-12}" "$OUT/$name.log" | sed 's/^/   /'
  [ $rc -eq 0 ] || { status=1; echo "   rc $rc"; }
}

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
step cuda-info 30 "$(bin kiln-cuda-info)"

# The CUDA test suites on the device (the simulator's tests, KILN_TEST_REAL_CUDA=1).
for t in kiln-cuda-loader-tests kiln-cuda-driver-tests kiln-cuda-tests kiln-cuda-op-conformance-test; do
  if [ "$DRY" = 1 ] && [ "${KILN_GPU_CHECKS_DRY_TESTS:-0}" != 1 ]; then
    step "$t" 30 "$(bin "$t")" --gtest_list_tests
  else
    step "$t" 90 "$(bin "$t")" --gtest_brief=1 --gtest_output="json:$OUT/$t.json"
  fi
done

# The GPT training step (issue 16 item 7): 12 layers, d_model 768, T 1024,
# B 16, vocab 50304, bf16 autocast; Kiln eager, compiled, compiled with CUDA
# graphs, compiled at memory_budget 0.5, then the per-kernel bandwidth and
# GEMM cases. gpt.json is written after each mode.
step gpt-kiln 150 "$(bin kiln-bench-gpt-cuda)" "${tiny[@]}" --kernels --perf-report --out "$OUT/gpt.json"
# The same GPT in PyTorch eager and torch.compile (its cold compile is most of this step).
if python3 -c 'import torch' 2>/dev/null; then
  step gpt-torch 150 python3 bench/gpu/torch_peer.py --gpt "${tiny[@]}" --out "$OUT/torch_gpt.json"
else
  printf 'gpt-torch\tskipped (no torch)\t0\n' >> "$OUT/steps.tsv"; echo "== gpt-torch: skipped (no torch here)"
fi
if [ -f "$OUT/gpt.json" ]; then
  python3 bench/gpu/report.py --gpt "$OUT/gpt.json" "$OUT/torch_gpt.json" > "$OUT/report_gpt.json" || status=1
fi

# Eager cases beside PyTorch eager (issue 14 item 8).
step eager-kiln 60 "$(bin kiln-bench-cuda-eager)" "${small[@]}" --out "$OUT/kiln.json"
if python3 -c 'import torch' 2>/dev/null; then
  step eager-torch 60 python3 bench/gpu/torch_peer.py "${small[@]}" --out "$OUT/torch.json"
fi
if [ -f "$OUT/kiln.json" ] && [ -f "$OUT/torch.json" ]; then
  python3 bench/gpu/report.py "$OUT/kiln.json" "$OUT/torch.json" > "$OUT/report.json" || status=1
fi

if [ "$DRY" != 1 ]; then
  # NCCL on one rank, DDP on a CUDA model, the digits job under kilnrun (issue 14).
  step kiln-nccl-tests 45 "$(bin kiln-nccl-tests)" --gtest_brief=1 --gtest_output="json:$OUT/kiln-nccl-tests.json"
  step kiln-ddp-cuda-tests 90 "$(bin kiln-ddp-cuda-tests)" --gtest_brief=1 \
    --gtest_filter='DDPCuda.Nccl*:DDPCuda.Eager*:DDPCuda.Compiled*:CudaCopy.*' --gtest_output="json:$OUT/kiln-ddp-cuda-tests.json"
  digits=(--epochs 1 --train-size 256 --batch-size 16)
  step digits-nccl 60 "$(bin kilnrun)" --nproc-per-node 1 "$(bin kiln-train-digits)" --ddp --backend nccl \
    --device cuda "${digits[@]}" --save "$OUT/digits_nccl.safetensors"
  step digits-cpu 45 "$(bin kiln-train-digits)" --eager "${digits[@]}" --save "$OUT/digits_cpu.safetensors"
  step digits-compare 20 python3 tests/tools/compare_safetensors.py "$OUT/digits_nccl.safetensors" \
    "$OUT/digits_cpu.safetensors" --rtol 2e-3
fi

# The short table last (the device tool's reply carries the end of the output).
echo "== steps ($(($(date +%s) - START)) s of ${BUDGET} s)"
column -t -s $'\t' "$OUT/steps.tsv" 2>/dev/null || cat "$OUT/steps.tsv"
if [ -f "$OUT/report_gpt.json" ]; then
  python3 - "$OUT/report_gpt.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("== GPT step:", r["device"], r["config"])
for k, v in r["ms_per_step"].items():
    print(f"  {k:22s} {v if v is None else round(v, 3)} ms  MFU {r['mfu'].get(k)}")
for k in ("compiled_over_eager_speedup", "compiled_over_torch_compile_speedup", "graphs_over_compiled_speedup",
          "peak_memory_budget05_over_budget1", "copy_GBps", "compile_s"):
    print(f"  {k}: {r[k]}")
for x in r["row_kernels"]:
    print(f"  {x['name']:22s} {x['GBps']:.1f} GB/s, {x['of_copy_kernel']} of copy")
for g in r["gemms"]:
    print(f"  {g['name']:28s} kiln {g['kiln_TFLOPs']} cublas {g['cublas_TFLOPs']} TFLOP/s")
print("  goals:", json.dumps(r["goals"]))
if r["errors"]:
    print("  errors:", json.dumps(r["errors"])[:1500])
EOF
fi
exit $status
