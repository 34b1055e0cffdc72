"""AsyncFilter (Middleware 2024; PLATO's ``examples/detector/detectors.py``, ``async_filter``): the buffer grouped by
staleness, and in each group large enough the updates farthest from the group's statistic dropped.

This module owns the filter's arithmetic and its record of past averages; the stage (:mod:`.stage`) hands it the
screened updates and the rule memory's ``defense_state``, which this returns replaced (never mutated), so a
checkpoint holds it and a resumed run has the uninterrupted run's record. docs/robustness.md, "AsyncFilter", says
what it computes and where it departs from PLATO's code.

At the aggregation of version t, the updates with base version b (staleness s = t − b) form one group G. In a group
of at least ``group_min`` updates:

1. m_G = (1/|G|) Σ_{k∈G} Δ_k, over every entry, float64.
2. The group's statistic: at s = 0, μ = m_G; at 0 < s ≤ ``history`` with a record (μ_b, c_b) of base b,
   μ = (c_b μ_b + |G| m_G)/(c_b + |G|), which becomes the record (μ, c_b + |G|); with none, μ = m_G, recorded with
   count |G|. Above ``history``, μ = m_G, not recorded. The staleness-0 group's (m_G, |G|) is recorded as base t's.
3. r_k = ‖Δ_k − μ‖ over the trainable parameters, normalised to sum 1 (PLATO's normalisation).
4. The r_k are split into 3 clusters by an exact 1-D k-means (:func:`farthest_cluster`) and the cluster of the
   largest mean is dropped.

A group below ``group_min`` is neither screened nor recorded. The record keeps the bases t + 1 − ``history`` .. t
(those a later group may read), each average in w_t's dtype (as PLATO keeps models), with its count.
"""
from __future__ import annotations

import math
from collections import Counter
from itertools import combinations
from types import MappingProxyType
from typing import Mapping, Optional

import torch

from .geometry import Deltas

CLUSTERS = 3  # PLATO's detection_cos: KMeans(n_clusters=3)


def farthest_cluster(values: list[float]) -> list[int]:
    """Positions of the cluster of the largest mean in the exact 1-D k-means of ``values`` with k = 3.

    The clusters are contiguous runs of the distinct values (an optimal 1-D k-means never needs to split equal
    values), each weighted by its multiplicity, and the partition minimises the within-cluster sum of squares, found
    by trying every pair of cuts. With fewer than 3 distinct values each distinct value is its own cluster; with one,
    nothing is dropped (every update is as far as the others). Ties between partitions of equal sums go to the one
    whose top cluster holds fewer distinct values, then whose middle cluster does."""
    distinct = sorted(set(values))
    m = len(distinct)
    if m < 2:
        return []
    count = Counter(values)
    sse = {}
    for a in range(m):
        for b in range(a + 1, m + 1):
            run = distinct[a:b]
            w = math.fsum(count[v] for v in run)
            mean = math.fsum(count[v] * v for v in run) / w
            sse[a, b] = math.fsum(count[v] * (v - mean) ** 2 for v in run)
    k = min(CLUSTERS, m)
    best_key, best_cuts = None, None
    for cuts in combinations(range(1, m), k - 1):
        edges = (0, *cuts, m)
        total = math.fsum(sse[edges[i], edges[i + 1]] for i in range(k))
        key = (total, tuple(-c for c in reversed(cuts)))
        if best_key is None or key < best_key:
            best_key, best_cuts = key, cuts
    top = set(distinct[best_cuts[-1]:])
    return [i for i, v in enumerate(values) if v in top]


@torch.no_grad()
def screen(updates, bases, global_flat: torch.Tensor, version: int, state: Mapping, group_min: int, history: int,
           mask: Optional[torch.Tensor]) -> tuple[dict[int, str], Mapping]:
    """({position: reason} of the dropped updates among ``updates``, the new state ``{"record": {b: {"mean",
    "count"}}}``), ``state`` the previous one (``{}`` at the first aggregation)."""
    record = dict(state.get("record", {}))  # the bases this aggregation's groups may read (pruned at the last one)
    groups: dict[int, list[int]] = {}
    for i, u in enumerate(updates):
        groups.setdefault(u.base_version, []).append(i)
    drops: dict[int, str] = {}
    for base in sorted(groups, reverse=True):  # staleness 0 first, as PLATO's groups
        members, s = groups[base], version - base
        if len(members) < group_min:
            continue
        deltas = Deltas([updates[i] for i in members], bases, global_flat)
        n = deltas.n
        entry = record.get(base) if 0 < s <= history else None
        sq = torch.zeros(n, dtype=torch.float64, device=global_flat.device)
        stat = torch.empty(deltas.d, dtype=torch.float64, device=global_flat.device)
        for lo, hi, x in deltas.blocks():
            mu = x.sum(dim=0) / n
            if entry is not None:
                c = entry["count"]
                mu = (entry["mean"][lo:hi].to(mu.device, torch.float64) * c + mu * n) / (c + n)
            stat[lo:hi] = mu
            diff = x - mu
            if mask is not None:
                diff = diff[:, mask[lo:hi].to(diff.device)]
            sq += (diff * diff).sum(dim=1)
        if s <= history:
            record[base] = MappingProxyType({"mean": stat.to(global_flat.dtype),
                                             "count": n + (entry["count"] if entry is not None else 0)})
        dist = sq.sqrt().tolist()
        total = math.fsum(dist)
        if total == 0.0:
            continue
        share = [r / total for r in dist]
        for j in farthest_cluster(share):
            drops[members[j]] = (f"asyncfilter: distance share {share[j]:.6g} in the farthest of {CLUSTERS} "
                                 f"clusters of the {n} updates at staleness {s}")
    keep = {b: e for b, e in record.items() if version + 1 - b <= history}  # what the next aggregation may read
    return drops, MappingProxyType({"record": MappingProxyType(keep)})
