"""One name's logged value within a job: Lightning's ``_ResultMetric`` in its two cases.

:class:`_Reduced` is a number or one-element tensor reduced over the steps (``reduce_fx`` mean
weighted by batch size, min, max, sum); :class:`_MetricResult` is a ``torchmetrics.Metric``, which
keeps its own state (its ``forward`` a step's value, its ``compute()`` an epoch's, reset each epoch).
:func:`local_metrics` keeps a module's metrics to its own rank's state. Used by train/standin.py's
``Recorder``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seafl_dist.train.optim_config import ModuleContractError

REDUCTIONS = {"mean": torch.mean, "avg": torch.mean, "max": torch.max, "min": torch.min, "sum": torch.sum}


def _reduction(reduce_fx) -> str:
    if isinstance(reduce_fx, str) and reduce_fx.lower() in REDUCTIONS:
        return "mean" if reduce_fx.lower() == "avg" else reduce_fx.lower()
    for name, fns in (("mean", (torch.mean,)), ("max", (torch.max, max)), ("min", (torch.min, min)),
                      ("sum", (torch.sum, sum))):
        if reduce_fx in fns:
            return name
    raise ModuleContractError(f"self.log(..., reduce_fx={reduce_fx!r}): Lightning supports min, max, mean and sum")


def batch_size_of(batch) -> int:
    """Lightning's ``extract_batch_size``: the length of the first tensor found in the batch."""
    if isinstance(batch, torch.Tensor):
        return 1 if batch.ndim == 0 else batch.size(0)
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        size = batch_size_of(item)
        if size is not None:
            return size
    return None


@dataclass
class _Reduced:
    """One logged name's running reduction (Lightning's ``_ResultMetric``, tensor case)."""
    reduce: str
    on_step: bool = True
    on_epoch: bool = True
    logger: bool = True  # in an evaluation's results (Lightning returns what is logged with logger=True)
    value: torch.Tensor = None
    count: torch.Tensor = None  # cumulated batch size (mean only)
    cache: torch.Tensor | None = None  # the last step's value (on_step)
    fresh: bool = field(default=True)  # reset and not updated since ("has_reset")

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        default = {"max": float("-inf"), "min": float("inf")}.get(self.reduce, 0.0)
        self.value, self.count = torch.tensor(default, dtype=torch.float32), torch.tensor(0)
        self.cache, self.fresh = None, True

    def update(self, value: torch.Tensor, batch_size: int) -> None:
        self.fresh = False
        self.value, self.count = self.value.to(value.device), self.count.to(value.device)
        if self.on_step:
            self.cache = value.clone()
            if not self.on_epoch:
                self.value = self.cache
                return
        if self.reduce == "mean":
            self.value = self.value + value * batch_size
            self.count = self.count + batch_size
        elif self.reduce in ("max", "min"):
            self.value = REDUCTIONS[self.reduce](self.value, value)
        else:
            self.value = self.value + value

    def compute(self) -> torch.Tensor:
        return self.value.clone() / self.count if self.reduce == "mean" else self.value.clone()


def is_metric(value) -> bool:
    """A ``torchmetrics.Metric`` (Lightning's dependency, so present wherever a LightningModule is)."""
    if isinstance(value, (torch.Tensor, float, int)):  # what self.log gets at most steps: no import to check
        return False
    try:
        from torchmetrics import Metric
    except ImportError:  # pragma: no cover - lightning requires torchmetrics
        return False
    return isinstance(value, Metric)


def _not_distributed() -> bool:
    return False


def local_metrics(module) -> None:
    """Each torchmetrics Metric of ``module`` computes on this process's state alone. A rank of a seafl run
    has a process group (its world is the run's ranks), over which torchmetrics would gather the metric's
    state at every ``compute()``; the other ranks, training other devices' jobs or aggregating, never join
    that gather, and the run would hang. (Under Lightning's DDP the ranks train one model; here each job
    is one device's own.)"""
    for m in module.modules():
        if is_metric(m):
            m.distributed_available_fn = _not_distributed


METRIC = object()  # a job total's place for a name logged as a torchmetrics Metric (see Recorder.job_values)


@dataclass
class _MetricResult:
    """One name logged as a ``torchmetrics.Metric`` (Lightning's ``_ResultMetric``, Metric case): the metric
    keeps its own state; a step's value is its ``forward`` result, an epoch's its ``compute()``, and the
    epoch's reset resets the metric."""
    on_step: bool = True
    on_epoch: bool = True
    logger: bool = True
    metric: object = None
    cache: torch.Tensor | None = None
    fresh: bool = True
    reduce: str = "metric"  # not a reduction: the metric computes itself (batch_size and reduce_fx unused)

    def update(self, metric, batch_size: int) -> None:
        self.fresh, self.metric, self.cache = False, metric, metric._forward_cache

    def compute(self) -> torch.Tensor:
        value = self.metric.compute()
        if not isinstance(value, torch.Tensor):
            raise ModuleContractError(f"the compute() of the {type(self.metric).__name__} logged must return a "
                                      f"tensor, as Lightning requires; it returned {type(value).__name__}")
        return value.detach()

    def reset(self) -> None:
        if self.metric is not None:
            self.metric.reset()
        self.cache, self.fresh = None, True
