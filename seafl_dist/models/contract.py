"""Which of a LightningModule's hooks a job honours, and which it refuses (docs/extending.md's table).

Every hook Lightning defines on a LightningModule (``ModelHooks``, ``DataHooks``, ``CheckpointHooks``
and the module's own overridable methods) has one row in :data:`HOOKS`: ``honoured`` (called
where ``Trainer.fit`` calls it, in its order, by both loops), ``not called`` (``Trainer.fit`` of one
job, with no validation data, no checkpointing and no prediction, does not call it either), or
``refused`` (a module that overrides it is stopped before the run, with one line saying why and
what to do). ``plain`` rows are refused by the plain loop only: ``train.loop: lightning`` runs them.

    why = refusal(module, loop="plain")      # None, or one line naming the hook and the fix
    fns = overridden(module)                 # {hook name: bound method} of the hooks it overrides
"""
from __future__ import annotations

HONOURED, NOT_CALLED, REFUSED, PLAIN = "honoured", "not called", "refused", "refused by the plain loop"

_FIT = ("setup", "configure_sharded_model", "configure_model", "on_fit_start", "on_train_start",
        "on_train_epoch_start", "on_train_batch_start", "on_before_zero_grad", "optimizer_zero_grad",
        "on_before_backward", "backward", "on_after_backward", "on_before_optimizer_step",
        "configure_gradient_clipping", "optimizer_step", "lr_scheduler_step", "on_train_batch_end",
        "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown")
_EVAL = ("on_validation_start", "on_validation_end", "on_validation_batch_start", "on_validation_batch_end",
         "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_model_zero_grad",
         "on_validation_model_eval", "on_validation_model_train", "on_test_start", "on_test_end",
         "on_test_batch_start", "on_test_batch_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_model_eval",
         "on_test_model_train", "on_predict_start", "on_predict_end", "on_predict_batch_start",
         "on_predict_batch_end", "on_predict_epoch_start", "on_predict_epoch_end", "on_predict_model_eval",
         "validation_step", "test_step", "predict_step", "on_save_checkpoint", "on_load_checkpoint")
_DATA = ("prepare_data", "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")
_TRANSFER = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")

HOOKS: dict[str, tuple[str, str]] = {
    **{h: (HONOURED, "called where Trainer.fit calls it") for h in _FIT},
    "training_step": (HONOURED, "called as (batch, batch_idx) or (batch); returns a Tensor, a dict with 'loss', "
                                "or None"),
    "configure_optimizers": (HONOURED, "each job builds its own optimizer and schedulers"),
    **{h: (NOT_CALLED, "a job's fit has no validation, test, prediction or checkpoint") for h in _EVAL},
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
