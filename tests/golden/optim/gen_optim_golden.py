#!/usr/bin/python3
"""Writes the PyTorch reference values that tests/frontend/optim_test.cpp and
lr_scheduler_test.cpp compare against.

Run with Debian's interpreter, the one python3-torch imports under:

    /usr/bin/python3 tests/golden/optim/gen_optim_golden.py

It writes optimizers.json and schedulers.json next to this script. CI has no
torch: the JSON is committed and only developers rerun this script (after
changing a configuration here). Everything is hand-specified and
deterministic; no random numbers are drawn.

Optimizers: two parameters w [2, 3] and b [3] minimise
    loss = sum(c_w * w^2) + sum(d_w * w) + sum(c_b * b^2) + sum(d_b * b)
so grad = 2 c p + d, which the C++ test rebuilds with Kiln's autograd. The
parameters after every step are recorded.

Schedulers: an SGD optimizer (momentum 0.9) with two parameter groups
(lr 0.1 and 0.05); get_last_lr() after construction and after every step is
recorded (and the group momentum for OneCycleLR).
"""
import json
import os
import warnings

import torch

warnings.filterwarnings("ignore")  # "lr_scheduler.step() before optimizer.step()"
torch.set_default_dtype(torch.float32)

HERE = os.path.dirname(os.path.abspath(__file__))

INIT = {
    "w": [[0.5, -1.25, 2.0], [-0.75, 1.5, 0.25]],
    "b": [0.3, -0.6, 1.1],
}
COEF = {
    "w": {"c": [[1.0, 0.5, 2.0], [0.25, 1.5, 0.75]], "d": [[0.1, -0.2, 0.3], [-0.4, 0.05, 0.2]]},
    "b": {"c": [0.8, 1.2, 0.4], "d": [-0.3, 0.1, 0.25]},
}
STEPS = 6

# name -> (optimizer class name, list of (param names, group hyperparameters)).
# Hyperparameters use the C++ option names; betas are beta1/beta2.
OPTIMIZERS = {
    "sgd_plain": ("SGD", [(["w", "b"], {"lr": 0.1})]),
    "sgd_momentum_nesterov_wd": ("SGD", [(["w", "b"], {"lr": 0.05, "momentum": 0.9, "nesterov": True,
                                                         "weight_decay": 0.1})]),
    "sgd_momentum_dampening": ("SGD", [(["w", "b"], {"lr": 0.05, "momentum": 0.8, "dampening": 0.3})]),
    "adam": ("Adam", [(["w", "b"], {"lr": 0.1})]),
    "adam_amsgrad_wd": ("Adam", [(["w", "b"], {"lr": 0.2, "beta1": 0.8, "beta2": 0.5, "amsgrad": True,
                                                "weight_decay": 0.05, "eps": 1e-6})]),
    "adamw": ("AdamW", [(["w", "b"], {"lr": 0.1, "weight_decay": 0.1})]),
    "adamw_amsgrad": ("AdamW", [(["w", "b"], {"lr": 0.2, "beta1": 0.7, "beta2": 0.5, "amsgrad": True})]),
    "rmsprop": ("RMSprop", [(["w", "b"], {"lr": 0.01})]),
    "rmsprop_centered_momentum_wd": ("RMSprop", [(["w", "b"], {"lr": 0.02, "alpha": 0.9, "eps": 1e-6,
                                                                "weight_decay": 0.1, "momentum": 0.5,
                                                                "centered": True})]),
    "adamw_two_groups": ("AdamW", [(["w"], {"lr": 0.1, "weight_decay": 0.2}),
                                   (["b"], {"lr": 0.01, "weight_decay": 0.0})]),
    "sgd_two_groups": ("SGD", [(["w"], {"lr": 0.1, "momentum": 0.9}),
                               (["b"], {"lr": 0.02, "weight_decay": 0.5})]),
}


def torch_group(names, params, hp):
    """C++ option names -> torch keyword arguments for one group."""
    group = {"params": [params[n] for n in names]}
    for key, value in hp.items():
        if key in ("beta1", "beta2"):
            continue
        group[key] = value
    if "beta1" in hp or "beta2" in hp:
        group["betas"] = (hp.get("beta1", 0.9), hp.get("beta2", 0.999))
    return group


def run_optimizer(kind, groups):
    params = {n: torch.tensor(v, requires_grad=True) for n, v in INIT.items()}
    coef = {n: {k: torch.tensor(v) for k, v in cd.items()} for n, cd in COEF.items()}
    torch_groups = [torch_group(names, params, hp) for names, hp in groups]
    extra = {} if kind == "SGD" else {"foreach": False}
    opt = getattr(torch.optim, kind)(torch_groups, **extra)
    history = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = sum((coef[n]["c"] * p * p).sum() + (coef[n]["d"] * p).sum() for n, p in params.items())
        loss.backward()
        opt.step()
        history.append({n: p.detach().tolist() for n, p in params.items()})
    return history


def optimizers_golden():
    cases = {}
    for name, (kind, groups) in OPTIMIZERS.items():
        cases[name] = {
            "optimizer": kind,
            "groups": [{"params": names, "options": hp} for names, hp in groups],
            "steps": run_optimizer(kind, groups),
        }
    return {"init": INIT, "coef": COEF, "cases": cases}


SCHED_STEPS = 30
LRS = [0.1, 0.05]
PLATEAU_METRICS = [1.0, 0.9, 0.95, 0.92, 0.91, 0.9, 0.89, 0.899, 0.8, 0.85, 0.86, 0.87, 0.88, 0.7, 0.7,
                   0.7, 0.7, 0.7, 0.7, 0.69995, 0.6, 0.61, 0.62, 0.63, 0.64, 0.65, 0.66, 0.67, 0.68, 0.69]

lrs = torch.optim.lr_scheduler

# name -> (C++ arguments recorded for the test, factory(opt) -> scheduler).
SCHEDULERS = {
    "step_lr": ({"step_size": 7, "gamma": 0.5}, lambda o: lrs.StepLR(o, step_size=7, gamma=0.5)),
    "multi_step_lr": ({"milestones": [5, 12, 12, 20], "gamma": 0.3},
                      lambda o: lrs.MultiStepLR(o, milestones=[5, 12, 12, 20], gamma=0.3)),
    "cosine_annealing_lr": ({"T_max": 10, "eta_min": 0.001},
                            lambda o: lrs.CosineAnnealingLR(o, T_max=10, eta_min=0.001)),
    "linear_lr_warmup": ({"start_factor": 0.25, "end_factor": 1.0, "total_iters": 8},
                         lambda o: lrs.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=8)),
    "linear_lr_decay": ({"start_factor": 1.0, "end_factor": 0.1, "total_iters": 10},
                        lambda o: lrs.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=10)),
    "sequential_warmup_cosine": (
        {"milestones": [5]},
        lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5),
                                       lrs.CosineAnnealingLR(o, T_max=20, eta_min=1e-4)], milestones=[5])),
    "sequential_three": (
        {"milestones": [4, 12]},
        lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, start_factor=0.5, total_iters=4),
                                       lrs.StepLR(o, step_size=3, gamma=0.5),
                                       lrs.CosineAnnealingLR(o, T_max=18)], milestones=[4, 12])),
    "plateau_min_rel": (
        {"mode": "min", "factor": 0.5, "patience": 2, "threshold": 1e-2, "threshold_mode": "rel",
         "cooldown": 1, "min_lr": [0.01, 0.02]},
        lambda o: lrs.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=1e-2,
                                        threshold_mode="rel", cooldown=1, min_lr=[0.01, 0.02])),
    "plateau_max_abs": (
        {"mode": "max", "factor": 0.3, "patience": 1, "threshold": 0.05, "threshold_mode": "abs",
         "cooldown": 0, "min_lr": [0.0, 0.0]},
        lambda o: lrs.ReduceLROnPlateau(o, mode="max", factor=0.3, patience=1, threshold=0.05,
                                        threshold_mode="abs")),
    "one_cycle_cos": ({"max_lr": [1.0, 0.5], "total_steps": 30},
                      lambda o: lrs.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=30)),
    "one_cycle_linear_three_phase": (
        {"max_lr": [0.8, 0.8], "total_steps": 30, "pct_start": 0.25, "anneal_strategy": "linear",
         "div_factor": 10.0, "final_div_factor": 100.0, "three_phase": True, "base_momentum": 0.8,
         "max_momentum": 0.9},
        lambda o: lrs.OneCycleLR(o, max_lr=0.8, total_steps=30, pct_start=0.25, anneal_strategy="linear",
                                 div_factor=10.0, final_div_factor=100.0, three_phase=True,
                                 base_momentum=0.8, max_momentum=0.9)),
}


def run_scheduler(name, factory):
    w = torch.zeros(2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([{"params": [w], "lr": LRS[0]}, {"params": [b], "lr": LRS[1]}], momentum=0.9)
    sched = factory(opt)
    plateau = isinstance(sched, lrs.ReduceLROnPlateau)

    def current_lrs():
        return [g["lr"] for g in opt.param_groups]

    lr_history = [current_lrs()]
    momentum_history = [[g["momentum"] for g in opt.param_groups]]
    for i in range(SCHED_STEPS):
        opt.step()
        if plateau:
            sched.step(PLATEAU_METRICS[i])
        else:
            sched.step()
            assert sched.get_last_lr() == current_lrs()
        lr_history.append(current_lrs())
        momentum_history.append([g["momentum"] for g in opt.param_groups])
    out = {"lrs": lr_history}
    if name.startswith("one_cycle"):
        out["momentum"] = momentum_history
    return out


def schedulers_golden():
    cases = {}
    for name, (args, factory) in SCHEDULERS.items():
        cases[name] = {"args": args, **run_scheduler(name, factory)}
    return {"initial_lrs": LRS, "momentum": 0.9, "plateau_metrics": PLATEAU_METRICS, "cases": cases}


def write(name, data):
    path = os.path.join(HERE, name)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    print("torch", torch.__version__)
    write("optimizers.json", optimizers_golden())
    write("schedulers.json", schedulers_golden())
