"""The LightningModule every model derives from: cross-entropy training and SGD from ``TrainConfig``.

    model = build_model("resnet18", num_classes=10, in_channels=3, optim=cfg.train)
    opt = model.configure_optimizers()           # SGD(lr, momentum, weight_decay) from cfg.train
    loss = model.training_step((x, y), 0)        # works with or without a lightning.Trainer

A subclass builds its layers in ``__init__`` and defines ``forward(x) -> logits``. Batch-norm
running statistics are registered buffers, so ``state_dict()`` (what the core flattens and
aggregates) holds them beside the parameters; note that ``num_batches_tracked`` is an int64
buffer.
"""
from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F

from ..config import TrainConfig


def scaled(channels: int, width: float) -> int:
    """A layer's channel count under the width multiplier (at least 1)."""
    return max(1, int(round(channels * width)))


class FLModule(L.LightningModule):
    """Base class: ``forward`` gives logits; training is mini-batch SGD on cross-entropy."""

    def __init__(self, *, num_classes: int, in_channels: int, width: float, image_size: int,
                 optim: TrainConfig | None = None) -> None:
        super().__init__()
        if num_classes < 1 or in_channels < 1 or width <= 0 or image_size < 1:
            raise ValueError(f"{type(self).__name__}: num_classes={num_classes}, in_channels={in_channels}, "
                             f"width={width}, image_size={image_size} must all be positive")
        self.num_classes, self.in_channels = num_classes, in_channels
        self.width, self.image_size = width, image_size
        self.train_config = optim if optim is not None else TrainConfig()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        if self._trainer is not None:  # self.log needs an attached Trainer; plain loops call this too
            self.log("train_loss", loss, batch_size=len(y))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        t = self.train_config
        return torch.optim.SGD(self.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)

    def num_parameters(self) -> int:
        """Trainable parameters (buffers not counted), the figure papers quote."""
        return sum(p.numel() for p in self.parameters())
