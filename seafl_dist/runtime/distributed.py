"""The distributed runtime: ``torchrun --nproc_per_node=W -m seafl_dist run CONFIG``.

Rank 0 is the server (scheduler, aggregation, evaluation, the run dir); ranks 1..W-1 are
workers. Rank 0 hands a job to a worker (``runtime.placement``: the least loaded one, or
device k's fixed worker ``1 + k mod (W-1)``; see :class:`Placement`) as soon as the schedule
starts it (with the exact epoch count, SEAFL² included, from the scheduler's lookahead),
keeps an ``irecv`` posted for every worker, and parks results that arrive early until the
virtual clock reaches them. The schedule and every aggregation are
the same as in one process, so the run dir is too.

Failures: every rank beats a heartbeat into the c10d store, and a worker's beat carries its
progress (messages handled, optimiser steps taken). Rank 0 names a worker that stops beating,
or whose progress stands still for ``runtime.timeout_s`` (at least 3 s) while rank 0 waits
for a result it owes (alive but stuck; a long job keeps stepping, so it is never mistaken for
one), writes what it has and exits non-zero; workers exit when rank 0 goes silent. SIGTERM,
SIGINT and SIGUSR1 (runtime/signals.py) end every rank: rank 0 checkpoints the last completed
aggregation and writes summary.json (status interrupted), workers just exit; every rank raises
(runtime/launch.py). Under ``torchrun --max-restarts`` a lost rank's attempt is restarted and
resumes from the last checkpoint (runtime/elastic.py).
A checkpoint written with W ranks resumes with any W (the jobs in flight are dispatched again).
"""
from __future__ import annotations

import os
import sys
import time
from functools import partial

import torch

from seafl_dist.codecs import UpdateCodec
from seafl_dist.privacy.device_key import device_key_for
from seafl_dist.runtime.faults import NO_FAULT
from seafl_dist.runtime.liveness import POLL_S, Heartbeat, StepCounter, Watcher
from seafl_dist.runtime.server import Server, format_summary
from seafl_dist.runtime.fetch import once_per_node, same_training_set
from seafl_dist.runtime.ca2fl_cache import check_cache
from seafl_dist.runtime import controls
from seafl_dist.runtime.residuals import check_disk, device_state
from seafl_dist.runtime.rundir import private_dir
from seafl_dist.runtime.cpus import cpus_here, oversubscription
from seafl_dist.runtime.setup import keep_only, pick_device, prepare
from seafl_dist.runtime.worker import GONE_FAILED, GONE_INTERRUPTED, gone, run_worker
from seafl_dist.settings import ConfigError
from seafl_dist.train import FlatLayout
from seafl_dist.train.plan import epoch_sizes
from seafl_dist.transport import (BYE, JOB, LOGS, RESULT, SAVE, SAVED, STOP, TAKEN, Channel, Header, Mailbox, Outbox,
                                  TransportError, decode_logs, make_links)


class WorkerLost(RuntimeError):
    """A worker died or stopped answering."""


def owner_rank(device: int, world_size: int) -> int:
    """The worker rank that hosts simulated device ``device`` under ``runtime.placement=device``."""
    return 1 + device % (world_size - 1)


def job_steps(n: int, epochs: int, batch_size: int) -> int:
    """Optimiser steps of a job on ``n`` samples (train_job's trailing-batch rule included)."""
    return epochs * len(epoch_sizes(n, batch_size))


class Placement:
    """Which worker trains a job (``runtime.placement``).

    ``device``: device k on worker ``1 + k mod (W-1)``; a worker holds only its devices' rows, but a
    round's jobs rarely split evenly (20 jobs on 2 workers: 13/7 ... 10/10), and the busier worker
    sets the pace. ``balanced`` (default): the worker with the fewest optimiser steps queued or in
    training (ties: the lowest rank); every worker holds the training set. A job's result does not
    depend on the worker that trains it (its batches and seeds are its own), so the run dir is the
    same either way."""

    def __init__(self, kind: str, world_size: int, n_samples: list[int], batch_size: int):
        self.kind, self.world = kind, world_size
        self.n_samples, self.batch_size = list(n_samples), batch_size
        self.queued = {r: 0 for r in range(1, world_size)}  # worker -> steps sent and not yet returned
        self.cost: dict[int, tuple[int, int]] = {}  # job -> (worker, steps)

    def pick(self, job: int, device: int, epochs: int) -> int:
        if self.kind == "device":
            r = owner_rank(device, self.world)
        else:
            r = min(self.queued, key=lambda w: (self.queued[w], w))
        steps = job_steps(self.n_samples[device], epochs, self.batch_size)
        self.queued[r] += steps
        self.cost[job] = (r, steps)
        return r

    def done(self, job: int) -> None:
        r, steps = self.cost.pop(job, (None, 0))
        if r is not None:
            self.queued[r] -= steps

    def devices_of(self, rank: int, num_devices: int) -> list[int]:
        """The devices whose training rows worker ``rank`` must hold."""
        if self.kind == "device":
            return [d for d in range(num_devices) if owner_rank(d, self.world) == rank]
        return list(range(num_devices))


class DistributedExecutor:
    """Rank 0's side of the job protocol, with the interface of InProcessExecutor."""

    # Progress is published once a second: a stall limit under this would see publication delay.
    stall_floor_s = 3.0

    def __init__(self, world_size: int, numel: int, watcher: Watcher, timeout_s: float, placement: Placement,
                 links=(Channel(), Channel()), ends=None, residuals_on: bool = False):
        self.world, self.numel = world_size, numel
        self.placement = placement
        self.watcher, self.timeout = watcher, timeout_s
        self.workers = list(range(1, world_size))
        self.mailbox, self.outbox = ends or open_ends(0, world_size, numel, links)
        self.last_sent = {r: None for r in self.workers}
        self.owed: dict[int, tuple[int, float]] = {}  # job -> (worker rank, when it was sent)
        self.results: dict[int, torch.Tensor] = {}
        self.logs: dict[int, dict] = {}  # job -> what its module logged (LOGS, ahead of its RESULT)
        self.feedback = None  # error feedback's residuals live on the workers, which write them (runtime/residuals.py)
        self.residuals_on = residuals_on
        self.came_from: dict[int, int] = {}  # job -> the worker that sent it (error feedback: told when it is taken)
        self.saved: dict[int, tuple[int, int]] = {}  # worker -> (version, bytes) of its last residual file
        self.failed = False

    def submit(self, spec, start: torch.Tensor) -> None:
        self._pump()  # results that came in while rank 0 was busy lower their worker's queue
        r = self.placement.pick(spec.job, spec.device, spec.epochs)
        payload = start if self.last_sent[r] != spec.version else None
        self.last_sent[r] = spec.version
        self.owed[spec.job] = (r, time.monotonic())
        self.outbox.send(r, Header(JOB, job=spec.job, device=spec.device, version=spec.version, epochs=spec.epochs,
                                   has_payload=payload is not None, finish=spec.finish, steps=spec.steps,
                                   payload_numel=self.numel if payload is not None else 0), payload)

    def _pump(self, wait_s: float = 0.0) -> bool:
        got = self.mailbox.poll(timeout=wait_s)
        for r, h, payload in got:
            if h.kind == BYE and h.device in (GONE_INTERRUPTED, GONE_FAILED):
                raise gone(r, h)
            if h.kind == LOGS:
                self.logs[h.job] = decode_logs(payload)
            if h.kind == RESULT:
                self.results[h.job] = payload
                self.owed.pop(h.job, None)
                self.placement.done(h.job)
                if self.residuals_on:
                    self.came_from[h.job] = r
            if h.kind == SAVED:
                self.saved[r] = (h.version, h.job)
        return bool(got)

    def _check_alive(self, job: int) -> None:
        r, sent_at = self.owed.get(job, (None, None))
        for rank, silent in self.watcher.silent():
            raise WorkerLost(f"worker rank {rank} stopped (no heartbeat for {silent:.0f}s)"
                             + (f" while rank 0 waits for job {job} from rank {r}" if r is not None else ""))
        if r is None:
            return
        # a worker may have idled for long before this job reached it: count from the send
        stuck = min(self.watcher.stalled(r), time.monotonic() - sent_at)
        if stuck > max(self.timeout, self.stall_floor_s):
            raise WorkerLost(f"worker rank {r} made no progress for {stuck:.0f}s (runtime.timeout_s="
                             f"{self.timeout:g}) while rank 0 waits for job {job}; its heartbeat goes on, "
                             f"so it is alive but stuck")

    def result(self, job: int) -> torch.Tensor:
        try:
            while job not in self.results:
                if job not in self.owed:
                    raise RuntimeError(f"job {job} was never submitted")
                if not self._pump(wait_s=POLL_S):
                    self._check_alive(job)
            return self.results.pop(job)
        except BaseException:
            self.failed = True
            raise

    def taken(self, updates: list[dict]) -> None:
        """After the rule: each aggregated job's worker may forget the residual the job replaced, and keeps its Δc_k
        only if accepted (TAKEN's ``epochs``: 1 accepted, 0 rejected; runtime/residuals.py, runtime/controls.py)."""
        if self.residuals_on:
            for u in updates:
                self.outbox.send(self.came_from.pop(u["job"]), Header(TAKEN, job=u["job"],
                                                                      epochs=0 if u.get("rejected") else 1))

    def save_residuals(self, version: int, run_dir) -> dict[str, int]:
        """Every worker writes its devices' residuals as of aggregation ``version`` (runtime/residuals.py); returns
        the files, once each worker said it wrote its own and rank 0 sees it."""
        from seafl_dist.runtime.residuals import check_written
        try:
            for r in self.workers:
                self.outbox.send(r, Header(SAVE, version=version))
            while any(self.saved.get(r, (None,))[0] != version for r in self.workers):
                if not self._pump(wait_s=POLL_S):
                    self._check_alive(-1)
            return check_written(run_dir, version, {r: self.saved[r][1] for r in self.workers})
        except BaseException:
            self.failed = True
            raise

    def logged(self, job: int) -> dict:
        """What the module logged in ``job`` (its LOGS message came before its result); {} if nothing."""
        return self.logs.pop(job, {})

    def diagnose(self) -> str:
        silent = self.watcher.silent(limit_s=2.0)
        return "".join(f"; worker rank {r} silent for {s:.0f}s (it may have died)" for r, s in silent)

    def close(self) -> None:
        """Normal end: STOP every worker and drain results until each says BYE."""
        if self.failed:
            return
        for r in self.workers:
            self.outbox.send(r, Header(STOP))
        deadline = time.monotonic() + self.timeout
        while self.mailbox.open_peers():
            if not self._pump(wait_s=POLL_S):
                if time.monotonic() > deadline or self.watcher.silent():
                    raise WorkerLost(f"workers {self.mailbox.open_peers()} did not answer STOP")
        self.outbox.flush()
        self.outbox.close()


def pick_backend(choice: str, device: torch.device) -> str:
    """How payloads travel (headers always go over gloo). ``auto`` and ``gloo``: pinned host
    buffers over gloo, the path tests/gpu runs on one GPU. ``nccl`` is opt-in: it needs one GPU
    per local rank (else gloo is used, with a message) and has not yet run on >= 2 GPUs."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    distinct_gpus = device.type == "cuda" and local_world <= torch.cuda.device_count()
    if choice == "nccl" and not distinct_gpus:
        print("seafl: runtime.backend=nccl needs one GPU per rank; using gloo for transport", file=sys.stderr)
        return "gloo"
    return "nccl" if choice == "nccl" else "gloo"


def run_distributed(cfg, out_dir, *, rank: int, world_size: int, local_rank: int, store, pg_timeout_s: float,
                    resume=None, hook=NO_FAULT) -> dict | None:
    """This rank's part of a run whose process group is up (runtime/launch.py forms it): rank 0
    serves and returns the summary, a worker trains and returns None; errors are raised."""
    if controls.active(cfg) and cfg.runtime.placement != "device":  # before anything starts, on every rank
        raise ConfigError(f"config key 'runtime.placement' has value {cfg.runtime.placement!r}; allowed: device with "
                          f"algorithm.name=scaffold under torchrun (a device's control variate c_i lives on the one "
                          f"worker that trains its jobs)")
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    device = pick_device(cfg.runtime.device, local_rank)
    backend = pick_backend(cfg.runtime.backend, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    links = make_links(backend, device)
    fetch = partial(once_per_node, store=store, node=int(os.environ.get("GROUP_RANK", "0")), local_rank=local_rank,
                    root=cfg.data.root, timeout_s=pg_timeout_s)
    exp = prepare(cfg, local_rank=local_rank, need_test=(rank == 0), fetch=fetch)
    same_training_set(exp.train, store=store, rank=rank, world_size=world_size, timeout_s=pg_timeout_s)
    if local_rank == 0 and exp.device.type == "cpu":  # once per node; rank 0 (if here) trains nothing
        training_here = int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) - (1 if rank == 0 else 0)
        warning = oversubscription(torch.get_num_threads(), max(1, training_here), cpus_here())
        if warning:
            print(warning, file=sys.stderr)
    hb_limit = max(3.0, min(30.0, cfg.runtime.timeout_s / 2))
    progress = StepCounter() if rank > 0 else None
    beat = Heartbeat(store, rank, progress=progress)
    numel = exp.initial_flat().numel()  # SCAFFOLD: a JOB carries w_v and c_v, a RESULT y and Δc_k (runtime/controls.py)
    numel += controls.extra_bytes(cfg, FlatLayout.of(exp.new_model())) // 4 if controls.active(cfg) else 0
    placement = Placement(cfg.runtime.placement, world_size, exp.n_samples, cfg.train.batch_size)
    upload = UpdateCodec(cfg.compression, FlatLayout.of(exp.new_model())).wire  # what a RESULT carries (codecs/)
    ends = open_ends(rank, world_size, numel, links, upload)
    try:
        # device state (error feedback's residuals, SCAFFOLD's c_k): written and read by their workers (runtime/residuals.py)
        feedback = cfg.compression.error_feedback or controls.active(cfg)
        if rank > 0:
            watcher = Watcher(store, [0], hb_limit)
            mine = placement.devices_of(rank, exp.num_devices)
            exp = keep_only(exp, mine)  # devices.num null: the writers
            exp.dp_key = device_key_for(cfg, private_dir(out_dir), resuming=False)  # opened at its first DP-SGD job
            run_worker(exp, rank, numel, watcher, links, progress, ends=ends,
                       residuals=(out_dir, device_state(resume, mine) if resume else None) if feedback else None)
            return None
        device_key_for(cfg, private_dir(out_dir), resuming=resume is not None, trains=False)  # DP-SGD: key kept
        check_disk(cfg, exp, out_dir)  # error feedback's residual checkpoints, before anything is written
        check_cache(cfg, exp, out_dir)  # CA²FL's cache, in memory and in the checkpoints
        watcher = Watcher(store, range(1, world_size), hb_limit)
        report = exp.partition_report()
        exp = keep_only(exp, [])  # rank 0 trains nothing: keep only what evaluation needs
        print(f"seafl: running {cfg.name} ({cfg.algorithm.name}) on {world_size} ranks ({backend}): rank 0 "
              f"aggregates, {world_size - 1} workers train; output in {out_dir}", file=sys.stderr)
        if cfg.algorithm.limit_line():  # a rule of your own under a β it did not choose (issue 63)
            print(cfg.algorithm.limit_line(), file=sys.stderr)
        from seafl_dist.report.wandb_sink import make_callbacks
        executor = DistributedExecutor(world_size, numel, watcher, cfg.runtime.timeout_s, placement, links, ends,
                                       residuals_on=feedback)
        summary = Server(exp, executor, out_dir, callbacks=make_callbacks(cfg, out_dir, resume),
                         partition_report=report, resume=resume, hook=hook).run()
        print(format_summary(summary))
        return summary
    except BaseException as err:
        if not isinstance(err, KeyboardInterrupt):
            say_failure(rank, err)  # before the farewell: a peer told of it may end the job (torchrun) at once
        farewell(*ends, GONE_INTERRUPTED if isinstance(err, KeyboardInterrupt) else GONE_FAILED)
        raise
    finally:
        beat.stop()


def say_failure(rank: int, err: BaseException) -> None:
    """This rank's error on its stderr, once (``err.seafl_said``): bad input (ConfigError, a missing file) is said
    by rank 0's CLI alone."""
    if getattr(err, "seafl_said", False) or isinstance(err, (ConfigError, FileNotFoundError)):
        return
    print(f"seafl: error on rank {rank}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    try:
        err.seafl_said = True
    except AttributeError:  # an exception type with __slots__
        pass


def open_ends(rank: int, world_size: int, numel: int, links, upload: tuple = (0, 0)) -> tuple[Mailbox, Outbox]:
    """This rank's mailbox and outbox: rank 0 hears every worker and sends down; a worker the reverse.
    ``upload``: (codec id, bytes) of a worker's RESULT with ``compression.codec`` (0, 0: the float32 model)."""
    down, up = links
    if rank == 0:
        return Mailbox(range(1, world_size), numel, up, upload), Outbox(down)
    return Mailbox([0], numel, down), Outbox(up)


def farewell(mailbox: Mailbox, outbox: Outbox, why: int, wait_s: float = 15.0) -> None:
    """After an interrupt or a failure (``why``): tell every peer we are gone, wait briefly for theirs.

    A gloo receive cannot be cancelled: a receiver thread still waiting when the process ends
    aborts it, and the caller's process (seafl_dist.run) must go on. So each rank sends its peers
    a BYE, which ends their receiver for it and says why (a worker told of rank 0's interrupt stops
    as interrupted, told of its failure as failed), and hears theirs: ranks stopped by one signal
    all do so (a worker takes messages between optimiser steps); a dead peer's connection fails
    at once."""
    for r in mailbox.peers:
        try:
            outbox.send(r, Header(BYE, device=why))
        except TransportError:  # an earlier send failed: that peer is gone
            pass
    mailbox.wait_closed(wait_s)
    outbox.close()
