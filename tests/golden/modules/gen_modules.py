#!/usr/bin/python3
"""Writes the PyTorch reference values that tests/frontend/golden_modules_test.cpp
compares against (and the state_dict key lists hard-coded in modules_test.cpp).

Run with Debian's interpreter, the one python3-torch imports under:

    /usr/bin/python3 tests/golden/modules/gen_modules.py

It writes modules.json next to this script (format: tests/golden/golden.py).
Each case builds one torch.nn module, exports its state_dict as inputs named
"state.<key>" together with the forward inputs, runs forward (in train or eval
mode), backpropagates fixed random weights "grad_output" and records:
    outputs "out0", "grad_output", and for modules with buffers in train mode
        "state_after.<key>" (running statistics after the forward);
    grads   "<input name>" for float inputs and "param.<name>" per parameter;
    attrs   "module" plus the constructor arguments, "train", "state_keys"
        (state_dict order) and, for attention, "is_causal".
Affine/normalisation weights and running statistics are randomised before
export so their gradients and updates are not trivial.
"""
import math
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from golden import GoldenFile  # noqa: E402

torch.manual_seed(0)
gf = GoldenFile("tests/golden/modules/gen_modules.py")


def randomize_affine(m):
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("weight") and isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
                p.copy_(torch.randn_like(p) * 0.5 + 1.0)
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
                p.copy_(torch.randn_like(p) * 0.5)


def randomize_running(m, batches=3):
    with torch.no_grad():
        m.running_mean.copy_(torch.randn_like(m.running_mean) * 0.3)
        m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)
        m.num_batches_tracked.fill_(batches)


def add_case(name, module, inputs, attrs, call=None, train=True, record_buffers=False):
    module.train(train)
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    leaves = {}
    for k, v in inputs.items():
        v = v.detach().clone()
        if v.is_floating_point():
            v.requires_grad_(True)
        leaves[k] = v
    out = call(module, **leaves) if call else module(leaves["x"])
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
    out.backward(w)
    outputs = {"out0": out, "grad_output": w}
    if record_buffers:
        for k, v in module.named_buffers():
            outputs["state_after." + k] = v
    grads = {k: v.grad for k, v in leaves.items() if v.is_floating_point()}
    for k, p in module.named_parameters():
        if p.grad is not None:  # unused parameters (holder_keys) get none
            grads["param." + k] = p.grad
    all_inputs = dict(inputs)
    all_inputs.update({"state." + k: v for k, v in state.items()})
    attrs = dict(attrs, train=train, state_keys=list(state.keys()))
    gf.add(name, all_inputs, outputs, grads, attrs)
    print(f"{name}: {list(state.keys())}")


# ---- Conv2d ----------------------------------------------------------------------------
def conv(name, cin, cout, k, stride=1, padding=0, dilation=1, groups=1, bias=True, shape=None):
    m = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
    pair = lambda v: list(v) if isinstance(v, tuple) else [v, v]
    attrs = {"module": "Conv2d", "in": cin, "out": cout, "kernel": pair(k), "stride": pair(stride),
             "padding": pair(padding), "dilation": pair(dilation), "groups": groups, "bias": bias}
    add_case(name, m, {"x": torch.randn(*shape)}, attrs)


conv("conv2d_basic", 3, 4, 3, shape=(2, 3, 6, 6))
conv("conv2d_stride_pad_dilation", 4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(2, 1), shape=(2, 4, 7, 8))
conv("conv2d_groups_nobias", 4, 6, 3, padding=1, groups=2, bias=False, shape=(2, 4, 5, 5))
conv("conv2d_unbatched", 2, 3, 2, stride=2, shape=(2, 5, 4))


# ---- BatchNorm -------------------------------------------------------------------------
def bn(name, cls, c, shape, train=True, momentum=0.1, affine=True, track=True, eps=1e-5):
    m = cls(c, eps=eps, momentum=momentum, affine=affine, track_running_stats=track)
    randomize_affine(m)
    if track:
        randomize_running(m)
    attrs = {"module": cls.__name__, "num_features": c, "eps": eps, "momentum": momentum, "affine": affine,
             "track_running_stats": track}
    add_case(name, m, {"x": torch.randn(*shape) * 2 + 0.5}, attrs, train=train, record_buffers=track)


bn("batchnorm1d_train_2d", nn.BatchNorm1d, 5, (8, 5))
bn("batchnorm1d_train_3d", nn.BatchNorm1d, 3, (4, 3, 6), momentum=0.3)
bn("batchnorm1d_eval", nn.BatchNorm1d, 3, (4, 3, 6), train=False)
bn("batchnorm2d_train", nn.BatchNorm2d, 3, (4, 3, 5, 5), eps=1e-3)
bn("batchnorm2d_eval", nn.BatchNorm2d, 3, (2, 3, 4, 4), train=False)
bn("batchnorm2d_train_cumulative", nn.BatchNorm2d, 2, (3, 2, 3, 3), momentum=None)
bn("batchnorm2d_no_affine_no_stats_train", nn.BatchNorm2d, 3, (2, 3, 4, 4), affine=False, track=False)
bn("batchnorm2d_no_stats_eval", nn.BatchNorm2d, 3, (2, 3, 4, 4), track=False, train=False)


# ---- LayerNorm -------------------------------------------------------------------------
def ln(name, normalized_shape, shape, eps=1e-5, affine=True):
    m = nn.LayerNorm(normalized_shape, eps=eps, elementwise_affine=affine)
    randomize_affine(m)
    attrs = {"module": "LayerNorm", "normalized_shape": list(normalized_shape), "eps": eps, "affine": affine}
    add_case(name, m, {"x": torch.randn(*shape) * 3 - 1}, attrs)


ln("layernorm_last_dim", [8], (3, 4, 8))
ln("layernorm_two_dims", [4, 8], (2, 4, 8), eps=1e-3)
ln("layernorm_no_affine", [6], (5, 6), affine=False)


# ---- Embedding -------------------------------------------------------------------------
def emb(name, n, d, idx, padding_idx=None):
    m = nn.Embedding(n, d, padding_idx=padding_idx)
    attrs = {"module": "Embedding", "num_embeddings": n, "embedding_dim": d, "padding_idx": padding_idx}
    add_case(name, m, {"x": torch.tensor(idx, dtype=torch.int64)}, attrs)


emb("embedding_basic", 10, 4, [[1, 2, 4, 5, 4], [4, 3, 2, 9, 0]])
emb("embedding_padding_idx", 6, 3, [[0, 2, 0], [5, 2, 1]], padding_idx=2)


# ---- activations -----------------------------------------------------------------------
for name, m, attrs in [("gelu_none", nn.GELU(), {"module": "GELU", "approximate": "none"}),
                       ("gelu_tanh", nn.GELU(approximate="tanh"), {"module": "GELU", "approximate": "tanh"}),
                       ("silu", nn.SiLU(), {"module": "SiLU"}),
                       ("relu", nn.ReLU(), {"module": "ReLU"})]:
    add_case(name, m, {"x": torch.randn(3, 7) * 3}, attrs)


# ---- MultiheadAttention ------------------------------------------------------------------
def mha(name, e, h, L, S, N=2, bias=True, mask=None, kpm=None, causal=False, self_attn=False):
    m = nn.MultiheadAttention(e, h, bias=bias, batch_first=True)
    if bias:  # PyTorch zero-initialises the biases; make them count
        with torch.no_grad():
            m.in_proj_bias.copy_(torch.randn_like(m.in_proj_bias) * 0.1)
            m.out_proj.bias.copy_(torch.randn_like(m.out_proj.bias) * 0.1)
    attrs = {"module": "MultiheadAttention", "embed_dim": e, "num_heads": h, "bias": bias, "is_causal": causal,
             "self_attention": self_attn}
    if self_attn:
        inputs = {"x": torch.randn(N, L, e)}
    else:
        inputs = {"q": torch.randn(N, L, e), "k": torch.randn(N, S, e), "v": torch.randn(N, S, e)}
    if mask is not None:
        inputs["attn_mask"] = mask
    if kpm is not None:
        inputs["key_padding_mask"] = kpm

    def call(mod, x=None, q=None, k=None, v=None, attn_mask=None, key_padding_mask=None):
        if x is not None:
            q = k = v = x
        if causal:
            attn_mask = torch.triu(torch.ones(L, S, dtype=torch.bool), 1)
        return mod(q, k, v, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False)[0]

    add_case(name, m, inputs, attrs, call=call)


bool_mask = torch.tensor([[False, True, False, False, True, False],
                          [False, False, False, True, False, False],
                          [True, False, False, False, False, True],
                          [False, False, True, False, False, False]])
mha("mha_self", 8, 2, 5, 5, self_attn=True)
mha("mha_cross_no_mask", 8, 4, 4, 6)
mha("mha_cross_bool_mask", 8, 2, 4, 6, mask=bool_mask)
mha("mha_cross_float_mask", 8, 2, 4, 6, mask=torch.randn(4, 6))
mha("mha_3d_float_mask", 6, 3, 3, 5, mask=torch.randn(2 * 3, 3, 5))
mha("mha_key_padding_mask", 8, 2, 4, 6, kpm=torch.tensor([[False] * 5 + [True], [False, True] + [False] * 4]))
mha("mha_causal_self", 8, 2, 5, 5, causal=True, self_attn=True)
mha("mha_no_bias", 8, 2, 4, 4, bias=False)


# ---- containers ------------------------------------------------------------------------
seq = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.GELU(), nn.Conv2d(4, 3, 1))
randomize_affine(seq[1])
randomize_running(seq[1], batches=0)
add_case("sequential_conv_bn_gelu", seq, {"x": torch.randn(2, 2, 5, 5)}, {"module": "SequentialConvBnGelu"},
         record_buffers=True)


class Holder(nn.Module):
    """Key layout of the containers (no forward values are compared)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.LayerNorm(2)])
        self.heads = nn.ModuleDict({"cls": nn.Linear(2, 3), "norm": nn.BatchNorm1d(3)})
        self.extra = nn.ParameterList([nn.Parameter(torch.zeros(2)), nn.Parameter(torch.ones(1, 2))])
        self.attn = nn.MultiheadAttention(4, 2)
        self.emb = nn.Embedding(3, 2)

    def forward(self, x):
        return self.blocks[0](x)


add_case("holder_keys", Holder(), {"x": torch.randn(1, 2)}, {"module": "Holder"})

gf.write(os.path.join(HERE, "modules.json"))
