#!/usr/bin/env python3
"""Runs the model zoo: Kiln (build/bench/kiln-zoo), LibTorch 1.13 eager
(build/bench/kiln-zoo-libtorch, bench/peers/libtorch/) and the PyTorch 2
peers (bench/peers/), compares with a baseline, writes JSON, a Markdown
table and a PNG chart.

usage: python3 bench/zoo.py [--build build] [--models mlp,cnn,gpt,bert,mixer] [--reps 5]
           [--rep-seconds 0.5] [--out bench/results/zoo.json] [--baseline PATH | REV:PATH]
           [--threshold 0.10] [--chart bench/results/zoo.png] [--table bench/results/zoo.md] [--no-peers]
           [--loss-steps N]

Per model, six processes in this order: kiln-zoo with an empty
KILN_CACHE_DIR (cold compile), the PyTorch peer with an empty
TORCHINDUCTOR_CACHE_DIR (FX graph and AOTAutograd caches on: cold),
kiln-zoo-libtorch, then the three again (Kiln and Inductor with the same
directories: warm start). Kiln's and PyTorch's processes measure eager and
compiled steps, interleaved over --reps repetitions, LibTorch's eager steps
over as many; the step times are the medians over both processes'
repetitions of a side, so the libraries alternate. Threads:
$OMP_NUM_THREADS (default 2) for all, with OMP_WAIT_POLICY=passive
(bench/README.md: spinning threads on a shared machine slow every library).
Without the kiln-zoo-libtorch binary (LibTorch not found by CMake) the
LibTorch column is empty and the run says so.
--loss-steps N times nothing: it trains each model N eager steps on each
side and prints the losses (the check that the ports train alike).
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


def merge(kiln_cold, kiln_warm, torch_cold, torch_warm, libtorch=(None, None)):
    """One model's row of zoo.json from the processes' reports (`libtorch`:
    kiln-zoo-libtorch's two, None when it did not run)."""
    def med(a, b, key):
        reps = (a or {}).get(key + "_reps", []) + (b or {}).get(key + "_reps", [])
        return statistics.median(reps) if reps else None

    m = {"description": kiln_cold.get("description"), "compile_error": kiln_cold.get("compile_error"),
         "parameters": kiln_cold.get("parameters"), "torch_parameters": (torch_cold or {}).get("parameters"),
         "kiln_eager_ms": med(kiln_cold, kiln_warm, "eager_ms"),
         "kiln_compiled_ms": med(kiln_cold, kiln_warm, "compiled_ms"),
         "libtorch_parameters": (libtorch[0] or {}).get("parameters"),
         "libtorch_eager_ms": med(libtorch[0], libtorch[1], "eager_ms"),
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
         "loss_eager": kiln_cold.get("loss_eager"), "loss_compiled": kiln_cold.get("loss_compiled"),
         "loss_libtorch": (libtorch[0] or {}).get("loss_eager"), "loss_torch": (torch_cold or {}).get("loss_eager")}
    ratio = lambda a, b: m[a] / m[b] if m.get(a) and m.get(b) else None  # noqa: E731
    m["compiled_vs_eager"] = ratio("kiln_eager_ms", "kiln_compiled_ms")
    m["compiled_vs_torch_compile"] = ratio("torch_compile_ms", "kiln_compiled_ms")
    m["eager_vs_libtorch_eager"] = ratio("libtorch_eager_ms", "kiln_eager_ms")
    m["compiled_vs_libtorch_eager"] = ratio("libtorch_eager_ms", "kiln_compiled_ms")
    m["eager_vs_torch_eager"] = ratio("torch_eager_ms", "kiln_eager_ms")
    m["cold_compile_vs_inductor"] = ratio("kiln_cold_compile_s", "inductor_cold_compile_s")
    return m


def commands(name, args, reps_args):
    """The command lines of the three sides for model `name`; the peers' are
    None with --no-peers, LibTorch's also without its binary."""
    kiln = [os.path.join(args.build, "bench", "kiln-zoo"), "--model", name] + reps_args
    libtorch = os.path.join(args.build, "bench", "kiln-zoo-libtorch")
    libtorch = [libtorch, "--model", name] + reps_args if os.path.exists(libtorch) and not args.no_peers else None
    torch = None if args.no_peers else [sys.executable, os.path.join(HERE, "peers", "harness.py"), "--model",
                                        name] + reps_args
    return kiln, libtorch, torch


def run_model(name, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    kiln_cmd, libtorch_cmd, torch_cmd = commands(name, args, ["--reps", str(args.reps),
                                                              "--rep-seconds", str(args.rep_seconds)])
    skipped = (None, {})
    with tempfile.TemporaryDirectory() as kiln_dir, tempfile.TemporaryDirectory() as torch_dir:
        kenv = dict(env, KILN_CACHE_DIR=kiln_dir)
        tenv = dict(env, TORCHINDUCTOR_CACHE_DIR=torch_dir, TORCHINDUCTOR_FX_GRAPH_CACHE="1",
                    TORCHINDUCTOR_AUTOGRAD_CACHE="1")
        reports = []
        for _ in ("cold", "warm"):
            reports.append(run_json(kiln_cmd, kenv))
            reports.append(run_json(torch_cmd, tenv) if torch_cmd else skipped)
            reports.append(run_json(libtorch_cmd, env) if libtorch_cmd else skipped)
    (kiln_cold, kiln_ctx), (torch_cold, torch_ctx), (lt_1, lt_ctx), (kiln_warm, _), (torch_warm, _), (lt_2, _) = reports
    m = merge(kiln_cold, kiln_warm, torch_cold, torch_warm, (lt_1, lt_2))
    # Whole-process high-water marks of the cold runs (both variants, the compiler, the libraries).
    m["kiln_max_rss_mb"], m["torch_max_rss_mb"] = kiln_ctx.get("max_rss_mb"), torch_ctx.get("max_rss_mb")
    m["libtorch_max_rss_mb"] = lt_ctx.get("max_rss_mb")
    return m, lt_ctx


def print_losses(args, threads):
    """--loss-steps: each side's loss at step 1 and step N per model."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    sides = ("Kiln", "LibTorch", "torch 2")
    print(f"{'model':8s}" + "".join(f"{side + ' 1 / ' + str(args.loss_steps):>22s}" for side in sides))
    for name in args.models.split(","):
        cells = []
        for cmd in commands(name, args, ["--loss-steps", str(args.loss_steps)]):
            losses = run_json(cmd, env)[0]["losses"] if cmd else None
            cells.append(f"{losses[0]:.4f} / {losses[-1]:.4f}" if losses else "-")
        print(f"{name:8s}" + "".join(f"{cell:>22s}" for cell in cells), flush=True)
    return 0


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
    parser.add_argument("--loss-steps", type=int, default=0)
    args = parser.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    if args.loss_steps > 0:
        return print_losses(args, threads)
    libtorch = os.path.join(args.build, "bench", "kiln-zoo-libtorch")
    if not os.path.exists(libtorch):
        print(f"zoo: {libtorch} not found: no LibTorch eager column (install libtorch-dev, rerun cmake, "
              "build kiln-zoo-libtorch)", file=sys.stderr)
    baseline = compare.read_json(args.baseline) if args.baseline else None  # read before --out is overwritten
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "git": git_revision(), "threads": threads,
            "cpus": os.cpu_count(), "load_average_start": load_average(),
            "eager_peers": ("LibTorch eager (kiln-zoo-libtorch) and torch 2 eager" if os.path.exists(libtorch)
                            else "torch 2 eager only (kiln-zoo-libtorch not built)")}
    doc = {"meta": meta, "models": {}}
    for name in args.models.split(","):
        print(f"zoo: {name}", file=sys.stderr, flush=True)
        doc["models"][name], libtorch_ctx = run_model(name, args, threads)
        if libtorch_ctx.get("libtorch"):
            meta["libtorch"] = libtorch_ctx["libtorch"]
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
