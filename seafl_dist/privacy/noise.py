"""Stage 5: Gaussian noise N(0, σ² I), σ = z·S, on the rule's result, and batch norm's variance kept ≥ 0 after it.

The noise of aggregation t is drawn from the run's named stream ``privacy`` keyed by t
(:func:`noise_seed`, sim/rng.py), on the CPU in float64 by a ``torch.Generator`` made for that aggregation alone,
then added once and rounded to w′'s dtype. So it is the same bits on any device and rank, and a resumed run
draws it again without any state in the checkpoint. Seeded noise is for studies: anyone holding config.yaml can
regenerate it and subtract it.

``privacy.secure_noise`` (:func:`secure_normal`) draws every noise vector from the OS's cryptographic source
instead (``os.urandom``): nothing seeds it and nothing is written, so no one can regenerate it, the run's bytes
differ from run to run and a resume goes on with fresh noise. Each N(0, 1) is the sum of four Box–Muller draws
from 53-bit uniforms, halved, as Opacus's ``secure_mode`` does after Holohan and Braghin (arXiv 2107.10138,
§5.1): a single float64 Gaussian draw can be inverted from its low bits (Mironov 2012 for the Laplace; Jin et al.,
arXiv 2112.05307, for Gaussians); the sum of several makes that search 2^(53·3) steps.

It covers the entries the clipping bound covers (trainable parameters and float statistics); integer counters
take none. A running variance that the noise drives below 0 would make batch norm divide by the root of a
negative number: :func:`clamp_variance` sets it to 0 (batch norm adds its ε), which is post-processing of the
released w′ and costs no privacy.
"""
from __future__ import annotations

import math
import os
from typing import Iterable

import torch

from ..sim.rng import stream_seed

VARIANCE_SUFFIX = "running_var"


def noise_seed(run_seed: int, version: int) -> int:
    """The seed of aggregation ``version``'s noise: the run's named stream ``privacy``, keyed by the version."""
    return stream_seed(run_seed, "privacy", version)


SECURE_TERMS = 4  # Gaussians summed per secure draw (Opacus's secure_mode: 2n with n = 2), then divided by 2
_CHUNK = 1 << 20  # entries drawn per os.urandom call: bounded memory for a model of any size


def _uniform53(n: int) -> torch.Tensor:
    """``n`` uniforms in (0, 1] in float64 from os.urandom: (k + 1)·2⁻⁵³, k the top 53 bits of 8 random bytes."""
    raw = torch.frombuffer(bytearray(os.urandom(8 * n)), dtype=torch.int64)
    return ((raw >> 11) & ((1 << 53) - 1)).to(torch.float64).add_(1.0).mul_(2.0 ** -53)


def secure_normal(n: int) -> torch.Tensor:
    """``n`` draws of N(0, 1) in float64 from the OS's cryptographic source: each the sum of ``SECURE_TERMS``
    Box–Muller normals divided by √SECURE_TERMS (= 2)."""
    out = torch.empty(n, dtype=torch.float64)
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        acc = torch.zeros(m, dtype=torch.float64)
        for _ in range(SECURE_TERMS):
            radius = _uniform53(m).log_().mul_(-2.0).sqrt_()
            acc.add_(radius.mul_(torch.cos(_uniform53(m).mul_(2.0 * math.pi))))
        out[start:start + m] = acc.div_(math.sqrt(SECURE_TERMS))
    return out


@torch.no_grad()
def add_noise(flat: torch.Tensor, std: float, mask: torch.Tensor, seed: int | None) -> torch.Tensor:
    """A copy of ``flat`` with N(0, std²) added to each ``mask`` entry, drawn from a generator seeded ``seed``;
    ``seed=None``: from the OS's cryptographic source (:func:`secure_normal`), unrepeatable."""
    if not std >= 0:
        raise ValueError(f"noise standard deviation {std} must be >= 0")
    mask = mask.to(flat.device)
    count = int(mask.sum())
    if seed is None:
        noise = secure_normal(count) * std
    else:
        noise = torch.randn(count, generator=torch.Generator(device="cpu").manual_seed(seed), dtype=torch.float64) * std
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
