"""Prints the PyTorch values that tests/frontend/numerics_test.cpp holds as
literals (NaN, signed zeros, subnormals, gradients at singular points).

Run with any torch (the literals came from torch 2.15, CPU):
    python3 tests/golden/numerics/gen_numerics.py
Not a build dependency: the test keeps the numbers, this script says where
they came from. Tensors are small, so torch takes its scalar CPU paths.
"""
import math

import torch

nan = float("nan")


def show(name, value):
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    print(f"{name}: {value}")


def grad_of(fn, values, **kw):
    x = torch.tensor(values, requires_grad=True)
    y = fn(x, **kw)
    y.sum().backward()
    return y.detach(), x.grad


def main():
    print("torch", torch.__version__)
    show("relu, grad", grad_of(torch.relu, [nan, -0.0, 0.0, 1.0, -1.0]))
    show("relu(log(x)), grad", grad_of(lambda x: torch.relu(torch.log(x)), [-1.0, 1.0]))
    b = torch.tensor([0.0, nan, 0.0, -0.0, 2.0])
    show("maximum(x, b), grad", grad_of(lambda x: torch.maximum(x, b), [nan, 0.0, -0.0, 0.0, 1.0]))
    x = torch.tensor([nan, -1.0, 0.0, 0.5], requires_grad=True)
    y = torch.zeros(4, requires_grad=True)
    torch.maximum(x, y).sum().backward()
    show("maximum grads (dx, dy)", (x.grad.tolist(), y.grad.tolist()))
    show("argmax", torch.argmax(torch.tensor([[1.0, nan, 3.0, nan], [1.0, 2.0, 3.0, 3.0]]), 1))
    show("max(x, 1), grad", grad_of(lambda x: torch.max(x, 1).values, [[1.0, nan, 3.0]]))
    show("clamp(-1, 1), grad", grad_of(lambda x: torch.clamp(x, -1.0, 1.0), [nan, -2.0, -0.5, 0.5, 2.0, -0.0]))
    show("clamp(min=0), grad", grad_of(lambda x: torch.clamp(x, min=0.0), [nan, -1.0, 0.5]))
    show("clamp(-0., 0, 1) signbit", torch.signbit(torch.clamp(torch.tensor([-0.0]), 0.0, 1.0)))
    show("amax, grad", grad_of(lambda x: torch.amax(x, 0, True), [1.0, nan, 3.0]))
    for z in ([-0.0, -0.0], [-0.0, 0.0], [0.0, -0.0]):
        show(f"amax({z}) signbit", torch.signbit(torch.amax(torch.tensor(z))))
    t = torch.tensor([1.0, nan])
    show("sum, mean, logsumexp of [1, nan]", [torch.sum(t), torch.mean(t), torch.logsumexp(t, 0)])
    show("logsumexp [1, inf]", torch.logsumexp(torch.tensor([1.0, math.inf]), 0))
    show("logsumexp [-inf, -inf]", torch.logsumexp(torch.tensor([-math.inf, -math.inf]), 0))
    c = torch.tensor([True, False])
    show("where, grad", grad_of(lambda x: torch.where(c, x, torch.tensor([-0.0, -0.0])), [nan, nan]))
    show("exp(-88), exp(-100)", torch.exp(torch.tensor([-88.0, -100.0])))
    show("log(1e-40)", torch.log(torch.tensor([1e-40])))
    show("bfloat16(1e-40)", torch.tensor([1e-40, -1e-40]).to(torch.bfloat16).float())
    for e in (0.0, 1.0, 2.0):
        values = [0.0, 2.0, -1.0, nan] if e == 0.0 else [0.0, 2.0]
        show(f"pow(x, {e}), grad", grad_of(lambda x: torch.pow(x, e), values))
    logits = torch.tensor([[0.5, -1.0, 2.0], [0.1, 0.3, -0.2]])
    ignored = torch.tensor([-100, -100])
    for smoothing in (0.0, 0.1):
        for reduction in ("mean", "sum"):
            f = lambda x: torch.nn.functional.cross_entropy(
                x, ignored, reduction=reduction, label_smoothing=smoothing)
            show(f"cross_entropy all ignored ({reduction}, {smoothing}), grad", grad_of(f, logits.tolist()))


if __name__ == "__main__":
    main()
