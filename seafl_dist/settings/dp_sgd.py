"""The ``train.dp_sgd`` section: record-level DP-SGD on the devices (seafl_dist/train/dp_sgd.py carries it out with
Opacus; docs/privacy.md, "Record-level DP-SGD", says what it protects).

``enabled: false``, the default, is no DP-SGD at all: nothing imports Opacus, and every byte of a run is what it was
before the section existed (the section is left out of config.yaml at its defaults). What relates the section to the
rest of the config (the algorithm, gradient clipping) is checked by :func:`check_dp_sgd`; what only the built model
can say (a layer Opacus cannot hold) is checked when the run is prepared (runtime/setup.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key

ACCOUNTANTS = ("rdp", "prv")  # Opacus's accountants a device's ε is composed by (privacy/record_accountant.py)

# Opacus's per-sample gradient modes that train a job's own module in place (opacus/grad_sample/utils.py
# get_hooks_class): hand-written per-layer samplers, or functorch's vmap for every layer. "ew" (expanded weights) and
# "ghost" (fast gradient clipping) need the module wrapped or a second backward: benchmarks/dp_sgd_cost.py measures
# them, the loops do not run them (docs/privacy.md).
GRAD_SAMPLE_MODES = ("hooks", "functorch")


@dataclass(kw_only=True)
class DPSGDConfig:
    """Per-sample clipping and Gaussian noise in every local step, on Poisson-sampled batches (Opacus)."""

    enabled: bool = key(False, "train every job with DP-SGD: each sample's gradient clipped to `clip`, Gaussian noise "
                        "σ·`clip` added to their sum, on Poisson-sampled batches of expected size `train.batch_size`",
                        note="Needs Opacus (`pip install \".[dp]\"`). Each step draws every sample of the device's "
                             "shard with probability q = B/n_k, as many steps an epoch as the plain loop takes; the "
                             "batches and the noise are drawn from the devices' secret key (`key_file`), never "
                             "from run.seed (docs/privacy.md, \"Record-level DP-SGD\"). Refused with "
                             "`algorithm.name: scaffold` and `train.grad_clip_val`; a job trains in its own loop "
                             "(not fused, not captured as CUDA graphs). Left out of config.yaml (the whole section) "
                             "at its defaults.")
    clip: float = key(1.0, "C_local: each sample's gradient is clipped to this L2 norm (over every trainable "
                      "parameter)", "(0, inf)")
    noise_multiplier: Optional[float] = key(1.0, "σ: the noise added to the sum of clipped gradients is "
                                            "N(0, (σ·C_local)² I), before it is divided by B; `null`: calibrated from "
                                            "`target_epsilon`", "[0, inf)")
    grad_sample_mode: str = key("hooks", "how Opacus computes per-sample gradients: `hooks` (its per-layer "
                                "samplers; functorch for layers it has none for) or `functorch` (vmap for every "
                                "layer)", GRAD_SAMPLE_MODES)
    fix_modules: bool = key(False, "replace the layers Opacus cannot train as Opacus's `ModuleValidator.fix` "
                            "proposes (BatchNorm becomes GroupNorm) in every model of the run; `false`: such a model "
                            "is refused, naming the layer",
                            note="The fixed model is the run's model everywhere (w_0, the server's, model.pt); the run's "
                                 "first lines and summary.json's `dp_sgd.replaced` name each layer replaced.")
    accountant: str = key("rdp", "how each device's record-level ε composes the DP-SGD steps of its arrived jobs at "
                          "q_k = B/n_k, at `privacy.delta`: Opacus's `rdp` (RDPAccountant, its default orders) or "
                          "`prv` (PRVAccountant, eps_error 0.01, its upper bound)", ACCOUNTANTS,
                          note="Charged: every job whose upload an aggregation takes (SEAFL²'s notified jobs at the "
                               "steps they took); never a dropped job or one in flight at the end. summary.json's "
                               "`dp_sgd.epsilon` holds each device's ε, the largest and the quantiles; `seafl report` "
                               "puts ε beside each device's speed (participation.csv, dp_sgd_epsilon.png). `rdp` costs "
                               "one RDP vector per distinct shard size; `prv` one composition per distinct (q_k, T_k), "
                               "seconds each at large q·T (docs/privacy.md, \"Each device's ε\").")
    target_epsilon: Optional[float] = key(None, "the target record-level ε: σ is calibrated before the run, over the "
                                          "whole schedule replayed, so that every device's ε over its arrived jobs "
                                          "is at most this; `null`: give `noise_multiplier`", "(0, inf)",
                                          note="Needs `noise_multiplier: null` and a schedule that ends "
                                               "(`run.max_aggregations` or `run.max_time`). The bound is the largest "
                                               "over devices of ε_k(q_k, T_k), each device at its own q_k (a small "
                                               "shard may bind before the device with the most jobs); a run that "
                                               "stops earlier (its target accuracy) spends less. summary.json's "
                                               "`dp_sgd.noise_multiplier` is the σ found.")

    key_file: Optional[str] = key(None, "a file whose bytes (at least 16, whitespace stripped) are the devices' "
                                  "DP-SGD key, which every job's Poisson batches and noise are drawn from, so that "
                                  "two runs draw the same; `null`: $SEAFL_DP_SGD_KEY if set, else a fresh key from "
                                  "os.urandom",
                                  note="Never run.seed: the server, which reads config.yaml, cannot regenerate a "
                                       "device's batches or noise. The key is kept in the run dir's "
                                       "private/device.key for a resume; only the trainers read it, and only its "
                                       "fingerprint is printed (docs/privacy.md, \"Record-level DP-SGD\").")

    def __post_init__(self) -> None:
        check_fields(self, "train.dp_sgd")


def check_dp_sgd(cfg) -> None:
    """DP-SGD against the rest of the config: each refusal one line naming the key, its value and the fix."""
    dp, t = cfg.train.dp_sgd, cfg.train
    if not dp.enabled:
        return
    if cfg.algorithm.name == "scaffold":
        _fail("train.dp_sgd.enabled", True, "false with algorithm.name=scaffold (option II's c_i⁺ reads the plain "
              "SGD steps' gradients, which DP-SGD replaces by noised ones after c − c_i would be added); use another "
              "algorithm.name")
    if dp.target_epsilon is not None and dp.noise_multiplier is not None:
        _fail("train.dp_sgd.noise_multiplier", dp.noise_multiplier, f"null with train.dp_sgd.target_epsilon="
              f"{dp.target_epsilon:g} (σ is calibrated to it before the run); or give train.dp_sgd.target_epsilon: "
              "null to train at this σ")
    if dp.target_epsilon is None and dp.noise_multiplier is None:
        _fail("train.dp_sgd.noise_multiplier", None, "a number >= 0 (σ), or null with train.dp_sgd.target_epsilon "
              "set (σ calibrated to it)")
    if dp.target_epsilon is not None and cfg.run.max_aggregations is None and cfg.run.max_time is None:
        _fail("train.dp_sgd.target_epsilon", dp.target_epsilon, "null unless run.max_aggregations or run.max_time "
              "ends the schedule (σ is calibrated over the whole schedule, replayed before the run)")
    if t.grad_clip_val is not None:
        _fail("train.grad_clip_val", t.grad_clip_val, "null with train.dp_sgd.enabled=true (DP-SGD clips each "
              "sample's gradient to train.dp_sgd.clip; clipping their noised mean again would only bias it)")
