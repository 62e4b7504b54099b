#!/usr/bin/env python3
"""The PyTorch 2 side of the model zoo: each bench/models/<name>.cpp written
in PyTorch (bench/peers/<name>.py), measured as bench/models/harness.h
measures Kiln: the training step (zero_grad, forward, loss, backward, AdamW)
eagerly and with torch.compile (Inductor, CPU; the model compiled, the loss
eager), interleaved over --reps repetitions of about --rep-seconds each
(median ms per step); the first compiled step's extra time over a steady one
(Dynamo + AOTAutograd + Inductor, "compile_seconds": run with an empty
TORCHINDUCTOR_CACHE_DIR for a cold compile, again with the same directory for
a warm start through the FX graph and AOTAutograd caches); graphs and graph
breaks (torch._dynamo's counters); the process' max RSS.

usage: python3 bench/peers/harness.py --model NAME [--reps R] [--rep-seconds S] [--json PATH] [--loss-steps N]
--loss-steps N times nothing: the losses of N eager steps on the batch
("losses"), as kiln-zoo --loss-steps (the check that a port trains alike).
Threads: torch.set_num_threads($OMP_NUM_THREADS, default 2), as Kiln's.
A bench-only tool: nothing in Kiln's build or tests imports torch.
"""
import argparse
import importlib
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def classification_loss(output, target):
    """cross_entropy over the last dim, ignore_index -100 (harness.h's)."""
    return F.cross_entropy(output.reshape(-1, output.size(-1)), target.reshape(-1), ignore_index=-100)


class Variant:
    """One variant (eager or torch.compile) of a model: module, optimizer, step."""

    def __init__(self, spec, compiled):
        torch.manual_seed(0)
        self.model = spec.make_model()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=getattr(spec, "LR", 1e-3))
        self.forward = torch.compile(self.model) if compiled else self.model
        self.loss = getattr(spec, "loss", classification_loss)
        self.ms_per_step = []

    def step(self, batch):
        self.opt.zero_grad()
        loss = self.loss(self.forward(batch[0]), batch[1])
        loss.backward()
        self.opt.step()
        return loss.item()

    def timed(self, batch, steps):
        start = time.perf_counter()
        for _ in range(steps):
            self.step(batch)
        self.ms_per_step.append(1e3 * (time.perf_counter() - start) / steps)


def graph_report():
    counters = torch._dynamo.utils.counters
    breaks = dict(counters["graph_break"])
    return {"graphs": int(counters["stats"]["unique_graphs"]), "graph_breaks": sum(breaks.values()),
            "graph_break_reasons": list(breaks)[:10]}


def measure(spec, reps, rep_seconds):
    eager, compiled = Variant(spec, False), Variant(spec, True)
    torch.manual_seed(1)
    batch = spec.make_batch()
    out = {"description": spec.DESCRIPTION, "parameters": sum(p.numel() for p in eager.model.parameters())}
    out["loss_eager"] = eager.step(batch)
    start = time.perf_counter()
    out["loss_compiled"] = compiled.step(batch)
    first_compiled = time.perf_counter() - start
    compiled.step(batch)
    start = time.perf_counter()
    eager.step(batch)  # a warm eager step sizes the repetitions
    steps = min(500, max(2, int(rep_seconds / max(time.perf_counter() - start, 1e-6))))
    for _ in range(reps):  # interleaved: eager, compiled, eager, ...
        eager.timed(batch, steps)
        compiled.timed(batch, steps)
    compiled_ms = statistics.median(compiled.ms_per_step)
    out.update(steps_per_rep=steps, reps=reps, eager_ms=statistics.median(eager.ms_per_step),
               compiled_ms=compiled_ms, eager_ms_reps=eager.ms_per_step, compiled_ms_reps=compiled.ms_per_step,
               compile_seconds=max(0.0, first_compiled - compiled_ms / 1e3))
    out.update(graph_report())
    return out


def loss_curve(spec, steps):
    """The loss of each of `steps` eager training steps on one batch (--loss-steps)."""
    eager = Variant(spec, False)
    torch.manual_seed(1)
    batch = spec.make_batch()
    return {"description": spec.DESCRIPTION, "losses": [eager.step(batch) for _ in range(steps)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rep-seconds", type=float, default=0.5)
    parser.add_argument("--json")
    parser.add_argument("--loss-steps", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.import_module(args.model)
    with open("/proc/loadavg") as f:
        load_start = " ".join(f.read().split()[:3])
    entry = loss_curve(spec, args.loss_steps) if args.loss_steps > 0 else measure(spec, args.reps, args.rep_seconds)
    report = {"models": {args.model: entry}}
    with open("/proc/loadavg") as f:
        load_end = " ".join(f.read().split()[:3])
    report["context"] = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                         "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "(default)"),
                         "load_average_start": load_start, "load_average_end": load_end,
                         "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    text = json.dumps(report, indent=2) + "\n"
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
