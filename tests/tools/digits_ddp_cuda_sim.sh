#!/usr/bin/env bash
# kiln-train-digits data parallel on CUDA models: two kilnrun ranks on the
# CUDA-on-CPU simulator (KILN_CUDA_SIM=1, eager CUDA kernels, Gloo staging
# the buckets through pinned host memory) must train the parameters of the
# same two ranks on the cpu, and of one cpu process on the global batch
# (2 x the per-rank batch), to 1e-5 relative (compare_safetensors.py); one
# cpu process at the per-rank batch must differ (the comparison tells
# trainings apart).
# Usage: digits_ddp_cuda_sim.sh KILNRUN KILN_TRAIN_DIGITS   (run in the source root)
set -euo pipefail
kilnrun=$1 train=$2
tools=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 KILN_DISTRIBUTED_TIMEOUT_S=60
args=(--eager --epochs 1 --train-size 192 --batch-size 16) # 6 steps per rank
KILN_CUDA_SIM=1 timeout 240 "$kilnrun" --nproc-per-node 2 "$train" --ddp --device cuda "${args[@]}" \
  --save "$work/cuda_ddp.safetensors" | tee "$work/cuda_ddp.log"
grep -q "eager MLP 64-128-10 on cuda:0" "$work/cuda_ddp.log"
timeout 60 "$kilnrun" --nproc-per-node 2 "$train" --ddp "${args[@]}" --save "$work/cpu_ddp.safetensors" >/dev/null
timeout 60 "$train" --eager --epochs 1 --train-size 192 --batch-size 32 --save "$work/cpu_one.safetensors" >/dev/null
timeout 60 "$train" --eager --epochs 1 --train-size 192 --batch-size 16 --save "$work/cpu_small.safetensors" >/dev/null
echo "cuda (simulator) DDP vs cpu DDP:"
python3 "$tools/compare_safetensors.py" "$work/cuda_ddp.safetensors" "$work/cpu_ddp.safetensors"
echo "cuda (simulator) DDP vs one cpu process on the global batch:"
python3 "$tools/compare_safetensors.py" "$work/cuda_ddp.safetensors" "$work/cpu_one.safetensors"
echo "cuda (simulator) DDP vs one cpu process at the per-rank batch (must differ):"
python3 "$tools/compare_safetensors.py" "$work/cuda_ddp.safetensors" "$work/cpu_small.safetensors" --expect-differ
