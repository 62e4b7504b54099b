#!/usr/bin/env bash
# kiln-train-gpt --ddp under kilnrun: two ranks at --batch B train the
# parameters one process trains at --batch 2B (the same windows: every rank
# draws the global batch and takes its half), to 1e-5 relative
# (tests/tools/compare_safetensors.py), compiled (the default) and eager.
# Dropout 0, so the two runs draw nothing else at random. The attention's
# key bias has a zero true gradient (softmax over the keys ignores q . b_k),
# so it drifts on float rounding alone (~1e-6 here, AdamW normalizing the
# noise): it is held to 1e-4 absolute instead (--atol-for). Rank 0 must print
# the progress line; a single process at the per-rank batch must differ
# (the comparison can tell the trainings apart). A small GPT (1 layer,
# d_model 32, context 16) for 8 steps: a few seconds.
#
# Usage: train_gpt_ddp_test.sh KILNRUN KILN_TRAIN_GPT   (every run has a 60 s timeout)
set -uo pipefail

kilnrun=$1 train=$2
tools=$(cd "${BASH_SOURCE[0]%/*}/../../tools" && pwd)
batch=4 # per rank; the reference runs at 2 x batch
model=(--layers 1 --d-model 32 --heads 2 --context 16 --steps 8 --dropout 0 --log-every 2)
export OMP_NUM_THREADS=1 KILN_DISTRIBUTED_TIMEOUT_S=30
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpt-ddp.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}

run() { # NAME COMMAND...: the command's output in $work/NAME.log
  local name=$1
  shift
  timeout 60 "$@" >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name exited with status $? (124: timeout)"; }
}

compare() { # GOT EXPECTED [--expect-differ]: prints the largest relative difference
  python3 "$tools/compare_safetensors.py" "$@" --atol-for h.0.attn.k_proj.bias=1e-4 >"$work/compare.log"
  local status=$?
  awk '/absolute/ { next } { for (i = 1; i <= NF; ++i) if ($i == "=") { v = $(i + 1) + 0; if (v > worst) worst = v } }
       END { printf "  largest relative difference over the tensors: %.3g\n", worst }' "$work/compare.log"
  grep absolute "$work/compare.log" | sed 's/^/  /'
  [ "$status" = 0 ] || cat "$work/compare.log"
  return "$status"
}

for mode in compiled eager; do
  flags=()
  [ "$mode" = eager ] && flags=(--eager)
  echo "$mode: one process at batch $((2 * batch)) vs kilnrun --nproc-per-node 2 --ddp at batch $batch"
  run "one_$mode" "$train" "${model[@]}" "${flags[@]}" --batch "$((2 * batch))" --save "$work/one_$mode.safetensors"
  run "two_$mode" "$kilnrun" --nproc-per-node 2 "$train" "${model[@]}" "${flags[@]}" --ddp --batch "$batch" \
    --save "$work/two_$mode.safetensors"
  grep -E '^\[rank 0\]: step +8 \| train loss [0-9.]+ \| val loss [0-9.]+ \| lr .* \| grad norm [0-9.]+ \| peak mem .* MB \| [0-9]+ tokens/s$' \
    "$work/two_$mode.log" || { cat "$work/two_$mode.log"; fail "rank 0 printed no progress line for step 8"; }
  grep -q "^\[rank 0\]: DistributedDataParallel over 2 processes" "$work/two_$mode.log" || fail "not data parallel"
  grep -q "^\[rank 1\]: kiln-train-gpt" "$work/two_$mode.log" && fail "rank 1 printed progress"
  grep -q "^\[rank 0\]: final: .*| $mode$" "$work/two_$mode.log" || { cat "$work/two_$mode.log"; fail "not $mode"; }
  compare "$work/two_$mode.safetensors" "$work/one_$mode.safetensors" ||
    fail "$mode: 2 ranks differ from one process on the global batch"
done

echo "control: one process at the per-rank batch $batch must differ"
run one_small "$train" "${model[@]}" --batch "$batch" --save "$work/one_small.safetensors"
compare "$work/one_small.safetensors" "$work/one_compiled.safetensors" --expect-differ ||
  fail "the comparison cannot tell batch $batch from batch $((2 * batch))"
echo "PASS: kiln-train-gpt --ddp on 2 ranks trains the parameters of one process on the global batch"
