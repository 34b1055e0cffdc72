"""``runtime.deterministic``: the same command gives the same bytes on a GPU too.

A CPU run is reproducible as it is. On a GPU, cuDNN and cuBLAS may pick algorithms that sum in a
different order from one run to the next (atomics, autotuning, split-K reductions), so two runs of
one config drift apart by rounding, and then by whole evaluations. :func:`apply` turns on
PyTorch's switches for deterministic algorithms in this process (every rank calls it from
``prepare``) and :func:`check_model` then takes one training step of the model on two samples, so
a model using an op that has no deterministic implementation stops before training, in one line
naming the op, instead of failing in the middle of a run.

The switches are only ever turned on: a run without the key leaves the process as the caller set it.
"""
from __future__ import annotations

import os
import re

import torch

from seafl_dist.settings import ConfigError

WORKSPACE = ":4096:8"  # cuBLAS: a fixed workspace per handle, which its deterministic mode needs


def apply() -> None:
    """Deterministic algorithms from here on in this process (cuBLAS reads its variable when a
    handle is made, so this runs before the first GPU matrix product)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def nondeterministic_op(err: BaseException) -> str | None:
    """The op named by PyTorch's "... does not have a deterministic implementation" error, else None."""
    m = re.search(r"(\S+) does not have a deterministic implementation", str(err))
    return m.group(1) if m else None


def check_model(exp) -> None:
    """One optimiser step of a fresh model on two training samples, on the run's device and
    precision: a ConfigError naming the op if one has no deterministic implementation (other
    errors are left to the model checks and training, which name them)."""
    from seafl_dist.train import flatten, train_job
    data = exp.train.to(exp.device)
    n = min(2, len(data))
    if n == 0:
        return
    model = exp.new_model()
    try:
        with torch.random.fork_rng(devices=[exp.device] if exp.device.type == "cuda" else []):
            train_job(model, flatten(model), data, torch.arange(n), epochs=1, batch_size=n, seed=0,
                      torch_seed=0, device=exp.device, precision=exp.cfg.runtime.precision)
    except Exception as err:  # noqa: BLE001 -- any other failure is the model checks' and training's to report
        op = nondeterministic_op(err)
        if op is None:
            return
        raise ConfigError(f"runtime.deterministic=true, but model {exp.cfg.model.name!r} uses {op}, which has no "
                          f"deterministic implementation on {exp.device.type}; set runtime.deterministic=false or "
                          f"change the model") from None
