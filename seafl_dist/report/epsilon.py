"""ε in the report: each run's, and the composition of the runs it pools (docs/privacy.md, "What a run reports").

    composed_of(group.runs)        # a grid point's seeds: their ε composed, never their mean
    per_data(runs)                 # every DP run of the report, composed per data set

A run's ε is its summary.json's ``privacy.epsilon`` (∞ where z = 0). Runs on the same data compose: a device of
one seed's run and a device of another's may hold the same person's samples, so their losses add up (adaptively),
and k seeds at ε each spend more than ε. Each run enters as its most-included device's ``max_inclusions`` m at its
own z (``noise_multiplier``), composed by privacy/accountant.py's :func:`composed_epsilon` (``dp-accounting``):
ε grows with m, so that bounds every device whatever it was in each run. It is reported at the smallest
``privacy.delta`` of the runs, with their accountant (PLD where they differ). A run with seeded noise
(``privacy.seeded_noise``) is flagged, and so is every composition it enters (:func:`seeded`).

**The same data** is the same ``data.name``, ``data.root`` and ``data.files`` in config.yaml (:data:`DATA_KEYS`, as
written there). How the samples are split (``data.seed``, ``data.partition``, ``data.samples_per_device``, ...) does
not make other data: every split draws on the same samples. Runs on different data are never composed together.
"""
from __future__ import annotations

import json
import math

from seafl_dist.settings import DataConfig

DATA_KEYS = ("data.name", "data.root", "data.files")


def data_of(run) -> tuple:
    """The data ``run`` (a RunResult) trained on, as :data:`DATA_KEYS`' values (config.yaml's defaults filled in)."""
    default = DataConfig()
    return tuple(json.dumps(run.config.get(k, getattr(default, k.split(".", 1)[1])), sort_keys=True)
                 for k in DATA_KEYS)


def data_name(data: tuple) -> str:
    """``data.name=mnist, data.root=data`` for :func:`data_of`'s tuple (``data.files`` only where set)."""
    return ", ".join(f"{k}={json.loads(v)}" for k, v in zip(DATA_KEYS, data) if json.loads(v) is not None)


def spent(run) -> tuple | None:
    """``(z, m, δ, accountant)`` of a DP run's summary.json, None for a run without privacy (or without them)."""
    p = run.summary.get("privacy") or {}
    if p.get("noise_multiplier") is None or p.get("max_inclusions") is None or p.get("delta") is None:
        return None
    return float(p["noise_multiplier"]), int(p["max_inclusions"]), float(p["delta"]), str(p.get("accountant", "pld"))


def seeded(runs) -> bool:
    """Whether any of ``runs`` drew its noise from ``run.seed`` (``privacy.seeded_noise``: summary.json's ``noise``):
    its ε, and any composition with it, holds against no reader of config.yaml."""
    return any((r.summary.get("privacy") or {}).get("noise") == "seeded" for r in runs)


def composed_of(runs) -> float:
    """The composed ε of ``runs`` (module doc): the run's own ε for one run; NaN where a run has no privacy record,
    or the runs are not all on the same data (they do not compose)."""
    runs = list(runs)
    if not runs or len({data_of(r) for r in runs}) > 1:
        return math.nan
    if len(runs) == 1:
        e = (runs[0].summary.get("privacy") or {})
        return math.nan if not e else math.inf if e.get("epsilon") is None else float(e["epsilon"])
    each = [spent(r) for r in runs]
    if any(s is None for s in each):
        return math.nan
    from seafl_dist.privacy.accountant import composed_epsilon  # dp-accounting: only a report of DP runs pays
    accountants = {s[3] for s in each}
    return composed_epsilon([(z, m) for z, m, _, _ in each], min(s[2] for s in each),
                            accountants.pop() if len(accountants) == 1 else "pld")


def per_data(runs) -> list[dict]:
    """Every DP run of the report, composed per data set: ``{"data", "runs", "delta", "epsilon"}`` in order of
    appearance (none for a report without DP runs)."""
    found: dict[tuple, list] = {}
    for r in runs:
        if r.summary.get("privacy"):
            found.setdefault(data_of(r), []).append(r)
    return [{"data": data_name(d), "runs": len(rs), "epsilon": composed_of(rs), "seeded": seeded(rs),
             "delta": min((s[2] for s in map(spent, rs) if s is not None), default=math.nan)}
            for d, rs in found.items()]
