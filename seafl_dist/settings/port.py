"""The ``algorithm.port`` section: Port's own keys (seafl_dist/algo/port.py computes the rule; docs/algorithms.md,
"Port", gives its equations and where each choice comes from).

``b`` is PLATO's ``server.staleness_bound`` in the staleness factor b/(S + b) (examples/async/port/port_server.py),
``lag`` the distance L of the global model's movement w_t − w_{t−L} that the cosine compares each delta with. The
section is left out of config.yaml when every key is at its default, so the file of a run of another rule is what it
was before the section existed.
"""
from __future__ import annotations

from dataclasses import dataclass

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.keys import key

MAX_LAG = 16  # the rule keeps the last L global models: L·d·4 bytes on rank 0 (docs/algorithms.md, "Port")


@dataclass(kw_only=True)
class PortConfig:
    """Port (Su and Li, IWQoS 2022) as PLATO's port_server.py computes it: a staleness factor and a similarity."""

    b: float = key(10.0, "Port b: the staleness factor b/(S + b) in each update's weight (PLATO's "
                   "`staleness_bound`, default 10)", "(0, inf)",
                   note="PLATO reads one key, `server.staleness_bound`, both for this factor and for the bound past "
                        "which its server waits for stragglers; here the bound is `algorithm.staleness_limit` (β, "
                        "10 for port when not given, as PLATO's Port example sets it) and b is its own key.")
    lag: int = key(1, "Port L: the global model's movement w_t − w_{t−L} that each delta's cosine compares with",
                   f"[1, {MAX_LAG}]",
                   note="1 is what port_server.py computes (it reads model_{r−2}.pth at round r, whose current model "
                        "is round r − 1's: one aggregation back); 2 is the reading w_t − w_{t−2} of PLATO's file "
                        "names. The rule keeps the last L global models it was called with (L·d·4 bytes on rank 0, "
                        "in every checkpoint). Left out of config.yaml (the whole section) at its defaults.")

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.port")
