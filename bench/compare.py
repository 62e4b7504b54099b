#!/usr/bin/env python3
"""Flags benchmark regressions of a new run against a baseline.

usage: python3 bench/compare.py BASELINE NEW [--threshold 0.10]

Two kinds of JSON:
- Google Benchmark output (Google Benchmark's compare.py convention):
  relative change of real time per benchmark, medians when the runs have
  repetitions.
- The model zoo (`bench/zoo.py`, a JSON with "models"): per model, Kiln's
  step times (eager, compiled), cold and warm compile time, the compiled
  step's peak bytes and the graph breaks (ZOO_METRICS). The peers' step
  times (LibTorch eager, torch 2 eager, torch.compile: PEER_METRICS) are
  printed beside them, marked "(peer)", and never flagged: they are not
  Kiln regressions, but a peer that slowed as much as Kiln points at the
  machine, not at Kiln.
Prints one line per metric present in both files: baseline, new, change.
Exits 1 if any is worse by more than the threshold (default 10%; a graph
break count that grows is always flagged), so a CI job or a developer can
gate on it. BASELINE (or NEW) may be a git revision and path,
`REV:bench/results/zoo.json`, read with `git show`. Numbers from different
machines or loads are not comparable: rerun the baseline on the same
machine first.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import times_of  # noqa: E402  (medians or single runs, one parser)

# Zoo metrics compared, all "lower is better".
ZOO_METRICS = ["kiln_eager_ms", "kiln_compiled_ms", "kiln_cold_compile_s", "kiln_warm_compile_s",
               "kiln_compiled_peak_step_bytes", "graph_breaks"]
# The peers' step times, shown for context and never flagged.
PEER_METRICS = ["libtorch_eager_ms", "torch_eager_ms", "torch_compile_ms"]


def read_json(spec):
    """Parses a file, or `REV:PATH` from git when no such file exists."""
    if os.path.exists(spec) or ":" not in spec:
        with open(spec) as f:
            return json.load(f)
    return json.loads(subprocess.check_output(["git", "show", spec], text=True))


def flatten(doc):
    """{name: value} of a Google Benchmark or a zoo JSON (module docstring)."""
    if "models" not in doc:
        return times_of(doc)
    return {f"{model}/{metric}": values[metric] for model, values in doc["models"].items()
            for metric in ZOO_METRICS + PEER_METRICS if values.get(metric) is not None}


def is_peer(name):
    """Whether a flattened name is a peer's metric (never a regression)."""
    return name.rsplit("/", 1)[-1] in PEER_METRICS


def compare(base_doc, new_doc, threshold=0.10):
    """Rows (name, baseline, new, relative change, regressed) for names in both."""
    base, new = flatten(base_doc), flatten(new_doc)
    rows = []
    for name in sorted(set(base) & set(new)):
        b, n = base[name], new[name]
        change = n / b - 1.0 if b else (float("inf") if n > b else 0.0)
        if is_peer(name):
            regressed = False
        elif name.endswith("graph_breaks"):
            regressed = n > b
        else:
            regressed = change > threshold
        rows.append((name, b, n, change, regressed))
    return rows, sorted(set(base) - set(new))


def main(argv):
    threshold = 0.10
    args = list(argv[1:])
    if "--threshold" in args:
        i = args.index("--threshold")
        threshold = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    rows, missing = compare(read_json(args[0]), read_json(args[1]), threshold)
    print(f"{'benchmark':45s} {'baseline':>14s} {'new':>14s} {'change':>8s}")
    for name, b, n, change, regressed in rows:
        mark = "  REGRESSION" if regressed else ("  (peer)" if is_peer(name) else "")
        print(f"{name:45s} {b:14.3f} {n:14.3f} {change:+8.1%}{mark}")
    if missing:
        print("missing from the new run: " + ", ".join(missing))
    regressions = sum(r[4] for r in rows)
    print(f"{regressions} regression(s) above {threshold:.0%}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
