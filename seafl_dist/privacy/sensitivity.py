"""The rule's sensitivity S: how far one device's updates can move the aggregate (docs/privacy.md, "Sensitivity").

Adjacency is replace-one at the user level: the neighbouring run replaces every update of one device by any other
(after clipping, any delta of norm ≤ C), with the schedule unchanged (the schedule never depends on trained
values: SPEC's invariant) and n_k public. Every update is kept (non-finite ones count as zero deltas), so |B| is
fixed. For the three rules, w′ is w_t or an average of models plus Σ_i c_i Δ̃_i, the c_i functions of the
schedule alone (:func:`coefficients`: FedBuff η_g·c(S_i)/|B|, FedAsync a_i·Π_{j>i}(1 − a_j), FedAvg n_i/Σn,
asyncsgd its delay-adaptive η_i = delay_lr(η, S_i, τ_C, c)), and
everything else in w′ (w_t, the bases w_{t_i}) is an earlier release. Replacing device d's deltas moves w′ by
‖Σ_{i of d} c_i (Δ̃_i − Δ̃′_i)‖ ≤ 2C Σ_{i of d} c_i, equal when they all point one way, so

    S = 2C · max_d Σ_{i of d} c_i.

SEAFL and SEAFL² (:func:`seafl_sensitivity`) weigh updates by their own cosines, so their S is derived apart, from
the bounds Lemma 1 puts on the weights, for Eq. 7 on the deltas and for the paper's Eq. 7 on the models.

A device that appears twice in one buffer (possible under churn: sim/churn.py counts only devices in flight as
busy) is covered by its sum; each aggregation that includes it is then one Gaussian mechanism with multiplier z
for it, whatever its number of updates there.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from ..algo.common import delay_lr
from ..algo.fedasync import staleness_factor_fedasync
from ..algo.fedbuff import fedbuff_scale
from ..algo.seafl import seafl_gamma
from ..settings import AlgorithmConfig
from ..settings.privacy import SEAFL_FORMS

RULES = ("fedbuff", "fedasync", "fedavg", "asyncsgd")


def coefficients(alg: AlgorithmConfig, staleness: Sequence[int], n_samples: Sequence[int]) -> list[float]:
    """c_i, the coefficient of update i's delta in w′ (the weight the rule records for it), from the schedule
    alone: each update's staleness S_i = t − t_i and n_i, in buffer order, every update kept."""
    if len(staleness) != len(n_samples):
        raise ValueError(f"{len(staleness)} staleness values for {len(n_samples)} updates")
    k = len(staleness)
    if alg.rule == "fedbuff":
        return [alg.server_lr * fedbuff_scale(s, alg.staleness_scaling) / k for s in staleness]
    if alg.rule == "fedasync":
        a = [alg.mixing * staleness_factor_fedasync(s, alg) for s in staleness]
        out = []
        for i in range(k):
            c = a[i]
            for j in range(i + 1, k):
                c *= 1.0 - a[j]
            out.append(c)
        return out
    if alg.rule == "asyncsgd":
        own = alg.asyncsgd
        return [delay_lr(own.lr, s, own.tau_c, own.c) for s in staleness]
    if alg.rule == "fedavg":
        total = sum(n_samples)
        return [n / total if total > 0 else 0.0 for n in n_samples]
    raise ValueError(f"no sensitivity is derived for rule {alg.rule!r}; allowed: {', '.join(RULES)}")


def sensitivity(alg: AlgorithmConfig, bound: float, devices: Sequence[int], staleness: Sequence[int],
                n_samples: Sequence[int]) -> float:
    """S = 2C · max over devices of the sum of their updates' coefficients (replace-one, |B| fixed); 0 for an
    empty buffer."""
    per_device: dict[int, float] = defaultdict(float)
    for d, c in zip(devices, coefficients(alg, staleness, n_samples), strict=True):
        per_device[d] += abs(c)
    return 2.0 * bound * max(per_device.values(), default=0.0)


# ---- SEAFL and SEAFL² (issue 42 B; docs/privacy.md, "SEAFL") ----------------------------------------------------

def seafl_weight_bounds(alg: AlgorithmConfig, staleness: Sequence[int], n_samples: Sequence[int]
                        ) -> list[tuple[float, float]]:
    """(lo_k, hi_k) of each update's raw weight r_k = d_k (γ_k + s_k) before normalisation (Eq. 6): γ_k and d_k are
    functions of the schedule, s_k = μ(Θ + 1)/2 lies in [0, μ] whatever the data (Lemma 1, with γ_k known)."""
    total = sum(n_samples)
    out = []
    for s, n in zip(staleness, n_samples, strict=True):
        d = n / total if total > 0 else 0.0
        gamma = seafl_gamma(s, alg.alpha, alg.staleness_limit)
        out.append((d * gamma, d * (gamma + alg.mu)))
    return out


def _share(mine: float, others: float) -> float:
    return mine / (mine + others) if mine + others > 0 else 0.0


def _model_form_shift(hi_d: float, lo_d: float, lo_o: float, hi_o: float, cross: float, own: float,
                      bound: float) -> float:
    """max over R ∈ [lo_o, hi_o] of (λ − λ′)(B_D + C) + (λ + λ′) C + λ B_DD, λ = H/(H + R), λ′ = L/(L + R).

    The sum is a1·H/(H + R) − a2·L/(L + R) with a1 = B_D + 2C + B_DD and a2 = B_D, whose derivative vanishes at
    one R at most: √(a1 H)(L + R) = √(a2 L)(H + R). So the maximum is at an end of the range or there."""
    a1, a2 = cross + 2.0 * bound + own, cross

    def shift(r: float) -> float:
        return a1 * _share(hi_d, r) - a2 * _share(lo_d, r)

    candidates = [lo_o, hi_o]
    u, v = math.sqrt(a1 * hi_d), math.sqrt(a2 * lo_d)
    if v != u:
        r = (u * lo_d - v * hi_d) / (v - u)
        if lo_o <= r <= hi_o:
            candidates.append(r)
    return max(shift(r) for r in candidates)


def seafl_sensitivity(alg: AlgorithmConfig, bound: float, devices: Sequence[int], staleness: Sequence[int],
                      n_samples: Sequence[int], form: str = "delta", base_distance=None) -> float:
    """S of SEAFL's Eq. 4-8 for one buffer under replace-one (docs/privacy.md, "SEAFL", derives both forms).

    Device D's updates hold a share λ = R_D / (R_D + R_−D) of the weights; replacing D's data moves R_D within
    [L_D, H_D] (:func:`seafl_weight_bounds`) and leaves R_−D, the others' sum, where it is (their cosines read only
    their own updates and public models), somewhere in [L_−D, H_−D].

    - ``delta`` (Eq. 7 on the deltas, w' = w_t + ϑ Σ p_k Δ̃_k): S = 2Cϑ · max_D H_D / (H_D + L_−D).
    - ``model`` (the paper's Eq. 7, w' = (1−ϑ) w_t + ϑ Σ p_k w̃_k: the bases w_{t_k} enter too):
      S = ϑ · max_D max_{R ∈ [L_−D, H_−D]} [(λ − λ′)(B_D + C) + (λ + λ′) C + λ B_DD], λ = H_D/(H_D + R),
      λ′ = L_D/(L_D + R), B_D the largest distance between a base of D's updates and one of the others', B_DD
      the largest between two of D's own (0 for one update). ``base_distance(i, j)`` gives ‖w_{t_i} − w_{t_j}‖
      for updates i and j (over the entries clipping covers)."""
    if form not in SEAFL_FORMS:
        raise ValueError(f"unknown SEAFL form {form!r}; allowed: {', '.join(SEAFL_FORMS)}")
    wb = seafl_weight_bounds(alg, staleness, n_samples)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, d in enumerate(devices):
        groups[d].append(i)
    lo_all, hi_all = sum(lo for lo, _ in wb), sum(hi for _, hi in wb)
    best = 0.0
    for members in groups.values():
        lo_d, hi_d = sum(wb[i][0] for i in members), sum(wb[i][1] for i in members)
        lo_o, hi_o = lo_all - lo_d, hi_all - hi_d
        if form == "delta":
            best = max(best, 2.0 * bound * _share(hi_d, lo_o))
            continue
        others = [k for k in range(len(devices)) if devices[k] != devices[members[0]]]
        cross = max((base_distance(i, k) for i in members for k in others), default=0.0)
        own = max((base_distance(i, j) for i in members for j in members if i < j), default=0.0)
        best = max(best, _model_form_shift(hi_d, lo_d, lo_o, hi_o, cross, own, bound))
    return alg.theta * best
