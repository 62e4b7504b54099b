#!/usr/bin/env bash
# DistributedDataParallel across two nodes: two network namespaces joined by
# a veth pair stand for two hosts (10.X.Y.1/24 and 10.X.Y.2/24, no loopback
# path between them), one kilnrun per namespace
#   kilnrun --nnodes 2 --node-rank R --nproc-per-node 1 --master-addr 10.X.Y.1 ...
# runs kiln-train-digits --ddp; the parameters rank 0 saves must equal one
# process trained on the global batch (2 x the per-rank batch) to 1e-5
# relative (tests/tools/compare_safetensors.py). Twice: with the address
# chosen from the connection to the master (the default), then with
# GLOO_SOCKET_IFNAME naming each node's veth. A MASTER_ADDR without a route
# must fail at once with the error naming it, and a single process at the
# per-rank batch must differ (the comparison tells trainings apart).
#
# Usage: two_nodes_test.sh KILNRUN KILN_TRAIN_DIGITS   (run in the source root)
# Exits 77 (ctest's SKIP_RETURN_CODE) with the reason when namespaces cannot
# be made here (not root, no `ip`, no CAP_NET_ADMIN, no veth); every step has
# a timeout, and a trap removes the namespaces even on failure.
set -uo pipefail

kilnrun=$1 train=$2
tools=$(cd "${BASH_SOURCE[0]%/*}/../../tools" && pwd)
skip_code=77
epochs=3 train_size=512 batch=16 # per rank; the reference runs at 2 x batch
step_timeout=60                  # seconds, for each training run
export OMP_NUM_THREADS=1 KILN_DISTRIBUTED_TIMEOUT_S=30

skip() {
  echo "SKIP: $*"
  exit "$skip_code"
}
fail() {
  echo "FAIL: $*"
  exit 1
}

# ---- can this machine make namespaces? ---------------------------------------
[ "$EUID" = 0 ] || skip "not root: creating network namespaces needs root (CAP_NET_ADMIN)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v timeout >/dev/null || skip "no 'timeout' command (coreutils)"
command -v python3 >/dev/null || skip "no python3 to compare the parameters"

# Names unique per run: the pid, then a random suffix (veth names: <= 15 bytes).
tag="$$$(printf %02d $((RANDOM % 100)))"
ns0="kiln2n-$tag-0" ns1="kiln2n-$tag-1" veth0="kv${tag}a" veth1="kv${tag}b"
subnet="10.$((200 + $$ % 50)).$((RANDOM % 250 + 1))"
addr0="$subnet.1" addr1="$subnet.2" port=29500
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-two-nodes.XXXXXX")
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  ip netns del "$ns0" 2>/dev/null # deleting a namespace deletes its end of the veth, and so the pair
  ip netns del "$ns1" 2>/dev/null
  ip link del "$veth0" 2>/dev/null # in case it was never moved into a namespace
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Namespaces a killed earlier run left behind (its pid is gone).
for stale in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^kiln2n-'); do
  owner=${stale#kiln2n-}
  owner=${owner%-*}
  owner=${owner:0:${#owner}-2}
  [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null && ip netns del "$stale" 2>/dev/null
done

ip netns add "$ns0" 2>"$work/err" || skip "ip netns add failed (no CAP_NET_ADMIN?): $(cat "$work/err")"
ip netns add "$ns1" 2>"$work/err" || skip "ip netns add failed: $(cat "$work/err")"
ip link add "$veth0" type veth peer name "$veth1" 2>"$work/err" || skip "no veth pair: $(cat "$work/err")"
ip link set "$veth0" netns "$ns0" && ip link set "$veth1" netns "$ns1" || skip "cannot move the veth ends"
for side in "$ns0 $veth0 $addr0" "$ns1 $veth1 $addr1"; do
  read -r ns dev addr <<<"$side"
  ip -n "$ns" addr add "$addr/24" dev "$dev" && ip -n "$ns" link set "$dev" up && ip -n "$ns" link set lo up ||
    skip "cannot configure $dev in $ns"
done
# Node 1 reaches node 0 (no ping here: a TCP connect to a closed port that
# is refused, not timed out or unroutable, has crossed the link).
probe=$(timeout 10 ip netns exec "$ns1" bash -c "exec 3<>/dev/tcp/$addr0/9" 2>&1)
[ $? = 0 ] || grep -q refused <<<"$probe" ||
  fail "node 1 ($addr1 in $ns1) cannot reach node 0 ($addr0 in $ns0) over the veth pair: $probe"
echo "two nodes: $ns0 ($veth0 $addr0) and $ns1 ($veth1 $addr1), master $addr0:$port"

train_args=(--ddp --epochs "$epochs" --train-size "$train_size" --batch-size "$batch")

# One kilnrun per namespace; rank 0 saves to $1. Further arguments are
# "VAR=VALUE" for node 0 then node 1 (e.g. GLOO_SOCKET_IFNAME per node).
run_two_nodes() {
  local out=$1 env0=${2:-KILN_TWO_NODES=1} env1=${3:-KILN_TWO_NODES=1} start=$SECONDS
  pids=()
  for r in 0 1; do
    local ns=$ns0 env=$env0
    [ "$r" = 1 ] && ns=$ns1 env=$env1
    ip netns exec "$ns" env "$env" timeout "$step_timeout" "$kilnrun" --nnodes 2 --node-rank "$r" \
      --nproc-per-node 1 --master-addr "$addr0" --master-port "$port" \
      "$train" "${train_args[@]}" --save "$out" >"$work/node$r.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for r in 0 1; do
    wait "${pids[$r]}" || status=$?
  done
  pids=()
  for r in 0 1; do sed "s/^/  node $r: /" "$work/node$r.log" | grep -E 'kilnrun|error|test accuracy|saved' ; done
  [ "$status" = 0 ] || {
    for r in 0 1; do sed "s/^/  node $r: /" "$work/node$r.log"; done
    fail "a node exited with status $status (124: past the ${step_timeout} s timeout)"
  }
  echo "  two nodes trained in $((SECONDS - start)) s"
}

compare() { # GOT EXPECTED [--expect-differ]
  python3 "$tools/compare_safetensors.py" "$@" | sed 's/^/  /'
  return "${PIPESTATUS[0]}"
}

echo "reference: one process at batch $((2 * batch))"
timeout "$step_timeout" "$train" --epochs "$epochs" --train-size "$train_size" --batch-size "$((2 * batch))" \
  --save "$work/one.safetensors" >"$work/one.log" 2>&1 || { cat "$work/one.log"; fail "the reference run failed"; }
timeout "$step_timeout" "$train" --epochs "$epochs" --train-size "$train_size" --batch-size "$batch" \
  --save "$work/one_small_batch.safetensors" >"$work/one_small.log" 2>&1 ||
  { cat "$work/one_small.log"; fail "the small-batch run failed"; }

echo "two nodes, each rank's Gloo address from its connection to the master:"
run_two_nodes "$work/two_nodes.safetensors"
compare "$work/two_nodes.safetensors" "$work/one.safetensors" || fail "two nodes differ from one process"

echo "two nodes, GLOO_SOCKET_IFNAME=$veth0 / $veth1:"
run_two_nodes "$work/two_nodes_ifname.safetensors" "GLOO_SOCKET_IFNAME=$veth0" "GLOO_SOCKET_IFNAME=$veth1"
compare "$work/two_nodes_ifname.safetensors" "$work/one.safetensors" ||
  fail "two nodes (GLOO_SOCKET_IFNAME) differ from one process"

echo "a MASTER_ADDR with no route to it: a kiln::Error at once, naming it"
start=$SECONDS
ip netns exec "$ns1" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.254.254.1 MASTER_PORT=$port timeout 20 "$train" --ddp \
  --epochs 1 --train-size 64 >"$work/unreachable.log" 2>&1
status=$?
sed 's/^/  /' "$work/unreachable.log"
[ "$status" = 1 ] && grep -q "10.254.254.1:$port is unreachable from this node" "$work/unreachable.log" ||
  fail "an unroutable MASTER_ADDR gave status $status, not the unreachable error"
echo "  failed in $((SECONDS - start)) s"

echo "control: one process at the per-rank batch $batch must differ"
compare "$work/one_small_batch.safetensors" "$work/one.safetensors" --expect-differ ||
  fail "the comparison cannot tell batch $batch from batch $((2 * batch))"
echo "PASS: two nodes over a veth pair train the parameters of one process on the global batch"
