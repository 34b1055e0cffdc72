"""The records the aggregation rules exchange with the server loop."""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Optional

import torch


@dataclass(frozen=True, eq=False)
class FlatParts:
    """Which entries of a flat model vector are what, from the model's layout (``train.flat``).

    Three disjoint boolean masks over the vector: ``params`` (trainable parameters), ``stats``
    (floating-point buffers such as batch norm's running mean and variance) and ``counters``
    (integer buffers such as ``num_batches_tracked``, carried as float32). The rules average
    params and stats; counters are never averaged as floats and never enter a cosine: the
    new global model's counters are the largest among w_t's and the accepted local models'
    (each local counter is the base model's plus the steps it trained).
    """

    params: torch.Tensor
    stats: torch.Tensor
    counters: torch.Tensor

    @classmethod
    def all_params(cls, numel: int) -> "FlatParts":
        """Every entry a trainable parameter (e.g. LeNet-5, which has no buffers)."""
        no = torch.zeros(numel, dtype=torch.bool)
        return cls(torch.ones(numel, dtype=torch.bool), no, no.clone())

    @property
    def numel(self) -> int:
        return self.params.numel()

    def similarity_mask(self, over: str) -> Optional[torch.Tensor]:
        """Entries Eq. 5's cosine runs over (``parameters`` or ``parameters_and_stats``); None = all."""
        if over == "parameters":
            mask = self.params
        elif over == "parameters_and_stats":
            mask = self.params | self.stats
        else:
            raise ValueError(f"unknown similarity_over {over!r}; allowed: parameters, parameters_and_stats")
        return None if bool(mask.all()) else mask


@dataclass(frozen=True, eq=False)
class BufferedUpdate:
    """One finished job waiting in the server's buffer.

    ``eq=False``: comparing two updates field by field would compare tensors, which has
    no single truth value; updates compare (and hash) by identity instead.
    """

    device: int
    job: int
    flat: torch.Tensor  # the trained local model w_k, flat (params + buffers), float32
    n_samples: int  # n_k = |D_k|
    base_version: int  # t_k, the global version the job started from
    epochs: int  # epochs actually trained (fewer than E under SEAFL² partial training)
    control: Optional[torch.Tensor] = None  # SCAFFOLD: the job's Δc_i over the trainable parameters (algo/scaffold.py)


@dataclass
class AggregationResult:
    """What one aggregation produced.

    ``new_global`` is w_{t+1}, always a fresh tensor (inputs are never mutated).
    ``info`` holds one dict per input update, in input order, with at least
    ``weight`` (the final normalised weight the rule gave the update; 0.0 if rejected),
    ``rejected`` (bool), ``reason`` (None, or why it was rejected) and ``staleness``
    (S_k = t − t_k). SEAFL adds ``gamma``, ``s`` and ``cos`` (None when rejected);
    FedAsync adds ``a`` (its mixing coefficient α_mix · f(S_k)). A stateful rule (algo/memory.py) returns its
    new ``state``.
    """

    new_global: torch.Tensor
    info: list[dict] = field(default_factory=list)
    norms: Optional[list] = None  # each update's ‖w_k − w_{t_k}‖ when measured (algo/guard.py); None: not
    state: Optional[Mapping] = None  # a stateful rule's new state (algo/memory.py); None for a rule without one
