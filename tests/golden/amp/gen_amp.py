#!/usr/bin/python3
"""Golden values for Kiln's mixed precision (frontend/include/kiln/amp.h),
read by tests/frontend/golden_amp_test.cpp.

Run with Debian's interpreter, the one python3-torch imports under:

    /usr/bin/python3 tests/golden/amp/gen_amp.py

It writes amp.json next to this script (committed; CI needs no torch).

Case "autocast_model": a Linear -> layer_norm -> Linear -> softmax model with
cross_entropy + 0.5 * mse_loss(softmax, one_hot), forward under
torch.autocast("cpu", dtype=torch.bfloat16), backward outside it. PyTorch
1.13's CPU autocast lists differ from Kiln's table (ir/AutocastPolicy.h,
CUDA-like): CPU keeps layer_norm and softmax in bfloat16 (only the losses
are in its fp32 list), Kiln runs them in float32. The reference therefore
follows Kiln's table: it adds the float32 casts itself (`.float()`) in
front of layer_norm and softmax, inside the same autocast region, so linear
(bfloat16) and cross_entropy/mse_loss (float32) are still cast by torch's
autocast. attrs.torch_cpu_dtypes records what plain torch CPU autocast gives
for each intermediate (no added casts) and attrs.kiln_dtypes what Kiln's
table gives; the C++ test checks Kiln's dtypes against the ones where both
agree (h, logits: bfloat16; loss: float32) and all values and parameter
gradients against the reference.

Cases "scaler_*": torch.cuda.amp.GradScaler needs CUDA in PyTorch 1.13 (it
disables itself without it, and _amp_update_scale_ /
_amp_foreach_non_finite_check_and_unscale_ have no CPU kernels), so
`RefGradScaler` below transcribes its Python state machine
(torch/cuda/amp/grad_scaler.py: scale, unscale_, step, update) and the two
CUDA kernels (aten/src/ATen/native/cuda/AmpKernels.cu) onto CPU tensors. A
float32 model (torch.optim.SGD with momentum) is trained with gradients set
to inf/NaN at scripted steps; per step the case records the scale after
update(), the growth tracker, whether optimizer.step() ran, and the
parameters.
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
g = GoldenFile("tests/golden/amp/gen_amp.py")


def r(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).float()


# ---- autocast_model ------------------------------------------------------------
N, D_IN, H, C = 8, 16, 32, 10
params = {
    "w1": r(H, D_IN, scale=0.25), "b1": r(H, scale=0.1),
    "ln_w": 1.0 + r(H, scale=0.1), "ln_b": r(H, scale=0.1),
    "w2": r(C, H, scale=0.2), "b2": r(C, scale=0.1),
}
x = r(N, D_IN)
target = torch.randint(0, C, (N,))
one_hot = F.one_hot(target, C).float()


def model(p, kiln_table):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = F.linear(x, p["w1"], p["b1"])
        if kiln_table:
            a = F.layer_norm(h.float(), (H,), p["ln_w"], p["ln_b"])
        else:  # torch 1.13 CPU refuses bfloat16 input with float32 weights here
            a = F.layer_norm(h, (H,), p["ln_w"].to(h.dtype), p["ln_b"].to(h.dtype))
        logits = F.linear(a, p["w2"], p["b2"])
        prob = F.softmax(logits.float() if kiln_table else logits, 1)
        loss = F.cross_entropy(logits, target) + 0.5 * F.mse_loss(prob, one_hot)
    return {"h": h, "a": a, "logits": logits, "prob": prob, "loss": loss}


leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
outs = model(leaves, kiln_table=True)
outs["loss"].backward()
grads = {k: v.grad for k, v in leaves.items()}
with torch.no_grad():
    plain = model(params, kiln_table=False)
name = lambda t: str(t.dtype).replace("torch.", "")  # noqa: E731
g.add("autocast_model", dict(params, x=x, target=target, one_hot=one_hot), outs, grads,
      attrs={"torch_cpu_dtypes": {k: name(v) for k, v in plain.items()},
             "kiln_dtypes": {k: name(v) for k, v in outs.items()}})


# ---- GradScaler ---------------------------------------------------------------------
class RefGradScaler:
    """torch.cuda.amp.GradScaler (1.13) for one optimizer on CPU tensors."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale_ = torch.full((1,), init_scale, dtype=torch.float32)
        self.growth_tracker = 0
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.stage, self.found_inf = "READY", None

    def scale(self, outputs):
        return outputs * self.scale_

    def unscale_(self, opt):
        assert self.stage == "READY"
        inv_scale = self.scale_.double().reciprocal().float()
        found = 0.0
        with torch.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    # _amp_foreach_non_finite_check_and_unscale_: flag, then
                    # multiply every element (in float) by inv_scale.
                    if not torch.isfinite(p.grad).all():
                        found = 1.0
                    p.grad.mul_(inv_scale)
        self.found_inf, self.stage = found, "UNSCALED"

    def step(self, opt):
        if self.stage == "READY":
            self.unscale_(opt)
        ran = self.found_inf == 0.0
        if ran:
            opt.step()
        self.stage = "STEPPED"
        return ran

    def update(self):
        # _amp_update_scale_ (AmpKernels.cu): double products stored in float.
        s = float(self.scale_.item())
        if self.found_inf:
            self.scale_.fill_(s * self.backoff_factor)
            self.growth_tracker = 0
        else:
            successful = self.growth_tracker + 1
            if successful == self.growth_interval:
                new_scale = torch.tensor(s * self.growth_factor, dtype=torch.float32)
                if torch.isfinite(new_scale):
                    self.scale_.fill_(new_scale.item())
                self.growth_tracker = 0
            else:
                self.growth_tracker = successful
        self.stage, self.found_inf = "READY", None


def scaler_case(case, init_scale, growth_interval, bad_steps, n_steps, loss_factor=1.0):
    """bad_steps: step -> (parameter, flat index, value) written into a
    gradient after backward (inf or nan). loss_factor multiplies the loss
    (keeps scaled gradients finite for huge scales)."""
    w = r(4, 3, scale=0.5).requires_grad_(True)
    b = r(3, scale=0.1).requires_grad_(True)
    xs = r(n_steps, 5, 4)
    ys = r(n_steps, 5, 3)
    opt = torch.optim.SGD([w, b], lr=0.05, momentum=0.9)
    scaler = RefGradScaler(init_scale=init_scale, growth_interval=growth_interval)
    inputs = {"w": w.detach().clone(), "b": b.detach().clone(), "xs": xs, "ys": ys}
    outputs = {}
    scales, trackers, ran = [], [], []
    for step in range(n_steps):
        opt.zero_grad()
        loss = ((xs[step] @ w + b - ys[step]) ** 2).mean() * loss_factor
        scaler.scale(loss).backward()
        if step in bad_steps:
            which, index, value = bad_steps[step]
            with torch.no_grad():
                (w if which == "w" else b).grad.view(-1)[index] = value
        ran.append(scaler.step(opt))
        scaler.update()
        scales.append(float(scaler.scale_.item()))
        trackers.append(scaler.growth_tracker)
        outputs[f"w_{step}"] = w.detach().clone()
        outputs[f"b_{step}"] = b.detach().clone()
    g.add(case, inputs, outputs, attrs={
        "init_scale": init_scale, "growth_interval": growth_interval, "n_steps": n_steps, "loss_factor": loss_factor,
        "bad_steps": {str(k): [v[0], v[1], str(v[2])] for k, v in bad_steps.items()},
        "scales": scales, "growth_trackers": trackers, "stepped": ran})


# Overflows at steps 2, 3 (twice in a row: 65536 -> 32768 -> 16384), a NaN at
# step 9; growth_interval 3 so the scale also doubles in between.
scaler_case("scaler_overflow_pattern", 2.0**16, 3,
            {2: ("w", 5, math.inf), 3: ("b", 0, -math.inf), 9: ("w", 0, math.nan)}, 14)
# Growth that would overflow float32 is refused: 2^126 grows to 2^127 after
# one clean step, then 2^127 * 2 = inf is not taken.
scaler_case("scaler_growth_capped", 2.0**126, 1, {}, 3, loss_factor=1e-3)

g.write(os.path.join(HERE, "amp.json"))
