#!/usr/bin/python3
"""Golden values for Kiln's extra pointwise math, reductions and bmm
(frontend/src/ops/pointwise.cpp, reduce_more.cpp, bmm.cpp), read by
tests/frontend/golden_math_test.cpp.

Run with Debian's interpreter, the one python3-torch imports under:

    /usr/bin/python3 tests/golden/math/gen_math.py

It writes math.json next to this script (committed; CI needs no torch).
Case names are <op>[_<variant>]_<dtype tag>; attrs hold the op's arguments.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from golden import GoldenFile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)
g = GoldenFile("tests/golden/math/gen_math.py")

TAGS = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}


def r(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


def pos(*shape, dtype=torch.float32):
    return (torch.rand(*shape, dtype=torch.float64) + 0.5).to(dtype)


# ---- pointwise -------------------------------------------------------------
UNARY = {
    "abs": torch.abs,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "sin": torch.sin,
    "cos": torch.cos,
}
for dt in (torch.float32, torch.float64):
    for name, fn in UNARY.items():
        g.add_op(f"{name}_{TAGS[dt]}", lambda x, fn=fn: fn(x), {"x": r(2, 3, dtype=dt, scale=2.0)})
    g.add_op(f"rsqrt_{TAGS[dt]}", lambda x: torch.rsqrt(x), {"x": pos(2, 3, dtype=dt)})
    g.add_op(f"clamp_{TAGS[dt]}", lambda x: torch.clamp(x, -0.5, 0.5), {"x": r(2, 3, dtype=dt)},
             {"min": -0.5, "max": 0.5})
    g.add_op(f"masked_fill_{TAGS[dt]}", lambda x, mask: x.masked_fill(mask, 2.5),
             {"x": r(2, 3, dtype=dt), "mask": torch.tensor([True, False, True])}, {"value": 2.5})

# Large magnitudes: the saturated tails of sigmoid/tanh/gelu and their gradients.
wide = torch.tensor([[-100.0, -20.0, -3.0], [0.0, 5.0, 100.0]])
for name in ("sigmoid", "tanh", "silu", "gelu", "gelu_tanh"):
    g.add_op(f"{name}_wide_f32", lambda x, fn=UNARY[name]: fn(x), {"x": wide.clone()})
g.add_op("clamp_min_only_f32", lambda x: torch.clamp(x, min=0.0), {"x": r(2, 3)}, {"min": 0.0})

# 16-bit floats: torch 1.13 has no CPU float16 kernels for most of these, so
# the reference is what Kiln (and PyTorch 2.x's CPU "opmath") does: compute in
# float32 and round the result once; gradients flow back through the casts.
def in_float32(fn):
    return lambda x: fn(x.float()).to(x.dtype)


for dt in (torch.float16, torch.bfloat16):
    for name in ("tanh", "sigmoid", "gelu", "silu"):
        g.add_op(f"{name}_{TAGS[dt]}", in_float32(UNARY[name]), {"x": r(2, 3, dtype=dt)})

# ---- reductions --------------------------------------------------------------
for dt in (torch.float32, torch.float64):
    t = TAGS[dt]
    g.add_op(f"var_dim1_{t}", lambda x: torch.var(x, dim=1), {"x": r(3, 4, dtype=dt)}, {"dims": [1], "correction": 1})
    g.add_op(f"var_all_pop_keepdim_{t}", lambda x: torch.var(x, dim=(0, 1), unbiased=False, keepdim=True),
             {"x": r(3, 4, dtype=dt)}, {"dims": [], "correction": 0, "keepdim": True})
    g.add_op(f"std_dim0_{t}", lambda x: torch.std(x, dim=0), {"x": r(3, 4, dtype=dt)}, {"dims": [0], "correction": 1})
    g.add_op(f"max_dim1_{t}", lambda x: torch.max(x, dim=1), {"x": r(3, 4, dtype=dt)}, {"dim": 1})
    g.add_op(f"min_dim0_keepdim_{t}", lambda x: torch.min(x, dim=0, keepdim=True), {"x": r(3, 4, dtype=dt)},
             {"dim": 0, "keepdim": True})
    g.add_op(f"logsumexp_dim1_{t}", lambda x: torch.logsumexp(x, dim=1), {"x": r(3, 4, dtype=dt)}, {"dims": [1]})
    g.add_op(f"logsumexp_01_keepdim_{t}", lambda x: torch.logsumexp(x, dim=(0, 1), keepdim=True),
             {"x": r(2, 3, dtype=dt)}, {"dims": [0, 1], "keepdim": True})
    g.add_op(f"cumsum_dim1_{t}", lambda x: torch.cumsum(x, dim=1), {"x": r(3, 4, dtype=dt)}, {"dim": 1})
    g.add_op(f"cumsum_dim0_{t}", lambda x: torch.cumsum(x, dim=0), {"x": r(3, 4, dtype=dt)}, {"dim": 0})
g.add_op("max_3d_dim2_f32", lambda x: torch.max(x, dim=-1), {"x": r(2, 3, 4)}, {"dim": -1})
g.add_op("logsumexp_large_f32", lambda x: torch.logsumexp(x, dim=1),
         {"x": torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]])}, {"dims": [1]})
g.add_op("var_dim1_bf16", in_float32(lambda x: torch.var(x, dim=1)), {"x": r(2, 4, dtype=torch.bfloat16)}, {"dims": [1]})
g.add_op("cumsum_int64", lambda x: torch.cumsum(x, dim=0), {"x": torch.tensor([3, -1, 4, 1, -5])}, {"dim": 0})

# ---- bmm ------------------------------------------------------------------------
for dt in (torch.float32, torch.float64):
    g.add_op(f"bmm_{TAGS[dt]}", torch.bmm, {"input": r(2, 3, 4, dtype=dt), "mat2": r(2, 4, 5, dtype=dt)})

g.write(os.path.join(HERE, "math.json"))
