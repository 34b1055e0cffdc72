"""Which of a LightningModule's hooks a job honours, and which it refuses (docs/extending.md's table).

Every hook Lightning defines on a LightningModule (``ModelHooks``, ``DataHooks``, ``CheckpointHooks``
and the module's own overridable methods) has one row in :data:`HOOKS`: ``honoured`` (called
where ``Trainer.fit`` calls it, in its order, by both loops), ``honoured at evaluation`` (a module
with ``test_step``, or else ``validation_step``, is evaluated by it: train/evaluation.py), ``not
called`` (neither a job's fit nor an evaluation calls it), or
``refused`` (a module that overrides it is stopped before the run, with one line saying why and
what to do). ``plain`` rows are refused by the plain loop only: ``train.loop: lightning`` runs them.

    why = refusal(module, loop="plain")      # None, or one line naming the hook and the fix
    fns = overridden(module)                 # {hook name: bound method} of the hooks it overrides
"""
from __future__ import annotations

HONOURED, NOT_CALLED, REFUSED, PLAIN = "honoured", "not called", "refused", "refused by the plain loop"
EVALUATION = "honoured at evaluation"

_FIT = ("setup", "configure_sharded_model", "configure_model", "on_fit_start", "on_train_start",
        "on_train_epoch_start", "on_train_batch_start", "on_before_zero_grad", "optimizer_zero_grad",
        "on_before_backward", "backward", "on_after_backward", "on_before_optimizer_step",
        "configure_gradient_clipping", "optimizer_step", "lr_scheduler_step", "on_train_batch_end",
        "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown")
_EVAL = tuple(f"{x}{stage}{y}" for stage in ("test", "validation")
              for x, y in (("", "_step"), ("on_", "_start"), ("on_", "_end"), ("on_", "_epoch_start"),
                           ("on_", "_epoch_end"), ("on_", "_batch_start"), ("on_", "_batch_end"),
                           ("on_", "_model_eval"), ("on_", "_model_train")))
_UNUSED = ("on_validation_model_zero_grad", "on_predict_start", "on_predict_end", "on_predict_batch_start",
           "on_predict_batch_end", "on_predict_epoch_start", "on_predict_epoch_end", "on_predict_model_eval",
           "predict_step", "on_save_checkpoint", "on_load_checkpoint")
_DATA = ("prepare_data", "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")
_TRANSFER = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")

HOOKS: dict[str, tuple[str, str]] = {
    **{h: (HONOURED, "called where Trainer.fit calls it") for h in _FIT},
    "training_step": (HONOURED, "called as (batch, batch_idx) or (batch); returns a Tensor, a dict with 'loss', "
                                "or None"),
    "configure_optimizers": (HONOURED, "each job builds its own optimizer and schedulers"),
    **{h: (EVALUATION, "the run's evaluations call them, as trainer.test (or trainer.validate, for a module "
                       "without test_step) does, on the test set") for h in _EVAL},
    **{h: (NOT_CALLED, "neither a job's fit nor an evaluation has prediction, a checkpoint or a validation "
                       "inside a fit") for h in _UNUSED},
    **{h: (REFUSED, "seafl feeds each job its device's shard of `data.name`; a module's own data is not used")
       for h in _DATA},
    **{h: (PLAIN, "it hands batches over as they are; set train.loop: lightning to run these hooks")
       for h in _TRANSFER},
    "configure_callbacks": (PLAIN, "it has no callbacks; set train.loop: lightning to run them"),
}


def lightning_base(module) -> type | None:
    """Lightning's ``LightningModule`` class if ``module`` is one (found in its class's MRO, so this needs
    no import of Lightning), else None."""
    for cls in type(module).__mro__:
        if cls.__name__ == "LightningModule" and cls.__module__.startswith("lightning.pytorch"):
            return cls
    return None


def overridden(module) -> dict:
    """``{hook: bound method}`` of the hooks in :data:`HOOKS` that ``module``'s class defines beyond
    Lightning's defaults and the built-in models' steps (:class:`~.base.FLNet`'s ``training_step`` and
    ``configure_optimizers``): empty for a plain ``nn.Module``, a built-in model, or a user's plain
    module wrapped to train like one (those train with no stand-in Trainer and log nothing)."""
    base = lightning_base(module)
    if base is None:
        return {}
    from .base import FLNet
    cls = type(module)
    return {h: getattr(module, h) for h in HOOKS
            if getattr(cls, h, None) is not getattr(base, h, None) and getattr(cls, h, None) is not getattr(FLNet, h, 0)}


def refusal(module, loop: str = "plain") -> str | None:
    """One line saying why ``module`` cannot be trained by ``loop`` exactly as Lightning trains it, or None."""
    base = lightning_base(module)
    if base is None:
        return None
    if not getattr(module, "automatic_optimization", True) and loop == "plain":
        return ("it sets automatic_optimization = False (manual optimization); the plain loop runs automatic "
                "optimization only: set train.loop: lightning")
    for hook in overridden(module):
        kind, why = HOOKS[hook]
        if kind == REFUSED or (kind == PLAIN and loop == "plain"):
            return f"it overrides {hook}, which {'a job' if kind == REFUSED else 'the plain loop'} does not run: {why}"
    return None
