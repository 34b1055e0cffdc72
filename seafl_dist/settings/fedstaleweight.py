"""The ``algorithm.fedstaleweight`` section: FedStaleWeight's own key (seafl_dist/algo/fedstaleweight.py computes the
rule; docs/algorithms.md, "FedStaleWeight", gives its equations and where each choice comes from).

``offset`` is c in each update's raw weight s̄_i + c, s̄_i its device's average observed staleness: 0 is the authors'
bench (afl-bench's expected_staleness.py), 1 counts each update's staleness from 1 (the aggregation it enters
included). The section is left out of config.yaml when every key is at its default, so the file of a run of another
rule is what it was before the section existed.
"""
from __future__ import annotations

from dataclasses import dataclass

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.keys import key


@dataclass(kw_only=True)
class FedStaleWeightConfig:
    """FedStaleWeight (Ma et al., arXiv 2406.02877): each update weighted by its device's average staleness."""

    offset: float = key(1.0, "FedStaleWeight c: each update's raw weight is s̄_i + c, s̄_i its device's average "
                        "observed staleness, before the buffer's normalisation", "[0, inf)",
                        note="0 is the authors' bench (afl-bench, expected_staleness.py): a device whose updates "
                             "were all fresh (S = 0) then gets weight 0, a buffer of such updates takes no step, and "
                             "one stale update among fresh ones takes the whole step (on the quickstart the run "
                             "diverged at its fifth aggregation). 1, the default, is the average of S + 1, the "
                             "aggregations each update spans counting the one it enters (docs/algorithms.md, "
                             "\"FedStaleWeight\"). Left out of config.yaml (the whole section) at its default.")

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.fedstaleweight")
