"""Who trains the jobs. The server loop only submits jobs and asks for their results.

:class:`InProcessExecutor` trains a job in this process when its result is first asked for.
The distributed executor (runtime/distributed.py) ships the same job to a worker rank at
submit time. Both train with :func:`run_job`, so a job gives the same bits everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from seafl_dist.sim import stream_seed
from seafl_dist.train import train_job


@dataclass(frozen=True)
class JobSpec:
    job: int
    device: int
    version: int  # the global version the job starts from
    epochs: int  # epochs it will train (SEAFL²: fewer when notified)
    finish: float  # planned virtual finish time, used for worker queue order


def run_job(exp, model, spec: JobSpec, start: torch.Tensor, on_step=None, result_on_device=False) -> torch.Tensor:
    """Train one job of ``exp`` (an Experiment) on ``model`` from flat ``start``; the result is on
    the CPU, or with ``result_on_device`` on the device that trained it (a worker's outbox copies it
    off the GPU without holding up the next job)."""
    cfg = exp.cfg
    return train_job(model, start, exp.train.to(exp.device), exp.shard(spec.device), epochs=spec.epochs,
                     batch_size=cfg.train.batch_size, seed=stream_seed(cfg.run.seed, "train", spec.device, spec.job),
                     augment=cfg.data.augment, device=exp.device, precision=cfg.runtime.precision, on_step=on_step,
                     result_device=exp.device if result_on_device else "cpu")


class InProcessExecutor:
    """Trains lazily, in this process, one model instance reused for every job."""

    def __init__(self, exp):
        self.exp = exp
        self.model = exp.new_model()
        self._pending: dict[int, tuple[JobSpec, torch.Tensor]] = {}

    def submit(self, spec: JobSpec, start: torch.Tensor) -> None:
        self._pending[spec.job] = (spec, start)

    def result(self, job: int) -> torch.Tensor:
        spec, start = self._pending.pop(job)
        return run_job(self.exp, self.model, spec, start)

    def close(self) -> None:
        self._pending.clear()
