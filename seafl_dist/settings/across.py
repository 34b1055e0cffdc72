"""The checks across sections: what one section's value asks of another's (a buffer no larger than the devices in
flight, SCAFFOLD's plain SGD, FedCompass's cross-silo clock, what DP assumes of the data, a model that takes the
dataset's samples). Each section checks its own values where it is built (settings/sections.py and the section
modules); :func:`check_across` runs once the whole config is built and its algorithm resolved
(settings/core.py ``Config.__post_init__``), and refuses in one line naming the key, its value and what is allowed.
"""
from __future__ import annotations

from seafl_dist.settings.defense import check_defense
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.sections import (MODEL_NAMES, TOKEN_DATASETS, TOKEN_MODELS, WITH_WRITERS, WITHOUT_WRITERS,
                                          check_dp_sgd)


def check_across(cfg) -> None:
    """Every check across sections of ``cfg`` (a settings/core.py ``Config``: not imported here, which imports
    this module), in the order a refusal names the first key at fault."""
    if cfg.devices.num is None and cfg.data.partition != "natural":
        _fail("devices.num", None, f"an integer >= 1; null (one device per writer) only with "
              f"data.partition=natural, not {cfg.data.partition}")
    if cfg.algorithm.buffer_size > cfg.devices.concurrency:
        _fail("algorithm.buffer_size", cfg.algorithm.buffer_size,
              f"at most devices.concurrency ({cfg.devices.concurrency}), or the buffer never fills")
    if cfg.algorithm.name == "fedcompass":
        _check_fedcompass(cfg)
    if cfg.algorithm.name == "scaffold":
        _check_scaffold(cfg)
    _check_device_eval(cfg)
    cfg.privacy.check_with(cfg.algorithm, cfg.run)
    check_defense(cfg.algorithm, cfg.privacy.enabled)  # K resolved above (settings/defense.py)
    check_dp_sgd(cfg)  # train.dp_sgd against the algorithm and clipping (settings/dp_sgd.py)
    cfg.threats.check_with(cfg)
    _check_data_under_dp(cfg)
    _check_inputs(cfg.model.name, cfg.data.name)
    if cfg.compression.error_feedback and cfg.runtime.placement != "device":
        _fail("compression.error_feedback", True, f"false unless runtime.placement=device (not "
              f"{cfg.runtime.placement}): a device's residual lives on the one worker that trains its jobs")
    if cfg.train.batch_size < 2 and cfg.model.name in ("resnet18", "vgg16"):
        _fail("train.batch_size", cfg.train.batch_size,
              f"at least 2 for model.name={cfg.model.name} (batch norm cannot train on one sample)")


def _check_inputs(model: str, data: str) -> None:
    """A built-in model takes images or token ids, and a built-in dataset holds one of them: a pairing that
    cannot work (lenet5 on shakespeare, lstm on mnist) is refused before anything is loaded. A model or dataset
    named by import path is checked on the loaded data instead (runtime/model_checks.py ``check_inputs``)."""
    if model not in MODEL_NAMES or data not in WITHOUT_WRITERS + WITH_WRITERS:
        return
    if (model in TOKEN_MODELS) != (data in TOKEN_DATASETS):
        kind = "character ids" if data in TOKEN_DATASETS else "images"
        fits = TOKEN_MODELS if data in TOKEN_DATASETS else tuple(m for m in MODEL_NAMES if m not in TOKEN_MODELS)
        _fail("model.name", model, f"{', '.join(fits)} or an import path for data.name={data}, whose samples are "
              f"{kind}; {model} takes {'character ids' if model in TOKEN_MODELS else 'images'}")


def _check_fedcompass(cfg) -> None:
    """FedCompass's cross-silo setting (sim/compass.py): every device trains all the time, always online, on the
    clock's constants; its step-counted jobs train in the plain loop; no privacy accounting is derived for it."""
    dev = cfg.devices
    if dev.num is not None and dev.concurrency != dev.num:
        _fail("devices.concurrency", dev.concurrency, f"devices.num ({dev.num}) with algorithm.name=fedcompass "
              "(cross-silo: every device trains all the time)")
    if cfg.clock.sec_per_sample <= 0:
        _fail("clock.sec_per_sample", cfg.clock.sec_per_sample, "> 0 with algorithm.name=fedcompass (its speed "
              "estimates are job times per step)")
    why = "with algorithm.name=fedcompass (cross-silo: every device always online at the clock's constants)"
    if dev.profile is not None:
        _fail("devices.profile", dev.profile, f"null {why}")
    if dev.dropout is not None:
        _fail("devices.dropout", dev.dropout, f"null {why}")
    if cfg.train.loop != "plain":
        _fail("train.loop", cfg.train.loop, "plain with algorithm.name=fedcompass (a step-counted job's last epoch is "
              "cut short, which lightning.Trainer.fit's epochs cannot say)")
    if cfg.privacy.enabled:
        _fail("privacy.enabled", True, "false with algorithm.name=fedcompass (no sensitivity is derived for its "
              "step-counted jobs and group aggregation)")


def _check_scaffold(cfg) -> None:
    """SCAFFOLD's option II (algo/scaffold.py, runtime/controls.py): c_i⁺ = c_i − c + (x − y)/(K·η_l) is the mean
    corrected gradient only for plain SGD at a constant η_l; Δc is sent exact; no sensitivity is derived for c. (Under
    torchrun c_i lives on the one worker that trains device i: ``runtime.placement: device``, runtime/distributed.py.)"""
    t, why = cfg.train, "with algorithm.name=scaffold (option II's (x − y)/(K·η_l) is the mean corrected gradient of "
    if t.momentum != 0:
        _fail("train.momentum", t.momentum, f"0 {why}plain SGD only; momentum's steps are not)")
    if t.weight_decay != 0:
        _fail("train.weight_decay", t.weight_decay, f"0 {why}plain SGD only; weight decay adds a term c_i never saw)")
    if cfg.compression.codec != "none":
        _fail("compression.codec", cfg.compression.codec, "none with algorithm.name=scaffold (a codec on Δc is "
              "deferred: the upload carries Δw and Δc exact)")
    if cfg.privacy.enabled:
        _fail("privacy.enabled", True, "false with algorithm.name=scaffold (no sensitivity is derived for the "
              "server's control variate c, which every later job downloads)")


def _check_device_eval(cfg) -> None:
    """Device evaluation needs held-out data, and a sample no larger than the population."""
    run, d = cfg.run, cfg.data
    if run.device_eval_every is not None and d.device_holdout == 0 and d.device_test != "writers":
        _fail("run.device_eval_every", run.device_eval_every, "null unless the devices hold data out: "
              "data.device_holdout > 0, or data.device_test=writers")
    if run.device_eval_sample is not None and cfg.devices.num is not None and run.device_eval_sample > cfg.devices.num:
        _fail("run.device_eval_sample", run.device_eval_sample, f"at most devices.num ({cfg.devices.num}), or null")


def _check_data_under_dp(cfg) -> None:
    """What DP assumes of the data (docs/privacy.md, "Evaluation and adjacency"): disjoint shards, so that replacing
    one device's shard changes no other device's; and a test split that is not the training split, whose accuracy
    the run releases un-noised. (A test set holding the devices' writers' samples is refused where the data is read:
    runtime/shards.py ``check_private_test``.)"""
    d = cfg.data
    if not cfg.privacy.enabled:
        return
    if d.shards_overlap:
        _fail("data.shards_overlap", True, "false with privacy.enabled=true (user-level adjacency replaces one "
              "device's shard and assumes the shards disjoint: a sample two devices share would change both)")
    if d.validation > 0:
        _fail("data.validation", d.validation, "0 with privacy.enabled=true (the server's validation slice of the "
              "training set is not analysed in docs/privacy.md: tune without DP, then run with it)")
    splits, files = d.splits or {}, d.files or {}
    same = ("data.splits", d.splits) if splits.get("train", "train") == splits.get("test", "test") else \
        ("data.files", d.files) if files.get("train") is not None and files.get("train") == files.get("test") else None
    if same:
        _fail(*same, "a test split other than the training split with privacy.enabled=true (the central evaluation "
              "would score the released model on the devices' own samples without noise)")
