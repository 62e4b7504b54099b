#!/usr/bin/env python3
"""Flags benchmark regressions of a new Google Benchmark JSON run against a
committed baseline (Google Benchmark's compare.py convention: relative change
of real time per benchmark).

usage: python3 bench/compare.py BASELINE.json NEW.json [--threshold 0.10]
Prints one line per benchmark present in both files: baseline time, new
time, change. Exits 1 if any benchmark is slower by more than the threshold
(default 10%), so a CI job or a developer can gate on it. Medians are used
when the runs have repetitions. Numbers from different machines or loads are
not comparable: rerun the baseline on the same machine first.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import load_times as load  # noqa: E402  (medians or single runs, one parser)


def main(argv):
    threshold = 0.10
    args = [a for a in argv[1:]]
    if "--threshold" in args:
        i = args.index("--threshold")
        threshold = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    base, new = load(args[0]), load(args[1])
    regressions = 0
    print(f"{'benchmark':45s} {'baseline':>12s} {'new':>12s} {'change':>8s}")
    for name in sorted(set(base) & set(new)):
        change = new[name] / base[name] - 1.0
        flag = "  REGRESSION" if change > threshold else ""
        regressions += bool(flag)
        print(f"{name:45s} {base[name]:12.3f} {new[name]:12.3f} {change:+8.1%}{flag}")
    missing = sorted(set(base) - set(new))
    if missing:
        print("missing from the new run: " + ", ".join(missing))
    print(f"{regressions} regression(s) above {threshold:.0%}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
