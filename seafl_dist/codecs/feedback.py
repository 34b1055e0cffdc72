"""Error feedback (``compression.error_feedback``): each device keeps what its codec did not send and adds it to its
next delta (Seide et al. 2014; Karimireddy et al. 2019's EF-SGD; FedML's top-k with error feedback).

For a job of device k with parameter delta Δ, the device sends C(Δ + r_k) and keeps r_k ← (Δ + r_k) − D(C(Δ + r_k)),
D being exactly what the server decodes, so over a device's jobs nothing is lost but the last residual. The rules:

- **Where.** r_k lives where device k's jobs train (``runtime.placement: device``: one worker for each device), in
  float32 on the host, over the trainable parameters: 4 bytes a parameter a device (ResNet-18: 44.7 MB).
- **Order.** A device's jobs are encoded in the order they finish (a device runs one job at a time), whichever group
  or rank trains them.
- **A dropped job** (its window closed, or ``devices.dropout``) is never trained, so it leaves r_k as it was.
- **A rejected update** (non-finite, or the norm guard) was sent: the device cannot know the server refused it, so
  r_k stays as it was updated when it sent. A device whose own Δ + r_k is non-finite resets r_k to zero.
- **Checkpoints.** The state a checkpoint needs is each device's residual before its first job not yet taken by the
  server (the jobs a resume trains again), so the residual a job replaced is kept until the server takes the job.
"""
from __future__ import annotations

import threading

import torch


class ErrorFeedback:
    """The residuals of the devices whose jobs are encoded here, and those a checkpoint may still need."""

    def __init__(self):
        self.residual: dict[int, torch.Tensor] = {}  # device -> r_k (CPU, float32); absent: zero
        self._before: dict[int, tuple[int, float, torch.Tensor | None]] = {}  # job -> (device, finish, r_k before it)
        self._lock = threading.Lock()  # a thread may train ahead while the server checkpoints

    def corrected(self, device: int, delta: torch.Tensor) -> torch.Tensor:
        """Δ + r_k, on Δ's device."""
        r = self.residual.get(device)
        return delta if r is None else delta + r.to(delta.device)

    def keep(self, device: int, job: int, finish: float, corrected: torch.Tensor, sent: torch.Tensor) -> None:
        """After the device sent ``sent`` (decoded) of ``corrected``: r_k ← corrected − sent (zero if not finite).
        A new tensor each time, never written in place, so a snapshot may hold references."""
        left = (corrected - sent).to("cpu", torch.float32)
        with self._lock:
            self._before[job] = (device, finish, self.residual.get(device))
            self.residual[device] = left if bool(torch.isfinite(left).all()) else torch.zeros_like(left)

    def taken(self, job: int) -> None:
        """The server took ``job``'s upload: no resume trains it again, so the residual before it is not needed."""
        with self._lock:
            self._before.pop(job, None)

    def state(self) -> dict[int, torch.Tensor]:
        """Each device's residual before its earliest job not yet taken (else its current one): what a checkpoint
        holds. References, not copies."""
        with self._lock:
            out = dict(self.residual)
            for job, (device, finish, before) in sorted(self._before.items(), key=lambda kv: (kv[1][1], kv[0]),
                                                        reverse=True):
                if before is None:  # the device had no residual before that job
                    out.pop(device, None)
                else:
                    out[device] = before
            return out

    def load(self, state: dict | None) -> None:
        """Residuals from a checkpoint (:meth:`state`): the jobs in flight then are trained again from them."""
        with self._lock:
            self.residual = {int(k): v.to(torch.float32) for k, v in (state or {}).items()}
            self._before.clear()

    def nbytes(self) -> int:
        return sum(r.numel() * 4 for r in self.residual.values())
