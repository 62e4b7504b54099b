#!/usr/bin/env python3
"""Prints compiled-vs-eager ratios from a Google Benchmark JSON file.

usage: python3 bench/ratios.py results.json
For every BM_<Name>Eager/<arg> with a matching BM_<Name>Compiled/<arg>, prints
the eager/compiled time ratio (> 1 means compiled is faster) measured in the
same run.
"""
import json
import sys


def main(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    # With --benchmark_repetitions, compare the medians; otherwise the single runs.
    medians = {r["run_name"]: r["real_time"] for r in runs if r.get("aggregate_name") == "median"}
    times = medians or {r["name"]: r["real_time"] for r in runs if r.get("run_type", "iteration") == "iteration"}
    print(f"{'benchmark':40s} {'eager':>12s} {'compiled':>12s} {'eager/compiled':>15s}")
    for name, t in sorted(times.items()):
        if "Eager" not in name:
            continue
        other = name.replace("Eager", "Compiled")
        if other in times:
            print(f"{name.replace('Eager', ''):40s} {t:12.1f} {times[other]:12.1f} {t / times[other]:15.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
