"""The ``algorithm.ca2fl`` section: CA²FL's own keys (seafl_dist/algo/ca2fl.py computes the rule; the cache's size
before anything trains is runtime/ca2fl_cache.py's; docs/algorithms.md, "CA²FL", gives the equations and figures).

The section is left out of config.yaml when every key is at its default, so the file of any run that does not set
it is what it was before the section existed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.keys import key


@dataclass(kw_only=True)
class Ca2flConfig:
    """CA²FL's limits: how much memory its cache of each device's latest update may take."""

    max_cache_gb: Optional[float] = key(
        16.0, "CA²FL: refuse a run whose cache of each device's latest update (float32, one per distinct device the "
              "schedule aggregates) would exceed this many GB of memory; `null`: no limit", "(0, inf]",
        note="Counted before anything trains, from the schedule (pure: no training): D distinct devices aggregated "
             "within `run.max_aggregations` / `run.max_time` (N when neither bounds the run) × d entries of the flat "
             "model × 4 bytes, plus the float64 running sum (8 d). The refusal also gives the disk its checkpoints "
             "take: the checkpoints kept plus the one being written, each holding the cache. Left "
             "out of config.yaml (the whole section) at its defaults.")

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.ca2fl")
