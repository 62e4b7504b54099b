#!/usr/bin/python3
"""Writes the PyTorch reference values for tests/frontend/golden_conv_test.cpp:
conv2d (stride/padding/dilation/groups), max_pool2d, avg_pool2d, layer_norm,
batch_norm (train: output and updated running stats; eval) and
scaled_dot_product_attention (bool/float mask, causal).

Run with Debian's interpreter, the one python3-torch imports under:

    /usr/bin/python3 tests/golden/conv/gen_conv.py

It writes conv.json next to this script (committed; CI needs no torch).

Torch 1.13 has no public F.scaled_dot_product_attention, so attention is the
PyTorch 2.x "math" reference written out below (softmax(q k^T / sqrt(E) +
mask) v; bool mask true = attend; is_causal keeps j <= i); it is checked
against 1.13's private F._scaled_dot_product_attention where that applies.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from golden import GoldenFile, tensor_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def add_conv(gf, name, x_shape, w_shape, bias=True, dtype=torch.float32, **kw):
    attrs = {"stride": list(kw.get("stride", (1, 1))), "padding": list(kw.get("padding", (0, 0))),
             "dilation": list(kw.get("dilation", (1, 1))), "groups": kw.get("groups", 1)}
    inputs = {"x": randn(*x_shape, dtype=dtype), "weight": randn(*w_shape, dtype=dtype)}
    if bias:
        inputs["bias"] = randn(w_shape[0], dtype=dtype)
    gf.add_op(name, lambda x, weight, bias=None: F.conv2d(x, weight, bias, **attrs), inputs, attrs)


def add_pool(gf, name, fn, x_shape, kernel, stride=None, padding=(0, 0), dtype=torch.float32):
    attrs = {"kernel_size": list(kernel), "stride": list(stride or (0, 0)), "padding": list(padding)}
    gf.add_op(name, lambda x: fn(x, kernel, stride or kernel, padding), {"x": randn(*x_shape, dtype=dtype)}, attrs)


def add_layer_norm(gf, name, x_shape, normalized, affine=True, eps=1e-5, dtype=torch.float32):
    inputs = {"x": randn(*x_shape, dtype=dtype)}
    if affine:
        inputs["weight"] = randn(*normalized, dtype=dtype)
        inputs["bias"] = randn(*normalized, dtype=dtype)
    gf.add_op(name, lambda x, weight=None, bias=None: F.layer_norm(x, normalized, weight, bias, eps), inputs,
              {"normalized_shape": list(normalized), "eps": eps})


def add_batch_norm(gf, name, x_shape, training, momentum=0.1, eps=1e-5, dtype=torch.float32):
    c = x_shape[1]
    rm, rv = randn(c, dtype=dtype) * 0.5, torch.rand(c, dtype=torch.float64).to(dtype) + 0.5
    inputs = {"x": randn(*x_shape, dtype=dtype) * 2 + 1, "weight": randn(c, dtype=dtype), "bias": randn(c, dtype=dtype)}

    def fn(x, weight, bias):
        m, v = rm.clone(), rv.clone()
        y = F.batch_norm(x, m, v, weight, bias, training, momentum, eps)
        return y, m, v

    gf.add_op(name, fn, inputs, {"training": training, "momentum": momentum, "eps": eps})
    # Running statistics are inputs without gradients (added after add_op so
    # that it does not mark them requires_grad).
    gf.cases[name]["inputs"]["running_mean"] = tensor_json(rm)
    gf.cases[name]["inputs"]["running_var"] = tensor_json(rv)


def sdpa_reference(q, k, v, mask=None, is_causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, -1) @ v


def check_against_private_sdpa(q, k, v, mask, is_causal):
    ours = sdpa_reference(q, k, v, mask, is_causal)
    theirs, _ = F._scaled_dot_product_attention(q, k, v, mask, 0.0, False, is_causal)
    assert torch.allclose(ours, theirs, atol=1e-6), "reference disagrees with torch's private sdpa"


def add_sdpa(gf, name, q_shape, kv_len, ev, mask=None, is_causal=False, dtype=torch.float32):
    kv_shape = list(q_shape[:-2]) + [kv_len]
    inputs = {"q": randn(*q_shape, dtype=dtype), "k": randn(*kv_shape, q_shape[-1], dtype=dtype),
              "v": randn(*kv_shape, ev, dtype=dtype)}
    if mask is not None:
        inputs["mask"] = mask.to(dtype) if mask.is_floating_point() else mask
    if mask is None or mask.dtype == torch.bool:
        check_against_private_sdpa(inputs["q"], inputs["k"], inputs["v"], inputs.get("mask"), is_causal)
    gf.add_op(name, lambda q, k, v, mask=None: sdpa_reference(q, k, v, mask, is_causal), inputs,
              {"is_causal": is_causal})


def shorten_float32(gf):
    """Writes float32 values with 9 significant digits (exact round trip)."""
    for case in gf.cases.values():
        for group in ("inputs", "outputs", "grads"):
            for t in case[group].values():
                if t["dtype"] == "float32":
                    t["data"] = [float("%.9g" % v) for v in t["data"]]


def main():
    gf = GoldenFile("tests/golden/conv/gen_conv.py")
    f64 = torch.float64
    add_conv(gf, "conv2d_basic", (2, 2, 4, 4), (3, 2, 3, 3))
    add_conv(gf, "conv2d_stride_padding", (1, 2, 6, 5), (3, 2, 3, 2), stride=(2, 1), padding=(1, 2))
    add_conv(gf, "conv2d_dilation_nobias", (1, 2, 7, 7), (2, 2, 3, 3), bias=False, dilation=(2, 3), padding=(1, 0))
    add_conv(gf, "conv2d_groups", (2, 4, 4, 4), (4, 2, 3, 3), groups=2, stride=(2, 2), padding=(1, 1))
    add_conv(gf, "conv2d_depthwise", (1, 3, 4, 4), (3, 1, 2, 2), groups=3)
    add_conv(gf, "conv2d_unbatched", (2, 4, 4), (3, 2, 2, 2))
    add_conv(gf, "conv2d_all_f64", (2, 4, 5, 4), (4, 2, 3, 2), dtype=f64, groups=2, stride=(2, 1), padding=(1, 1),
             dilation=(1, 2))
    add_pool(gf, "max_pool2d_basic", F.max_pool2d, (2, 2, 4, 4), (2, 2))
    add_pool(gf, "max_pool2d_stride_padding", F.max_pool2d, (1, 2, 7, 6), (3, 2), (2, 1), (1, 1))
    add_pool(gf, "max_pool2d_overlap_f64", F.max_pool2d, (2, 2, 5, 5), (3, 3), (1, 1), (1, 0), dtype=f64)
    add_pool(gf, "avg_pool2d_basic", F.avg_pool2d, (2, 2, 4, 4), (2, 2))
    add_pool(gf, "avg_pool2d_stride_padding", F.avg_pool2d, (1, 2, 7, 6), (3, 3), (2, 2), (1, 1))
    add_pool(gf, "avg_pool2d_f64", F.avg_pool2d, (1, 2, 5, 4), (2, 3), (1, 1), (1, 1), dtype=f64)
    add_layer_norm(gf, "layer_norm_last", (3, 4, 5), (5,))
    add_layer_norm(gf, "layer_norm_two_dims", (2, 3, 4), (3, 4), eps=1e-3)
    add_layer_norm(gf, "layer_norm_no_affine", (4, 6), (6,), affine=False)
    add_layer_norm(gf, "layer_norm_f64", (3, 5), (5,), dtype=f64)
    add_batch_norm(gf, "batch_norm_train_4d", (4, 3, 2, 2), True, momentum=0.2)
    add_batch_norm(gf, "batch_norm_train_2d", (5, 3), True)
    add_batch_norm(gf, "batch_norm_eval_4d", (4, 3, 2, 2), False)
    add_batch_norm(gf, "batch_norm_train_f64", (3, 2, 4), True, momentum=0.3, dtype=f64)
    add_sdpa(gf, "sdpa_plain", (2, 3, 4), 5, 3)
    bool_mask = torch.rand(3, 5) > 0.4
    bool_mask[:, 0] = True  # every query attends somewhere
    add_sdpa(gf, "sdpa_bool_mask", (2, 2, 3, 3), 5, 2, mask=bool_mask)
    add_sdpa(gf, "sdpa_float_mask", (2, 2, 3, 3), 5, 2, mask=torch.randn(2, 1, 3, 5))
    add_sdpa(gf, "sdpa_causal", (1, 2, 4, 4), 4, 3, is_causal=True)
    add_sdpa(gf, "sdpa_causal_rect", (2, 3, 4), 5, 2, is_causal=True)
    add_sdpa(gf, "sdpa_mask_f64", (2, 3, 4), 5, 3, mask=bool_mask, dtype=f64)
    shorten_float32(gf)
    gf.write(os.path.join(HERE, "conv.json"))


if __name__ == "__main__":
    main()
