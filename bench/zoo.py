#!/usr/bin/env python3
"""Runs the model zoo: Kiln (build/bench/kiln-zoo) and the PyTorch 2 peers
(bench/peers/), compares with a baseline, writes JSON, a Markdown table and
a PNG chart.

usage: python3 bench/zoo.py [--build build] [--models mlp,cnn,gpt,bert,mixer] [--reps 5]
           [--rep-seconds 0.5] [--out bench/results/zoo.json] [--baseline PATH | REV:PATH]
           [--threshold 0.10] [--chart bench/results/zoo.png] [--table bench/results/zoo.md] [--no-peers]

Per model, four processes in this order: kiln-zoo with an empty
KILN_CACHE_DIR (cold compile), the PyTorch peer with an empty
TORCHINDUCTOR_CACHE_DIR (FX graph and AOTAutograd caches on: cold), then
both again with the same directories (warm start). Every process measures
eager and compiled steps, interleaved over --reps repetitions; the step
times are the medians over both processes' repetitions, so Kiln and PyTorch
alternate. Threads: $OMP_NUM_THREADS (default 2) for both, with
OMP_WAIT_POLICY=passive (bench/README.md: spinning threads on a shared
machine slow both libraries). LibTorch 1.13 (Debian libtorch-dev) is not
used here: torch 2 eager, the same ATen kernels, is the eager peer.
Exit status 1 when compare.py flags a regression against --baseline.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import zoo_report  # noqa: E402


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_json(cmd, env):
    """Runs `cmd` with `--json FILE` appended; returns the model's entry and the context."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(cmd + ["--json", out.name], env=env, check=True)
        doc = json.load(open(out.name))
    (entry,) = doc["models"].values()
    return entry, doc.get("context", {})


def merge(kiln_cold, kiln_warm, torch_cold, torch_warm):
    """One model's row of zoo.json from the four processes' reports."""
    def med(a, b, key):
        reps = (a or {}).get(key + "_reps", []) + (b or {}).get(key + "_reps", [])
        return statistics.median(reps) if reps else None

    m = {"description": kiln_cold.get("description"), "compile_error": kiln_cold.get("compile_error"),
         "parameters": kiln_cold.get("parameters"), "torch_parameters": (torch_cold or {}).get("parameters"),
         "kiln_eager_ms": med(kiln_cold, kiln_warm, "eager_ms"),
         "kiln_compiled_ms": med(kiln_cold, kiln_warm, "compiled_ms"),
         "torch_eager_ms": med(torch_cold, torch_warm, "eager_ms"),
         "torch_compile_ms": med(torch_cold, torch_warm, "compiled_ms"),
         "kiln_cold_compile_s": kiln_cold.get("compile_seconds"), "kiln_warm_compile_s": kiln_warm.get("compile_seconds"),
         "inductor_cold_compile_s": (torch_cold or {}).get("compile_seconds"),
         "inductor_warm_compile_s": (torch_warm or {}).get("compile_seconds"),
         "graphs": kiln_cold.get("graphs"), "graph_breaks": kiln_cold.get("graph_breaks"),
         "graph_break_ops": sorted(set(kiln_cold.get("graph_break_ops", []))),
         "fused_kernels": kiln_cold.get("fused_kernels"),
         "torch_graphs": (torch_cold or {}).get("graphs"), "torch_graph_breaks": (torch_cold or {}).get("graph_breaks"),
         "kiln_eager_peak_step_bytes": kiln_cold.get("eager_peak_step_bytes"),
         "kiln_compiled_peak_step_bytes": kiln_cold.get("compiled_peak_step_bytes"),
         "loss_eager": kiln_cold.get("loss_eager"), "loss_compiled": kiln_cold.get("loss_compiled")}
    ratio = lambda a, b: m[a] / m[b] if m.get(a) and m.get(b) else None  # noqa: E731
    m["compiled_vs_eager"] = ratio("kiln_eager_ms", "kiln_compiled_ms")
    m["compiled_vs_torch_compile"] = ratio("torch_compile_ms", "kiln_compiled_ms")
    m["eager_vs_torch_eager"] = ratio("torch_eager_ms", "kiln_eager_ms")
    m["cold_compile_vs_inductor"] = ratio("kiln_cold_compile_s", "inductor_cold_compile_s")
    return m


def run_model(name, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    kiln_cmd = [os.path.join(args.build, "bench", "kiln-zoo"), "--model", name, "--reps", str(args.reps),
                "--rep-seconds", str(args.rep_seconds)]
    torch_cmd = [sys.executable, os.path.join(HERE, "peers", "harness.py"), "--model", name,
                 "--reps", str(args.reps), "--rep-seconds", str(args.rep_seconds)]
    with tempfile.TemporaryDirectory() as kiln_dir, tempfile.TemporaryDirectory() as torch_dir:
        kenv = dict(env, KILN_CACHE_DIR=kiln_dir)
        tenv = dict(env, TORCHINDUCTOR_CACHE_DIR=torch_dir, TORCHINDUCTOR_FX_GRAPH_CACHE="1",
                    TORCHINDUCTOR_AUTOGRAD_CACHE="1")
        reports = []
        for _ in ("cold", "warm"):
            reports.append(run_json(kiln_cmd, kenv))
            reports.append((None, {}) if args.no_peers else run_json(torch_cmd, tenv))
    (kiln_cold, kiln_ctx), (torch_cold, torch_ctx), (kiln_warm, _), (torch_warm, _) = reports
    m = merge(kiln_cold, kiln_warm, torch_cold, torch_warm)
    # Whole-process high-water marks of the cold runs (both variants, the compiler, the libraries).
    m["kiln_max_rss_mb"], m["torch_max_rss_mb"] = kiln_ctx.get("max_rss_mb"), torch_ctx.get("max_rss_mb")
    return m


def git_revision():
    try:
        return subprocess.check_output(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--models", default="mlp,cnn,gpt,bert,mixer")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rep-seconds", type=float, default=0.5)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "zoo.json"))
    parser.add_argument("--baseline")
    parser.add_argument("--threshold", type=float, default=0.10)
    parser.add_argument("--chart", default=os.path.join(HERE, "results", "zoo.png"))
    parser.add_argument("--table", default=os.path.join(HERE, "results", "zoo.md"))
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    baseline = compare.read_json(args.baseline) if args.baseline else None  # read before --out is overwritten
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "git": git_revision(), "threads": threads,
            "cpus": os.cpu_count(), "load_average_start": load_average(),
            "eager_peer": "torch 2 eager (LibTorch 1.13 is not installed: apt-get install libtorch-dev)"}
    doc = {"meta": meta, "models": {}}
    for name in args.models.split(","):
        print(f"zoo: {name}", file=sys.stderr, flush=True)
        doc["models"][name] = run_model(name, args, threads)
    meta["load_average_end"] = load_average()
    if not args.no_peers:
        import torch
        meta["torch"] = torch.__version__
    regressed, status = set(), 0
    if baseline:
        rows, _ = compare.compare(baseline, doc, args.threshold)
        regressed = {r[0] for r in rows if r[4]}
        meta["baseline"] = args.baseline
        meta["regressions"] = sorted(regressed)
        status = 1 if regressed else 0
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    table = zoo_report.markdown_table(doc, regressed)
    with open(args.table, "w") as f:
        f.write(table)
    zoo_report.write_chart(doc, regressed, args.chart)
    print(table)
    print(f"zoo: wrote {args.out}, {args.table}, {args.chart}; "
          f"{len(regressed)} regression(s) above {args.threshold:.0%}" + (f": {sorted(regressed)}" if regressed else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
