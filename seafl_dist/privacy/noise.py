"""Stage 5: Gaussian noise N(0, σ² I), σ = z·S, on the rule's result, and batch norm's variance kept ≥ 0 after it.

The noise of aggregation t is drawn from the run's named stream ``privacy`` keyed by t
(:func:`noise_seed`, sim/rng.py), on the CPU in float64 by a ``torch.Generator`` made for that aggregation alone,
then added once and rounded to w′'s dtype. So it is the same bits on any device and rank, and a resumed run
draws it again without any state in the checkpoint. Seeded noise is for studies: a deployment needs a
cryptographic source, which no seed can reproduce.

It covers the entries the clipping bound covers (trainable parameters and float statistics); integer counters
take none. A running variance that the noise drives below 0 would make batch norm divide by the root of a
negative number: :func:`clamp_variance` sets it to 0 (batch norm adds its ε), which is post-processing of the
released w′ and costs no privacy.
"""
from __future__ import annotations

from typing import Iterable

import torch

from ..sim.rng import stream_seed

VARIANCE_SUFFIX = "running_var"


def noise_seed(run_seed: int, version: int) -> int:
    """The seed of aggregation ``version``'s noise: the run's named stream ``privacy``, keyed by the version."""
    return stream_seed(run_seed, "privacy", version)


@torch.no_grad()
def add_noise(flat: torch.Tensor, std: float, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """A copy of ``flat`` with N(0, std²) added to each ``mask`` entry, drawn from a generator seeded ``seed``."""
    if not std >= 0:
        raise ValueError(f"noise standard deviation {std} must be >= 0")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    mask = mask.to(flat.device)
    noise = torch.randn(int(mask.sum()), generator=gen, dtype=torch.float64) * std
    out = flat.clone()
    out[mask] = (flat[mask].to(torch.float64) + noise.to(flat.device)).to(flat.dtype)
    return out


def variance_mask(names: Iterable[str], sizes: Iterable[int]) -> torch.Tensor:
    """A bool vector over a flat model (state_dict order, ``train.flat.FlatLayout``'s names and entry sizes):
    True on batch norm's running variances."""
    parts = [torch.full((n,), name.endswith(VARIANCE_SUFFIX), dtype=torch.bool) for name, n in zip(names, sizes)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)


@torch.no_grad()
def clamp_variance(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``flat`` with every ``mask`` entry below 0 set to 0 (a copy only when one is)."""
    mask = mask.to(flat.device)
    if not bool((flat[mask] < 0).any()):
        return flat
    out = flat.clone()
    out[mask] = flat[mask].clamp(min=0)
    return out
