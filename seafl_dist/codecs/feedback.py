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

The same object holds the other state a device keeps where it trains: SCAFFOLD's control variate c_k
(``algorithm.name: scaffold``, runtime/controls.py), its ``controls`` part. One mechanism, two parts:

- **Start.** A job reads c_k as it was when the job reached the device (:meth:`started`: submitted in one process,
  its JOB message received on a worker), so when it trains (lazily, or ahead on a thread) does not matter.
- **Kept only when taken.** Its Δc_k waits (:meth:`trained`) until the server takes the job: accepted, c_k ← c_k + Δc_k
  (a new tensor); rejected, Δc_k is forgotten (:meth:`taken`). Adding Δc_k (rather than writing c_k⁺) keeps
  c = (1/N) Σ_k c_k exact, also where a device's next job started before its last one was taken (device churn).
- **Checkpoints.** :meth:`controls_state`: every device's c_k, and for a job not yet taken whose start saw another
  c_k (churn only) that one; a resume's jobs start from them (:meth:`load_controls`).
"""
from __future__ import annotations

import threading

import torch


class ErrorFeedback:
    """The residuals of the devices whose jobs are encoded here, and those a checkpoint may still need."""

    def __init__(self):
        self.residual: dict[int, torch.Tensor] = {}  # device -> r_k (CPU, float32); absent: zero
        self.controls: dict[int, torch.Tensor] = {}  # device -> c_k (CPU, float32; SCAFFOLD); absent: zero
        self._seen: dict[int, tuple[int, torch.Tensor | None]] = {}  # job -> (device, the c_k its start read)
        self._delta: dict[int, torch.Tensor] = {}  # job -> its Δc_k, until the server takes it
        self._resumed: dict[int, torch.Tensor] = {}  # job -> the c_k a checkpoint says its start read
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

    def taken(self, job: int, accepted: bool = True) -> None:
        """The server took ``job``'s upload: no resume trains it again, so the residual before it is not needed; its
        Δc_k joins c_k if the server ``accepted`` it, else is forgotten."""
        with self._lock:
            self._before.pop(job, None)
            seen, delta = self._seen.pop(job, None), self._delta.pop(job, None)
            if accepted and delta is not None:
                old = self.controls.get(seen[0])
                self.controls[seen[0]] = delta.clone() if old is None else old + delta

    # ---- the controls part (SCAFFOLD) ------------------------------------------------------
    def started(self, job: int, device: int) -> None:
        """``job`` of ``device`` reached here: it will train from c_k as it is now (or as a checkpoint said)."""
        with self._lock:
            self._seen[job] = (device, self._resumed.pop(job) if job in self._resumed else self.controls.get(device))

    def control_of(self, job: int) -> torch.Tensor | None:
        """The c_k ``job`` trains from (None: zero)."""
        with self._lock:
            return self._seen[job][1]

    def trained(self, job: int, delta: torch.Tensor) -> None:
        """``job`` trained to Δc_k: kept until the server takes the job."""
        with self._lock:
            self._delta[job] = delta.to("cpu", torch.float32)

    def controls_state(self) -> dict:
        """What a checkpoint holds of the controls part: ``{"c": {device: c_k}, "seen": {job: c_k its start read}}``,
        ``seen`` only where that is not the device's c_k now (an empty tensor: zero). References, not copies."""
        with self._lock:
            seen = {job: (torch.zeros(0) if c is None else c) for job, (d, c) in self._seen.items()
                    if c is not self.controls.get(d)}
            return {"c": dict(self.controls), "seen": seen}

    def load_controls(self, state: dict | None, devices=None) -> None:
        """The controls part from a checkpoint (:meth:`controls_state`; only ``devices`` if given)."""
        state = state or {}
        keep = None if devices is None else set(devices)
        with self._lock:
            self.controls = {int(d): c.to(torch.float32) for d, c in state.get("c", {}).items()
                             if keep is None or int(d) in keep}
            self._resumed = {int(j): (None if c.numel() == 0 else c.to(torch.float32))
                             for j, c in state.get("seen", {}).items()}
            self._seen.clear()
            self._delta.clear()

    def controls_nbytes(self) -> int:
        return sum(c.numel() * 4 for c in self.controls.values())

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
