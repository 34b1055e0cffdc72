"""What a LightningModule sees of its Trainer inside a job of the plain loop, and what it logs.

:class:`Recorder` is ``self.log`` / ``self.log_dict``: values reduced as Lightning's result collection
reduces them (``lightning.pytorch.trainer.connectors.logger_connector.result``: float32 tensors,
batch-size-weighted means, ``reduce_fx`` min/max/sum, ``on_step``/``on_epoch`` defaults per hook, the
``_step``/``_epoch`` forked names, torchmetrics ``Metric`` values by their own ``forward``/``compute``/
``reset``: train/logged_values.py), so ``callback_metrics`` (what ``ReduceLROnPlateau`` monitors) read
as under a real Trainer. Beside that it keeps, per name, one reduction over every step of the job
(``job_values``): what the update carries to rank 0.

:class:`StandInTrainer` is ``self.trainer``: the documented surface (docs/extending.md) and nothing
else; reading or setting anything more raises one line naming it and ``train.loop: lightning``.
"""
from __future__ import annotations

import numbers
import warnings
from functools import partial

import torch

from seafl_dist.train.logged_values import (METRIC, _MetricResult, _not_distributed, _Reduced, _reduction,
                                            batch_size_of, is_metric)
from seafl_dist.train.optim_config import ModuleContractError

STEP_LEVEL = ("training_step", "on_train_batch_start", "on_train_batch_end", "on_before_backward", "backward",
              "on_after_backward", "on_before_optimizer_step", "optimizer_step", "configure_gradient_clipping",
              "on_before_zero_grad", "optimizer_zero_grad")
EVAL_STEP_LEVEL = tuple(f"{x}{stage}{y}" for stage in ("test", "validation")
                        for x, y in (("", "_step"), ("on_", "_batch_start"), ("on_", "_batch_end")))
EPOCH_LEVEL = ("on_train_start", "on_train_epoch_start", "on_train_epoch_end",
               *(f"on_{stage}_{when}" for stage in ("test", "validation") for when in ("start", "epoch_start", "epoch_end")))
class Recorder:
    """``self.log`` of one job: per-epoch results (for callback_metrics) and per-job totals."""

    def __init__(self) -> None:
        self.fx: str | None = None  # the hook being run (Lightning's ``_current_fx_name``)
        self.results: dict[tuple[str, str], _Reduced] = {}
        self.totals: dict[str, _Reduced] = {}
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.batch, self.batch_size, self.in_batches = None, None, False
        self.training = True  # an evaluation's recorder: False (what reaches callback_metrics differs)
        self.module = None  # the module, where a logged Metric must be one of its attributes (as Lightning checks)

    def log(self, name: str, value, prog_bar: bool = False, logger=None, on_step=None, on_epoch=None,
            reduce_fx="mean", enable_graph: bool = False, sync_dist: bool = False, sync_dist_group=None,
            add_dataloader_idx: bool = True, batch_size: int | None = None, metric_attribute=None,
            rank_zero_only: bool = False) -> None:
        on_step, on_epoch = self._levels(name, on_step, on_epoch)
        metric = is_metric(value)
        if metric:
            self._check_attribute(name, value, metric_attribute)
            value.distributed_available_fn = _not_distributed  # see local_metrics
            reduce = "metric"
        else:
            reduce = _reduction(reduce_fx)
            value = self._tensor(name, value)
        key = (self.fx, name)
        entry = self.results.get(key)
        if entry is None:
            made = _MetricResult if metric else partial(_Reduced, reduce)
            entry = self.results[key] = made(on_step=on_step, on_epoch=on_epoch, logger=logger is not False)
        elif (entry.reduce, entry.on_step, entry.on_epoch) != (reduce, on_step, on_epoch):
            raise ModuleContractError(f"self.log({name!r}) was called twice in {self.fx} with different arguments")
        total = self.totals.setdefault(name, METRIC if metric else _Reduced(reduce, on_step=False, on_epoch=True))
        if (total is METRIC) != metric:
            raise ModuleContractError(f"self.log({name!r}) with a torchmetrics Metric and with a number in one job")
        if metric:
            entry.update(value, 1)
            return
        if total.reduce != reduce:
            raise ModuleContractError(f"self.log({name!r}) with reduce_fx {reduce} and {total.reduce} in one job")
        # Lightning weighs a mean by the batch size given, else by the batch's (its first tensor's length)
        size = batch_size if batch_size is not None else self._batch_size()
        entry.update(value, size)
        total.update(value, size)

    def _check_attribute(self, name: str, value, metric_attribute) -> None:
        """Lightning's rule: a logged Metric is one of the module's attributes (found among its submodules)."""
        if self.module is None or metric_attribute is not None:
            return
        if not any(m is value for m in self.module.modules()):
            raise ModuleContractError(f"self.log({name!r}, <{type(value).__name__}>): Lightning logs a torchmetrics "
                                      f"Metric only when it is an attribute of the LightningModule (set it as one, or "
                                      f"pass metric_attribute=)")

    def log_dict(self, dictionary, **kwargs) -> None:
        items = dictionary.items()
        try:
            from torchmetrics import MetricCollection
        except ImportError:  # pragma: no cover
            MetricCollection = ()
        if isinstance(dictionary, MetricCollection):  # its metrics under their prefixed names, as Lightning logs them
            items = dictionary.items(keep_base=False, copy_state=not dictionary._enable_compute_groups)
        for name, value in items:
            self.log(name, value, **kwargs)

    def _levels(self, name: str, on_step, on_epoch) -> tuple[bool, bool]:
        if self.fx in STEP_LEVEL:
            levels = (True if on_step is None else on_step, False if on_epoch is None else on_epoch)
        elif self.fx in EVAL_STEP_LEVEL:  # an evaluation's batches: reduced over them by default
            levels = (False if on_step is None else on_step, True if on_epoch is None else on_epoch)
        elif self.fx in EPOCH_LEVEL:
            if on_step or on_epoch is False:
                raise ModuleContractError(f"self.log({name!r}) in {self.fx}: only on_epoch=True is allowed there")
            levels = (False, True)
        else:
            raise ModuleContractError(f"self.log({name!r}) in {self.fx}: Lightning does not allow logging there")
        if not any(levels):
            raise ModuleContractError(f"self.log({name!r}, on_step=False, on_epoch=False) logs nothing")
        return levels

    @staticmethod
    def _tensor(name: str, value) -> torch.Tensor:
        if not isinstance(value, (torch.Tensor, numbers.Number)):
            raise ModuleContractError(f"self.log({name!r}, ...) got a {type(value).__name__}; Lightning logs numbers, "
                                      f"one-element tensors and torchmetrics Metrics")
        value = value.clone().detach() if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float32)
        if value.numel() != 1:
            raise ModuleContractError(f"self.log({name!r}, ...) got a tensor of shape {tuple(value.shape)}; it must "
                                      f"have one element")
        value = value.squeeze()
        if not torch.is_floating_point(value):
            warnings.warn(f"self.log({name!r}) got a {value.dtype} value; converted to float32", stacklevel=4)
        return value if value.dtype in (torch.float32, torch.float64) else value.to(torch.float32)

    def _batch_size(self) -> int:
        if self.batch_size is None:
            self.batch_size = (batch_size_of(self.batch) or 1) if self.batch is not None else 1
        return self.batch_size

    # ---- the loop's calls, where Lightning's logger connector makes them -------------------
    def batch_start(self, batch) -> None:
        self.batch, self.batch_size, self.in_batches = batch, None, True

    def batch_end(self) -> None:
        self._collect(on_step=True)
        self.batch, self.batch_size = None, None

    def epoch_end_reached(self) -> None:
        self.in_batches = False

    def epoch_end(self) -> None:
        self._collect(on_step=False)

    def reset(self) -> None:
        for entry in self.results.values():
            entry.reset()

    def _collect(self, on_step: bool) -> None:
        for (_, name), e in self.results.items():
            if e.fresh or not (e.on_step if on_step else e.on_epoch):
                continue
            value = e.cache if on_step else e.compute()
            if value is None:  # a Metric updated without forward(): no step value (Lightning skips it too)
                continue
            if self.training or (e.on_epoch and not on_step):  # Lightning's rule for callback_metrics
                forked = f"{name}_{'step' if on_step else 'epoch'}" if e.on_step and e.on_epoch else name
                self.callback_metrics[name] = self.callback_metrics[forked] = value

    def metrics(self) -> dict:
        """``trainer.callback_metrics``: brought up to date as Lightning's property does."""
        self._collect(on_step=self.in_batches)
        return self.callback_metrics

    def epoch_results(self) -> dict[str, float]:
        """What ``trainer.test`` returns of this epoch: each value logged with ``on_epoch`` (and ``logger``),
        reduced over the batches, under its epoch name (``name``, or ``name_epoch`` if also logged on_step)."""
        out = {}
        for (_, name), e in self.results.items():
            if not e.fresh and e.on_epoch and e.logger:
                out[f"{name}_epoch" if e.on_step else name] = float(e.compute())
        return out

    def job_values(self, callback_metrics: dict | None = None) -> dict[str, float]:
        """Each name's reduction over every step of the job, as Python floats (names in the order first logged).
        A torchmetrics Metric, reset by Lightning every epoch, gives what ``callback_metrics`` (the trainer's
        after the job; default this recorder's) holds of it: its last epoch's value, or its last step's."""
        metrics = self.callback_metrics if callback_metrics is None else callback_metrics
        out = {}
        for name, t in self.totals.items():
            if t is METRIC:
                if name in metrics:
                    out[name] = float(metrics[name])
            elif not t.fresh:
                out[name] = float(t.compute())
        return out


# ---- self.trainer ---------------------------------------------------------------------------
SURFACE = ("current_epoch", "global_step", "max_epochs", "max_steps", "num_training_batches",
           "estimated_stepping_batches", "is_last_batch", "optimizers", "lr_scheduler_configs", "callback_metrics",
           "gradient_clip_val", "gradient_clip_algorithm", "accumulate_grad_batches", "precision", "precision_plugin",
           "strategy", "training", "validating", "testing", "predicting", "sanity_checking", "is_global_zero",
           "global_rank", "local_rank", "node_rank", "world_size", "num_devices", "num_nodes", "logger", "loggers",
           "callbacks", "progress_bar_callback", "fast_dev_run", "barebones", "lightning_module", "model",
           "datamodule", "should_stop")


def _absent(what: str, name: str) -> AttributeError:
    return AttributeError(f"{what} has no {name!r} (docs/extending.md lists what it offers); set "
                          f"train.loop: lightning to train under a real lightning.Trainer")


class _Strategy:
    """``trainer.strategy`` as far as a module reaches it: ``self.optimizers()``, its device, ``reduce``."""

    def __init__(self, device: torch.device) -> None:
        self._lightning_optimizers: list = []
        self.root_device = device

    @staticmethod
    def reduce(tensor, *args, **kwargs):
        return tensor  # one process: nothing to reduce across

    def __getattr__(self, name: str):
        raise _absent("the plain loop's stand-in strategy", name)


class StandInTrainer:
    """``self.trainer`` in a job of the plain loop, or (``stage`` ``test``/``validate``) while the module's
    own step evaluates it (see :data:`SURFACE`); read-only to the module."""

    def __init__(self, module, recorder: Recorder, *, epochs: int, steps_per_epoch: int, clip_val, clip_algorithm,
                 device: torch.device, precision: str, stage: str = "fit") -> None:
        from lightning.pytorch.plugins.precision import Precision  # a LightningModule's job: Lightning is loaded
        from lightning.pytorch.utilities.enums import GradClipAlgorithmType
        self.__dict__.update(
            current_epoch=0, global_step=0, max_epochs=epochs, max_steps=-1, num_training_batches=steps_per_epoch,
            estimated_stepping_batches=epochs * steps_per_epoch, is_last_batch=False, optimizers=[],
            lr_scheduler_configs=[], gradient_clip_val=clip_val, accumulate_grad_batches=1,
            gradient_clip_algorithm=GradClipAlgorithmType(clip_algorithm) if clip_algorithm else None,
            precision="bf16-mixed" if precision == "bf16" and device.type == "cuda" else "32-true",
            precision_plugin=Precision(), strategy=_Strategy(device), training=stage == "fit",
            validating=stage == "validate", testing=stage == "test",
            predicting=False, sanity_checking=False, is_global_zero=True, global_rank=0, local_rank=0, node_rank=0,
            world_size=1, num_devices=1, num_nodes=1, logger=None, loggers=[], callbacks=[],
            progress_bar_callback=None, fast_dev_run=False, barebones=False, lightning_module=module, model=module,
            datamodule=None, should_stop=False, _recorder=recorder)

    @property
    def callback_metrics(self) -> dict:
        return self._recorder.metrics()

    def _set(self, **values) -> None:
        """The loop's own updates (the module may not set anything)."""
        self.__dict__.update(values)

    def __getattr__(self, name: str):
        raise _absent("the plain loop's stand-in Trainer", name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"the plain loop's stand-in Trainer is read-only (setting {name!r}); set "
                             f"train.loop: lightning to train under a real lightning.Trainer")
