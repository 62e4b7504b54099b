"""Golden values for Kiln's core ops (elementwise, reductions, matmul, views,
softmax) from PyTorch. Run: /usr/bin/python3 tests/golden/core/gen_core.py"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from golden import GoldenFile  # noqa: E402

torch.manual_seed(0)
g = GoldenFile("tests/golden/core/gen_core.py")


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def pos(*shape, dtype=torch.float32):
    return (torch.rand(*shape, dtype=torch.float64) + 0.5).to(dtype)


for dt, tag in [(torch.float32, "f32"), (torch.float64, "f64")]:
    g.add_op(f"add_broadcast_{tag}", lambda a, b: a + b, {"a": r(3, 1, dtype=dt), "b": r(4, dtype=dt)})
    g.add_op(f"sub_broadcast_{tag}", lambda a, b: a - b, {"a": r(2, 3, dtype=dt), "b": r(1, 3, dtype=dt)})
    g.add_op(f"mul_{tag}", lambda a, b: a * b, {"a": r(2, 3, dtype=dt), "b": r(2, 3, dtype=dt)})
    g.add_op(f"div_{tag}", lambda a, b: a / b, {"a": r(2, 3, dtype=dt), "b": pos(3, dtype=dt)})
    g.add_op(f"exp_{tag}", lambda a: torch.exp(a), {"a": r(5, dtype=dt)})
    g.add_op(f"log_{tag}", lambda a: torch.log(a), {"a": pos(5, dtype=dt)})
    g.add_op(f"sqrt_{tag}", lambda a: torch.sqrt(a), {"a": pos(5, dtype=dt)})
    g.add_op(f"pow_{tag}", lambda a: torch.pow(a, 2.5), {"a": pos(5, dtype=dt)})
    g.add_op(f"neg_{tag}", lambda a: -a, {"a": r(5, dtype=dt)})
    g.add_op(f"relu_{tag}", lambda a: torch.relu(a), {"a": r(7, dtype=dt)})
    g.add_op(f"maximum_{tag}", lambda a, b: torch.maximum(a, b), {"a": r(6, dtype=dt), "b": r(6, dtype=dt)})
    g.add_op(f"matmul_{tag}", lambda a, b: a @ b, {"a": r(3, 4, dtype=dt), "b": r(4, 5, dtype=dt)})
    g.add_op(f"sum_dims_{tag}", lambda a: a.sum(dim=(0, 2)), {"a": r(2, 3, 4, dtype=dt)})
    g.add_op(f"mean_keepdim_{tag}", lambda a: a.mean(dim=1, keepdim=True), {"a": r(2, 3, 4, dtype=dt)})
    g.add_op(f"amax_{tag}", lambda a: torch.amax(a, dim=1), {"a": r(3, 5, dtype=dt)})
    g.add_op(f"softmax_{tag}", lambda a: F.softmax(a, dim=1), {"a": r(3, 5, dtype=dt)})
    g.add_op(f"log_softmax_{tag}", lambda a: F.log_softmax(a, dim=-1), {"a": r(2, 3, 4, dtype=dt)})
    g.add_op(f"linear_3d_{tag}", lambda x, w, b: F.linear(x, w, b),
             {"x": r(2, 3, 4, dtype=dt), "w": r(5, 4, dtype=dt), "b": r(5, dtype=dt)})

g.add_op("matmul_vector", lambda a, b: a @ b, {"a": r(3, 4), "b": r(4)})
g.add_op("matmul_batched_broadcast", lambda a, b: a @ b, {"a": r(2, 1, 3, 4), "b": r(5, 4, 2)})
g.add_op("sum_all", lambda a: a.sum(), {"a": r(3, 4)})
g.add_op("where", lambda c, a, b: torch.where(c, a, b), {"c": r(2, 3) > 0, "a": r(2, 3), "b": r(3)})
g.add_op("view_permute_expand", lambda a: a.view(2, 6).permute(1, 0).reshape(3, 4).unsqueeze(0).expand(2, 3, 4) * 1.0,
         {"a": r(3, 4)})
g.add_op("narrow_transpose", lambda a: a.narrow(1, 1, 2).t().contiguous(), {"a": r(3, 4)})
g.add_op("to_float16", lambda a: a.to(torch.float16).to(torch.float32), {"a": r(6)})
g.add_op("to_bfloat16", lambda a: a.to(torch.bfloat16).to(torch.float32), {"a": r(6)})
g.add_op("add_float16", lambda a, b: a + b, {"a": r(4, dtype=torch.float16), "b": r(4, dtype=torch.float16)})
g.add_op("mul_bfloat16", lambda a, b: a * b, {"a": r(4, dtype=torch.bfloat16), "b": r(4, dtype=torch.bfloat16)})

# Forward-only: comparisons and argmax (no gradients).
a, b = r(2, 3), r(3)
for name, fn in [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt),
                 ("ge", torch.ge)]:
    g.add(f"cmp_{name}", {"a": a, "b": b}, {"out0": fn(a, b)})
x = r(3, 5)
g.add("argmax_dim1", {"a": x}, {"out0": torch.argmax(x, dim=1)})
g.add("promote_int32_int64", {"a": torch.tensor([1, 2], dtype=torch.int32), "b": torch.tensor([3, 4])},
      {"out0": torch.tensor([1, 2], dtype=torch.int32) + torch.tensor([3, 4])})
g.add("promote_f16_bf16", {"a": r(3, dtype=torch.float16), "b": r(3, dtype=torch.bfloat16)}, {})
c = g.cases["promote_f16_bf16"]
fa = torch.tensor(c["inputs"]["a"]["data"], dtype=torch.float16)
fb = torch.tensor(c["inputs"]["b"]["data"], dtype=torch.bfloat16)
from golden import tensor_json  # noqa: E402
c["outputs"]["out0"] = tensor_json(fa + fb)

g.write(os.path.join(os.path.dirname(__file__), "core.json"))
