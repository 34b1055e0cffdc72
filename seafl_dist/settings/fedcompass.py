"""The ``algorithm.fedcompass`` section: FedCompass's own keys (seafl_dist/sim/compass.py computes the schedule,
seafl_dist/algo/fedcompass.py the server step; docs/algorithms.md, "FedCompass", gives the equations).

The defaults are the authors' reference code's (APPFL's ``CompassScheduler`` and ``FedCompassAggregator``): local
steps in [Q_min, Q_max] = [20, 100], speed momentum 0.9, latest-time factor 1.5, server step α = 0.9. The section is
left out of config.yaml when every key is at its default, so the file of a run of another rule is what it was.
"""
from __future__ import annotations

from dataclasses import dataclass

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key


@dataclass(kw_only=True)
class FedCompassConfig:
    """FedCompass (Li et al., ICLR 2024): local steps assigned per client from its estimated speed."""

    q_min: int = key(20, "FedCompass Q_min: the fewest local steps a job is assigned", "[1, inf)")
    q_max: int = key(100, "FedCompass Q_max: the most local steps a job is assigned (every first job's)", "[1, inf)")
    speed_momentum: float = key(0.9, "FedCompass m: a device's time per step v ← (1 − m)·v + m·(its last job's)",
                                "(0, 1]")
    latest_time_factor: float = key(1.5, "FedCompass λ: a group's deadline is λ times its expected span after its "
                                    "creation", "[1, inf)")
    alpha: float = key(0.9, "FedCompass α: the server step w ← w + α·Σ_k f(S_k)·Δ_k / N", "(0, inf)")

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.fedcompass")
        if self.q_min > self.q_max:
            _fail("algorithm.fedcompass.q_min", self.q_min, f"at most algorithm.fedcompass.q_max ({self.q_max})")
