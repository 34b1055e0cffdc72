"""A user's LightningModule checked before the run: what it overrides, then one tiny job.

    why = check_module(module, probe_batches(train), loop="plain", clip=(None, None), device=cpu)   # None or one line

First the hooks a job cannot run (models/contract.py), then a probe job: one epoch of two batches of
two samples (the training set's first four rows, as its ``batch`` makes them) through the loop the run uses. That finds, before anything is written, what
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


def probe_batches(data, device=None) -> list:
    """Two batches of ``data``'s first four rows (rows 0-1 and 2-3; one batch with fewer than two rows), on ``device``."""
    n = min(4, len(data))
    half = max(1, n // 2)
    return [data.batch(torch.arange(0, half), device=device), data.batch(torch.arange(half, n), device=device)] \
        if n > half else [data.batch(torch.arange(n), device=device)]


def check_module(module, batches: list, *, loop: str, clip: tuple, device, precision: str = "32",
                 prox_mu: float = 0.0, dp_sgd=None) -> str | None:
    """Why ``module`` cannot train as the run would train it on ``batches`` (on ``device``; one line), or None.
    ``prox_mu`` (``train.prox_mu``): the probe job trains with it, so a module of manual optimization is refused
    as the job's Trainer refuses it (train/lightning_loop.py); ``dp_sgd`` (``train.dp_sgd`` when enabled): the probe
    job trains under Opacus's DP step too (train/dp_sgd.py), so what it cannot do is said before the run."""
    why = refusal(module, loop)
    if why is not None:
        return why
    device = torch.device(device)
    batches = _Batches(batches)
    half = _rows(batches.batches[0])
    dp = None
    if dp_sgd is not None:
        from seafl_dist.train.dp_sgd import JobDP
        dp = JobDP(dp_sgd, seed=0, device=device, expected_batch_size=max(half, 1))
    try:
        with warnings.catch_warnings(), job_random_state(0, device):
            warnings.simplefilter("ignore")  # the run itself shows the module's warnings
            module.to(device).train()
            if loop == "lightning":
                from seafl_dist.train.lightning_loop import fit_lightning
                fit_lightning(module, batches, epochs=1, device=device, precision=precision, clip=clip,
                              prox_mu=prox_mu, dp=dp)
            else:
                fit_job(module, batches, epochs=1, device=device, precision=precision, clip=clip, prox_mu=prox_mu,
                        dp=dp)
    except ModuleContractError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 -- the module's own error, said in one line
        first = (str(err).strip().splitlines() or [""])[0][:300]
        return f"a probe job (one epoch of {len(batches)} batch(es) of {half}) failed: {type(err).__name__}: {first}"
    return None


def _rows(batch) -> int:
    """How many rows a batch holds: its first tensor's length."""
    if isinstance(batch, torch.Tensor):
        return len(batch)
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else ()
    return next((n for n in map(_rows, values) if n), 0)


class Rows:
    """A few rows ``(x, y)`` as a dataset (``len`` and ``batch(idx, device=...)``): the dry run's zeros."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, idx, device=None):
        return self.x[idx].to(device), self.y[idx].to(device)


def probe_evaluation(module, data, *, device, precision: str = "32") -> tuple[dict, str]:
    """(what the module's own evaluation logs on the rows of ``data``, or {}; why it is refused, or "")."""
    from seafl_dist.train.evaluation import evaluate_by_step, evaluation_step
    step = evaluation_step(module)
    n = len(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = evaluate_by_step(module, flatten(module), data, batch_size=max(1, n // 2), device=device,
                                   precision=precision)
    except ModuleContractError as err:
        return {}, str(err)
    except Exception as err:  # noqa: BLE001 -- the module's own error, said in one line
        first = (str(err).strip().splitlines() or [""])[0][:300]
        return {}, f"its {step} failed on {n} rows: {type(err).__name__}: {first}"
    if not got:
        return {}, f"its {step} logs nothing (self.log the metric to evaluate it by, e.g. self.log('test_loss', loss))"
    bad = {k: v for k, v in got.items() if not math.isfinite(v)}
    if bad:
        return {}, f"its {step} logged {', '.join(f'{k} = {v}' for k, v in bad.items())} on {n} rows (not finite)"
    return got, ""
