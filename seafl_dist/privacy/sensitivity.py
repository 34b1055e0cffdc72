"""The rule's sensitivity S: how far one device's updates can move the aggregate (docs/privacy.md, "Sensitivity").

Adjacency is replace-one at the user level: the neighbouring run replaces every update of one device by any other
(after clipping, any delta of norm ≤ C), with the schedule unchanged (the schedule never depends on trained
values: SPEC's invariant) and n_k public. Every update is kept (non-finite ones count as zero deltas), so |B| is
fixed. For the three rules, w′ is w_t or an average of models plus Σ_i c_i Δ̃_i, the c_i functions of the
schedule alone (:func:`coefficients`: FedBuff η_g·c(S_i)/|B|, FedAsync a_i·Π_{j>i}(1 − a_j), FedAvg n_i/Σn), and
everything else in w′ (w_t, the bases w_{t_i}) is an earlier release. Replacing device d's deltas moves w′ by
‖Σ_{i of d} c_i (Δ̃_i − Δ̃′_i)‖ ≤ 2C Σ_{i of d} c_i, equal when they all point one way, so

    S = 2C · max_d Σ_{i of d} c_i.

A device that appears twice in one buffer (possible under churn: sim/churn.py counts only devices in flight as
busy) is covered by its sum; each aggregation that includes it is then one Gaussian mechanism with multiplier z
for it, whatever its number of updates there.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..algo.fedasync import staleness_factor_fedasync
from ..algo.fedbuff import fedbuff_scale
from ..settings import AlgorithmConfig

RULES = ("fedbuff", "fedasync", "fedavg")


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
