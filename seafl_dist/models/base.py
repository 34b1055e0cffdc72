"""The base every model derives from: cross-entropy training and SGD from ``TrainConfig``.

    model = build_model("resnet18", num_classes=10, in_channels=3, optim=cfg.train)   # a LightningModule
    opt = model.configure_optimizers()           # SGD(lr, momentum, weight_decay) from cfg.train
    loss = model.training_step((x, y), 0)        # works with or without a lightning.Trainer

A subclass of :class:`FLNet` builds its layers in ``__init__`` and defines ``forward(x) -> logits``.
Batch-norm running statistics are registered buffers, so ``state_dict()`` (what the core flattens
and aggregates) holds them beside the parameters; note that ``num_batches_tracked`` is an int64
buffer.

Why two classes: ``import lightning`` costs 2.4-3.7 s of CPU per process, and a simulation rank
uses nothing of Lightning (local training drives ``training_step`` / ``configure_optimizers``
with a plain loop). So the model classes derive from the plain ``torch.nn.Module`` :class:`FLNet`,
which the runtime builds (``build_model(..., lightning=False)``), and :class:`FLModule`, the
``LightningModule`` base the public API returns, is made on first use: ``FLNet`` first in its
method order, so both give the same training step, optimiser and ``state_dict`` keys.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..settings import TrainConfig


def scaled(channels: int, width: float) -> int:
    """A layer's channel count under the width multiplier (at least 1)."""
    return max(1, int(round(channels * width)))


class FLNet(nn.Module):
    """Base class: ``forward`` gives logits; training is mini-batch SGD on cross-entropy.

    ``channels_last``: the model's forward takes channels-last (NHWC) images, so it trains and
    evaluates with its weights and images laid out so, on a CPU and on a GPU (train/local.py's
    ``memory_format``; the built-in models: a job 1.07-1.26x less CPU on one thread, evaluation
    1.3-2.3x faster; docs/performance.md). The layout changes the convolutions' rounding, so turning it on or off
    changes a run's bits (numerics version 2 is the built-in models channels-last on the CPU). A
    model whose ``forward`` calls ``view`` on its input could not take such a tensor, so the base
    leaves it off.

    ``inputs``: what ``forward`` takes, ``"images"`` (``(N, C, H, W)`` float) or ``"tokens"`` (``(N, L)``
    int64 ids); a built-in model and a dataset of the other kind are refused in one line before a run."""

    channels_last = False
    inputs = "images"

    def __init__(self, *, num_classes: int, in_channels: int, width: float, image_size: int,
                 optim: TrainConfig | None = None) -> None:
        super().__init__()
        if num_classes < 1 or in_channels < 1 or width <= 0 or image_size < 1:
            raise ValueError(f"{type(self).__name__}: num_classes={num_classes}, in_channels={in_channels}, "
                             f"width={width}, image_size={image_size} must all be positive")
        self.num_classes, self.in_channels = num_classes, in_channels
        self.width, self.image_size = width, image_size
        self.train_config = optim if optim is not None else TrainConfig()

    def _attached(self) -> bool:
        """self.log needs an attached lightning Trainer; plain loops call the steps too."""
        return getattr(self, "_trainer", None) is not None

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        if self._attached():
            self.log("train_loss", loss, batch_size=len(y))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        t = self.train_config
        return torch.optim.SGD(self.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)

    def num_parameters(self) -> int:
        """Trainable parameters (buffers not counted), the figure papers quote."""
        return sum(p.numel() for p in self.parameters())


_LIGHTNING: dict = {}  # FLNet subclass -> its LightningModule twin, made once


def _flmodule() -> type:
    if "base" not in _LIGHTNING:
        import lightning as L

        class FLModule(FLNet, L.LightningModule):
            """The LightningModule base: FLNet's steps and optimiser, Lightning's Trainer support."""
        FLModule.__qualname__ = "FLModule"
        _LIGHTNING["base"] = FLModule
    return _LIGHTNING["base"]


def lightning_class(cls: type) -> type:
    """The LightningModule version of model class ``cls`` (same layers, same ``state_dict``)."""
    if cls not in _LIGHTNING:
        base = _flmodule()
        _LIGHTNING[cls] = type(cls.__name__, (cls, base), {"__module__": cls.__module__,
                                                           "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
    return _LIGHTNING[cls]


def __getattr__(name: str):  # FLModule on first use (PEP 562), so importing models needs no Lightning
    if name == "FLModule":
        return _flmodule()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
