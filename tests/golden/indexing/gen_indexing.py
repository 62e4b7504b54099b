"""Golden values for Kiln's indexing/joining ops (index_select, gather,
scatter_add, stepped slice, cat, stack, split, chunk), embedding and the
losses (mse_loss, binary_cross_entropy_with_logits, cross_entropy, nll_loss)
from PyTorch. Dropout is not comparable (different RNG) and is tested by its
properties in C++.

Run: /usr/bin/python3 tests/golden/indexing/gen_indexing.py
Writes tests/golden/indexing/indexing.json (tiny shapes, committed)."""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from golden import GoldenFile  # noqa: E402

torch.manual_seed(0)
g = GoldenFile("tests/golden/indexing/gen_indexing.py")

DTYPES = [(torch.float32, "f32"), (torch.float64, "f64"), (torch.float16, "f16"), (torch.bfloat16, "bf16")]


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def idx(values):
    return torch.tensor(values, dtype=torch.int64)


def add_indexing(dt, tag):
    """Every indexing op for one dtype (suffix `tag`)."""
    g.add_op(f"index_select_dim0_{tag}", lambda a, index: torch.index_select(a, 0, index),
             {"a": r(4, 3, dtype=dt), "index": idx([3, 0, 3, 1, 0])})
    g.add_op(f"index_select_dim1_{tag}", lambda a, index: torch.index_select(a, -2, index),
             {"a": r(2, 4, 3, dtype=dt), "index": idx([2, 2])})
    g.add_op(f"gather_dim1_{tag}", lambda a, index: torch.gather(a, 1, index),
             {"a": r(3, 4, dtype=dt), "index": idx([[0, 0], [3, 1], [2, 2]])})
    g.add_op(f"gather_dim0_smaller_{tag}", lambda a, index: torch.gather(a, 0, index),
             {"a": r(4, 3, dtype=dt), "index": idx([[3, 0], [1, 3]])})
    g.add_op(f"scatter_add_dim0_{tag}", lambda a, index, src: torch.scatter_add(a, 0, index, src),
             {"a": r(4, 3, dtype=dt), "index": idx([[0, 1, 3], [0, 2, 3]]), "src": r(2, 3, dtype=dt)})
    g.add_op(f"scatter_add_dim1_{tag}", lambda a, index, src: torch.scatter_add(a, 1, index, src),
             {"a": r(2, 5, dtype=dt), "index": idx([[4, 4, 0], [1, 2, 1]]), "src": r(2, 3, dtype=dt)})
    g.add_op(f"slice_step2_{tag}", lambda a: a[1:6:2] * 1, {"a": r(7, 3, dtype=dt)})
    g.add_op(f"slice_step3_neg_{tag}", lambda a: a[:, -5:100:3] * 1, {"a": r(2, 7, dtype=dt)})
    g.add_op(f"cat_dim0_{tag}", lambda a, b, c: torch.cat([a, b, c], 0),
             {"a": r(1, 3, dtype=dt), "b": r(2, 3, dtype=dt), "c": r(3, 3, dtype=dt)})
    g.add_op(f"cat_dim1_{tag}", lambda a, b: torch.cat([a, b], -1), {"a": r(2, 2, dtype=dt), "b": r(2, 3, dtype=dt)})
    g.add_op(f"stack_dim0_{tag}", lambda a, b, c: torch.stack([a, b, c], 0),
             {"a": r(2, 3, dtype=dt), "b": r(2, 3, dtype=dt), "c": r(2, 3, dtype=dt)})
    g.add_op(f"stack_last_{tag}", lambda a, b: torch.stack([a, b], -1), {"a": r(2, 3, dtype=dt), "b": r(2, 3, dtype=dt)})
    g.add_op(f"split_{tag}", lambda a: torch.split(a, 2, 1), {"a": r(2, 5, dtype=dt)})
    g.add_op(f"split_weighted_{tag}", lambda a: torch.cat([p * (i + 1) for i, p in enumerate(torch.split(a, 2, 1))], 1),
             {"a": r(2, 5, dtype=dt)})
    g.add_op(f"chunk_{tag}", lambda a: torch.chunk(a, 3, 0), {"a": r(7, 2, dtype=dt)})
    g.add_op(f"chunk_weighted_{tag}", lambda a: torch.cat([p * (i + 1) for i, p in enumerate(torch.chunk(a, 3, 0))], 0),
             {"a": r(7, 2, dtype=dt)})
    g.add_op(f"embedding_{tag}", lambda input, weight: F.embedding(input, weight),
             {"input": idx([[1, 4, 1], [0, 2, 4]]), "weight": r(5, 3, dtype=dt)})


def add_losses(dt, tag, reductions):
    """mse_loss, BCE with logits, cross_entropy and nll_loss for one dtype."""
    x, t = r(3, 4, dtype=dt), r(3, 4, dtype=dt)
    logits = (r(4, 3) * 10).to(dt)  # includes large |x| for the stable form
    probs = torch.rand(4, 3, dtype=torch.float64).to(dt)
    pw = (torch.rand(3, dtype=torch.float64) * 3).to(dt)
    for red in reductions:
        g.add_op(f"mse_loss_{red}_{tag}", lambda input, target: F.mse_loss(input, target, reduction=red),
                 {"input": x, "target": t}, attrs={"reduction": red})
        g.add_op(f"bce_logits_{red}_{tag}",
                 lambda input, target: F.binary_cross_entropy_with_logits(input, target, reduction=red),
                 {"input": logits, "target": probs}, attrs={"reduction": red})
        g.add_op(f"bce_logits_pos_weight_{red}_{tag}",
                 lambda input, target, pos_weight: F.binary_cross_entropy_with_logits(
                     input, target, reduction=red, pos_weight=pos_weight.detach()),
                 {"input": logits, "target": probs, "pos_weight": pw}, attrs={"reduction": red})  # torch: no pos_weight grad
    scores = r(5, 4, dtype=dt)
    # "ignore": the default ignore_index -100 appears in the target; "ignore_class":
    # ignore_index is a real class (2), as for a padding token.
    targets = {"plain": idx([1, 3, 2, 0, 2]), "ignore": idx([1, -100, 2, 0, -100]),
               "ignore_class": idx([1, 3, 2, 0, 2])}
    configs = [("plain", -100, 0.0), ("smooth", -100, 0.1), ("ignore", -100, 0.0), ("ignore_smooth", -100, 0.25),
               ("ignore_class", 2, 0.0), ("ignore_class_smooth", 2, 0.25)]
    for red in reductions:
        for name, ignore, eps in configs:
            target = targets[name.replace("_smooth", "")] if name != "smooth" else targets["plain"]
            g.add_op(f"cross_entropy_{name}_{red}_{tag}",
                     lambda logits, target: F.cross_entropy(logits, target, reduction=red, ignore_index=ignore,
                                                           label_smoothing=eps),
                     {"logits": scores, "target": target},
                     attrs={"reduction": red, "ignore_index": ignore, "label_smoothing": eps})
        for name, ignore in [("plain", -100), ("ignore", -100), ("ignore_class", 2)]:
            g.add_op(f"nll_loss_{name}_{red}_{tag}",
                     lambda log_probs, target: F.nll_loss(log_probs, target, reduction=red, ignore_index=ignore),
                     {"log_probs": F.log_softmax(scores.double(), 1).to(dt), "target": targets[name]},
                     attrs={"reduction": red, "ignore_index": ignore})

for dt, tag in DTYPES:
    add_indexing(dt, tag)
add_losses(torch.float32, "f32", ["none", "mean", "sum"])
add_losses(torch.float64, "f64", ["mean"])  # the float64 path; reductions are covered in float32
g.add_op("cat_mixed_dtypes", lambda a, b: torch.cat([a, b], 0), {"a": r(1, 2), "b": r(2, 2, dtype=torch.float64)})
g.add_op("cat_int64", lambda a, b: torch.cat([a, b], 1), {"a": idx([[1], [2]]), "b": idx([[3, 4], [5, 6]])})
g.add_op("gather_int64", lambda a, index: torch.gather(a, 0, index), {"a": idx([[1, 2], [3, 4]]), "index": idx([[1, 0]])})
g.add_op("scatter_add_int64", lambda a, index, src: torch.scatter_add(a, 0, index, src),
         {"a": idx([1, 2, 3]), "index": idx([2, 2, 0]), "src": idx([10, 20, 30])})

g.write(os.path.join(HERE, "indexing.json"))
