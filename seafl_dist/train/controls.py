"""SCAFFOLD's corrected local step (``algorithm.name: scaffold``, Karimireddy et al. 2020, Algorithm 1 line 10):

    y ← y − η_l (g(y) − c_i + c)

    step = ControlStep(c - c_i, layout)   # flat over the model's entries (0 outside the trainable parameters)
    ...loss.backward()...; prox.add()     # (train/proximal.py, if any)
    step.add()                            # grad += (c − c_i) where a grad exists; step.steps += 1 if one did
    ...clip, optimizer.step()...

The correction is added after the backward pass (and FedProx's term) and before gradient clipping, on the plain loop
(train/loop.py) and on a lightning.Trainer (train/lightning_loop.py: the job's callback, ``on_before_optimizer_step``);
a scaffold job always trains in its own loop (runtime/executor.py ``loop_blocker``), never fused or captured.
``steps`` counts the optimiser steps it was added to: K of option II's c_i⁺ = c_i − c + (x − y)/(K·η_l)
(runtime/controls.py computes it), the steps actually trained (a step whose ``training_step`` returned None leaves
every gradient None, moves nothing and is not counted).

Option II assumes plain SGD at a constant η_l: :func:`check_plain_sgd` refuses, in one line, the optimiser of a
module that configures its own (momentum, weight decay, another class, another lr, a scheduler) before any step.
"""
from __future__ import annotations

import torch

from seafl_dist.train.optim_config import ModuleContractError


class ControlStep:
    """The correction c − c_i of one job on a module's trainable parameters, and the steps it was added to."""

    def __init__(self, correction: torch.Tensor, layout, lr: float):
        self.correction, self.layout, self.lr = correction, layout, float(lr)
        self.steps, self.pairs = 0, []

    def bind(self, module) -> "ControlStep":
        """Split the flat correction onto ``module``'s trainable parameters (by name, in the layout's order)."""
        pieces = self.layout.split(self.correction)
        params = dict(module.named_parameters())
        device = next(iter(params.values())).device if params else "cpu"
        self.pairs = [(params[n], pieces[n].to(device)) for n, kind in zip(self.layout.names, self.layout.kinds)
                      if kind == "param"]
        return self

    @torch.no_grad()
    def add(self) -> None:
        """g += c − c_i on every trainable parameter that has a gradient; one more step counted if any has one (a
        step whose ``training_step`` returned None has none: the optimiser does not move y, so it is no step of K)."""
        grads = [(p.grad, c) for p, c in self.pairs if p.grad is not None]
        if grads:
            torch._foreach_add_([g for g, _ in grads], [c for _, c in grads])
            self.steps += 1


def check_plain_sgd(optimizer, schedulers, lr: float) -> None:
    """Refuse (one line) an optimiser option II's c_i⁺ does not hold for: anything but torch.optim.SGD at ``lr``
    (``train.lr``), without momentum, weight decay, Nesterov, and without a scheduler."""
    why = None
    if type(optimizer) is not torch.optim.SGD:
        why = f"the module's configure_optimizers returns {type(optimizer).__name__}, not torch.optim.SGD"
    elif schedulers:
        why = "the module's configure_optimizers returns a learning-rate scheduler"
    else:
        for g in optimizer.param_groups:
            if g.get("momentum", 0) or g.get("weight_decay", 0) or g.get("nesterov", False) or g["lr"] != lr:
                why = (f"its SGD has lr={g['lr']:g}, momentum={g.get('momentum', 0):g}, weight_decay="
                       f"{g.get('weight_decay', 0):g} (scaffold needs lr=train.lr={lr:g}, momentum 0, weight decay 0)")
                break
    if why is not None:
        raise ModuleContractError(f"algorithm.name=scaffold trains with plain SGD at a constant train.lr (option II's "
                                  f"(x − y)/(K·η_l)), but {why}; use a module whose optimiser is that, or another "
                                  f"algorithm.name")
