"""The plain loop: one job trained as ``lightning.Trainer.fit`` trains a LightningModule, without a Trainer.

    logged = {}
    fit_job(module, batches, epochs=5, device=device, logged=logged)   # module: on device, weights loaded, train()

Lightning 2.x automatic optimization, step for step (``loops/fit_loop.py``,
``loops/training_epoch_loop.py``, ``loops/optimization/automatic.py``, ``plugins/precision``):

    setup("fit") -> configure_model -> configure_optimizers -> on_fit_start -> on_train_start
    per epoch: on_train_epoch_start
      per batch: on_train_batch_start (-1 ends the epoch) -> optimizer_step(epoch, batch_idx, optimizer, closure)
                 closure = training_step -> on_before_zero_grad -> optimizer_zero_grad -> on_before_backward
                           -> backward -> on_after_backward, then on_before_optimizer_step -> clipping
                 (train.prox_mu > 0: mu (w - w_base) added to the gradients after the closure, before
                 on_before_optimizer_step and clipping; train/proximal.py; then SCAFFOLD's c − c_i,
                 train/controls.py; under train.dp_sgd the optimizer is Opacus's DPOptimizer around the module's
                 own, which clips each sample's gradient and adds the noise in its step, the proximal term after it:
                 train/dp_sgd.py)
                 -> "step" schedulers -> (last batch) "epoch" schedulers -> on_train_batch_end
                 -> "step" plateau schedulers
      on_train_epoch_end -> "epoch" plateau schedulers
    on_train_end -> on_fit_end -> teardown("fit")

A hook the module does not override is not called; the ones that act (``optimizer_step``,
``optimizer_zero_grad``, ``backward``, gradient clipping, ``lr_scheduler_step``) then do what
Lightning's defaults do, with the same torch calls, so the weights are Lightning's to the bit on a
CPU. A module that overrides nothing (the built-in models) trains with no stand-in Trainer and
logs nothing: then this is a bare loop, as cheap as one. Refusals (models/contract.py,
train/optim_config.py) are one-line :class:`ModuleContractError` s.
"""
from __future__ import annotations

import inspect
import warnings
from contextlib import nullcontext

import torch

from seafl_dist.models.contract import overridden
from seafl_dist.train.optim_config import ModuleContractError, parse_optimizers, step_schedulers
from seafl_dist.train.logged_values import local_metrics
from seafl_dist.train.controls import check_plain_sgd
from seafl_dist.train.proximal import Proximal
from seafl_dist.train.standin import Recorder, StandInTrainer


def takes_batch_idx(step) -> bool:
    """Lightning's rule (``is_param_in_hook_signature(..., "batch_idx", min_args=2)``)."""
    step = getattr(step, "__wrapped__", step)
    spec = inspect.getfullargspec(step)
    args = spec.args[1:] if inspect.ismethod(step) or spec.args[:1] == ["self"] else spec.args
    return "batch_idx" in args or spec.varargs is not None or len(args) >= 2


def step_output(out) -> tuple[torch.Tensor | None, dict]:
    """(loss, the other keys) of what ``training_step`` returned, as Lightning's ``ClosureResult`` reads it."""
    if isinstance(out, torch.Tensor):
        loss, extra = out, {}
    elif isinstance(out, dict):
        if "loss" not in out or out["loss"] is None:
            raise ModuleContractError(f"training_step returned a dict without 'loss' (keys {sorted(map(str, out))})")
        loss, extra = out["loss"], {k: v for k, v in out.items() if k != "loss"}
    elif out is None:
        return None, {}
    else:
        raise ModuleContractError(f"training_step returned a {type(out).__name__}; Lightning takes a Tensor, a "
                                  f"dict with 'loss', or None (skip the step)")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ModuleContractError(f"training_step's loss is {got}; it must be one number (a one-element tensor)")
    return loss, extra


def clip_gradients(optimizer, value, algorithm) -> None:
    """Lightning's ``Precision.clip_gradients`` (no clipping at ``None``/0): over the optimizer's parameters."""
    if not value or value <= 0:
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(params, clip_value=value)
    else:
        torch.nn.utils.clip_grad_norm_(params, value)


class _Job:
    """The state one job's hooks share: the module, its overridden hooks, the stand-in and the recorder."""

    def __init__(self, module, *, epochs: int, steps_per_epoch: int, clip: tuple, device, precision: str, autocast,
                 prox_mu: float = 0.0, control=None, dp=None):
        self.module, self.hooks, self.autocast, self.control, self.dp = module, overridden(module), autocast, control, dp
        self.clip_val, self.clip_algorithm = clip
        self.prox_mu, self.prox = prox_mu, None  # the proximal term: made once the weights are the job's start
        self.recorder = self.trainer = None
        if self.hooks:  # a LightningModule of its own: a stand-in Trainer, and self.log recorded
            self.recorder = Recorder()
            self.recorder.module = module
            self.trainer = StandInTrainer(module, self.recorder, epochs=epochs, steps_per_epoch=steps_per_epoch,
                                          clip_val=self.clip_val, clip_algorithm=self.clip_algorithm,
                                          device=torch.device(device), precision=precision)
        self.with_idx = takes_batch_idx(module.training_step)

    def call(self, hook: str, *args, **kwargs):
        """The module's ``hook`` if it overrides it (with Lightning's current-hook name set for self.log), else None."""
        fn = self.hooks.get(hook)
        if fn is None:
            return None
        rec = self.recorder
        prev, rec.fx = rec.fx, hook
        try:
            return fn(*args, **kwargs)
        finally:
            rec.fx = prev

    def step(self, optimizer, batch, batch_idx: int, epoch: int, wants_outputs: bool):
        """One optimizer step of automatic optimization; the outputs on_train_batch_end gets."""
        m, hooks, rec, result = self.module, self.hooks, self.recorder, {}

        def closure():  # Lightning's Closure: training_step, then zero_grad and backward
            if rec is not None:
                rec.fx = "training_step"
            with self.autocast():
                out = m.training_step(batch, batch_idx) if self.with_idx else m.training_step(batch)
            loss, extra = step_output(out)
            if not hooks:  # nothing of the module's to call in between (the built-in models)
                optimizer.zero_grad()
                if loss is not None:
                    loss.backward()
                return loss
            with torch.enable_grad():  # as Lightning's closure, whoever calls it
                return self._zero_grad_and_backward(optimizer, loss, extra, batch_idx, epoch, result, wants_outputs)

        def closure_and_clip():  # Lightning's precision plugin wraps the closure so
            loss = closure()
            if self.prox is not None:
                self.prox.add()
            if self.control is not None:  # SCAFFOLD: g − c_i + c (train/controls.py)
                self.control.add()
            if hooks:
                self.call("on_before_optimizer_step", optimizer)
            if "configure_gradient_clipping" in hooks:
                self.call("configure_gradient_clipping", optimizer, gradient_clip_val=self.trainer.gradient_clip_val,
                          gradient_clip_algorithm=self.trainer.gradient_clip_algorithm)
            elif self.clip_val:
                clip_gradients(optimizer, self.clip_val, self.clip_algorithm)
            return loss

        if "optimizer_step" in hooks:
            self.call("optimizer_step", epoch, batch_idx, optimizer, closure_and_clip)
        else:
            optimizer.step(closure=closure_and_clip)
        if self.trainer is not None:
            self.trainer._set(global_step=self.trainer.global_step + 1)
        return result.get("out")

    def _zero_grad_and_backward(self, optimizer, loss, extra, batch_idx, epoch, result, wants_outputs):
        if self.recorder is not None:
            self.recorder.fx = None
        if loss is None:
            warnings.warn("`training_step` returned `None`. If this was on purpose, ignore this warning...",
                          stacklevel=3)
        self.call("on_before_zero_grad", optimizer)
        if "optimizer_zero_grad" in self.hooks:
            self.call("optimizer_zero_grad", epoch, batch_idx, optimizer)
        else:
            optimizer.zero_grad()
        if loss is not None:
            self.call("on_before_backward", loss)
            if "backward" in self.hooks:
                self.call("backward", loss)
            else:
                loss.backward()
            self.call("on_after_backward")
        if wants_outputs:
            result["out"] = {"loss": loss.detach().clone(), **extra} if loss is not None else {}
        return None if loss is None else loss.detach()

    def scheduler_step(self, scheduler, value) -> None:
        if "lr_scheduler_step" in self.hooks:
            self.call("lr_scheduler_step", scheduler, value)
        elif value is None:
            scheduler.step()
        else:
            scheduler.step(value)


def fit_job(module, batches, *, epochs: int, device, precision: str = "32", clip: tuple = (None, None),
            autocast=nullcontext, on_step=None, logged: dict | None = None, prox_mu: float = 0.0,
            control=None, dp=None) -> None:
    """Train ``module`` (on its device, weights loaded, in train mode) for ``epochs`` passes over
    ``batches`` (iterating it gives the next epoch's batches; ``len`` is the batches per epoch), as
    Lightning does (module doc). ``clip``: (``train.grad_clip_val``, ``train.grad_clip_algorithm``);
    ``autocast()``: the training step's precision context. ``on_step()`` after each optimizer step;
    ``logged`` gets each name the module logged, reduced over the job (see train/standin.py);
    ``prox_mu``: ``train.prox_mu``, the proximal term's mu (0: none; train/proximal.py). ``control``: SCAFFOLD's
    correction of this job (a train/controls.py ControlStep; None: none), whose ``steps`` then counts K. ``dp``:
    the job's DP-SGD (a train/dp_sgd.py JobDP; None: none), attached to the module for the job."""
    job = _Job(module, epochs=epochs, steps_per_epoch=len(batches), clip=clip, device=device, precision=precision,
               autocast=autocast, prox_mu=prox_mu, control=control, dp=dp)
    if job.trainer is not None:
        module.trainer, module.log, module.log_dict = job.trainer, job.recorder.log, job.recorder.log_dict
        local_metrics(module)
    try:
        _fit(job, batches, epochs, on_step)
    finally:
        if dp is not None:
            dp.detach()
        if job.trainer is not None:
            module.trainer = None
            del module.log, module.log_dict
    if logged is not None and job.recorder is not None:
        logged.update(job.recorder.job_values())


def _fit(job: _Job, batches, epochs: int, on_step) -> None:
    m, call, rec, trainer = job.module, job.call, job.recorder, job.trainer
    call("setup", "fit")
    call("configure_sharded_model")
    call("configure_model")
    conf = m.configure_optimizers()
    if trainer is None:
        optimizer, schedulers = conf, []
    else:
        optimizer, schedulers = parse_optimizers(conf, own_scheduler_step="lr_scheduler_step" in job.hooks)
    job.prox = Proximal.of(m, job.prox_mu)  # w_base: the weights the job starts from, as configure_model left them
    if job.dp is not None:  # DP-SGD: hooks on the layers configure_model left, the module's optimizer inside Opacus's
        job.dp.attach(m)  # (and the proximal term after the noise)
        optimizer = job.dp.wrap(optimizer, after=job.prox.add if job.prox is not None else None)
        job.prox = None
    if trainer is not None:
        trainer.strategy._lightning_optimizers.append(optimizer)
        trainer._set(optimizers=[optimizer], lr_scheduler_configs=schedulers)
    metrics = rec.callback_metrics if rec is not None else {}
    if job.control is not None:  # plain SGD at train.lr, or one line (train/controls.py)
        check_plain_sgd(optimizer, schedulers, job.control.lr)
        job.control.bind(m)
    call("on_fit_start")
    call("on_train_start")
    wants_outputs = "on_train_batch_end" in job.hooks
    for epoch in range(epochs):
        if trainer is not None:
            trainer._set(current_epoch=epoch)
        call("on_train_epoch_start")
        last = len(batches) - 1
        for batch_idx, batch in enumerate(batches):
            if rec is not None:
                rec.batch_start(batch)
                trainer._set(is_last_batch=batch_idx == last)
            if call("on_train_batch_start", batch, batch_idx) == -1:  # the rest of the epoch is skipped
                step_schedulers(schedulers, "step", index=batch_idx + 1, plateau=False, metrics=metrics,
                                step=job.scheduler_step)
                step_schedulers(schedulers, "epoch", index=epoch + 1, plateau=False, metrics=metrics,
                                step=job.scheduler_step)
                break
            out = job.step(optimizer, batch, batch_idx, epoch, wants_outputs)
            if schedulers:
                step_schedulers(schedulers, "step", index=batch_idx + 1, plateau=False, metrics=metrics,
                                step=job.scheduler_step)
                if batch_idx == last:
                    step_schedulers(schedulers, "epoch", index=epoch + 1, plateau=False, metrics=metrics,
                                    step=job.scheduler_step)
            call("on_train_batch_end", out, batch, batch_idx)
            if rec is not None:
                rec.batch_end()
                step_schedulers(schedulers, "step", index=batch_idx + 1, plateau=True, metrics=metrics,
                                step=job.scheduler_step)
            if on_step is not None:
                on_step()
        if rec is not None:
            rec.epoch_end_reached()
        call("on_train_epoch_end")
        if rec is not None:
            rec.epoch_end()
            step_schedulers(schedulers, "epoch", index=epoch + 1, plateau=True, metrics=metrics,
                            step=job.scheduler_step)
            rec.reset()
    if trainer is not None:
        trainer._set(current_epoch=epochs)  # Lightning counts completed epochs
    call("on_train_end")
    call("on_fit_end")
    call("teardown", "fit")
