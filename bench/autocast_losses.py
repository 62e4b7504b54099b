#!/usr/bin/env python3
"""Trains kiln-train-gpt with and without autocast and records the losses.

usage: python3 bench/autocast_losses.py BUILD_DIR OUT.json [--steps N] [--autocast bf16|f16]
Runs `kiln-train-gpt --steps N --log-every 50` compiled in f32 and with
`--autocast <dtype>` (same seed, data and initial weights), parses the
progress lines and the final losses, and writes them as JSON with the
relative differences (autocast / f32 - 1). Default: 200 steps, bf16.
"""
import json
import re
import subprocess
import sys
import time

STEP = re.compile(r"step\s+(\d+) \| train loss ([\d.]+) \| val loss\s+([\d.]+|-)\s*\|.*\| ([\d.]+) tokens/s")
FINAL = re.compile(r"final: train loss ([\d.]+) \| val loss ([\d.]+)")


def run(build, steps, autocast):
    cmd = [f"{build}/examples/kiln-train-gpt", "--steps", str(steps), "--log-every", "50", "--autocast", autocast]
    start = time.time()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    steps_seen = []
    for m in STEP.finditer(out):
        steps_seen.append({"step": int(m.group(1)), "train_loss": float(m.group(2)),
                           "val_loss": None if m.group(3) == "-" else float(m.group(3)),
                           "tokens_per_second": float(m.group(4))})
    final = FINAL.search(out)
    return {"command": " ".join(cmd), "wall_seconds": round(time.time() - start, 1), "log": steps_seen,
            "final_train_loss": float(final.group(1)), "final_val_loss": float(final.group(2))}


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    build, out = argv[1], argv[2]
    steps, dtype = 200, "bf16"
    rest = argv[3:]
    while rest:
        if rest[0] == "--steps" and len(rest) > 1:
            steps = int(rest[1])
        elif rest[0] == "--autocast" and len(rest) > 1:
            dtype = rest[1]
        else:
            sys.exit(__doc__)
        rest = rest[2:]
    f32 = run(build, steps, "off")
    low = run(build, steps, dtype)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "steps": steps, "f32": f32, dtype: low,
        "relative_difference": {
            "final_train_loss": round(low["final_train_loss"] / f32["final_train_loss"] - 1, 5),
            "final_val_loss": round(low["final_val_loss"] / f32["final_val_loss"] - 1, 5),
        },
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"f32:  train {f32['final_train_loss']:.4f} val {f32['final_val_loss']:.4f}")
    print(f"{dtype}: train {low['final_train_loss']:.4f} val {low['final_val_loss']:.4f}")
    print(f"relative: {result['relative_difference']}")


if __name__ == "__main__":
    main(sys.argv)
