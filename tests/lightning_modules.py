"""LightningModules written as Lightning's documentation writes them, one per form or hook under test.

Each is built by ``build(name)`` (and, as a ``model.name`` plugin, by ``lightning_modules:<name>``
with the builder signature ``f(num_classes, in_channels, image_size, width)``). Every module records
what a test compares between the plain loop, ``train.loop: lightning`` and a bare ``Trainer.fit``:
``calls`` (the hooks it saw, in order, with epoch, batch index and global step) and ``seen`` (at
each epoch's end, the callback metrics and the learning rate).
"""
from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import OneCycleLR, ReduceLROnPlateau, StepLR


class Base(L.LightningModule):
    """A small CNN for 28x28x1 digits; SGD with momentum; logs its loss per step and per epoch."""

    lr = 0.05

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28):
        super().__init__()
        side = (image_size - 5) // 2 + 1
        self.net = nn.Sequential(nn.Conv2d(in_channels, 4, 5, stride=2), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(4 * side * side, num_classes))
        self.seen, self.calls = [], []

    def forward(self, x):
        return self.net(x)

    def loss(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def sgd(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    def configure_optimizers(self):
        return self.sgd()

    def on_train_epoch_end(self):
        metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
        self.seen.append({**metrics, "lr": self.trainer.optimizers[0].param_groups[0]["lr"]})


# ---- configure_optimizers, every form ---------------------------------------------------------

def _form(name, make):
    return type(name, (Base,), {"configure_optimizers": make})


def _step(self, opt):
    return StepLR(opt, step_size=1, gamma=0.5)


FORMS = {
    "form_optimizer": lambda self: self.sgd(),
    "form_list": lambda self: [self.sgd()],
    "form_tuple": lambda self: (self.sgd(),),
    "form_lists": lambda self: (lambda o: ([o], [_step(self, o)]))(self.sgd()),
    "form_list_and_scheduler": lambda self: (lambda o: ([o], _step(self, o)))(self.sgd()),
    "form_dict": lambda self: {"optimizer": self.sgd()},
    "form_dict_scheduler": lambda self: (lambda o: {"optimizer": o, "lr_scheduler": _step(self, o)})(self.sgd()),
    "form_dict_scheduler_dict": lambda self: (lambda o: {"optimizer": o, "lr_scheduler": {
        "scheduler": StepLR(o, step_size=1, gamma=0.7), "interval": "step", "frequency": 2, "name": "steps",
        "strict": True}})(self.sgd()),
    "form_list_of_dicts": lambda self: (lambda o: [{"optimizer": o, "lr_scheduler": _step(self, o)}])(self.sgd()),
    "form_tuple_of_dicts": lambda self: (lambda o: ({"optimizer": o, "lr_scheduler": {
        "scheduler": _step(self, o), "interval": "epoch"}},))(self.sgd()),
    "form_outer_monitor": lambda self: (lambda o: {"optimizer": o, "lr_scheduler": ReduceLROnPlateau(
        o, factor=0.5, patience=0, threshold=10.0), "monitor": "train_loss"})(self.sgd()),
}
MODULES = {name: _form(name, make) for name, make in FORMS.items()}


def _module(name):
    def deco(cls):
        MODULES[name] = cls
        cls.__name__ = cls.__qualname__ = name
        return cls
    return deco


# ---- schedulers by Lightning's rules ----------------------------------------------------------

@_module("onecycle_per_step")
class OneCycle(Base):
    def configure_optimizers(self):
        opt = self.sgd()
        sched = OneCycleLR(opt, max_lr=0.1, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@_module("plateau_on_step_value")
class PlateauStep(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("loss_now", loss)  # on_step only: the plateau reads the last step's value
        return loss

    def configure_optimizers(self):
        opt = self.sgd()
        return {"optimizer": opt, "lr_scheduler": {"scheduler": ReduceLROnPlateau(opt, factor=0.5, patience=0),
                                                   "monitor": "loss_now", "interval": "step", "frequency": 3}}


@_module("plateau_not_strict")
class PlateauLoose(Base):
    def configure_optimizers(self):
        opt = self.sgd()
        return {"optimizer": opt, "lr_scheduler": {"scheduler": ReduceLROnPlateau(opt), "monitor": "nowhere",
                                                   "strict": False}}


class Halving:
    """A scheduler that is not torch's: Lightning steps it through the module's lr_scheduler_step."""

    def __init__(self, optimizer):
        self.optimizer, self.n = optimizer, 0

    def step(self):
        self.n += 1
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.9

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


@_module("custom_scheduler")
class CustomScheduler(Base):
    def configure_optimizers(self):
        opt = self.sgd()
        return {"optimizer": opt, "lr_scheduler": {"scheduler": Halving(opt), "interval": "step", "frequency": 2}}

    def lr_scheduler_step(self, scheduler, metric):
        scheduler.step()


@_module("skip_rest_epoch_scheduler")
class SkipRest(Base):
    """on_train_batch_start returns -1 mid-epoch: the epoch ends there, and Lightning still steps an
    epoch-interval scheduler (that batch is the epoch's last)."""

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if (self.trainer.current_epoch, batch_idx) == (1, 2) else None

    def configure_optimizers(self):
        opt = self.sgd()
        return {"optimizer": opt, "lr_scheduler": {"scheduler": StepLR(opt, step_size=1, gamma=0.5),
                                                   "interval": "epoch"}}


@_module("introspects")
class Introspects(Base):
    """Reads what the loop hands it: the stage ``setup`` and ``teardown`` are given, a (deprecated, still
    called) ``configure_sharded_model``, the batch ``on_train_batch_start`` and ``on_train_batch_end`` are
    given, ``self.optimizers()`` and ``self.lr_schedulers()`` inside ``training_step``. Its three schedulers
    have frequency 3, so a step index off by one or two moves when they step: a step-interval StepLR, an
    epoch-interval StepLR, and an epoch-interval ReduceLROnPlateau; epoch 1 ends early (-1 at its 3rd batch),
    where Lightning still steps the first two."""

    def setup(self, stage):  # compared as a module would test it: Lightning's TrainerFn equals any case of "fit"
        self.calls.append(("setup", stage, stage == "fit"))

    def teardown(self, stage):
        self.calls.append(("teardown", stage, stage == "fit"))

    def configure_sharded_model(self):
        self.calls.append(("configure_sharded_model", self.trainer.current_epoch))

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(("on_train_batch_start", batch_idx, int(batch[1][0]), len(batch[1])))
        return -1 if (self.trainer.current_epoch, batch_idx) == (1, 2) else None

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(("on_train_batch_end", batch_idx, int(batch[1][-1])))

    def training_step(self, batch, batch_idx):
        optimizer, schedulers = self.optimizers(), self.lr_schedulers()
        self.calls.append(("lr", optimizer.param_groups[0]["lr"], [type(s).__name__ for s in schedulers]))
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        opt = self.sgd()
        return [opt], [{"scheduler": StepLR(opt, step_size=1, gamma=0.8), "interval": "step", "frequency": 3},
                       {"scheduler": StepLR(opt, step_size=1, gamma=0.5), "interval": "epoch", "frequency": 3},
                       {"scheduler": ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=10.0),
                        "interval": "epoch", "frequency": 3, "monitor": "train_loss"}]


@_module("zero_grad_to_zeros")
class ZeroGrad(Base):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=False)


# ---- training_step forms ----------------------------------------------------------------------

@_module("step_returns_dict")
class StepDict(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        return {"loss": loss, "size": len(batch[1])}

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(("outputs", sorted(outputs), float(outputs["loss"]), outputs["size"]))


@_module("step_returns_none")
class StepNone(Base):
    def training_step(self, batch, batch_idx):
        return None if batch_idx % 3 == 1 else self.loss(batch)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(("outputs", sorted(outputs), self.trainer.global_step))


@_module("step_without_batch_idx")
class StepNoIdx(Base):
    def training_step(self, batch):
        return self.loss(batch)


# ---- every hook, in order ---------------------------------------------------------------------

def _recording(hook):
    def method(self, *args, **kwargs):
        self.calls.append((hook, self.trainer.current_epoch, self.trainer.global_step))
        return getattr(super(Hooks, self), hook)(*args, **kwargs)
    method.__name__ = hook
    return method


RECORDED = ("setup", "configure_model", "on_fit_start", "on_train_start", "on_train_epoch_start",
            "on_before_zero_grad", "optimizer_zero_grad", "on_before_backward", "backward", "on_after_backward",
            "on_before_optimizer_step", "configure_gradient_clipping", "lr_scheduler_step", "on_train_epoch_end",
            "on_train_end", "on_fit_end", "teardown")


class Hooks(Base):
    """Every honoured hook records itself and then does what Lightning's default does."""

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(("on_train_batch_start", self.trainer.current_epoch, batch_idx, self.trainer.global_step))
        return -1 if (self.trainer.current_epoch, batch_idx) == (1, 2) else None  # epoch 1 ends after 2 batches

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(("on_train_batch_end", batch_idx, sorted(outputs), self.trainer.is_last_batch))

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self.calls.append(("optimizer_step", epoch, batch_idx))
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def on_train_epoch_end(self):
        self.calls.append(("on_train_epoch_end", self.trainer.current_epoch))
        super().on_train_epoch_end()

    def configure_optimizers(self):
        opt = self.sgd()
        return {"optimizer": opt, "lr_scheduler": {"scheduler": StepLR(opt, 1, 0.8), "interval": "step"}}


for _hook in RECORDED:
    if _hook not in vars(Hooks):
        setattr(Hooks, _hook, _recording(_hook))
MODULES["every_hook"] = Hooks


# ---- clipping, warm-up, logging, Adam, random layers ------------------------------------------

@_module("clip_by_own_hook")
class OwnClip(Base):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.clip_gradients(optimizer, gradient_clip_val=0.05, gradient_clip_algorithm="value")


@_module("warmup_optimizer_step")
class Warmup(Base):
    """Lightning's documented warm-up recipe."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        optimizer.step(closure=optimizer_closure)
        if self.trainer.global_step < 10:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / 10.0)
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.lr


@_module("log_reduce_fx")
class LogReduce(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("loss_max", loss, reduce_fx="max", on_epoch=True)
        self.log_dict({"loss_sum": loss, "ones": 1.0}, reduce_fx="sum", on_step=False, on_epoch=True)
        self.log("weighted", loss, on_epoch=True, batch_size=3)
        return loss

    def on_train_epoch_start(self):
        self.log("epoch_mark", float(self.trainer.current_epoch))


@_module("adam")
class AdamModule(Base):
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01, weight_decay=1e-4)


@_module("dropout")
class Dropout(Base):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.net.insert(2, nn.Dropout(0.3))


# modules only `train.loop: lightning` trains (the plain loop refuses them in one line): not conformance cases
LIGHTNING_ONLY = ("manual_optimization",)


@_module("manual_optimization")
class Manual(Base):
    """Lightning's manual optimization, as its documentation writes it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.loss(batch)
        self.manual_backward(loss)
        opt.step()


def build(name: str):
    return MODULES[name]()


def __getattr__(name: str):  # lightning_modules:<name> as a model.name plugin
    if name in MODULES:
        def builder(num_classes, in_channels, image_size, width):
            return MODULES[name](num_classes, in_channels, image_size)
        return builder
    raise AttributeError(name)


# ---- a built-in model with a hook of its own (the fused step cannot run it) -------------------

def lenet_with_hook(num_classes, in_channels, image_size, width):
    """LeNet-5 as built in (its loss and SGD), plus one hook that logs: fusable but for the hook."""
    from seafl_dist.models import LeNet5
    from seafl_dist.models.base import lightning_class

    class LeNetWithHook(lightning_class(LeNet5)):
        def on_train_epoch_start(self):
            self.log("epoch", float(self.current_epoch))
    return LeNetWithHook(num_classes, in_channels, width=width, image_size=image_size)


# ---- evaluation by the module's own step ------------------------------------------------------

@_module("evaluates_itself")
class Evaluates(Base):
    """test_step logging a loss, an accuracy weighted by its own batch size, a max and a forked value;
    on_test_epoch_end logs from what the batches gathered."""

    def on_test_epoch_start(self):
        self.gathered = []

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("test_loss", loss)
        self.log("test_acc", (logits.argmax(1) == y).float().mean(), batch_size=len(y))
        self.log("worst", loss, reduce_fx="max")
        self.log("both", loss, on_step=True)
        self.log("quiet", loss, logger=False)
        self.gathered.append(len(y))
        return loss

    def on_test_epoch_end(self):
        self.log("batches", float(len(self.gathered)))


@_module("validates_itself")
class Validates(Base):
    def validation_step(self, batch):
        self.log("val_loss", self.loss(batch))


# ---- torchmetrics values in self.log, as Lightning's logging docs write them ----------------------

def _metrics(num_classes: int):
    import torchmetrics
    from torchmetrics.classification import MulticlassAccuracy
    return (MulticlassAccuracy(num_classes=num_classes), torchmetrics.MeanMetric(),
            torchmetrics.MetricCollection({"acc": MulticlassAccuracy(num_classes=num_classes, average="micro"),
                                           "f1": torchmetrics.classification.MulticlassF1Score(num_classes)},
                                          prefix="mc_"))


class _WithMetrics(Base):
    """Base with three torchmetrics attributes: an accuracy, a mean and a MetricCollection (prefix ``mc_``)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28):
        super().__init__(num_classes, in_channels, image_size)
        self.acc, self.mean_loss, self.collection = _metrics(num_classes)
        self.unlogged = type(self.mean_loss)()


@_module("torchmetrics_logged")
class TorchmetricsLogged(_WithMetrics):
    """An accuracy by forward (step and epoch values), a mean updated without forward (epoch only), a
    MetricCollection by log_dict, and a ReduceLROnPlateau monitoring a Metric's epoch value."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.acc(logits, y)
        self.log("train_acc", self.acc, on_step=True, on_epoch=True)
        self.mean_loss.update(loss)
        self.log("mean_loss", self.mean_loss, on_step=False, on_epoch=True)
        self.unlogged.update(loss)
        self.collection(logits, y)
        self.log_dict(self.collection, on_step=False, on_epoch=True)
        return loss

    def on_train_epoch_end(self):
        # a metric the module computes and resets itself, never handing it to self.log (Lightning's docs do so)
        self.log("loss_by_compute", self.unlogged.compute())
        self.unlogged.reset()
        super().on_train_epoch_end()

    def configure_optimizers(self):
        opt = self.sgd()
        return {"optimizer": opt, "lr_scheduler": {"scheduler": ReduceLROnPlateau(opt, mode="min", factor=0.5,
                                                                                  patience=0),
                                                   "monitor": "mean_loss"}}


@_module("evaluates_with_metrics")
class EvaluatesWithMetrics(_WithMetrics):
    """test_step logging torchmetrics values: an accuracy by forward, a mean by update, a collection."""

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.acc(logits, y)
        self.log("test_acc", self.acc)
        self.mean_loss.update(F.cross_entropy(logits, y))
        self.log("test_loss", self.mean_loss)
        self.collection.update(logits, y)
        self.log_dict(self.collection)


@_module("metrics_everywhere")
class MetricsEverywhere(TorchmetricsLogged, EvaluatesWithMetrics):
    """torchmetrics values in training and in its own test_step (a run's evaluation)."""
