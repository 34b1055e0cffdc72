"""What ``configure_optimizers`` returned, read as Lightning reads it, and its schedulers stepped as
Lightning steps them (``lightning.pytorch.core.optimizer`` and the training epoch loop, 2.x).

    optimizer, schedulers = parse_optimizers(module.configure_optimizers())
    step_schedulers(schedulers, "step", index=batch_idx + 1, plateau=False, metrics={}, step=lr_scheduler_step)

The forms: one optimizer; a list or tuple of one; ``([optimizers], [schedulers])`` and
``([optimizer], scheduler)``; a dict with ``"optimizer"`` and optionally ``"lr_scheduler"`` (a
scheduler, or a dict with ``"scheduler"``, ``"interval"``, ``"frequency"``, ``"monitor"``,
``"strict"``, ``"name"``) and ``"monitor"``; a list or tuple of such dicts. Automatic optimization
trains one optimizer, so several are refused, and so is ``None`` (Lightning would train nothing).
Each refusal is a :class:`ModuleContractError`, one line saying what was found. No Lightning
import: the forms are torch objects in Python containers.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import torch
from torch.optim.lr_scheduler import LRScheduler, OneCycleLR, ReduceLROnPlateau

from seafl_dist.settings.errors import ModuleContractError


@dataclass
class SchedulerConfig:
    """One scheduler and how it steps: the fields (and names) of Lightning's ``LRSchedulerConfig``, so
    ``self.trainer.lr_scheduler_configs[0].scheduler`` reads as under a real Trainer."""
    scheduler: object
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True


NO_OPTIMIZER = ("configure_optimizers returned None: a device would train nothing (Lightning would run without an "
                "optimizer); return an optimizer")
FORMS = ("an optimizer, [optimizer], ([optimizer], [schedulers]), {'optimizer': ..., 'lr_scheduler': ..., "
         "'monitor': ...} or a list of such dicts")


def _optimizable(x) -> bool:
    return isinstance(x, torch.optim.Optimizer) or (callable(getattr(x, "step", None))
                                                     and callable(getattr(x, "zero_grad", None)))


def _split(conf) -> tuple[list, list, str | None]:
    """(optimizers, schedulers, monitor) of every form Lightning accepts."""
    if _optimizable(conf):
        return [conf], [], None
    seq = isinstance(conf, (list, tuple))
    if seq and len(conf) == 2 and isinstance(conf[0], list) and all(_optimizable(o) for o in conf[0]):
        return list(conf[0]), (conf[1] if isinstance(conf[1], list) else [conf[1]]), None
    if isinstance(conf, dict):
        _check_optimizer_dict(conf)
        return [conf["optimizer"]], ([conf["lr_scheduler"]] if "lr_scheduler" in conf else []), conf.get("monitor")
    if seq and conf and all(isinstance(d, dict) for d in conf):
        for d in conf:
            _check_optimizer_dict(d)
        wrap = (lambda s: dict(s) if isinstance(s, dict) else {"scheduler": s})
        return [d["optimizer"] for d in conf], [wrap(d["lr_scheduler"]) for d in conf if "lr_scheduler" in d], None
    if seq and conf and all(_optimizable(o) for o in conf):
        return list(conf), [], None
    raise ModuleContractError(f"configure_optimizers returned {_describe(conf)}; Lightning accepts {FORMS}")


def _describe(x) -> str:
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of ({', '.join(type(v).__name__ for v in x)})"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    return "None" if x is None else f"a {type(x).__name__}"


def _check_optimizer_dict(d: dict) -> None:
    if "optimizer" not in d:
        raise ModuleContractError(f"configure_optimizers returned a dict without 'optimizer' (keys "
                                  f"{sorted(map(str, d))}); Lightning accepts {FORMS}")
    extra = set(d) - {"optimizer", "lr_scheduler", "monitor"}
    if extra:  # Lightning warns and goes on
        warnings.warn(f"Found unsupported keys in the optimizer configuration: {extra}", RuntimeWarning, stacklevel=3)


def _scheduler_config(s, monitor: str | None) -> SchedulerConfig:
    """One scheduler entry as Lightning's ``_configure_schedulers_automatic_opt`` reads it."""
    if isinstance(s, dict):
        known = {f.name for f in fields(SchedulerConfig)}
        extra = set(s) - known
        if extra:  # Lightning warns, drops them and goes on
            warnings.warn(f"Found unsupported keys in the lr scheduler dict: {extra}", RuntimeWarning, stacklevel=3)
        s = {k: v for k, v in s.items() if k in known}
        if "scheduler" not in s:
            raise ModuleContractError("configure_optimizers: a lr_scheduler dict needs the key 'scheduler'")
        if s.get("interval", "epoch") not in ("step", "epoch"):
            raise ModuleContractError(f"configure_optimizers: lr_scheduler 'interval' is {s['interval']!r}; "
                                      f"allowed: 'step' or 'epoch'")
        freq = s.get("frequency", 1)
        if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
            raise ModuleContractError(f"configure_optimizers: lr_scheduler 'frequency' is {freq!r}; allowed: an "
                                      f"integer >= 1")
        s.setdefault("reduce_on_plateau", isinstance(s["scheduler"], ReduceLROnPlateau))
        if s["reduce_on_plateau"] and s.get("monitor") is None:
            raise ModuleContractError("configure_optimizers: a ReduceLROnPlateau scheduler needs a 'monitor' "
                                      "(the name of a value the module logs)")
        if isinstance(s["scheduler"], OneCycleLR) and s.get("interval", "epoch") == "epoch":
            warnings.warn("A `OneCycleLR` scheduler is using 'interval': 'epoch'. Are you sure you didn't mean "
                          "'interval': 'step'?", RuntimeWarning, stacklevel=3)
        return SchedulerConfig(**s)
    if isinstance(s, ReduceLROnPlateau):
        if monitor is None:
            raise ModuleContractError("configure_optimizers: a ReduceLROnPlateau scheduler needs a 'monitor' "
                                      "(return {'optimizer': ..., 'lr_scheduler': ..., 'monitor': 'name'})")
        return SchedulerConfig(s, reduce_on_plateau=True, monitor=monitor)
    return SchedulerConfig(s)


def parse_optimizers(conf, *, own_scheduler_step: bool = False) -> tuple[object, list[SchedulerConfig]]:
    """The one optimizer and the scheduler configs of ``configure_optimizers``'s result ``conf``.
    ``own_scheduler_step``: the module overrides ``lr_scheduler_step`` (then a scheduler need not be torch's)."""
    if conf is None:
        raise ModuleContractError(NO_OPTIMIZER)
    optimizers, schedulers, monitor = _split(conf)
    if len(optimizers) != 1:
        raise ModuleContractError(f"configure_optimizers returned {len(optimizers)} optimizers; automatic "
                                  f"optimization trains one (several need manual optimization: train.loop: lightning)")
    configs = [_scheduler_config(s, monitor) for s in schedulers]
    for c in configs:
        sched = c.scheduler
        if not (callable(getattr(sched, "state_dict", None)) and callable(getattr(sched, "load_state_dict", None))):
            raise ModuleContractError(f"configure_optimizers: the scheduler {type(sched).__name__} has no "
                                      f"state_dict/load_state_dict")
        if not isinstance(sched, (LRScheduler, ReduceLROnPlateau)) and not own_scheduler_step:
            raise ModuleContractError(f"configure_optimizers: the scheduler {type(sched).__name__} is not torch's; "
                                      f"override lr_scheduler_step to step it")
        if getattr(sched, "optimizer", None) is not optimizers[0]:
            raise ModuleContractError("configure_optimizers: a scheduler is attached to an optimizer that "
                                      "configure_optimizers did not return")
    return optimizers[0], configs


def step_schedulers(configs: list[SchedulerConfig], interval: str, *, index: int, plateau: bool, metrics: dict,
                    step) -> None:
    """Lightning's ``_update_learning_rates``: every scheduler of ``interval`` whose ``index`` (batch
    index in the epoch + 1 for ``step``, epoch + 1 for ``epoch``) is a multiple of its frequency; the
    plateau ones (``plateau=True``) with the logged value they monitor, from ``metrics`` (the
    callback metrics). ``step(scheduler, value)`` is the module's ``lr_scheduler_step``."""
    for c in configs:
        if c.reduce_on_plateau != plateau or c.interval != interval or index % c.frequency != 0:
            continue
        value = None
        if c.reduce_on_plateau:
            value = metrics.get(c.monitor)
            if value is None:
                if c.strict:
                    raise ModuleContractError(f"ReduceLROnPlateau monitors {c.monitor!r}, which the module did not "
                                              f"log; it logged: {', '.join(sorted(metrics)) or 'nothing'}")
                warnings.warn(f"ReduceLROnPlateau conditioned on metric {c.monitor} which is not available but "
                              f"strict is set to `False`. Skipping learning rate update.", RuntimeWarning, stacklevel=2)
                continue
        step(c.scheduler, value)
