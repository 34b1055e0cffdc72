"""Checks of the model a run builds, made before anything is trained: a built-in model given data of
the other kind (images for a model of token ids, or the reverse), a built-in model too large for
this machine (counted on torch's meta device), a user's model the allocator refuses to build, and the
``train.*`` optimizer keys a module with its own ``configure_optimizers`` leaves unused (a warning); a user's
model probed by a job before any trains (:func:`check_user_model`), and ``run.target_metric`` checked against what
the evaluation logs (:func:`check_target_metric`).
"""
from __future__ import annotations

import os
import sys

import torch

from seafl_dist.models import build_model
from seafl_dist.settings import Config, ConfigError
from seafl_dist.settings.plugins import is_import_path


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_inputs(cfg: Config, inputs: str) -> None:
    """Refuse a built-in model whose input (``inputs`` of its class: images or token ids) is not what the dataset
    holds (``inputs``, of an ArrayDataset or the dry run's DataCheck). The config refuses the pairings of built-in
    names already (settings/core.py); this catches a dataset named by import path. A user's model takes what it
    takes (its own check is a probe on the data, runtime/setup.py)."""
    from seafl_dist.models import MODELS
    name = cfg.model.name
    if name not in MODELS or MODELS[name].inputs == inputs:
        return
    fits = ", ".join(m for m, cls in MODELS.items() if cls.inputs == inputs)
    what = {"tokens": "token ids", "images": "images"}.get(inputs, "of any structure (a DataModule's, or a loader's that are not images)")
    raise ConfigError(f"config key 'model.name' has value {name!r}; allowed: {fits + ' or ' if fits else ''}an import path for "
                      f"data.name={cfg.data.name}, whose samples are {what}; {name} takes "
                      f"{MODELS[name].inputs.replace('tokens', 'token ids')}")


COPIES = 3  # what any training process holds at least: the weights, their gradients, the flat vector


def check_model_size(cfg: Config, num_classes: int, in_channels: int, image_size: int, memory: int | None = None,
                     num_devices: int = 0) -> None:
    """Refuse, before anything is allocated, a built-in model whose float32 weights, gradients and flat
    vector (``COPIES``) alone exceed this machine's memory (a large ``model.width``), and, with
    ``compression.error_feedback``, one whose ``num_devices`` residuals (float32, one per device) do too, and so with
    ``algorithm.name: scaffold`` for its devices' control variates c_k: counted
    on torch's meta device, which allocates nothing. A user's model is built as it is (its own code)."""
    m = cfg.model
    if is_import_path(m.name):
        return
    memory = physical_memory() if memory is None else memory
    if memory is None:
        return
    try:
        with torch.device("meta"), torch.random.fork_rng(devices=[]):
            model = build_model(m.name, num_classes, in_channels, width=m.width, image_size=image_size, lightning=False)
    except ValueError:  # not the size: build_model's own check says what (model.name)
        return
    params = sum(p.numel() for p in model.parameters())
    needed = COPIES * 4 * params
    if needed > memory:
        raise ConfigError(f"config key 'model.width' has value {m.width:g}: {m.name} at that width has {params:,} "
                          f"parameters, and its weights, gradients and flat vector alone take {needed / 1e9:.1f} GB as "
                          f"float32, more than this machine's {memory / 1e9:.1f} GB of memory; choose a smaller "
                          f"model.width (1 is the paper's model)")
    residuals = 4 * params * num_devices if cfg.compression.error_feedback else 0
    controls = 4 * params * num_devices if cfg.algorithm.name == "scaffold" else 0  # SCAFFOLD's c_k, alike
    if controls and needed + residuals + controls > memory:
        raise ConfigError(f"config key 'algorithm.name' has value 'scaffold': {num_devices} devices' control variates "
                          f"c_k of {m.name}'s {params:,} parameters take {controls / 1e9:.2f} GB as float32 "
                          f"({4 * params / 1e6:.1f} MB a device), with the model's {needed / 1e9:.2f} GB"
                          f"{' and the residuals' if residuals else ''} more than this machine's {memory / 1e9:.1f} GB "
                          f"of memory; use fewer devices or another algorithm.name")
    if residuals and needed + residuals > memory:  # every device's residual, on one machine (codecs/feedback.py)
        raise ConfigError(f"config key 'compression.error_feedback' has value True: {num_devices} devices' residuals "
                          f"of {m.name}'s {params:,} parameters take {residuals / 1e9:.2f} GB as float32 ("
                          f"{4 * params / 1e6:.1f} MB a device), with the model's {needed / 1e9:.2f} GB more than this "
                          f"machine's {memory / 1e9:.1f} GB of memory; turn error feedback off or use fewer devices")


def built(cfg: Config, make):
    """``make()`` (a user's model being built), with running out of host memory said in one line."""
    try:
        return make()
    except (MemoryError, RuntimeError) as err:
        if isinstance(err, RuntimeError) and "can't allocate memory" not in str(err):
            raise
        raise ConfigError(f"model.name={cfg.model.name} (model.width {cfg.model.width:g}) cannot be built here: "
                          f"{str(err).splitlines()[0] or type(err).__name__}; choose a smaller model") from None


def say_unused_optimizer_keys(cfg: Config, model) -> None:
    """The warning of :func:`unused_optimizer_keys`, once (rank 0), after every refusal had its chance."""
    unused = unused_optimizer_keys(cfg, model)
    if unused and os.environ.get("RANK", "0") == "0":  # every rank probes; one says it
        print(f"seafl: warning: {unused}", file=sys.stderr)


OPTIMIZER_KEYS = ("lr", "momentum", "weight_decay")  # what FLModule's configure_optimizers reads of train.*


def unused_optimizer_keys(cfg: Config, model) -> str | None:
    """A user's LightningModule with its own ``configure_optimizers`` makes its own optimizer, so
    ``train.lr``, ``train.momentum`` and ``train.weight_decay`` do nothing: named when the config sets
    any of them away from its default (a plain ``nn.Module`` is wrapped and trained with them)."""
    from seafl_dist.models.base import FLModule
    if type(model).configure_optimizers is FLModule.configure_optimizers:
        return None
    defaults = type(cfg.train)()
    set_here = [f"train.{k}={getattr(cfg.train, k):g}" for k in OPTIMIZER_KEYS
                if getattr(cfg.train, k) != getattr(defaults, k)]
    if not set_here:
        return None
    return (f"{', '.join(set_here)} {'is' if len(set_here) == 1 else 'are'} not used: model.name={cfg.model.name} "
            f"brings its own configure_optimizers, whose optimizer and settings apply")


def check_dp_model(cfg: Config, exp) -> list[str]:
    """Under ``train.dp_sgd``: Opacus installed and a model it can train, each refused in one line (the model's by
    the layer, train/dp_sgd.py ``blocker``); with ``fix_modules`` the layers its fix replaced, said once (rank 0) on
    stderr and returned for summary.json."""
    from seafl_dist.train.dp_sgd import blocker, fix_line, fix_model, fixable, require_opacus
    require_opacus()
    with torch.random.fork_rng(devices=[]):  # building it must not move torch's global generator
        d, m = exp.train, cfg.model
        raw = built(cfg, lambda: build_model(m.name, d.num_classes, d.in_channels, width=m.width,
                                             image_size=d.image_size, optim=cfg.train, lightning=False,
                                             params=m.params))
    replaced = fix_model(raw) if cfg.train.dp_sgd.fix_modules else []
    why = blocker(raw.train())
    if why is not None:
        fix = ("; set train.dp_sgd.fix_modules: true (Opacus's ModuleValidator.fix: BatchNorm becomes GroupNorm)"
               if fixable(raw) else "; use a model whose layers Opacus can train")
        raise ConfigError(f"config key 'model.name' has value {cfg.model.name!r} under train.dp_sgd.enabled=true: "
                          f"{why}{fix}")
    if replaced and os.environ.get("RANK", "0") == "0":
        print(fix_line(replaced), file=sys.stderr)
    return replaced


def check_user_model(cfg: Config, model, data, num_classes: int, device, eval_data=None, dp_sgd=None) -> list[str] | None:
    """A model named by import path, refused in one ConfigError line naming ``model.name``: unless a module
    evaluated as the built-in models are gives ``(batch, num_classes)`` logits on batches ``(x, labels)``; unless a
    probe job (train/probe.py: the hooks it overrides, then one epoch of two batches of ``data``'s first four rows
    by the run's loop) trains it as the run would; and, for a module with its own ``test_step`` (or
    ``validation_step``), unless it logs finite values on ``eval_data`` (some test rows; ``data`` when None).
    ``data`` / ``eval_data``: datasets (``len`` and ``batch``). Returns the names that evaluation logs, in order
    (the metrics.csv columns), or None for the built-in evaluation."""
    from seafl_dist.data.samples import as_pair
    from seafl_dist.models.custom import check_logits  # imports Lightning: custom models only
    from seafl_dist.train.evaluation import evaluation_step
    from seafl_dist.train.probe import check_module, probe_batches, probe_evaluation
    own_step = evaluation_step(model) is not None
    batches = probe_batches(data, torch.device(device))
    if not own_step:
        pair = as_pair(batches[0])
        if pair is None:
            raise ConfigError(f"config key 'model.name' has value {cfg.model.name!r}: it has no test_step (or "
                              f"validation_step), and data.name={cfg.data.name}'s batches are "
                              f"{type(batches[0]).__name__}, not (inputs, integer labels), which the built-in "
                              "evaluation scores; give the module a test_step that self.logs its metrics")
        check_logits(cfg.model.name, model, pair[0][:2], num_classes)
    t = cfg.train
    why = check_module(model, batches, loop=t.loop, clip=(t.grad_clip_val, t.grad_clip_algorithm), device=device,
                       precision=cfg.runtime.precision, prox_mu=t.prox_mu,
                       dp_sgd=(dp_sgd or t.dp_sgd) if t.dp_sgd.enabled else None)
    names = None
    if why is None and own_step:
        logged, why = probe_evaluation(model, eval_data if eval_data is not None else data, device=device,
                                       precision=cfg.runtime.precision)
        names = list(logged)
    if why:
        raise ConfigError(f"config key 'model.name' has value {cfg.model.name!r}: {why}")
    return names


def check_target_metric(cfg: Config, eval_names: list[str] | None) -> None:
    """``run.target_metric`` must be a metric the evaluation gives (one line naming what it gives)."""
    from seafl_dist.report.metric import BUILT_IN
    if cfg.run.target_metric in (eval_names if eval_names is not None else BUILT_IN):
        return
    given = (f"a name its evaluation step logs: {', '.join(eval_names)}" if eval_names is not None else
             f"{' or '.join(BUILT_IN)} (the built-in evaluation; a module evaluated by its own test_step may log others)")
    raise ConfigError(f"config key 'run.target_metric' has value {cfg.run.target_metric!r}; allowed: {given}")
