"""``train.loop: lightning``: each job is one ``lightning.Trainer.fit``, on the job's own batches.

    fit_lightning(module, batches, epochs=5, device=device, precision="32", clip=(None, None), logged={})

The Trainer is Lightning's, all of it (manual optimization, ``configure_callbacks``, the
batch-transfer hooks, everything the plain loop's stand-in refuses), with what a
job does not need switched off: logger, checkpointing, progress bar, model summary, validation.
``max_epochs`` is the job's epochs (fewer for a SEAFL²-notified job) and the batches are
:class:`~seafl_dist.train.local.EpochBatches`, a plain sized iterable: a ``DataLoader`` would draw
from torch's global generator every epoch and shift what random layers draw. The module arrives on
its device with the job's weights loaded; Lightning's teardown moves it to the CPU at the end (on a
GPU, one copy of the model per job that the plain loop does not make). What the module logs is
recorded as the plain loop records it (train/standin.py), beside Lightning's own logging. With
``train.prox_mu`` > 0 the job's callback adds the proximal term (train/proximal.py) in
``on_before_optimizer_step``, which Lightning calls after the closure's backward and before clipping
and before the module's own hook, where the plain loop adds it; manual optimization (no such hook
between a backward and a step of the module's own) is refused in one line. Under ``train.dp_sgd`` the callback
puts the Trainer's optimizer inside Opacus's DPOptimizer at ``on_fit_start`` (train/dp_sgd.py), whose step clips,
noises and then adds the proximal term; manual optimization is refused there too.
"""
from __future__ import annotations

import logging
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from seafl_dist.models.contract import lightning_base, overridden
from seafl_dist.train.optim_config import NO_OPTIMIZER, ModuleContractError
from seafl_dist.train.logged_values import is_metric, local_metrics
from seafl_dist.train.controls import check_plain_sgd
from seafl_dist.train.proximal import Proximal
from seafl_dist.train.standin import Recorder

QUIET = ("lightning.pytorch", "lightning.fabric")  # their INFO lines ("GPU available: ...") at every Trainer
NOWHERE = str(Path(tempfile.gettempdir()) / "seafl-lightning-job-writes-nothing")


@contextmanager
def _quiet():
    """Lightning's per-Trainer INFO lines and its once-a-job hints off for the job; the levels restored after."""
    loggers = [logging.getLogger(name) for name in QUIET]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*(does not have many workers|no `val_dataloader`|"
                                                      r"`training_step` returned `None`|The `srun` command).*")
            # Lightning 2.6's own use of torch's LeafSpec, deprecated in torch 2.14: once a job, nothing a user can do
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                    category=FutureWarning)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _one_process():
    """The job's cluster environment: this one process. Left to itself, a Trainer reads torchrun's or Slurm's
    variables (a rank of a seafl run has them) as its own cluster, and warns about ``srun`` on a Slurm node."""
    from lightning.fabric.plugins.environments import LightningEnvironment
    return LightningEnvironment()  # world size 1, global rank 0


def manual_prox(prox_mu: float) -> str:
    """The one line refusing ``train.prox_mu`` > 0 for a module of manual optimization."""
    return (f"it sets automatic_optimization = False (manual optimization), whose own optimizer steps get no "
            f"proximal term; train.prox_mu is {prox_mu:g}: set train.prox_mu: 0 or use automatic optimization")


def _callback(on_step, recorder, prox_mu: float = 0.0, control=None, dp=None):
    """A Callback that counts steps for the worker's liveness, shows the recorder the current batch and
    adds the proximal term (``prox_mu`` > 0) and SCAFFOLD's correction (``control``, train/controls.py) to the
    gradients before clipping."""
    import lightning as L

    class _JobCallback(L.Callback):
        prox = None

        def on_fit_start(self, trainer, pl_module):
            if pl_module.automatic_optimization and type(trainer.optimizers[0]).__name__ == "_MockOptimizer":
                raise ModuleContractError(NO_OPTIMIZER)  # Lightning would train on with no optimizer
            if prox_mu and not pl_module.automatic_optimization:
                raise ModuleContractError(manual_prox(prox_mu))
            self.prox = Proximal.of(pl_module, prox_mu)  # w_base: the job's start, as configure_model left it
            if dp is not None:  # DP-SGD: Opacus's optimizer around the module's; the proximal term after its noise
                if not pl_module.automatic_optimization:
                    raise ModuleContractError("train.dp_sgd clips and noises the steps of automatic optimization, but "
                                              "the module sets automatic_optimization = False (manual optimization); "
                                              "use automatic optimization or train.dp_sgd.enabled: false")
                dp.attach(pl_module)  # on the layers configure_model left
                trainer.strategy.optimizers = [dp.wrap(trainer.optimizers[0],
                                                       after=self.prox.add if self.prox is not None else None)]
                self.prox = None
            if control is not None:  # SCAFFOLD: plain SGD at train.lr, automatic optimization, or one line
                if not pl_module.automatic_optimization:
                    raise ModuleContractError("algorithm.name=scaffold adds c − c_i to every step's gradients, but the "
                                              "module sets automatic_optimization = False (manual optimization); use "
                                              "automatic optimization or another algorithm.name")
                check_plain_sgd(trainer.optimizers[0], trainer.lr_scheduler_configs, control.lr)
                control.bind(pl_module)

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            if self.prox is not None:
                self.prox.add()
            if control is not None:
                control.add()

        def on_train_epoch_start(self, trainer, pl_module):
            if recorder is not None:
                recorder.batch = recorder.batch_size = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if recorder is not None:
                recorder.batch_start(batch)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if on_step is not None:
                on_step()

        def on_train_epoch_end(self, trainer, pl_module):
            if recorder is not None:
                recorder.batch = recorder.batch_size = None
    return _JobCallback()


def fit_lightning(module, batches, *, epochs: int, device: torch.device, precision: str = "32",
                  clip: tuple = (None, None), on_step=None, logged: dict | None = None, prox_mu: float = 0.0,
                  control=None, dp=None) -> None:
    """Train ``module`` on ``batches`` for ``epochs`` with a fresh ``lightning.Trainer`` (module doc);
    ``prox_mu``: ``train.prox_mu`` (0: no proximal term); ``control``: SCAFFOLD's correction (train/controls.py)."""
    import lightning as L
    if lightning_base(module) is None:
        raise ModuleContractError(f"train.loop: lightning trains LightningModules; this is a "
                                  f"{type(module).__name__}")
    cuda = device.type == "cuda"
    local_metrics(module)
    recorder = Recorder() if overridden(module) else None
    if recorder is not None:  # beside Lightning's own self.log: the job's reduction, which travels with the update
        base_log = type(module).log

        def log(name, value, *args, **kwargs):
            if isinstance(value, (torch.Tensor, int, float)) or is_metric(value):
                recorder.fx = module._current_fx_name
                recorder.log(name, value, *args, **kwargs)
            return base_log(module, name, value, *args, **kwargs)
        module.log = log
    with _quiet():
        trainer = L.Trainer(
            max_epochs=epochs, accelerator="gpu" if cuda else "cpu", devices=[device.index or 0] if cuda else 1,
            precision="bf16-mixed" if precision == "bf16" and cuda else "32-true", logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, limit_val_batches=0, gradient_clip_val=clip[0], gradient_clip_algorithm=clip[1],
            callbacks=[_callback(on_step, recorder, prox_mu, control, dp)], plugins=[_one_process()],
            default_root_dir=NOWHERE)  # never made: a job writes nothing, and resumes no "hpc" checkpoint
        try:
            trainer.fit(module, train_dataloaders=batches)
        finally:
            if dp is not None:
                dp.detach()
            module.trainer = None
            if recorder is not None:
                del module.log
    if logged is not None and recorder is not None:
        logged.update(recorder.job_values(trainer.callback_metrics))
