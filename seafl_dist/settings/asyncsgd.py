"""The ``algorithm.asyncsgd`` section: the keys of ``asyncsgd``, delay-adaptive asynchronous SGD (Koloskova, Stich
and Jaggi 2022; Mishchenko et al. 2022), whose rule is seafl_dist/algo/asyncsgd.py.

    w_{t+1} = w_t + η_t Δ_k,   η_t = η if S_k ≤ τ_C, else min(η, c / S_k)

``lr`` is η, ``tau_c`` is τ_C (``null``: the concurrency M, ``devices.concurrency``, as Koloskova et al. take it:
their n workers), ``c`` is c. Its own section rather than ``algorithm.server_lr`` (FedBuff's η_g, which the server
optimizers fold into their own η): asyncsgd's η_t is its rule's. The section is left out of config.yaml when every
key is at its default; an ``asyncsgd`` run records τ_C resolved (settings/core.py ``_resolve_algorithm``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.keys import key


@dataclass(kw_only=True)
class AsyncSGDConfig:
    """asyncsgd's step: η, and the delay adaptation's τ_C and c."""

    lr: float = key(1.0, "η: asyncsgd's step on an update's delta while its staleness is at most `tau_c`",
                    "(0, inf)")
    tau_c: Optional[int] = key(None, "τ_C: the largest staleness stepped with η; above it η_t = min(η, c/S); "
                               "`null`: the concurrency M (`devices.concurrency`)", "[0, inf)",
                               shown="`null` (M)",
                               note="Koloskova et al. (NeurIPS 2022) take τ_C = n, their number of workers (M "
                                    "here), and c = 1/(4L) for an L-smooth loss; L is unknown for a network, so c is "
                                    "a key (docs/algorithms.md, \"asyncsgd\"). Left out of config.yaml (the whole "
                                    "section) at its defaults; an asyncsgd run records τ_C resolved.")
    c: float = key(1.0, "c: above `tau_c` the step is min(η, c/S), S the update's staleness", "(0, inf)")

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.asyncsgd")
