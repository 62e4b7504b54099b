#!/usr/bin/python3
"""Golden values for the ops of issue 13 part C (erf, rounding, division
modes, remainders, binary and all-dims extremes, one-sided clamp,
argmax/argmin, cumsum), read by tests/frontend/golden_pointwise_test.cpp.

    python3 tests/golden/pointwise/gen_pointwise.py

It writes pointwise.json next to this script (committed; CI needs no torch).
Case names are <op>_<variant>_<dtype tag>; inputs are "x" (and "y");
attrs hold the op's arguments.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from golden import GoldenFile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)
g = GoldenFile("tests/golden/pointwise/gen_pointwise.py")
nan, inf = math.nan, math.inf

TAGS = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64"}


def r(*shape, dtype=torch.float32, scale=3.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


# Halves, negative zero, NaN, infinities: the cases rounding must get right.
SPECIAL = [2.5, -2.5, 0.5, -0.5, 1.5, -0.0, 0.0, nan, inf, -inf, 3.7, -3.7]

for dt in (torch.float32, torch.float64):
    t = TAGS[dt]
    special = torch.tensor(SPECIAL, dtype=dt).reshape(3, 4)
    g.add_op(f"erf_{t}", lambda x: torch.erf(x), {"x": r(3, 4, dtype=dt, scale=1.5)})
    for name, fn in (("floor", torch.floor), ("ceil", torch.ceil), ("round", torch.round), ("trunc", torch.trunc)):
        g.add_op(f"{name}_{t}", lambda x, fn=fn: fn(x), {"x": r(3, 4, dtype=dt)})
        g.add(f"{name}_special_{t}", {"x": special}, {"out0": fn(special)})
    # Division family: mixed signs, exact multiples, and a divisor of 0.
    a = torch.tensor([7.0, -7.0, 7.0, -7.0, 6.0, -6.0, 5.5, -0.0, 1.0, -1.0, 0.0, nan], dtype=dt).reshape(3, 4)
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -1.5, 2.0, 0.0, 0.0, 0.0, 1.0], dtype=dt).reshape(3, 4)
    g.add(f"floor_divide_special_{t}", {"x": a, "y": b}, {"out0": torch.div(a, b, rounding_mode="floor")})
    g.add(f"div_trunc_special_{t}", {"x": a, "y": b}, {"out0": torch.div(a, b, rounding_mode="trunc")})
    g.add(f"remainder_special_{t}", {"x": a, "y": b}, {"out0": torch.remainder(a, b)})
    g.add(f"fmod_special_{t}", {"x": a, "y": b}, {"out0": torch.fmod(a, b)})
    y = r(3, 4, dtype=dt)
    y = torch.where(y.abs() < 0.5, torch.full_like(y, 0.75), y)
    g.add_op(f"floor_divide_{t}", lambda x, y: torch.div(x, y, rounding_mode="floor"), {"x": r(3, 4, dtype=dt), "y": y})
    g.add_op(f"div_trunc_{t}", lambda x, y: torch.div(x, y, rounding_mode="trunc"), {"x": r(3, 4, dtype=dt), "y": y})
    g.add_op(f"remainder_{t}", lambda x, y: torch.remainder(x, y), {"x": r(3, 4, dtype=dt), "y": y})
    g.add_op(f"fmod_{t}", lambda x, y: torch.fmod(x, y), {"x": r(3, 4, dtype=dt), "y": y})
    # Extremes: broadcasting, NaN, ties (gradient split in half).
    p = torch.tensor([1.0, nan, 2.0, -0.0, 3.0, 3.0], dtype=dt).reshape(2, 3)
    q = torch.tensor([0.5, 1.0, nan, 0.0, 3.0, 4.0], dtype=dt).reshape(2, 3)
    g.add_op(f"maximum_special_{t}", lambda x, y: torch.maximum(x, y), {"x": p, "y": q})
    g.add_op(f"minimum_special_{t}", lambda x, y: torch.minimum(x, y), {"x": p, "y": q})
    g.add_op(f"maximum_bcast_{t}", lambda x, y: torch.maximum(x, y), {"x": r(3, 4, dtype=dt), "y": r(4, dtype=dt)})
    g.add_op(f"minimum_bcast_{t}", lambda x, y: torch.minimum(x, y), {"x": r(3, 4, dtype=dt), "y": r(3, 1, dtype=dt)})
    g.add_op(f"clamp_min_{t}", lambda x: torch.clamp_min(x, 0.25), {"x": r(3, 4, dtype=dt)}, {"min": 0.25})
    g.add_op(f"clamp_max_{t}", lambda x: torch.clamp_max(x, -0.25), {"x": r(3, 4, dtype=dt)}, {"max": -0.25})
    # All-dims max/min (ties split evenly), arg reductions, cumsum.
    tied = torch.tensor([[1.0, 4.0, 4.0], [-2.0, 4.0, 0.5]], dtype=dt)
    g.add_op(f"max_all_{t}", lambda x: torch.max(x), {"x": r(3, 4, dtype=dt)})
    g.add_op(f"min_all_{t}", lambda x: torch.min(x), {"x": r(3, 4, dtype=dt)})
    g.add_op(f"max_all_tied_{t}", lambda x: torch.max(x), {"x": tied})
    g.add_op(f"min_all_tied_{t}", lambda x: torch.min(x), {"x": -tied})
    withnan = torch.tensor([[1.0, nan, 5.0, nan], [2.0, 2.0, -1.0, -1.0], [-inf, -inf, -inf, -inf]], dtype=dt)
    for name, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        g.add(f"{name}_dim1_{t}", {"x": withnan}, {"out0": fn(withnan, dim=1)}, attrs={"dim": 1})
        x = r(3, 4, 2, dtype=dt)
        g.add(f"{name}_dim0_keepdim_{t}", {"x": x}, {"out0": fn(x, dim=0, keepdim=True)},
              attrs={"dim": 0, "keepdim": True})
        g.add(f"{name}_all_{t}", {"x": x}, {"out0": fn(x)}, attrs={"all": True})
        g.add(f"{name}_all_nan_{t}", {"x": withnan}, {"out0": fn(withnan)}, attrs={"all": True})
    g.add_op(f"cumsum_dim2_{t}", lambda x: torch.cumsum(x, dim=2), {"x": r(2, 3, 5, dtype=dt)}, {"dim": 2})
    g.add_op(f"cumsum_dim0_{t}", lambda x: torch.cumsum(x, dim=0), {"x": r(4, 3, dtype=dt)}, {"dim": 0})
    g.add_op(f"max_dim1_nan_{t}", lambda x: torch.max(x, dim=1), {"x": withnan[:2].clone()}, {"dim": 1})

# Integers: Python's floor and sign rules, identity rounding, extremes.
ai = torch.tensor([7, -7, 7, -7, 6, -6, 0, 1, -9, 9, 5, -5])
bi = torch.tensor([2, 2, -2, -2, 3, 3, 4, -4, 4, -4, 5, 5])
g.add("floor_divide_i64", {"x": ai, "y": bi}, {"out0": torch.div(ai, bi, rounding_mode="floor")})
g.add("div_trunc_i64", {"x": ai, "y": bi}, {"out0": torch.div(ai, bi, rounding_mode="trunc")})
g.add("remainder_i64", {"x": ai, "y": bi}, {"out0": torch.remainder(ai, bi)})
g.add("fmod_i64", {"x": ai, "y": bi}, {"out0": torch.fmod(ai, bi)})
g.add("maximum_i64", {"x": ai, "y": bi}, {"out0": torch.maximum(ai, bi)})
g.add("minimum_i64", {"x": ai, "y": bi}, {"out0": torch.minimum(ai, bi)})
for name, fn in (("floor", torch.floor), ("ceil", torch.ceil), ("round", torch.round), ("trunc", torch.trunc)):
    g.add(f"{name}_i64", {"x": ai}, {"out0": fn(ai)})
g.add("max_all_i64", {"x": ai}, {"out0": torch.max(ai)})
g.add("min_all_i64", {"x": ai}, {"out0": torch.min(ai)})
g.add("argmax_all_i64", {"x": ai}, {"out0": torch.argmax(ai)}, attrs={"all": True})
g.add("argmin_all_i64", {"x": ai}, {"out0": torch.argmin(ai)}, attrs={"all": True})
g.add("cumsum_dim0_i64", {"x": ai}, {"out0": torch.cumsum(ai, dim=0)}, attrs={"dim": 0})



def strings_for_non_finite(node):
    """JSON has no NaN/Infinity: such elements are written as "nan", "inf", "-inf" (golden.h reads them)."""
    if isinstance(node, dict):
        return {k: strings_for_non_finite(v) for k, v in node.items()}
    if isinstance(node, list):
        return [strings_for_non_finite(v) for v in node]
    if isinstance(node, float) and not math.isfinite(node):
        return "nan" if math.isnan(node) else ("inf" if node > 0 else "-inf")
    return node


g.cases = strings_for_non_finite(g.cases)
g.write(os.path.join(HERE, "pointwise.json"))
