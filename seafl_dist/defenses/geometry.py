"""The buffer's deltas as the defenses read them: coordinate blocks of the n × d matrix of (scaled) deltas, their
norms, and the pairwise squared distances from one Gram matrix.

Δ_k = w_k − w_{t_k} is formed in w_t's dtype (as FedBuff forms it), then widened to float64; the defenses compute in
float64 and never hold the whole n × d matrix: it is read :data:`CHUNK` coordinates at a time, so the extra memory
is n × CHUNK float64 entries whatever the model. Distances and norms run over the trainable parameters (batch norm's
statistics and integer counters excluded), as the update guard's norm does (algo/guard.py).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from ..algo.common import as_global
from ..algo.types import BufferedUpdate

CHUNK = 1 << 19  # coordinates per block: n × CHUNK float64 entries of extra memory (200 MB at n = 50)


class Deltas:
    """The rows c_k Δ_k of the updates ``updates`` (``scale`` the c_k, None: all 1), read block by block."""

    def __init__(self, updates: Sequence[BufferedUpdate], bases: Callable[[int], torch.Tensor],
                 global_flat: torch.Tensor, scale: Optional[Sequence[float]] = None):
        self.updates, self.bases, self.global_flat = list(updates), bases, global_flat
        self.n, self.d = len(self.updates), global_flat.numel()
        self.scale = None if scale is None or all(c == 1.0 for c in scale) else \
            torch.tensor(list(scale), dtype=torch.float64, device=global_flat.device)[:, None]

    def block(self, lo: int, hi: int, mask: Optional[torch.Tensor] = None, exact: bool = False) -> torch.Tensor:
        """The n × (hi − lo) float64 block of rows c_k Δ_k, restricted to ``mask[lo:hi]`` when given. ``exact``:
        in w_t's dtype when no c_k scales them (the same values, for a caller that only compares and selects them:
        half the memory traffic of float64 in float32)."""
        g = self.global_flat
        x = torch.stack([as_global(u.flat[lo:hi], g) - self.bases(u.base_version)[lo:hi] for u in self.updates])
        if not (exact and self.scale is None):
            x = x.to(torch.float64)
        if mask is not None:
            x = x[:, mask[lo:hi].to(x.device)]
        return x if self.scale is None else x * self.scale

    def blocks(self, mask: Optional[torch.Tensor] = None, exact: bool = False):
        """(lo, hi, block) over the whole vector."""
        for lo in range(0, self.d, CHUNK):
            hi = min(lo + CHUNK, self.d)
            yield lo, hi, self.block(lo, hi, mask, exact)


def params_mask(parts) -> Optional[torch.Tensor]:
    """The trainable parameters' mask, None when every entry is one (no indexing then)."""
    return None if parts is None or bool(parts.params.all()) else parts.params


@torch.no_grad()
def gram(deltas: Deltas, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """G = X Xᵀ (n × n, float64) of the rows over ``mask``: one matrix product, summed over coordinate blocks."""
    g = torch.zeros((deltas.n, deltas.n), dtype=torch.float64, device=deltas.global_flat.device)
    for _, _, x in deltas.blocks(mask):
        g += x @ x.T
    return g


@torch.no_grad()
def against(deltas: Deltas, vec: torch.Tensor, mask: Optional[torch.Tensor]) -> tuple[list[float], list[float], float]:
    """(x_k · u, ‖x_k‖², ‖u‖²) of each row against a server-side vector u (FLTrust's g_0, Zeno++'s v) over
    ``mask``, in float64, summed over coordinate blocks."""
    u = vec.to(deltas.global_flat.device, torch.float64)
    dot = torch.zeros(deltas.n, dtype=torch.float64, device=u.device)
    sq = torch.zeros(deltas.n, dtype=torch.float64, device=u.device)
    u_sq = 0.0
    for lo, hi, x in deltas.blocks(mask):
        ub = u[lo:hi] if mask is None else u[lo:hi][mask[lo:hi].to(u.device)]
        dot += x @ ub
        sq += (x * x).sum(dim=1)
        u_sq += float((ub * ub).sum())
    return dot.tolist(), sq.tolist(), u_sq


@torch.no_grad()
def pairwise_sq_distances(deltas: Deltas, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """D[i, j] = ‖x_i − x_j‖² = ‖x_i‖² + ‖x_j‖² − 2 x_i·x_j from the Gram matrix (float64; symmetric, ≥ 0, zero
    diagonal): never a loop over pairs."""
    g = gram(deltas, mask)
    sq = g.diagonal()
    dist = (sq[:, None] + sq[None, :] - 2.0 * g).clamp_(min=0.0)
    dist = (dist + dist.T) / 2.0  # the product's rounding need not be symmetric
    return dist.fill_diagonal_(0.0)
