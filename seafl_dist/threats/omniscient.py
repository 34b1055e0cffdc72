"""The omniscient attacks: one crafted delta for the malicious updates of a buffer, computed at aggregation time
on rank 0 from the honest deltas R = {Δ_i} of that buffer (the buffer is not full when a malicious update
arrives, so this is the first moment the attacker's knowledge exists). Each knows R, the buffer's size n and its
count m of malicious updates; none knows the rule or the defense. With no honest update in the buffer, R is the
malicious updates' own trained deltas (what non-omniscient ALIE uses). μ and σ are R's coordinate-wise mean and
standard deviation (Bessel-corrected, as torch.std; σ = 0 for one delta).

- ``alie`` (Baruch et al., NeurIPS 2019, Algorithm 1): Δ_m = μ + z·σ, with ``threats.z`` or the paper's
  z = Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − m the supporters needed, taken at least 1 (a malicious majority would make
  z infinite).
- ``ipm`` (Xie et al., UAI 2019): Δ_m = −ε·μ.
- ``min_max``, ``min_sum`` (Shejwalkar & Houmansadr, NDSS 2021, AGR-agnostic): Δ_m = μ − γ·p, p = σ, μ/‖μ‖ or
  sign(μ) (``threats.perturbation``), with γ ≥ 0 the largest for which Min-Max's
  max_i ‖Δ_m − Δ_i‖ ≤ max_{i,j} ‖Δ_i − Δ_j‖, or Min-Sum's Σ_i ‖Δ_m − Δ_i‖² ≤ max_i Σ_j ‖Δ_i − Δ_j‖², holds
  (both hold at γ = 0, and the feasible γ form an interval: found by doubling, then bisection to 1e-9 relative, as
  the paper's Algorithm 1 searches). p = 0 gives γ = 0.

All malicious updates of the buffer send the same Δ_m (they collude), each on its own base model.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import torch


def alie_z(n: int, m: int) -> float:
    """ALIE's z for a buffer of ``n`` updates, ``m`` of them malicious."""
    s = max(math.floor(n / 2 + 1) - m, 1)
    return NormalDist().inv_cdf((n - s) / n)


def _spread(ref: torch.Tensor) -> torch.Tensor:
    return ref.std(dim=0) if ref.shape[0] > 1 else torch.zeros_like(ref[0])


def _perturbation(kind: str, ref: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    if kind == "std":
        return _spread(ref)
    if kind == "unit_vector":
        norm = torch.linalg.vector_norm(mu)
        return mu / norm if norm > 0 else torch.zeros_like(mu)
    if kind == "sign":
        return torch.sign(mu)
    raise ValueError(f"unknown perturbation {kind!r}")


def largest_gamma(attack: str, ref: torch.Tensor, mu: torch.Tensor, p: torch.Tensor) -> float:
    """Min-Max's or Min-Sum's γ (module doc), in float64: ‖μ − γp − Δ_i‖² = a_i − 2γ b_i + γ² c."""
    ref, mu, p = ref.double(), mu.double(), p.double()
    c = float(p @ p)
    if c == 0.0:
        return 0.0
    diff = mu - ref  # (h, d)
    a, b = (diff * diff).sum(dim=1), diff @ p
    pair = torch.cdist(ref, ref) ** 2  # ‖Δ_i − Δ_j‖²
    if attack == "min_max":
        bound = float(pair.max())
        feasible = lambda g: float((a - 2 * g * b + g * g * c).max()) <= bound  # noqa: E731
    elif attack == "min_sum":
        bound = float(pair.sum(dim=1).max())
        feasible = lambda g: float((a - 2 * g * b + g * g * c).sum()) <= bound  # noqa: E731
    else:
        raise ValueError(f"not a distance attack: {attack!r}")
    lo, hi = 0.0, 1.0
    while feasible(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    return lo


def crafted_delta(attack: str, honest: torch.Tensor, own: torch.Tensor, threats) -> torch.Tensor:
    """Δ_m for ``attack`` (settings.threats.OMNISCIENT_ATTACKS): ``honest`` the buffer's honest deltas (h, d), h ≥ 0;
    ``own`` the malicious updates' trained deltas (m, d), m ≥ 1, the reference when h = 0."""
    ref = honest if honest.shape[0] > 0 else own
    mu = ref.mean(dim=0)
    if attack == "alie":
        n, m = honest.shape[0] + own.shape[0], own.shape[0]
        z = threats.z if threats.z is not None else alie_z(n, m)
        return mu + z * _spread(ref)
    if attack == "ipm":
        return -threats.epsilon * mu
    if attack in ("min_max", "min_sum"):
        p = _perturbation(threats.perturbation, ref, mu)
        return mu - largest_gamma(attack, ref, mu, p) * p
    raise ValueError(f"not an omniscient attack: {attack!r}")
