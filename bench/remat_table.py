#!/usr/bin/env python3
"""Prints the memory-budget table of one kiln-bench-gpt JSON run.

usage: python3 bench/remat_table.py results.json

Rows: BM_KilnGptStepBudget/budget_pct:{100,50,0} and BM_KilnGptStepNoRemat.
Columns: median step time, peak activation bytes (saved + max(forward arena,
backward arena), from the executables' memory plans), saved bytes, measured
allocator peak per step, recompute GFLOP, and time / peak activation as
ratios to budget 1.0 (budget_pct:100) of the same run.
"""
import json
import sys


def load(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    medians = {r["run_name"]: r for r in runs if r.get("aggregate_name") == "median"}
    return medians or {r["name"]: r for r in runs if r.get("run_type", "iteration") == "iteration"}


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    runs = load(argv[1])
    base = runs.get("BM_KilnGptStepBudget/budget_pct:100")
    if base is None:
        sys.exit("no BM_KilnGptStepBudget/budget_pct:100 in " + argv[1])
    rows = [("1.0", "BM_KilnGptStepBudget/budget_pct:100"), ("0.5", "BM_KilnGptStepBudget/budget_pct:50"),
            ("0.0", "BM_KilnGptStepBudget/budget_pct:0"), ("no remat", "BM_KilnGptStepNoRemat")]
    print("| memory_budget | time/step | peak activation | saved | fwd arena | bwd arena | allocator peak/step "
          "| recompute | time vs 1.0 | peak act. vs 1.0 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    mb = 1e6
    for label, name in rows:
        r = runs.get(name)
        if r is None:
            continue
        print(f"| {label} | {r['real_time']:.1f} ms | {r['peak_activation_bytes'] / mb:.2f} MB "
              f"| {r['saved_bytes'] / mb:.2f} MB | {r['forward_arena_bytes'] / mb:.2f} MB "
              f"| {r['backward_arena_bytes'] / mb:.2f} MB | {r['peak_step_bytes'] / mb:.1f} MB "
              f"| {r['recompute_flops'] / 1e9:.3f} GFLOP | {r['real_time'] / base['real_time']:.2f}x "
              f"| {r['peak_activation_bytes'] / base['peak_activation_bytes']:.2f}x |")


if __name__ == "__main__":
    main(sys.argv)
