"""Adaptive clipping (``privacy.adaptive_clip``): the clipping bound C_t of central DP follows a target quantile γ
of the update norms, by the geometric update of Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private
Learning with Adaptive Clipping" (NeurIPS 2021, arXiv 1905.03871, Algorithm 1 and its §3.1 accounting).

This room owns C_t and nothing else of the mechanism: the noised count of the buffer's unclipped updates, the
update of C_t from it, the count's noise std, and the update noise's multiplier z_Δ that keeps the run's total
multiplier at z (so ε is accounted as before, privacy/accountant.py). For aggregation t with K kept updates
(the buffer less broken uploads, which the rules reject by size or dtype alone: K is public):

    b_k = 1[‖Δ_k‖ ≤ C_t]                          (a non-finite update is a zero delta: b_k = 1)
    b̃_t = (Σ_k b_k + N(0, (σ_b·s_b)²)) / K        s_b: the most updates one device has in the buffer (1 but under churn)
    C_{t+1} = C_t · exp(−η_C (b̃_t − γ))

The paper's m (the expected updates per round) is the buffer size K here, so its default σ_b = m/20 is K/20
(settings/privacy.py ``AdaptiveClipConfig.count_std_for``). The count's draw comes from the run's privacy noise source, the update noise's mode
(keyed, secure or seeded) under a stream name of its own, :data:`COUNT_STREAM`, so that it never reuses a draw of
the update noise (privacy/mechanism.py ``_count_source``).

Accounting (the paper's first option, §3.1): the vector release and the count are one Gaussian mechanism. The
vector moves by at most S under noise z_Δ·S, the count by at most s_b under noise σ_b·s_b, so their multiplier is
(z_Δ⁻² + σ_b⁻²)^(−½), and the update noise is raised to

    z_Δ = (z⁻² − (σ_b/Δ_b)⁻²)^(−½)

for a total of exactly z (:func:`update_multiplier`). Δ_b is the count's sensitivity per update: the paper's
add-or-remove adjacency counts b_k − ½ and has Δ_b = ½, whence its (z⁻² − (2σ_b)⁻²)^(−½); under this project's
replace-one adjacency (docs/privacy.md, "Adjacency": S = 2C, not C) a replaced update moves the count by 1, so
Δ_b = 1 and z_Δ = (z⁻² − σ_b⁻²)^(−½). Only σ_b > z·Δ_b has a real z_Δ; a smaller σ_b is refused in one line.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import torch

from ..settings.privacy import check_count_std
from .noise import Source, add_noise

COUNT_STREAM = "privacy-clip-count"  # the count's named stream (keyed and seeded modes), apart from ``privacy``
COUNT_SENSITIVITY = 1.0  # Δ_b: one replaced update moves Σ_k b_k by at most 1 (replace-one adjacency)
PAPER_COUNT_SENSITIVITY = 0.5  # Δ_b of the paper's add-or-remove adjacency, with b_k − 1/2 counted


def update_multiplier(z: float, count_std: float, count_sensitivity: float = COUNT_SENSITIVITY) -> float:
    """z_Δ = (z⁻² − (σ_b/Δ_b)⁻²)^(−½), the update noise's multiplier that keeps the total at ``z`` (0 for z = 0:
    the run adds no update noise and its ε is ∞). :class:`~seafl_dist.settings.errors.ConfigError` in one line when
    σ_b ≤ z·Δ_b (no real z_Δ)."""
    check_count_std(z, count_std, count_sensitivity)
    if z == 0:
        return 0.0
    return (z ** -2 - (count_std / count_sensitivity) ** -2) ** -0.5


def next_bound(bound: float, unclipped_fraction: float, target: float, lr: float) -> float:
    """C_{t+1} = C_t · exp(−η_C (b̃_t − γ)): down while more than γ of the updates are within C_t, up while fewer."""
    return bound * math.exp(-lr * (unclipped_fraction - target))


def unclipped(norms: Sequence[float | None], bound: float) -> tuple[int, int]:
    """(Σ_k b_k, K) over the updates with a norm (None: a broken upload the rules reject, left out); a NaN norm
    (a non-finite update, taken as a zero delta) is within the bound."""
    kept = [n for n in norms if n is not None]
    return sum(1 for n in kept if math.isnan(n) or n <= bound), len(kept)


def count_sensitivity(devices: Sequence[int]) -> int:
    """s_b: the most updates one device has among ``devices`` (the kept updates'), what replacing it moves the
    count by at most."""
    return max(Counter(devices).values(), default=0)


def noised_count(count: int, std: float, source: Source) -> float:
    """count + N(0, std²), drawn from ``source`` as the update noise is (privacy/noise.py ``add_noise``, one entry):
    a seed, a keyed stream, or None (os.urandom)."""
    one = torch.tensor([float(count)], dtype=torch.float64)
    return float(add_noise(one, std, torch.ones(1, dtype=torch.bool), source)[0])


class AdaptiveClip:
    """C_t of one run: its update after each aggregation, and what the checkpoint keeps (C_{t+1})."""

    def __init__(self, section, z: float, buffer_size: int, initial: float):
        self.target, self.lr = section.target_quantile, section.lr
        self.count_std = section.count_std_for(buffer_size)
        self.z_update = update_multiplier(z, self.count_std)
        self.bound = float(initial)

    def step(self, norms: Sequence[float | None], devices: Sequence[int], draw) -> float:
        """After an aggregation clipped at C_t (``self.bound``) with pre-clip ``norms`` and the kept updates'
        ``devices``: b̃_t, and C_{t+1} in ``self.bound``. ``draw(count, std)`` gives the noised count (the mode's
        source, or a secure run's record)."""
        count, k = unclipped(norms, self.bound)
        if k == 0:
            return math.nan
        fraction = draw(count, self.count_std * count_sensitivity(devices)) / k
        self.bound = next_bound(self.bound, fraction, self.target, self.lr)
        return fraction

    def state(self) -> dict:
        return {"bound": self.bound}

    def load(self, state: dict) -> None:
        self.bound = float(state["bound"])
