"""The paper's models as LightningModules, built by name.

    from seafl_dist.models import build_model
    model = build_model("lenet5", num_classes=10, in_channels=1, image_size=28, optim=cfg.train)
    model = build_model("resnet18", ds.num_classes, ds.in_channels, width=0.125, image_size=ds.image_size)

``lenet5`` (:mod:`.lenet`), ``resnet18`` (CIFAR variant, :mod:`.resnet`), ``vgg16`` (with batch
norm, CIFAR-size classifier, :mod:`.vgg`) take images; ``lstm`` (LEAF's Shakespeare character LSTM,
:mod:`.lstm`) takes token ids, with ``in_channels`` the vocabulary and ``image_size`` the sequence
length (what a token dataset's ``in_channels`` / ``image_size`` give). A model class's ``inputs``
says which (``"images"`` or ``"tokens"``). Every model is an :class:`FLModule` (a LightningModule): ``forward(x)``
gives logits, ``training_step`` the cross-entropy loss, ``configure_optimizers`` the SGD of
``optim`` (a :class:`~seafl_dist.settings.TrainConfig`; its defaults when ``None``). ``width``
multiplies every channel count (at least 1 channel each), so tests can use tiny versions.

``build_model(..., lightning=False)`` gives the same model as a plain ``torch.nn.Module``
(:class:`FLNet`, same steps and ``state_dict``) without importing Lightning: what the simulation's
ranks build, since ``import lightning`` costs seconds per process and they use none of it.

``name`` may also be an import path ``pkg.module:builder`` (:mod:`.custom`, :mod:`seafl_dist.settings.plugins`).

Parameters at width 1 and 10 classes: lenet5 61,706 (28x28x1) / 83,126 (32x32x3),
resnet18 11,173,962 (3 channels), vgg16 14,728,266 (3 channels); lstm 819,920 (80 characters, 80 classes).
"""
from __future__ import annotations

from ..settings import TrainConfig
from ..settings.plugins import is_import_path
from .base import FLNet, lightning_class, scaled
from .lenet import LeNet5
from .lstm import CharLSTM
from .resnet import ResNet18
from .vgg import VGG16

MODELS = {"lenet5": LeNet5, "resnet18": ResNet18, "vgg16": VGG16, "lstm": CharLSTM}


def build_model(name: str, num_classes: int, in_channels: int, *, width: float = 1.0, image_size: int = 28,
                optim: TrainConfig | None = None, lightning: bool = True, params: dict | None = None) -> FLNet:
    """A fresh, randomly initialised model (seed torch beforehand for reproducible weights): a
    LightningModule, or with ``lightning=False`` the plain ``nn.Module`` (same weights for the same seed).
    A model named by import path is built by :func:`.custom.build_custom` (it imports Lightning), given
    ``params`` (``model.params``) as keyword arguments."""
    if is_import_path(name):
        from .custom import build_custom
        return build_custom(name, num_classes, in_channels, width=width, image_size=image_size, optim=optim,
                            params=params)
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    cls = lightning_class(MODELS[name]) if lightning else MODELS[name]
    return cls(num_classes, in_channels, width=width, image_size=image_size, optim=optim)


def __getattr__(name: str):  # FLModule, the LightningModule base, is made on first use
    if name == "FLModule":
        from . import base
        return base.FLModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CharLSTM", "FLModule", "FLNet", "LeNet5", "MODELS", "ResNet18", "VGG16", "build_model", "scaled"]
