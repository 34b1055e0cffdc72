"""FedProx's proximal term (``train.prox_mu``, Li et al., MLSys 2020), one helper for every training path.

    prox = Proximal.of(module, mu)        # None at mu = 0: nothing is kept, no step does anything more
    ...loss.backward()...
    prox.add()                            # each trainable parameter's grad += mu * (w - w_base)
    ...clip, optimizer.step()...

``w_base`` is the model the job started from (the global model of its base version): a copy of the
trainable parameters (``requires_grad``) taken when the job's weights are loaded, before its first
step. The term is added after the backward pass and before gradient clipping and the optimiser step,
on the plain loop (train/loop.py), a Lightning Trainer (train/lightning_loop.py: a callback's
``on_before_optimizer_step``), the fused step (train/batched.py, on stacked rows) and a graph slot
(train/graphed.py, inside the captured step). The arithmetic is one formula everywhere,
:func:`add_proximal`: ``g + (w - w_base) * mu``, elementwise, so the paths agree to the bit where
their gradients do.
"""
from __future__ import annotations

import torch


@torch.no_grad()
def add_proximal(grads: list[torch.Tensor], params: list[torch.Tensor], bases: list[torch.Tensor],
                 mu: float) -> None:
    """``grads[i] += (params[i] - bases[i]) * mu`` in place (the gradient of mu/2 ||w - w_base||^2 added)."""
    if not grads:
        return
    diffs = torch._foreach_sub(params, bases)
    torch._foreach_mul_(diffs, mu)
    torch._foreach_add_(grads, diffs)


class Proximal:
    """The proximal term of one job on a module's trainable parameters (their values now are w_base)."""

    def __init__(self, params: list[torch.Tensor], mu: float):
        self.params, self.mu = params, mu
        self.bases = [p.detach().clone() for p in params]

    @classmethod
    def of(cls, module, mu: float) -> "Proximal | None":
        """The term for ``module`` starting now, or None at ``mu`` = 0 (then a step is today's step)."""
        if not mu:
            return None
        return cls([p for p in module.parameters() if p.requires_grad], float(mu))

    def rebase(self) -> None:
        """The parameters' values now are the new w_base (a graph slot's next job: copied in place)."""
        with torch.no_grad():
            torch._foreach_copy_(self.bases, [p.detach() for p in self.params])

    def add(self) -> None:
        """Add mu (w - w_base) to the gradient of every parameter that has one (a step whose
        ``training_step`` returned None has none, and the optimiser skips it)."""
        pairs = [(p.grad, p, b) for p, b in zip(self.params, self.bases) if p.grad is not None]
        if pairs:
            grads, params, bases = map(list, zip(*pairs))
            add_proximal(grads, params, bases, self.mu)
