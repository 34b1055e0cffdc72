"""The defenses by name: kind, whether each drops updates or keeps a state, and its paper."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defense:
    kind: str  # "filter" or "estimator"
    drops: bool  # whether it drops updates before the rule (a filter; Bulyan's selection)
    stateful: bool  # whether it keeps a state between aggregations (rule memory)
    paper: str


DEFENSES = {
    "krum": Defense("filter", True, False, "Blanchard et al., NeurIPS 2017"),
    "multikrum": Defense("filter", True, False, "Blanchard et al., NeurIPS 2017"),
    "median": Defense("estimator", False, False, "Yin et al., ICML 2018"),
    "trimmed_mean": Defense("estimator", False, False, "Yin et al., ICML 2018"),
    "bulyan": Defense("estimator", True, False, "El Mhamdi et al., ICML 2018"),
    "centered_clipping": Defense("estimator", False, True, "Karimireddy et al., ICML 2021"),
    "fltrust": Defense("estimator", False, False, "Cao et al., NDSS 2021"),
    "zenopp": Defense("filter", True, True, "Xie, Koyejo and Gupta, ICML 2020"),
    "asyncfilter": Defense("filter", True, True, "AsyncFilter, Middleware 2024 (PLATO's examples/detector)"),
}
