"""A user's LightningModule checked before the run: what it overrides, then one tiny job.

    why = check_module(module, x, y, loop="plain", clip=(None, None), device=cpu)   # None or one line

First the hooks a job cannot run (models/contract.py), then a probe job: one epoch of two batches of
two samples of ``(x, y)`` through the loop the run uses. That finds, before anything is written, what
only a first batch shows: a ``configure_optimizers`` form Lightning does not take (or several
optimizers, or none), a scheduler dict with an unknown ``interval``, a ``training_step`` that returns
something else or a loss of more than one number, a plateau scheduler whose ``monitor`` the module
never logs, an attribute of the stand-in Trainer it does not offer, or any error of the module's
own. The probe draws from a forked random state and trains a module the caller throws away.
"""
from __future__ import annotations

import math
import warnings

import torch

from seafl_dist.models.contract import refusal
from seafl_dist.train.flat import flatten
from seafl_dist.train.local import job_random_state
from seafl_dist.train.loop import fit_job
from seafl_dist.train.optim_config import ModuleContractError


class _Batches:
    """Two batches, one epoch (a sized iterable, as the loops take them)."""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        yield from self.batches


def check_module(module, x: torch.Tensor, y: torch.Tensor, *, loop: str, clip: tuple, device, precision: str = "32"
                 ) -> str | None:
    """Why ``module`` cannot train as the run would train it (one line), or None (module doc)."""
    why = refusal(module, loop)
    if why is not None:
        return why
    device = torch.device(device)
    x, y = x[:4].to(device), y[:4].to(device)
    half = max(1, len(x) // 2)
    batches = _Batches([(x[:half], y[:half]), (x[half:], y[half:])] if len(x) > half else [(x, y)])
    try:
        with warnings.catch_warnings(), job_random_state(0, device):
            warnings.simplefilter("ignore")  # the run itself shows the module's warnings
            module.to(device).train()
            if loop == "lightning":
                from seafl_dist.train.lightning_loop import fit_lightning
                fit_lightning(module, batches, epochs=1, device=device, precision=precision, clip=clip)
            else:
                fit_job(module, batches, epochs=1, device=device, precision=precision, clip=clip)
    except ModuleContractError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 -- the module's own error, said in one line
        first = (str(err).strip().splitlines() or [""])[0][:300]
        return f"a probe job (one epoch of {len(batches)} batch(es) of {half}) failed: {type(err).__name__}: {first}"
    return None


class _Rows:
    """A few rows as a dataset the evaluation takes (``len`` and ``batch(idx, device=...)``)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, idx, device=None):
        return self.x[idx].to(device), self.y[idx].to(device)


def probe_evaluation(module, x: torch.Tensor, y: torch.Tensor, *, device, precision: str = "32") -> tuple[dict, str]:
    """(what the module's own evaluation logs on the rows ``(x, y)``, or {}; why it is refused, or "")."""
    from seafl_dist.train.evaluation import evaluate_by_step, evaluation_step
    step = evaluation_step(module)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = evaluate_by_step(module, flatten(module), _Rows(x, y), batch_size=max(1, len(x) // 2),
                                   device=device, precision=precision)
    except ModuleContractError as err:
        return {}, str(err)
    except Exception as err:  # noqa: BLE001 -- the module's own error, said in one line
        first = (str(err).strip().splitlines() or [""])[0][:300]
        return {}, f"its {step} failed on {len(x)} rows: {type(err).__name__}: {first}"
    if not got:
        return {}, f"its {step} logs nothing (self.log the metric to evaluate it by, e.g. self.log('test_loss', loss))"
    bad = {k: v for k, v in got.items() if not math.isfinite(v)}
    if bad:
        return {}, f"its {step} logged {', '.join(f'{k} = {v}' for k, v in bad.items())} on {len(x)} rows (not finite)"
    return got, ""
