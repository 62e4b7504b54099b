#!/usr/bin/env python3
"""The cases of kiln-bench-cuda-eager (bench_cuda_eager.cpp) through PyTorch
eager on the same GPU, timed the same way (median of synchronized calls after
3 warm-ups), as JSON. Used by bench/gpu/run_checks.sh for the ratios.

    python3 bench/gpu/torch_peer.py [--small] [--out torch.json]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def median_seconds(f, reps):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 "highest", as Kiln
    reps = 3 if args.small else 20
    n = 1 << 12 if args.small else 1 << 26
    rows, cols = (16, 256) if args.small else (8192, 4096)
    g32, g16 = (64, 64) if args.small else (4096, 8192)
    cases = []

    def add(name, nbytes, flops, f):
        s = median_seconds(f, reps)
        c = {"name": name, "ms": s * 1e3}
        if nbytes:
            c["GBps"], c["bytes"] = nbytes / s / 1e9, nbytes
        if flops:
            c["TFLOPs"] = flops / s / 1e12
        cases.append(c)
        print(f"{name:28s} {s * 1e3:10.4f} ms", flush=True)

    one = torch.ones(1, device=dev)
    add("latency_add_1", 0, 0, lambda: one + one)
    x, y = torch.rand(n, device=dev), torch.rand(n, device=dev)
    fb = n * 4
    add("copy_f32", 2 * fb, 0, lambda: x.clone())
    add("add_f32", 3 * fb, 0, lambda: x + y)
    add("mul_add_f32", 3 * fb, 0, lambda: x * y + 1.0)
    add("exp_f32", 2 * fb, 0, lambda: torch.exp(x))
    r = torch.randn(rows, cols, device=dev)
    w, b = torch.ones(cols, device=dev), torch.zeros(cols, device=dev)
    rb = rows * cols * 4
    add("softmax_f32", 2 * rb, 0, lambda: F.softmax(r, 1))
    add("layer_norm_f32", 2 * rb, 0, lambda: F.layer_norm(r, (cols,), w, b, 1e-5))
    a32, b32 = torch.randn(g32, g32, device=dev), torch.randn(g32, g32, device=dev)
    add(f"gemm_f32_{g32}", 0, 2.0 * g32**3, lambda: a32 @ b32)
    a16 = torch.randn(g16, g16, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(g16, g16, device=dev, dtype=torch.bfloat16)
    add(f"gemm_bf16_{g16}", 0, 2.0 * g16**3, lambda: a16 @ b16)
    out = {"device": torch.cuda.get_device_name(0), "library": f"torch {torch.__version__}", "small": args.small,
           "cases": cases}
    text = json.dumps(out, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
