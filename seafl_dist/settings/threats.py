"""The ``threats`` section: which devices are malicious and what they do (seafl_dist/threats/ carries it out;
docs/robustness.md, "Malicious devices and attacks", defines each attack and what it knows).

``attack: none`` with no malicious device, the default, is no threat at all: nothing in seafl_dist/threats/ runs,
and every byte of a run is what it was before the section existed (the section is left out of config.yaml at its
defaults). The malicious devices are ``malicious`` (a fraction of the N devices, drawn from the run's named stream
"malicious") or ``malicious_devices`` (a list of ids); the run records them in partition.json.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields, list_of
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key

LOCAL_ATTACKS = ("sign_flip", "scale", "gaussian")  # the device's own delta, on the device
OMNISCIENT_ATTACKS = ("alie", "ipm", "min_max", "min_sum")  # the buffer's honest deltas, on rank 0
DATA_ATTACKS = ("label_flip", "backdoor")  # the device's shard, before anything trains
ATTACKS = ("none",) + LOCAL_ATTACKS + OMNISCIENT_ATTACKS + DATA_ATTACKS
PERTURBATIONS = ("std", "unit_vector", "sign")  # Min-Max / Min-Sum's ∇p (Shejwalkar & Houmansadr, NDSS 2021)
IMAGE_DATASETS = ("digits", "mnist", "emnist", "cifar10", "cinic10", "femnist")  # built-in image sets, labelled


@dataclass(kw_only=True)
class ThreatsConfig:
    """Malicious devices and their attack on the update or on the data (docs/robustness.md)."""

    malicious: float = key(0.0, "the share of the N devices that are malicious: round(malicious × N) of them, drawn "
                           "without replacement from the run's stream \"malicious\"", "[0, 1]",
                           note="Or name them in `malicious_devices`. The devices chosen are recorded in "
                                "partition.json (`malicious`), and each aggregate event marks their updates "
                                "(`\"malicious\": true`). Left out of config.yaml (the whole section) at its defaults "
                                "(docs/robustness.md).")
    malicious_devices: Optional[list] = key(None, "the malicious devices by id, in place of `malicious`; null: "
                                            "drawn by `malicious`", list_of("[0, inf)"))
    attack: str = key("none", "what the malicious devices do: to their delta on the device (`sign_flip`, `scale`, "
                      "`gaussian`), to it at aggregation from the buffer's honest deltas (`alie`, `ipm`, `min_max`, "
                      "`min_sum`), or to their data (`label_flip`, `backdoor`)", ATTACKS)
    fast: bool = key(False, "fast attackers: the malicious devices take the smallest idle times of the population's "
                     "draw (the honest devices they displace take the malicious devices' own)",
                     note="Needs `clock.idle.resample: per_device`, an idle distribution other than `none`, and no "
                          "`devices.profile` (docs/robustness.md, \"Fast attackers\").")
    scale: float = key(10.0, "`scale`: λ, the delta boosted to λ·Δ", "(0, inf)")
    sigma: float = key(0.1, "`gaussian`: σ of the noise N(0, σ²I) added to the delta", "(0, inf)")
    z: Optional[float] = key(None, "`alie`: z of μ + z·σ; null: derived from the buffer as ALIE's Algorithm 1 does",
                             "[0, inf)")
    epsilon: float = key(0.1, "`ipm`: ε of −ε·μ, μ the mean of the honest deltas", "(0, inf)")
    perturbation: str = key("std", "`min_max`, `min_sum`: ∇p, the direction subtracted from μ: the honest deltas' "
                            "coordinate-wise standard deviation, μ's unit vector, or μ's sign", PERTURBATIONS)
    backdoor_target: int = key(0, "`backdoor`: the label the trigger asks for", "[0, inf)")
    backdoor_fraction: float = key(0.5, "`backdoor`: the share of a malicious shard's samples given the trigger and "
                                   "the target label", "(0, 1]")
    trigger_size: int = key(3, "`backdoor`: the trigger's side in pixels, a square at the image's bottom-right "
                            "corner set to the brightest value", "[1, 64]")

    def __post_init__(self) -> None:
        check_fields(self, "threats")
        if self.malicious_devices is not None:
            if self.malicious:
                _fail("threats.malicious", self.malicious, "0 with threats.malicious_devices set (one way of "
                      "naming the malicious devices)")
            if len(set(self.malicious_devices)) != len(self.malicious_devices):
                _fail("threats.malicious_devices", self.malicious_devices, "distinct device ids")

    @property
    def active(self) -> bool:
        """Whether any device is malicious (with ``attack: none`` they are honest but recorded, and ``fast``)."""
        return bool(self.malicious) or bool(self.malicious_devices)

    @property
    def omniscient(self) -> bool:
        return self.attack in OMNISCIENT_ATTACKS

    def check_with(self, cfg) -> None:
        """What the attack asks of the rest of the run (``cfg``: the whole Config): refused in one line each."""
        if not self.active:
            if self.attack != "none" or self.fast:
                field, value = ("threats.attack", self.attack) if self.attack != "none" else ("threats.fast", True)
                _fail(field, value, f"{'none' if field == 'threats.attack' else 'false'} with no malicious device, "
                      "or set threats.malicious > 0 or threats.malicious_devices")
            return
        n = cfg.devices.num
        if self.malicious_devices is None and n is not None and math.floor(self.malicious * n + 0.5) == 0:
            _fail("threats.malicious", self.malicious, f"at least {0.5 / n:g} with devices.num={n}, or 0: "
                  f"round({self.malicious:g} × {n}) malicious devices is none")
        if self.malicious_devices is not None and n is not None and max(self.malicious_devices, default=-1) >= n:
            _fail("threats.malicious_devices", self.malicious_devices, f"device ids below devices.num ({n})")
        if cfg.privacy.enabled:
            _fail("privacy.enabled", True, "false with malicious devices (threats.*): DP's guarantee is about an "
                  "honest device's data, and no attack is analysed under it in docs/privacy.md")
        if self.omniscient and cfg.algorithm.buffer_size == 1:
            _fail("threats.attack", self.attack, f"a local or data attack with algorithm.buffer_size=1 "
                  f"(algorithm.name={cfg.algorithm.name}): an omniscient attack reads the honest updates of the "
                  "buffer it lands in, and a buffer of one holds none")
        if self.fast:
            idle = cfg.clock.idle
            if idle.distribution == "none" or idle.resample != "per_device" or cfg.devices.profile is not None:
                _fail("threats.fast", True, "false unless clock.idle.distribution is zipf or pareto, "
                      "clock.idle.resample=per_device and devices.profile is null (fast attackers take the smallest "
                      "of the idle times drawn once per device)")
            if cfg.algorithm.name == "fedcompass":
                _fail("threats.fast", True, "false with algorithm.name=fedcompass (its step counts are assigned "
                      "from the clock's speeds, which fast attackers would change)")
        if self.attack in DATA_ATTACKS:
            d = cfg.data
            if d.shards_overlap:
                _fail("data.shards_overlap", True, f"false with threats.attack={self.attack} (a poisoned sample "
                      "shared with an honest device would poison it too)")
            if self.attack == "backdoor" and ":" in cfg.model.name:
                _fail("model.name", cfg.model.name, "a built-in model with threats.attack=backdoor (its success rate "
                      "is scored by the built-in evaluation, on logits)")
            if d.name not in IMAGE_DATASETS:
                _fail("threats.attack", self.attack, f"an update attack for data.name={d.name}: data attacks change "
                      f"the labels and pixels of the built-in image sets ({', '.join(IMAGE_DATASETS)})")
