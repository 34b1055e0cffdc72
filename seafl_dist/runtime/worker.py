"""A worker rank (>= 1): receives jobs, trains them earliest-virtual-finish first, returns models.

With ``runtime.batch_jobs`` = G > 1 it takes up to G queued jobs (the earliest-finishing) and
trains them together (train/batched.py); which jobs share a group depends on what has arrived.

Protocol (see transport/messages.py): a JOB header carries the global model as payload only
when this worker does not hold that version yet; rank 0 dispatches jobs in non-decreasing
version order, so once a newer version has arrived an older one is dropped as soon as no
queued job needs it. STOP ends the loop: the worker answers BYE after its last result.
"""
from __future__ import annotations

import heapq
import time

from seafl_dist.runtime.executor import GroupTrainer, JobSpec
from seafl_dist.runtime.liveness import POLL_S, StepCounter
from seafl_dist.runtime.residuals import WorkerResiduals
from seafl_dist.transport import (BYE, JOB, LOGS, RESULT, SAVE, STOP, TAKEN, Channel, Header, Mailbox, Outbox,
                                  encode_logs)


class RankZeroLost(RuntimeError):
    pass


# A farewell (runtime/distributed.py) is a BYE whose ``device`` field says why its sender stopped.
GONE_INTERRUPTED, GONE_FAILED = 1, 2


def gone(rank: int, h: Header) -> BaseException:
    """What a peer's farewell means here: its interrupt is ours too (one job, one signal); its failure ends us."""
    if h.device == GONE_INTERRUPTED:
        return KeyboardInterrupt(f"{'worker ' if rank else ''}rank {rank} was interrupted")
    return RankZeroLost(f"rank {rank} failed (its own error says why)") if rank == 0 else \
        RuntimeError(f"worker rank {rank} failed (its own error says why)")


def run_worker(exp, rank: int, numel: int, watcher, links=(Channel(), Channel()), progress=None, ends=None,
               residuals=None) -> int:
    """Serve rank 0 until it says STOP; return the number of jobs trained.

    ``progress`` (a liveness.StepCounter) is bumped for every message handled and every optimiser
    step, so rank 0 can tell a long job from a stuck worker. Messages are also taken in between
    optimiser steps, so rank 0's farewell (it failed or was interrupted) ends a long job at once.
    A result leaves the GPU (if any) as it was trained: the outbox copies it to the host on a
    side stream while the next job trains.

    ``residuals``: with device state (error feedback, SCAFFOLD), (run dir, this worker's devices' state from the
    checkpoint resumed, runtime/residuals.py device_state, or None): TAKEN and SAVE messages are handled as
    runtime/residuals.py says."""
    progress = progress if progress is not None else StepCounter()
    trainer = GroupTrainer(exp)
    down, up = links
    mailbox, outbox = ends or (Mailbox([0], numel, down), Outbox(up))
    inbox = _Inbox(mailbox, rank, progress)
    if residuals is not None:
        run_dir, loaded = residuals
        trainer.feedback.load((loaded or {}).get("residuals"))
        trainer.feedback.load_controls((loaded or {}).get("controls"))
        inbox.residuals = WorkerResiduals(trainer.feedback, run_dir, rank, outbox, trainer.controls is not None)
    trained = 0
    while True:
        if inbox.take(timeout=0 if inbox.queue else POLL_S):
            outbox.flush()
            outbox.send(0, Header(BYE, job=trained))
            outbox.flush()
            outbox.close()
            return trained
        if not inbox.queue:
            silent = watcher.silent()
            if silent:
                raise RankZeroLost(f"rank {rank}: rank 0 has been silent for {silent[0][1]:.0f}s; giving up")
            continue
        group = [heapq.heappop(inbox.queue)[2] for _ in range(min(trainer.limit, len(inbox.queue)))]
        specs = [JobSpec(h.job, h.device, h.version, h.epochs, h.finish, h.steps) for h in group]
        flats = trainer.train(specs, [inbox.versions[h.version] for h in group], on_step=inbox.on_step,
                              result_on_device=True)
        for h, flat in zip(group, flats):
            logged = trainer.logs.pop(h.job, None)
            if logged:  # what the module logged travels just ahead of its model (a LOGS message)
                values = encode_logs(logged)
                outbox.send(0, Header(LOGS, job=h.job, has_payload=True, payload_numel=values.numel()), values)
            outbox.send(0, Header(RESULT, job=h.job, device=h.device, version=h.version, epochs=h.epochs,
                                  has_payload=True, finish=h.finish, payload_numel=flat.numel(),
                                  codec=trainer.codec.wire_id), flat)  # the model, or its compressed delta
        trained += len(group)
        inbox.forget_unneeded()


class _Inbox:
    """What has arrived from rank 0: the queued jobs (earliest virtual finish first) and the versions they need."""

    def __init__(self, mailbox: Mailbox, rank: int, progress: StepCounter, poll_every_s: float = 0.05):
        self.mailbox, self.rank, self.progress = mailbox, rank, progress
        self.versions, self.queue, self.newest = {}, [], -1
        self.stopped = False
        self.residuals = None  # error feedback: a residuals.WorkerResiduals
        self.every, self._last = poll_every_s, 0.0

    def take(self, timeout: float) -> bool:
        """Handle what has arrived (waiting up to ``timeout``); True once rank 0 said STOP."""
        for _, h, payload in self.mailbox.poll(timeout=timeout):
            if h.kind == STOP:
                self.stopped = True
            elif h.kind == BYE:
                raise gone(0, h)
            elif h.kind == TAKEN:
                self.residuals.taken(h.job, bool(h.epochs))
            elif h.kind == SAVE:
                self.residuals.save(h.version)
            elif h.kind == JOB:
                self.progress.step()
                if self.residuals is not None:  # SCAFFOLD: the job trains from its device's c_k as it is now
                    self.residuals.started(h.job, h.device)
                if payload is not None:
                    self.versions[h.version] = payload
                elif h.version not in self.versions:
                    raise RuntimeError(f"rank {self.rank}: job {h.job} refers to version {h.version}, "
                                       f"which was never sent")
                self.newest = max(self.newest, h.version)
                heapq.heappush(self.queue, (h.finish, h.job, h))
        return self.stopped

    def on_step(self) -> None:
        """Between optimiser steps: count the step, and take messages now and then (cheap: no wait)."""
        self.progress.step()
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.take(timeout=0)

    def forget_unneeded(self) -> None:
        needed = {q[2].version for q in self.queue} | {self.newest}
        for v in [v for v in self.versions if v not in needed]:
            del self.versions[v]
