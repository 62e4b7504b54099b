#!/usr/bin/env python3
"""Ratios of one run_checks.sh run: kiln.json and torch.json (the same cases,
bench_cuda_eager.cpp / torch_peer.py) -> report.json on stdout.

Per case: Kiln's time over PyTorch's (below 1: Kiln faster). Bandwidth
cases: GB/s over Kiln's own copy kernel's (goal for pointwise >= 0.70) and
over the H200's 4.8 TB/s. GEMMs: TFLOP/s (goal bf16 8192^3 >= 600).
"""
import json
import sys

H200_BYTES_PER_S = 4.8e12


def main():
    kiln, torch = (json.load(open(p)) for p in sys.argv[1:3])
    peer = {c["name"]: c for c in torch["cases"]}
    copy = next(c for c in kiln["cases"] if c["name"] == "copy_f32")
    rows = []
    for c in kiln["cases"]:
        r = {"name": c["name"], "kiln_ms": c["ms"]}
        if c["name"] in peer:
            r["torch_ms"] = peer[c["name"]]["ms"]
            r["kiln_over_torch_time"] = c["ms"] / peer[c["name"]]["ms"]
        if "GBps" in c:
            r["kiln_GBps"] = c["GBps"]
            r["of_copy_kernel"] = c["GBps"] / copy["GBps"]
            r["of_4.8TBps"] = c["GBps"] * 1e9 / H200_BYTES_PER_S
        if "TFLOPs" in c:
            r["kiln_TFLOPs"] = c["TFLOPs"]
            if c["name"] in peer:
                r["torch_TFLOPs"] = peer[c["name"]]["TFLOPs"]
        rows.append(r)
    goals = {}
    for name in ("add_f32", "mul_add_f32", "exp_f32"):
        row = next((r for r in rows if r["name"] == name), None)
        if row:
            goals[f"{name} >= 70% of copy"] = row["of_copy_kernel"] >= 0.70
    gemm = next((r for r in rows if r["name"].startswith("gemm_bf16")), None)
    if gemm:
        goals["bf16 GEMM >= 600 TFLOP/s"] = gemm["kiln_TFLOPs"] >= 600
    print(json.dumps({"device": kiln["device"], "peer": torch["library"], "small": kiln.get("small", False),
                      "cases": rows, "goals": goals}, indent=2))


if __name__ == "__main__":
    main()
