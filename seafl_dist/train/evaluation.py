"""Evaluation by a module's own step: ``test_step`` (or, failing that, ``validation_step``), as
``trainer.test`` runs it (lightning.pytorch/loops/evaluation_loop.py), without a Trainer.

    metrics = evaluate_by_step(module, flat, test_set, batch_size=1024, device=device)   # {"test_loss": ...}

The module's weights come from ``flat``; it is put in ``eval()`` (its mode restored after) and run
under ``torch.no_grad`` over the test set in batches (``on_{stage}_model_eval`` and
``on_{stage}_model_train`` replace that switch where the module overrides them): ``on_{stage}_start`` ->
``on_{stage}_epoch_start`` -> per batch ``on_{stage}_batch_start`` -> ``{stage}_step`` ->
``on_{stage}_batch_end`` -> ``on_{stage}_epoch_end`` -> ``on_{stage}_end``. What it logs with
``self.log`` is reduced over the batches as Lightning's ``on_epoch`` reduction does (train/standin.py),
and the result is what ``trainer.test`` returns: each value logged ``on_epoch``, under its epoch
name. Out of GPU memory, the batches halve (one line says so), as for the built-in evaluation.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch

from seafl_dist.models.contract import overridden
from seafl_dist.train.flat import load_flat
from seafl_dist.train.local import _autocast, halving, memory_format
from seafl_dist.train.loop import takes_batch_idx
from seafl_dist.train.logged_values import local_metrics
from seafl_dist.train.standin import Recorder, StandInTrainer


def evaluation_step(module) -> str | None:
    """``test_step`` or ``validation_step`` if the module defines one (the first of them), else None."""
    hooks = overridden(module)
    return next((name for name in ("test_step", "validation_step") if name in hooks), None)


def evaluate_by_step(module, flat: torch.Tensor, data, *, batch_size: int = 1024, device="cpu",
                     precision: str = "32", autocast=None) -> dict[str, float]:
    """The module's own evaluation of the flat model on ``data`` (module doc); ``autocast()``: the step's precision."""
    device = torch.device(device)
    load_flat(module, flat)
    module.to(device)
    return halving(module, batch_size, lambda size: _evaluate(module, data, size, device, precision, autocast))


def _evaluate(module, data, batch_size: int, device: torch.device, precision: str, autocast) -> dict[str, float]:
    step_name = evaluation_step(module)
    stage = "test" if step_name == "test_step" else "validation"
    hooks, rec = overridden(module), Recorder()
    rec.training, rec.module = False, module
    n = len(data)
    trainer = StandInTrainer(module, rec, epochs=1, steps_per_epoch=-(-n // batch_size), clip_val=None,
                             clip_algorithm=None, device=device, precision=precision,
                             stage="test" if stage == "test" else "validate")

    def call(hook: str, *args):
        fn = hooks.get(hook)
        if fn is not None:
            rec.fx = hook
            fn(*args)
            rec.fx = None

    step, with_idx = getattr(module, step_name), takes_batch_idx(getattr(module, step_name))
    was_training = module.training
    module.trainer, module.log, module.log_dict = trainer, rec.log, rec.log_dict
    local_metrics(module)
    try:
        with torch.no_grad():  # Lightning's loop runs every hook, on_{stage}_model_eval too, without gradients
            if f"on_{stage}_model_eval" in hooks:  # Lightning's default: eval()
                call(f"on_{stage}_model_eval")
            else:
                module.eval()
            call(f"on_{stage}_start")
            call(f"on_{stage}_epoch_start")
            for batch_idx, lo in enumerate(range(0, n, batch_size)):
                batch = data.batch(torch.arange(lo, min(lo + batch_size, n)), device=device)  # of any structure
                rec.batch_start(batch)
                call(f"on_{stage}_batch_start", batch, batch_idx)
                rec.fx = step_name
                with (autocast or nullcontext)():
                    out = step(batch, batch_idx) if with_idx else step(batch)
                rec.fx = None
                call(f"on_{stage}_batch_end", out, batch, batch_idx)
                rec.batch_end()
            rec.epoch_end_reached()
            call(f"on_{stage}_epoch_end")
            rec.epoch_end()
            results = rec.epoch_results()
            call(f"on_{stage}_end")
            rec.reset()  # Lightning's reset_results: a logged torchmetrics Metric starts the next evaluation afresh
            if f"on_{stage}_model_train" in hooks:
                call(f"on_{stage}_model_train")
    finally:
        if f"on_{stage}_model_train" not in hooks:
            module.train(was_training)
        module.trainer = None
        del module.log, module.log_dict
    return results


@torch.no_grad()
def evaluate_groups(module, flat: torch.Tensor, data, offsets, *, batch_size: int = 1024, device="cpu",
                    precision: str = "32") -> tuple[np.ndarray, np.ndarray]:
    """Accuracy and mean cross-entropy of the flat model, as :func:`~seafl_dist.train.local.evaluate` gives them, on
    each group of rows ``offsets[i]:offsets[i + 1]`` of ``data`` (a device's held-out part), in one pass over
    ``data`` in batches that cross groups; each row's loss and hit are summed per group in float64. A group of no
    row gives NaN. Out of GPU memory, the batches halve as for the central evaluation."""
    device = torch.device(device)
    fmt = memory_format(module, device, training=False)
    load_flat(module, flat)
    module.to(device, memory_format=fmt).eval()
    n = len(data)

    def run(size: int):
        hits, losses = np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.float64)
        for lo in range(0, n, size):
            x, y = data.batch(torch.arange(lo, min(lo + size, n)), device=device)
            with _autocast(device, precision):
                logits = module(x.contiguous(memory_format=fmt))
            loss = torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
            losses[lo:lo + len(y)] = loss.double().cpu().numpy()
            hits[lo:lo + len(y)] = (logits.argmax(dim=1) == y).double().cpu().numpy()
        return hits, losses

    hits, losses = halving(module, batch_size, run)
    sizes = np.diff(np.asarray(offsets, dtype=np.int64))
    group = np.repeat(np.arange(len(sizes)), sizes)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.bincount(group, weights=hits, minlength=len(sizes)) / sizes
        loss = np.bincount(group, weights=losses, minlength=len(sizes)) / sizes
    return acc, loss
