#!/usr/bin/env python3
"""The cases of kiln-bench-cuda-eager (bench_cuda_eager.cpp) through PyTorch
eager on the same GPU, timed the same way (median of synchronized calls after
3 warm-ups), as JSON. Used by bench/gpu/run_checks.sh for the ratios.

    python3 bench/gpu/torch_peer.py [--small] [--out torch.json]

--gpt: instead, the GPT training step of kiln-bench-gpt-cuda
(bench_gpt_cuda.cpp, examples/models/gpt.h) in PyTorch: the same model
(pre-LN, separate q/k/v, causal SDPA, GELU tanh, untied lm_head, nanoGPT
init), cross-entropy, backward, AdamW (lr 3e-4, weight decay 0.1), bf16
autocast (torch.autocast("cuda")), eager and torch.compile, the same sizes
flags and the same JSON fields (ms_per_step median of synchronized steps,
tokens_per_s, TFLOPs, mfu against 990 TFLOP/s, peak_memory_bytes,
first_step_s; for torch.compile, cold_compile_s = the first step's time
minus a steady step's).

    python3 bench/gpu/torch_peer.py --gpt [--tiny] [--modes eager,compile] [--out torch_gpt.json]
"""
import argparse
import json
import os
import statistics
import sys
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


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import gpt as peer_gpt  # noqa: E402  (bench/peers/gpt.py: the one PyTorch GPT of the benchmarks)


class GPT(peer_gpt.GPT):
    """bench/peers/gpt.py's GPT with the next-token loss (f32 cross-entropy) as its output."""

    def __init__(self, vocab, context, layers, d, h):
        super().__init__(vocab, context, layers, d, h)

    def forward(self, idx, targets):
        logits = super().forward(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets)


def gpt_main(args):
    import datetime
    import time as _time
    c = dict(layers=12, d_model=768, heads=12, context=1024, batch=16, vocab=50304, steps=20, warmup=3)
    if args.tiny:
        c.update(layers=1, d_model=32, heads=2, context=8, batch=1, vocab=16, steps=1, warmup=1)
    for k in c:
        v = getattr(args, k)
        if v is not None:
            c[k] = v
    dev = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    L, D, T, B, V = c["layers"], c["d_model"], c["context"], c["batch"], c["vocab"]
    N = 12 * L * D * D + 13 * L * D + 2 * D + V * D
    flops = (6 * N + 12 * L * D * T) * B * T
    out = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": torch.cuda.get_device_name(0), "library": f"torch {torch.__version__}",
           "config": dict(c, autocast=args.autocast, optimizer="AdamW"),
           "params_non_embedding": N, "flops_per_step": flops, "peak_flops": 990e12, "modes": {}}
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (B, T), generator=g).to(dev)
    y = torch.randint(0, V, (B * T,), generator=g).to(dev)
    for mode in args.modes.split(","):
        print(f"== {mode}", flush=True)
        r = {"mode": mode, "dtype": "bf16 autocast" if args.autocast == "bf16" else "float32"}
        try:
            torch.manual_seed(0)
            model = GPT(V, T, L, D, c["heads"]).to(dev)
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
            fwd = torch.compile(model) if mode == "compile" else model

            def step():
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
                    loss = fwd(x, y)
                loss.backward()
                opt.step()
                return loss

            t0 = _time.perf_counter()
            r["loss_first"] = step().item()
            torch.cuda.synchronize()
            r["first_step_s"] = _time.perf_counter() - t0
            for _ in range(c["warmup"] - 1):
                step()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(0)
            times = []
            for _ in range(c["steps"]):
                t = _time.perf_counter()
                loss = step()
                torch.cuda.synchronize()
                times.append(_time.perf_counter() - t)
            s = statistics.median(times)
            r.update(ms_per_step=s * 1e3, ms_min=min(times) * 1e3, ms_max=max(times) * 1e3,
                     tokens_per_s=B * T / s, TFLOPs=flops / s / 1e12, mfu=flops / s / 990e12,
                     peak_memory_bytes=torch.cuda.max_memory_allocated(0), loss_last=loss.item(),
                     memory_budget=1.0)
            if mode == "compile":
                r["cold_compile_s"] = r["first_step_s"] - s
            print(f"  {s * 1e3:.3f} ms/step, {B * T / s:.0f} tokens/s, MFU {r['mfu']:.3f}", flush=True)
            del model, opt, fwd
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - record and go on
            r["error"] = f"{type(e).__name__}: {e}"
            print(f"  error: {r['error']}", flush=True)
        out["modes"][mode] = r
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--gpt", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--autocast", default="bf16", choices=["bf16", "off"])
    for k in ("layers", "d-model", "heads", "context", "batch", "vocab", "steps", "warmup"):
        ap.add_argument(f"--{k}", type=int)
    args = ap.parse_args()
    if args.gpt:
        text = json.dumps(gpt_main(args), indent=2)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
        return
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
