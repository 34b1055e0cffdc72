"""The estimators: what replaces the mean of the deltas, coordinate by coordinate or around a centre, on the
n rows x_k = c_k Δ_k (:mod:`.geometry`), in float64.

- **median** (Yin et al., ICML 2018): each coordinate's median of the n values; for even n, the mean of the two
  middle ones.
- **trimmed mean** (Yin et al., ICML 2018): each coordinate's mean of the n − 2b values left when the b = ⌊β n⌋
  largest and the b smallest are dropped (β as written in decimal: ⌊0.3 × 10⌋ = 3).
- **Bulyan's coordinate phase** (El Mhamdi et al., ICML 2018), on the θ updates its selection kept
  (:func:`.filters.bulyan_selection`): each coordinate's mean of the β' = θ − 2f values closest to that
  coordinate's median (ties in distance to the smaller value).
- **centered clipping** (Karimireddy et al., ICML 2021, Algorithm 2 as the authors' code runs it): from the centre
  v (the previous aggregation's result; 0 at the first), L times
  v ← v + (1/n) Σ_k min(1, τ / ‖x_k − v‖) (x_k − v), the norm over the trainable parameters (1 when it is 0);
  the result is the last v, and the next aggregation's centre.
- **FLTrust** (Cao, Fang, Liu and Gong, NDSS 2021, Algorithm 1 and Eqs. 1-4) around the server's own update g_0
  (runtime/server_data.py): each row's trust score TS_k = ReLU(cos(x_k, g_0)), x_k rescaled to ‖g_0‖, and
  Σ_k TS_k (‖g_0‖/‖x_k‖) x_k / Σ_k TS_k (0 when every score is 0), cosines and norms over the trainable parameters
  (a zero norm scores 0).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

import torch

from .geometry import Deltas, against


def trimmed_count(beta: float, n: int) -> int:
    """b = ⌊β n⌋ with β as its decimal (no binary rounding below an integer)."""
    return math.floor(Fraction(repr(beta)) * n)


NETWORK_MAX = 24  # up to this many rows, an odd-even transposition network sorts the columns faster than torch.sort


def sorted_columns(x: torch.Tensor) -> torch.Tensor:
    """``x`` with each column sorted ascending (a new tensor). Up to :data:`NETWORK_MAX` rows by an odd-even
    transposition network, n rounds of elementwise min/max of neighbouring rows (exact: the same values as a sort;
    3× faster than ``torch.sort`` along a short dim 0 at n = 10), above by ``torch.sort``."""
    n = x.shape[0]
    if n > NETWORK_MAX:
        return x.sort(dim=0).values
    x = x.clone()
    for r in range(n):
        a, b = x[r % 2:n - 1:2], x[r % 2 + 1:n:2]
        lo, hi = torch.minimum(a, b), torch.maximum(a, b)
        x[r % 2:n - 1:2], x[r % 2 + 1:n:2] = lo, hi
    return x


def median_of(x: torch.Tensor) -> torch.Tensor:
    """Each column's median (the two middle values' mean for an even count); ``x`` sorted along dim 0."""
    n = x.shape[0]
    return (x[(n - 1) // 2].to(torch.float64) + x[n // 2].to(torch.float64)) / 2.0


def nearest_window(x: torch.Tensor, size: int) -> torch.Tensor:
    """The rows (``size`` × columns, as indices into ``x``, sorted along dim 0) of each column's ``size`` values
    closest to its median, ties in distance to the smaller value. In a sorted column the distances to the median
    fall then rise, so these values are a window of consecutive rows: grown from the closest row (the first, on a
    tie) one row at a time towards the nearer neighbour (the lower one on a tie), ``size`` − 1 steps of elementwise
    operations instead of a sort by distance. (Where a tie leaves a choice between equal values, either gives the
    same mean.)"""
    n = x.shape[0]
    dist = (x - median_of(x)).abs()
    lo = dist.argmin(dim=0, keepdim=True)  # the first row of the least distance
    hi = lo + 1  # the window is rows [lo, hi)
    inf = torch.full_like(lo, 0, dtype=dist.dtype).fill_(float("inf"))
    for _ in range(size - 1):
        left = torch.where(lo > 0, dist.gather(0, (lo - 1).clamp(min=0)), inf)
        right = torch.where(hi < n, dist.gather(0, hi.clamp(max=n - 1)), inf)
        take_left = left <= right
        lo = lo - take_left.to(lo.dtype)
        hi = hi + (~take_left).to(hi.dtype)
    return lo + torch.arange(size, device=x.device)[:, None]


@torch.no_grad()
def coordinatewise(deltas: Deltas, name: str, beta: float = 0.0, f: int = 0) -> torch.Tensor:
    """The median, the trimmed mean or Bulyan's coordinate phase of the rows, over every entry (float64, length d)."""
    out = torch.empty(deltas.d, dtype=torch.float64, device=deltas.global_flat.device)
    n = deltas.n
    for lo, hi, x in deltas.blocks(exact=True):  # sorted in w_t's dtype where exact, averaged in float64
        x = sorted_columns(x)
        if name == "median":
            out[lo:hi] = median_of(x)
        elif name == "trimmed_mean":
            b = trimmed_count(beta, n)
            out[lo:hi] = x[b:n - b].to(torch.float64).mean(dim=0)
        elif name == "bulyan":
            x = x.to(torch.float64)
            out[lo:hi] = x.gather(0, nearest_window(x, n - 2 * f)).mean(dim=0)
        else:
            raise ValueError(f"unknown coordinate-wise estimator {name!r}")
    return out


@torch.no_grad()
def centered_clipping(deltas: Deltas, centre: Optional[torch.Tensor], tau: float, iterations: int,
                      mask: Optional[torch.Tensor]) -> torch.Tensor:
    """The centre after ``iterations`` clipping steps from ``centre`` (None: 0), float64 of length d."""
    v = torch.zeros(deltas.d, dtype=torch.float64, device=deltas.global_flat.device) if centre is None else \
        centre.to(deltas.global_flat.device, torch.float64).clone()
    for _ in range(iterations):
        sq = torch.zeros(deltas.n, dtype=torch.float64, device=v.device)
        for lo, hi, x in deltas.blocks():
            diff = x - v[lo:hi]
            if mask is not None:
                diff = diff[:, mask[lo:hi].to(v.device)]
            sq += (diff * diff).sum(dim=1)
        norms = sq.sqrt().tolist()
        scale = torch.tensor([1.0 if r == 0.0 else min(1.0, tau / r) for r in norms], dtype=torch.float64,
                             device=v.device)[:, None]
        step = torch.empty_like(v)
        for lo, hi, x in deltas.blocks():
            step[lo:hi] = (scale * (x - v[lo:hi])).sum(dim=0) / deltas.n
        v += step
    return v


@torch.no_grad()
def trust_scores(deltas: Deltas, g0: torch.Tensor, mask: Optional[torch.Tensor]) -> tuple[list[float], list[float],
                                                                                          float]:
    """(TS_k = ReLU(cos(x_k, g_0)), ‖x_k‖, ‖g_0‖), over ``mask``, in float64; a zero norm scores 0."""
    dot, sq, g_sq = against(deltas, g0, mask)
    g_norm, norms = g_sq ** 0.5, [r2 ** 0.5 for r2 in sq]
    scores = [0.0 if r == 0.0 or g_norm == 0.0 else max(0.0, p / (r * g_norm)) for p, r in zip(dot, norms)]
    return scores, norms, g_norm


@torch.no_grad()
def fltrust(deltas: Deltas, g0: torch.Tensor, mask: Optional[torch.Tensor]
            ) -> tuple[torch.Tensor, list[float], list[float]]:
    """(FLTrust's aggregate, float64 of length d, every entry; each row's coefficient in it, TS_k ‖g_0‖/‖x_k‖ /
    Σ TS; each row's TS_k): the rows rescaled to ‖g_0‖ and averaged with their trust scores as weights."""
    scores, norms, g_norm = trust_scores(deltas, g0, mask)
    total = sum(scores)
    coef = [0.0 if total == 0.0 or ts == 0.0 else ts * g_norm / (r * total) for ts, r in zip(scores, norms)]
    out = torch.zeros(deltas.d, dtype=torch.float64, device=deltas.global_flat.device)
    if total == 0.0:
        return out, coef, scores
    c = torch.tensor(coef, dtype=torch.float64, device=out.device)
    for lo, hi, x in deltas.blocks():
        out[lo:hi] = c @ x
    return out, coef, scores
