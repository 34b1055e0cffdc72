"""A job's step plan (SPEC "Local training"): which samples each optimiser step trains on, in
which order, for how many epochs. Written once and used by every trainer -- one job at a time
(train/local.py), G jobs fused (train/batched.py) -- and by the worker placement's cost
(``runtime/distributed.py`` counts a job's steps with :func:`epoch_sizes`), so they cannot
disagree about a single batch.

    plan = StepPlan(shard_indices, epochs=5, batch_size=32, seed=job_seed, augment=True)
    for i, idx, draws in plan.batches(data.augment_draws):   # i: the batch's index in its epoch
        x, y = data.batch(idx, augment=True, draws=draws)

Order: the job's own generator (``seed``) draws a permutation of the shard at the start of every
epoch, then each batch's augmentation draws (if any), batch after batch, in that order.

A step-counted job (FedCompass's, ``max_steps`` Q): the plan stops after Q steps, so its last epoch is cut short
(it has ⌈Q / steps of an epoch⌉ epochs); each epoch still starts with its own permutation.

Poisson batches (``poisson=True``, ``train.dp_sgd``; train/dp_sgd.py): a step's batch holds each sample of the
shard independently with probability q = min(1, batch_size / n), one uniform draw per sample from the same
generator (no permutation), then that batch's augmentation draws; an epoch has as many steps as the plain plan's
(so the clock, the worker's cost and a step-counted job count the same steps), and a batch may be empty (a step of
noise only). Its size varies, so it is never fused or captured.

Trailing-batch rule: with batch_size > 1, a trailing mini-batch of a single sample is skipped when
the shard has more than one sample (batch norm cannot train on one sample). batch_size = 1 trains
sample by sample; the config refuses it for the batch-norm models (ResNet-18, VGG-16).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch


def epoch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` of every batch of one epoch over ``n`` shuffled samples (the trailing-batch rule applied)."""
    bounds = [(lo, min(lo + batch_size, n)) for lo in range(0, n, batch_size)]
    if bounds and bounds[-1][1] - bounds[-1][0] == 1 and n > 1 and batch_size > 1:
        bounds.pop()  # a last batch of one sample
    return bounds


def epoch_sizes(n: int, batch_size: int) -> list[int]:
    """The batch sizes of one epoch over ``n`` samples."""
    return [hi - lo for lo, hi in epoch_bounds(n, batch_size)]


@dataclass(frozen=True, eq=False)
class StepPlan:
    """The steps of one job on the shard ``indices``: ``epochs`` epochs of ``batch_size`` batches."""

    indices: torch.Tensor
    epochs: int
    batch_size: int
    seed: int  # the job's data-order stream: permutations and augmentation draws
    augment: bool = False
    max_steps: int | None = None  # a step-counted job: stop after this many steps (None: every epoch whole)
    poisson: bool = False  # Poisson batches of expected size batch_size (DP-SGD), in place of a permutation's
    bounds: list = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", epoch_bounds(len(self.indices), self.batch_size))

    @property
    def steps(self) -> int:
        """Optimiser steps of the whole job."""
        whole = self.epochs * len(self.bounds)
        return whole if self.max_steps is None else min(whole, self.max_steps)

    @property
    def rate(self) -> float:
        """q: the probability that a Poisson batch holds a given sample, min(1, batch_size / n)."""
        return min(1.0, self.batch_size / max(len(self.indices), 1))

    def size(self, step: int) -> int:
        """The batch size of step ``step`` (counted from 0 over all epochs)."""
        lo, hi = self.bounds[step % len(self.bounds)]
        return hi - lo

    def batches(self, draw: Callable | None = None) -> Iterator[tuple[int, torch.Tensor, tuple | None]]:
        """``(index in epoch, sample indices, augmentation draws or None)`` per step, drawn lazily
        from a fresh generator; ``draw(n, generator)`` makes a batch's draws (``ArrayDataset.augment_draws``)."""
        gen = torch.Generator().manual_seed(self.seed)
        n, left = len(self.indices), self.steps
        for _epoch in range(self.epochs):
            if self.poisson:  # each sample in with probability q, one draw each, every step
                for i in range(len(self.bounds)):
                    if left == 0:
                        return
                    left -= 1
                    idx = self.indices[torch.rand(n, generator=gen) < self.rate]
                    yield i, idx, (draw(len(idx), gen) if self.augment else None)
                continue
            order = self.indices[torch.randperm(n, generator=gen)]
            for i, (lo, hi) in enumerate(self.bounds):
                if left == 0:
                    return
                left -= 1
                idx = order[lo:hi]
                yield i, idx, (draw(len(idx), gen) if self.augment else None)
