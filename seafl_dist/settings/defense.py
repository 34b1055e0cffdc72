"""The ``algorithm.defense`` section: a robust-aggregation stage between Screen (2) and Clip (3) of SPEC's "One
aggregation, end to end" (seafl_dist/defenses/ computes it; docs/robustness.md, "Defenses", defines each one).

``name: none``, the default, is no stage at all: every byte of a run is what it was before the section existed, and
the section is left out of config.yaml. A **filter** (``krum``, ``multikrum``, ``zenopp``, ``asyncfilter``) drops updates and the rule weights
what is left, so it works with every rule; an **estimator** (``median``, ``trimmed_mean``, ``bulyan``,
``centered_clipping``, ``fltrust``) replaces the mean of the deltas, so it works with the rules that average deltas only
(:data:`DELTA_RULES`). What relates the section to the rest of the config (K, the rule, DP) is checked by
:func:`check_defense`, called once the buffer size is resolved.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key

FILTERS = ("krum", "multikrum", "zenopp", "asyncfilter")
ESTIMATORS = ("median", "trimmed_mean", "bulyan", "centered_clipping", "fltrust")
DEFENSES = ("none",) + FILTERS + ESTIMATORS
# the rules whose w′ is w_t + η_g · mean of (scaled) deltas, whose mean an estimator replaces (fadas's rule is fedbuff)
DELTA_RULES = ("fedbuff",)
WITH_F = ("krum", "multikrum", "bulyan")  # the defenses that read f
SERVER_HELD = ("fltrust", "zenopp")  # the defenses that read the server-held slice of the training set (server_samples)
# the fewest updates each defense takes, as a function of f: Krum's n > 2f + 2 (Blanchard et al. 2017), Bulyan's
# n ≥ 4f + 3 (El Mhamdi et al. 2018)
LEAST = {"krum": lambda f: 2 * f + 3, "multikrum": lambda f: 2 * f + 3, "bulyan": lambda f: 4 * f + 3}


@dataclass(kw_only=True)
class DefenseConfig:
    """Which robust-aggregation defense screens or replaces the buffer's mean, and its parameters."""

    name: str = key("none", "the defense: `none`, a filter (`krum`, `multikrum`, `zenopp`, `asyncfilter`: drop updates, then the "
                    "rule weights the rest) or an estimator (`median`, `trimmed_mean`, `bulyan`, `centered_clipping`: "
                    "replace the mean of the deltas; fedbuff and fadas only; `fltrust` with a server-held root set)", DEFENSES,
                    note="Filters and Bulyan's selection measure distances between the deltas Δ_k = w_k − w_{t_k} "
                         "over the trainable parameters, in float64, from one Gram matrix; an update a filter drops "
                         "is reported in the aggregate event as the update guard's are (weight 0, `rejected`, its "
                         "`reason`). An estimator gives w′ = w_t + η_g · est({c_k Δ_k}) (c_k FedBuff's staleness "
                         "scale) over parameters and statistics; counters are carried as by every rule. Refused "
                         "under DP (no sensitivity is derived), with a model-averaging rule for an estimator, and "
                         "with fewer updates than the defense needs (docs/robustness.md, \"Defenses\"). Left out of "
                         "config.yaml (the whole section) at its defaults.")
    f: int = key(1, "f: the number of malicious updates Krum, Multi-Krum and Bulyan tolerate in a buffer "
                 "(Krum needs `buffer_size` ≥ 2f + 3, Bulyan ≥ 4f + 3)", "[0, inf)")
    keep: Optional[int] = key(None, "Multi-Krum's m: how many updates of the lowest scores it keeps; `null`: n − f "
                              "of the n it screens", "[1, inf)")
    beta: float = key(0.1, "β: the trimmed mean drops the ⌊β n⌋ largest and ⌊β n⌋ smallest values of each "
                      "coordinate among the n deltas", "[0, 0.5)")
    tau: float = key(10.0, "τ: centered clipping's radius, each Δ_k − v clipped to norm τ around the centre v",
                     "(0, inf)")
    iterations: int = key(1, "L: centered clipping's iterations per aggregation (the authors' default 1)",
                          "[1, inf)")
    server_samples: int = key(0, "the server-held set FLTrust's root dataset is: this many samples of the training "
                              "set, carved before the partition (stratified by label, from `data.seed`'s stream "
                              "`server_data`), so disjoint from every device's shard, `data.validation` and the test "
                              "set; 0: none (required ≥ 1 by `fltrust` and `zenopp`, refused above 0 by the others)",
                              "[0, inf)")
    gamma: float = key(0.01, "γ: Zeno++'s step size in its score γ⟨v, g⟩ − ρ‖g‖² (the paper's learning rate; "
                       "`train.lr`'s default)", "(0, inf)")
    rho: float = key(0.001, "ρ: Zeno++'s weight of ‖g‖² in its score γ⟨v, g⟩ − ρ‖g‖²", "[0, inf)")
    epsilon: float = key(0.1, "ε: Zeno++ accepts an update whose score is at least −γε", "[0, inf)")
    refresh: int = key(1, "Zeno++'s lazy refresh: v, the gradient of the loss on the server-held set, is recomputed "
                       "at w_t when it is this many versions old (1: at every aggregation)", "[1, inf)")

    group_min: int = key(3, "AsyncFilter: the fewest updates of one staleness it screens (a smaller group passes "
                         "unscreened and unrecorded)", "[3, inf)",
                         note="PLATO's async_filter screens a staleness group of at least 3 (its `len(weights) >= 3`, "
                              "the least a 3-cluster KMeans takes): the default and the least allowed. "
                              "`algorithm.buffer_size` must be at least this.")
    history: int = key(19, "AsyncFilter: how many versions back its record of each version's average update "
                       "reaches (a group staler than this is compared with its own mean)", "[0, inf)",
                       note="PLATO's async_filter groups staleness 0 to 19 (its 20 groups), reading the record up "
                            "to 19 aggregations back: the default. The record holds up to this many averages in "
                            "w_t's dtype (19 × 45 MB for ResNet-18) and travels in every checkpoint "
                            "(`defense_state`).")

    def __post_init__(self) -> None:
        check_fields(self, "algorithm.defense")

    @property
    def on(self) -> bool:
        return self.name != "none"

    @property
    def kind(self) -> Optional[str]:
        """``filter``, ``estimator`` or None (off)."""
        return "filter" if self.name in FILTERS else "estimator" if self.name in ESTIMATORS else None


def check_defense(alg, privacy_enabled: bool) -> None:
    """The defense against the rest of the config (``alg``: the algorithm section, its K resolved): each refusal
    one line naming the key, its value and the fix."""
    d = alg.defense
    if d.name not in SERVER_HELD and d.server_samples > 0:
        _fail("algorithm.defense.server_samples", d.server_samples, f"0 unless algorithm.defense.name is one of "
              f"{', '.join(SERVER_HELD)} (not {d.name})")
    if not d.on:
        return
    key_ = "algorithm.defense.name"
    if privacy_enabled:
        _fail(key_, d.name, "none with privacy.enabled=true (no sensitivity is derived for a defense: "
              "docs/privacy.md's bounds are the rules' own)")
    if d.kind == "estimator" and alg.rule not in DELTA_RULES:
        _fail(key_, d.name, f"a filter ({', '.join(FILTERS)}) or none with algorithm.name={alg.name}: an estimator "
              f"replaces a mean of deltas, which only {', '.join(DELTA_RULES)} and fadas take (docs/robustness.md, "
              f"\"Defenses\")")
    if d.kind == "estimator" and alg.server_opt.pseudo_gradient == "delta":
        _fail("algorithm.server_opt.pseudo_gradient", "delta", f"model with algorithm.defense.name={d.name} (an "
              f"estimator gives no coefficient per update, which the delta form needs)")
    if d.name in LEAST and alg.buffer_size < LEAST[d.name](d.f):
        _fail("algorithm.buffer_size", alg.buffer_size, f"at least {LEAST[d.name](d.f)} with "
              f"algorithm.defense.name={d.name} and f={d.f} ({'4f + 3' if d.name == 'bulyan' else '2f + 3'}), "
              f"or a smaller algorithm.defense.f")
    if d.name in SERVER_HELD and d.server_samples < 1:
        _fail("algorithm.defense.server_samples", d.server_samples, f"at least 1 with algorithm.defense.name={d.name} "
              f"(its server-held set; FLTrust's paper uses 100)")
    if d.name == "asyncfilter" and alg.buffer_size < d.group_min:
        _fail("algorithm.buffer_size", alg.buffer_size, f"at least algorithm.defense.group_min = {d.group_min} with "
              f"algorithm.defense.name=asyncfilter (a smaller buffer has no group to screen), or a smaller group_min")
    if d.keep is not None and d.name != "multikrum":
        _fail("algorithm.defense.keep", d.keep, f"null unless algorithm.defense.name=multikrum (not {d.name})")
    if d.name == "multikrum" and d.keep is not None and d.keep > alg.buffer_size - d.f:
        _fail("algorithm.defense.keep", d.keep, f"at most algorithm.buffer_size − f = {alg.buffer_size - d.f}, "
              f"or null (n − f)")
