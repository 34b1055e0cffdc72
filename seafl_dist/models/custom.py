"""A model named by import path (``model.name: mymodels:tiny_cnn``), built and checked.

The builder is called as ``f(num_classes, in_channels, image_size, width, **model.params)``. A LightningModule
that defines ``training_step`` and ``configure_optimizers`` is used as it is; a plain
``torch.nn.Module`` (``forward(x) -> logits``) is wrapped in :class:`Wrapped`, which trains it
like the built-in models: cross-entropy, SGD from ``train.*``. Anything else is refused with
one line naming ``model.name``.
"""
from __future__ import annotations

import lightning as L
import torch

from ..settings import TrainConfig
from ..settings.plugins import plugin_error, resolve
from .base import FLModule


class Wrapped(FLModule):
    """A user's plain ``nn.Module`` as an FLModule; its state lives under ``net.``."""

    def __init__(self, net: torch.nn.Module, *, num_classes: int, in_channels: int, width: float, image_size: int,
                 optim: TrainConfig | None = None) -> None:
        super().__init__(num_classes=num_classes, in_channels=in_channels, width=width, image_size=image_size,
                         optim=optim)
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _overrides(module: L.LightningModule, name: str) -> bool:
    return getattr(type(module), name) is not getattr(L.LightningModule, name)


def build_custom(path: str, num_classes: int, in_channels: int, *, width: float, image_size: int,
                 optim: TrainConfig | None = None, params: dict | None = None) -> FLModule | L.LightningModule:
    """Call the builder ``path`` names (``params``: its own keyword arguments) and make its result trainable
    here (see the module doc)."""
    made = resolve("model.name", path)(num_classes, in_channels, image_size, width, **(params or {}))
    if isinstance(made, L.LightningModule):
        missing = [m for m in ("training_step", "configure_optimizers") if not _overrides(made, m)]
        if missing:
            raise plugin_error("model.name", path, f"it returned a LightningModule without {' and '.join(missing)} "
                                                   "(define them, or return a plain nn.Module to be wrapped)")
        return made
    if isinstance(made, torch.nn.Module):
        return Wrapped(made, num_classes=num_classes, in_channels=in_channels, width=width, image_size=image_size,
                       optim=optim)
    raise plugin_error("model.name", path, f"it returned {type(made).__name__}, not a torch.nn.Module")


@torch.no_grad()
def check_logits(path: str, model: torch.nn.Module, x: torch.Tensor, num_classes: int) -> None:
    """Refuse a model whose ``forward`` on a batch ``x`` does not give ``(len(x), num_classes)`` logits."""
    was_training = model.training
    model.eval()
    try:
        out = model(x)
    except Exception as err:
        raise plugin_error("model.name", path, f"its forward failed on a batch of shape {tuple(x.shape)}: "
                                               f"{type(err).__name__}: {err}") from None
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(x), num_classes):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise plugin_error("model.name", path, f"its forward gave {got} for a batch of shape {tuple(x.shape)}, "
                                               f"not logits of shape ({len(x)}, {num_classes})")
