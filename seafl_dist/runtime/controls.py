"""SCAFFOLD's control variates in a run (``algorithm.name: scaffold``; the rule is algo/scaffold.py, the corrected
step train/controls.py): what a job downloads and uploads, where c_k lives, and when it changes.

- **Download** (:meth:`ServerControls.download`): a job that starts from version v gets w_v followed by c_v, the
  server's control variate over the trainable parameters as the rule's state holds it for v (every version the
  server still keeps; the others are pruned here, as the server drops their models).
- **Local training** (:class:`JobControls`, on whichever process trains the device: ``runtime.placement: device``):
  the step is y ← y − η_l (g − c_k + c), K the steps the job trained, and it uploads y followed by
  Δc_k = c_k⁺ − c_k = (x − y)/(K·η_l) − c (option II; x = w_v the job's start; a job of no step sends Δc_k = 0).
  c_k is the device's as the job found it when it reached that process (codecs/feedback.py's controls part).
- **Receive** (:meth:`ServerControls.buffered`): the upload splits into w_k and Δc_k (``BufferedUpdate.control``).
- **Taken** (:meth:`ServerControls.taken`): after the rule, the executor hears of each job whether it was accepted:
  only then does the device's c_k ← c_k + Δc_k (a TAKEN message under torchrun, whose ``epochs`` is 1 for accepted,
  0 for rejected). The same message lets error feedback forget a residual (runtime/residuals.py).
- **Bytes**: both ways the float32 model plus 4 bytes a trainable parameter (:func:`extra_bytes`); with a device
  profile the clock charges both over the device's bandwidths, and ``clock.upload_s`` is scaled by the upload's
  bytes as a codec's (runtime/setup.py); ``clock.download_s`` is the configured constant.
"""
from __future__ import annotations

from types import MappingProxyType

import torch

from seafl_dist.algo import BufferedUpdate
from seafl_dist.algo.scaffold import control_at
from seafl_dist.train.controls import ControlStep


def active(cfg) -> bool:
    return cfg.algorithm.name == "scaffold"


def extra_bytes(cfg, layout) -> int:
    """What c (down) or Δc (up) adds to a float32 model's bytes: 4 a trainable parameter; 0 for other rules."""
    return 4 * int(layout.mask("param").sum()) if active(cfg) else 0


class ServerControls:
    """Rank 0's side: the download of each job, the split of each upload, the TAKEN of each aggregated job."""

    def __init__(self, cfg, parts, memory):
        self.on, self.memory = active(cfg), memory
        self.numel, self.n_params = parts.numel, int(parts.params.sum())

    def download(self, version: int, versions: dict) -> torch.Tensor:
        """w_v, followed by c_v for scaffold; c of the versions the server no longer keeps is dropped."""
        w = versions[version]
        if not self.on:
            return w
        state = self.memory.state
        kept = state.get("c", {})
        if any(v not in versions for v in kept):
            self.memory.state = MappingProxyType({**state, "c": {v: c for v, c in kept.items() if v in versions}})
        return torch.cat([w, control_at(self.memory.state, version, self.n_params).to(w.device)])

    def received(self, jobs: list[dict], result, versions: dict, decode) -> list[BufferedUpdate]:
        """The buffer of an aggregate event's ``jobs``: each upload (``result(job)``) decoded to w_k on its base
        (stage 1, ``decode``), and its Δc_k split off for scaffold."""
        return [self.buffered(u, result(u["job"]), versions, decode) for u in jobs]

    def buffered(self, u: dict, upload: torch.Tensor, versions: dict, decode) -> BufferedUpdate:
        """The buffer's entry for aggregated job ``u``: its w_k decoded, and its Δc_k for scaffold."""
        control = None
        if self.on:
            upload, control = upload[:self.numel], upload[self.numel:]
        return BufferedUpdate(device=u["device"], job=u["job"], n_samples=u["n_samples"], epochs=u["epochs"],
                              flat=decode(upload, versions[u["base_version"]]), base_version=u["base_version"],
                              control=control)

    @staticmethod
    def taken(executor, updates: list[dict]) -> None:
        """Tell the executor the aggregation's jobs are taken, each accepted or not (no executor of device state:
        nothing)."""
        tell = getattr(executor, "taken", None)
        if tell is not None:
            tell(updates)


class JobControls:
    """The trainer's side (runtime/executor.py GroupTrainer): trains a scaffold job from its download and makes its
    upload, with the device's c_k from ``state`` (codecs/feedback.py's controls part)."""

    def __init__(self, exp, layout, state):
        self.exp, self.layout, self.state = exp, layout, state
        self.mask = layout.mask("param")
        self.numel, self.lr = layout.numel, float(exp.cfg.train.lr)

    def train(self, run, spec, download: torch.Tensor) -> torch.Tensor:
        """``run(spec, start, control)`` trains the job (runtime/executor.py run_job); returns y followed by Δc_k."""
        w, c = download[:self.numel], download[self.numel:]
        c_k = self.state.control_of(spec.job)
        correction = torch.zeros(self.numel, dtype=torch.float32)
        correction[self.mask] = (c if c_k is None else c - c_k.to(c.device)).to("cpu", torch.float32)
        step = ControlStep(correction, self.layout, self.lr)
        trained = run(spec, w, step)
        mask = self.mask.to(trained.device)
        if step.steps:  # (x − y)/(K·η_l) − c
            delta = (w.to(trained.device)[mask] - trained[mask]) / (step.steps * self.lr) - c.to(trained.device)
        else:  # no step trained: c_k⁺ = c_k
            delta = torch.zeros_like(c, device=trained.device)
        self.state.trained(spec.job, delta)
        return torch.cat([trained, delta.to(trained.dtype)])
