"""ε at δ for a device included m times: the composition of m Gaussian mechanisms, each with multiplier z.

Each aggregation that includes device k releases w′ + N(0, (z·S)² I) with S bounding what k's updates can move w′
(privacy/sensitivity.py), so for k it is ``GaussianDpEvent(z)``; k's loss over the run is
``SelfComposedDpEvent(GaussianDpEvent(z), m_k)``, composed adaptively. No amplification by sampling is claimed: a
device takes part because it is fast and online, not because a random sample drew it. The run's ε is the
largest over devices. ``dp-accounting`` computes it (PLD by default, RDP on request), never code of this
project, once per distinct m; it is imported here only, when ε is first asked for, so a run without privacy
never imports it (``pip install seafl-dist[privacy]`` installs it).
"""
from __future__ import annotations

import functools
import math
from typing import Iterable

ACCOUNTANTS = ("pld", "rdp")


def _accountant(kind: str):
    import dp_accounting  # lazy: only a run with privacy, or a test, pays for it
    # S is already the whole shift replace-one can cause (2C·Σc, privacy/sensitivity.py), so the event is a
    # Gaussian whose neighbouring means lie σ/z apart: dp-accounting's GaussianDpEvent under ADD_OR_REMOVE_ONE.
    # Its REPLACE_ONE would read z against the norm of one record and double the shift a second time (PLD; its
    # RDP ignores the relation for a Gaussian).
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind == "pld":
        return dp_accounting.pld.PLDAccountant(neighboring_relation=relation)
    if kind == "rdp":
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    raise ValueError(f"unknown accountant {kind!r}; allowed: {', '.join(ACCOUNTANTS)}")


@functools.lru_cache(maxsize=4096)
def epsilon(noise_multiplier: float, count: int, delta: float, accountant: str = "pld") -> float:
    """ε at ``delta`` of ``count`` compositions of the Gaussian mechanism with ``noise_multiplier``: 0 for no
    inclusion, ∞ for z = 0 (no noise)."""
    if count < 0 or not 0 < delta < 1 or not noise_multiplier >= 0:
        raise ValueError(f"epsilon needs count >= 0, delta in (0, 1), z >= 0: got {count}, {delta}, "
                         f"{noise_multiplier}")
    if count == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    import dp_accounting
    acc = _accountant(accountant)
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(noise_multiplier), count))
    return float(acc.get_epsilon(delta))


def run_epsilon(noise_multiplier: float, inclusions: Iterable[int], delta: float, accountant: str = "pld") -> float:
    """The run's ε: the largest over devices of each one's ε for its number of inclusions m_k (one computation
    per distinct m)."""
    return max((epsilon(noise_multiplier, int(m), delta, accountant) for m in set(inclusions)), default=0.0)
