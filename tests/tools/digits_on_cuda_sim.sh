#!/usr/bin/env bash
# kiln-train-digits on the CUDA-on-CPU simulator must reach the CPU's test
# accuracy within 0.5% (issue 14's acceptance), same seed, same epochs.
# Usage: digits_on_cuda_sim.sh PATH/kiln-train-digits EPOCHS   (run in the source root)
set -euo pipefail
bin=$1 epochs=$2
cpu=$("$bin" --eager --epochs "$epochs" | sed -n 's/^test accuracy: //p')
sim=$(KILN_CUDA_SIM=1 "$bin" --device cuda --epochs "$epochs" | tee /dev/stderr | sed -n 's/^test accuracy: //p')
echo "test accuracy: cpu $cpu, cuda (simulator) $sim"
python3 - "$cpu" "$sim" <<'PY'
import sys
cpu, sim = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if abs(cpu - sim) <= 0.005 else f"cuda {sim} vs cpu {cpu}: more than 0.5% apart")
PY
