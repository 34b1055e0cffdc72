"""The filters: which updates of a buffer Krum, Multi-Krum (Blanchard et al., NeurIPS 2017) and Bulyan's selection
(El Mhamdi et al., ICML 2018) keep, from the pairwise squared distances D of the deltas (:mod:`.geometry`).

- Krum's score of update i among n: the sum of its n − f − 2 smallest D[i, j], j ≠ i (Blanchard et al.'s
  "n − f − 2 closest vectors"); ties between scores go to the lower position in the buffer.
- **Krum** keeps the one update of the lowest score; **Multi-Krum** the m of the lowest scores, m = ``keep``
  (at most n − f) or n − f.
- **Bulyan's selection** applies Krum θ = n − 2f times, each time to the updates not yet selected (recomputing
  the scores on them, with max(0, r − f − 2) neighbours among the r left), and keeps the θ it chose.

- **Zeno++** (Xie, Koyejo and Gupta, ICML 2020, Algorithm 1 with its lazy v): the paper's candidate g is a
  gradient the server would step against (x ← x − γ g); an update here is a move Δ_k, so g_k = −Δ_k, rescaled to
  ‖v‖: ĝ_k = −(‖v‖/‖Δ_k‖) Δ_k (0 when Δ_k = 0). Its score γ⟨v, ĝ_k⟩ − ρ‖ĝ_k‖², over the trainable parameters;
  the update is kept iff the score is at least −γε.

Each returns ``{position: reason}`` of the updates it drops; a buffer smaller than the defense's least n
(:data:`~seafl_dist.settings.defense.LEAST`) drops every update, with the numbers in the reason.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..settings.defense import LEAST
from .geometry import against


def krum_scores(dist: torch.Tensor, f: int) -> torch.Tensor:
    """Each row's sum of its n − f − 2 smallest off-diagonal distances (float64; zero when that is < 1)."""
    n = dist.shape[0]
    m = max(0, n - f - 2)
    off = dist + torch.diag(torch.full((n,), float("inf"), dtype=dist.dtype, device=dist.device))
    return off.sort(dim=1).values[:, :m].sum(dim=1)


def ranked(scores: torch.Tensor) -> list[int]:
    """Positions by increasing score, ties to the lower position."""
    return torch.sort(scores.cpu(), stable=True).indices.tolist()


def too_few(name: str, n: int, f: int) -> Optional[dict[int, str]]:
    """Every update dropped when the buffer holds fewer than the defense needs; None when it holds enough."""
    least = LEAST[name](f)
    if n >= least:
        return None
    return dict.fromkeys(range(n), f"{name}: {n} updates to screen, fewer than the {least} it needs with f={f}")


def multi_krum(dist: torch.Tensor, f: int, keep: Optional[int], name: str = "multikrum") -> dict[int, str]:
    """Multi-Krum's drops (Krum's with ``keep`` = 1)."""
    n = dist.shape[0]
    refused = too_few(name, n, f)
    if refused is not None:
        return refused
    m = n - f if keep is None else min(keep, n - f)
    scores = krum_scores(dist, f)
    order = ranked(scores)
    return {i: f"{name}: score {float(scores[i]):.6g} not among the {m} lowest of {n} (f={f})" for i in order[m:]}


@torch.no_grad()
def zeno_scores(deltas, v: torch.Tensor, mask: Optional[torch.Tensor], gamma: float, rho: float) -> list[float]:
    """Zeno++'s score of each row Δ_k against v (float64; module doc)."""
    dot, sq, v_sq = against(deltas, v, mask)
    v_norm = v_sq ** 0.5
    out = []
    for p, r2 in zip(dot, sq):
        if r2 == 0.0:
            out.append(0.0)  # ĝ = 0
        else:  # ⟨v, ĝ⟩ = −‖v‖⟨v, Δ⟩/‖Δ‖ and ‖ĝ‖² = ‖v‖²
            out.append(gamma * (-v_norm * p / r2 ** 0.5) - rho * v_sq)
    return out


def zeno_drops(scores: list[float], gamma: float, epsilon: float) -> dict[int, str]:
    """Zeno++'s drops: each score below −γε."""
    bar = -gamma * epsilon
    return {i: f"zenopp: score {s:.6g} below -γε = {bar:.6g}" for i, s in enumerate(scores) if s < bar}


def bulyan_selection(dist: torch.Tensor, f: int) -> dict[int, str]:
    """Bulyan's drops: the 2f updates its iterated Krum does not select."""
    n = dist.shape[0]
    refused = too_few("bulyan", n, f)
    if refused is not None:
        return refused
    theta = n - 2 * f
    left = list(range(n))
    for _ in range(theta):
        sub = dist[left][:, left]
        left.pop(ranked(krum_scores(sub, f))[0])
    return {i: f"bulyan: not among the {theta} of {n} its iterated Krum selects (f={f})" for i in left}
