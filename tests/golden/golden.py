"""Shared helpers for golden-value generators (PyTorch -> JSON for C++ tests).

Run generators with Debian's interpreter, which has python3-torch:
    /usr/bin/python3 tests/golden/<area>/gen_<area>.py
Each writes tests/golden/<area>/<name>.json, committed so CI needs no torch.

File format (read by tests/golden/golden.h):
    {"generator": "...", "torch_version": "...",
     "cases": {"<case>": {"inputs":  {"<name>": TENSOR, ...},
                          "outputs": {"<name>": TENSOR, ...},
                          "grads":   {"<input name>": TENSOR, ...},
                          "attrs":   {...any JSON...}}}}
    TENSOR = {"shape": [..], "dtype": "float32", "data": [row-major values]}
"""
import json
import os

import torch


def tensor_json(t):
    t = t.detach()
    data = t.double().flatten().tolist() if t.dtype != torch.bool else t.flatten().int().tolist()
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "data": data}


class GoldenFile:
    """Collects cases and writes one JSON file."""

    def __init__(self, generator):
        self.generator = generator
        self.cases = {}

    def add(self, name, inputs, outputs, grads=None, attrs=None):
        assert name not in self.cases, name
        self.cases[name] = {
            "inputs": {k: tensor_json(v) for k, v in inputs.items()},
            "outputs": {k: tensor_json(v) for k, v in outputs.items()},
            "grads": {k: tensor_json(v) for k, v in (grads or {}).items()},
            "attrs": attrs or {},
        }

    def add_op(self, name, fn, inputs, attrs=None, seed_grad=1234):
        """Runs fn(**inputs) -> tensor (or tuple: first is differentiated),
        backpropagates fixed random weights and records outputs and the
        gradients of every floating input. The weights are saved as the
        output "grad_output" so C++ can backpropagate the same ones."""
        leaves = {}
        for k, v in inputs.items():
            v = v.detach().clone()
            if v.is_floating_point():
                v.requires_grad_(True)
            leaves[k] = v
        out = fn(**leaves)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.Generator().manual_seed(seed_grad)
        w = torch.randn(outs[0].shape, generator=g, dtype=torch.float64).to(outs[0].dtype)
        grads = {}
        if outs[0].requires_grad:
            outs[0].backward(w)
            grads = {k: v.grad for k, v in leaves.items() if v.is_floating_point() and v.grad is not None}
        outputs = {f"out{i}": o for i, o in enumerate(outs)}
        outputs["grad_output"] = w
        self.add(name, inputs, outputs, grads, attrs)

    def write(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        doc = {"generator": self.generator, "torch_version": torch.__version__, "cases": self.cases}
        with open(path, "w") as f:
            json.dump(doc, f, indent=None, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {len(self.cases)} cases to {path}")
