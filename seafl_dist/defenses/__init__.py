"""Robust aggregation: the defenses that stand between Screen (2) and Clip (3) of SPEC's "One aggregation, end to
end" (``algorithm.defense``; docs/robustness.md, "Defenses", defines each one exactly).

This room owns what a defense computes from a buffer: which updates a filter drops, and what an estimator puts in
place of the mean of the deltas Δ_k = w_k − w_{t_k}. The server loop, the rules and their weights are algo/'s;
the keys and their refusals are settings/defense.py's. Everything here is a pure function of flat tensors (and, for
centered clipping, of the centre kept as rule memory, algo/memory.py).

- :mod:`.geometry`: the deltas read in coordinate blocks, float64; pairwise squared distances from one Gram matrix.
- :mod:`.filters`: Krum, Multi-Krum, Bulyan's iterated-Krum selection, Zeno++'s score.
- :mod:`.asyncfilter`: AsyncFilter's staleness groups, their outlier clusters and its record of past averages (the
  memory's ``defense_state``).
- :mod:`.estimators`: coordinate-wise median, trimmed mean, Bulyan's coordinate phase, centered clipping, FLTrust.

FLTrust and Zeno++ read what the server computes on its held set (FLTrust's update g_0, Zeno++'s gradient v) from
the rule memory's ``server`` (runtime/server_data.py sets it: training is not this room's); Zeno++'s cached v is
the memory's ``defense_state``.
- :mod:`.stage`: the stage as algo/dispatch.py calls it.

:data:`DEFENSES` is the registry: each name with its kind (``filter`` drops updates and lets any rule weight the
rest; ``estimator`` replaces a mean of deltas, for the rules that take one), whether it drops updates, and whether
it keeps a state between aggregations.
"""
from __future__ import annotations

from .registry import DEFENSES, Defense
from .stage import estimator_rule, rejections

__all__ = ["DEFENSES", "Defense", "estimator_rule", "rejections"]
