#!/usr/bin/env python3
"""Kiln eager vs LibTorch before/after a change, from several runs of one
peer benchmark (kiln-bench-ops or kiln-bench-gpt) per variant.

Each run is one Google Benchmark JSON file (Kiln and LibTorch interleaved in
the same process, so they share the machine's load). Per run and benchmark
pair the ratio Kiln time / LibTorch time is taken (< 1: Kiln faster; wall time,
and in brackets the benchmark thread's CPU time); the
table shows the median over the runs of each variant (a loaded 2-core VM
moves single runs by 30%).

    python3 bench/eager_ratios.py --out bench/results/eager_ops.json \\
        before=/tmp/before-1.json,/tmp/before-2.json after=/tmp/after-1.json,/tmp/after-2.json
"""
import argparse
import json
import statistics
import sys


def times(path):
    """{benchmark name without the Kiln/Torch prefix: {"Kiln"|"Torch": real_time ns}} of one run."""
    with open(path) as f:
        data = json.load(f)
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    out = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        for peer in ("Kiln", "Torch"):
            prefix = "BM_" + peer
            if name.startswith(prefix):
                key = name[len(prefix):]
                out.setdefault(key, {})[peer] = b["real_time"] * scale[b["time_unit"]]
                out[key][peer + "_cpu"] = b["cpu_time"] * scale[b["time_unit"]]
    return out, data.get("context", {})


def summarize(paths):
    """{name: {kiln_ns, torch_ns, ratio}} medians over the runs in `paths`."""
    per = {}
    contexts = []
    for p in paths:
        t, ctx = times(p)
        contexts.append({k: ctx.get(k) for k in ("date", "load_avg", "threads")})
        for name, v in t.items():
            if "Kiln" in v and "Torch" in v:
                per.setdefault(name, []).append((v["Kiln"], v["Torch"], v["Kiln_cpu"], v["Torch_cpu"]))
    rows = {}
    for name, runs in per.items():
        rows[name] = {
            "kiln_ns": statistics.median(r[0] for r in runs),
            "torch_ns": statistics.median(r[1] for r in runs),
            "kiln_over_torch": statistics.median(r[0] / r[1] for r in runs),
            "kiln_over_torch_cpu": statistics.median(r[2] / r[3] for r in runs),
            "runs": len(runs),
        }
    return rows, contexts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", help="NAME=run1.json,run2.json,...")
    ap.add_argument("--out", help="write the summary as JSON here")
    args = ap.parse_args()
    result = {}
    for v in args.variants:
        name, _, files = v.partition("=")
        rows, contexts = summarize(files.split(","))
        result[name] = {"rows": rows, "runs": contexts}
    names = list(result)
    keys = sorted({k for r in result.values() for k in r["rows"]})
    print("| benchmark | " + " | ".join(f"{n}: Kiln / LibTorch" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for k in keys:
        cells = []
        for n in names:
            r = result[n]["rows"].get(k)
            cells.append(f"{r['kiln_ns'] / 1e3:.1f} / {r['torch_ns'] / 1e3:.1f} us = **{r['kiln_over_torch']:.2f}** "
                         f"(cpu {r['kiln_over_torch_cpu']:.2f})" if r else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
