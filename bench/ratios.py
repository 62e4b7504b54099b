#!/usr/bin/env python3
"""Prints time ratios between paired benchmarks of one Google Benchmark JSON run.

usage: python3 bench/ratios.py results.json [--pair A B] [--cpu]
Pairs BM_<x>A<y> with BM_<x>B<y> (default A=Eager, B=Compiled; use
--pair Torch Kiln for the LibTorch comparison) and prints time(A)/time(B):
> 1 means B is faster. With --benchmark_repetitions the medians are used.
--cpu compares cpu_time (the benchmark thread's CPU time) instead of
real_time: steadier on a loaded machine for single-threaded runs.
"""
import json
import sys


def load_times(path, key="real_time"):
    with open(path) as f:
        return times_of(json.load(f), key)


def times_of(doc, key="real_time"):
    """{benchmark: time} of a parsed Google Benchmark JSON: the medians when it has repetitions."""
    runs = doc["benchmarks"]
    medians = {r["run_name"]: r[key] for r in runs if r.get("aggregate_name") == "median"}
    return medians or {r["name"]: r[key] for r in runs if r.get("run_type", "iteration") == "iteration"}


def main(argv):
    key = "real_time"
    if "--cpu" in argv:
        argv = [x for x in argv if x != "--cpu"]
        key = "cpu_time"
    if len(argv) not in (2, 5) or (len(argv) == 5 and argv[2] != "--pair"):
        sys.exit(__doc__)
    a, b = (argv[3], argv[4]) if len(argv) == 5 else ("Eager", "Compiled")
    times = load_times(argv[1], key)
    print(f"{'benchmark':40s} {a:>12s} {b:>12s} {a + '/' + b:>16s}")
    for name, t in sorted(times.items()):
        if a not in name:
            continue
        other = name.replace(a, b)
        if other in times:
            print(f"{name.replace(a, ''):40s} {t:12.3f} {times[other]:12.3f} {t / times[other]:16.2f}")


if __name__ == "__main__":
    main(sys.argv)
