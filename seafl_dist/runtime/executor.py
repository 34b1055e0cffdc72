"""Who trains the jobs. The server loop only submits jobs and asks for their results.

:class:`InProcessExecutor` trains a job in this process when its result is first asked for.
The distributed executor (runtime/distributed.py) ships the same job to a worker rank at
submit time. Both train with :class:`GroupTrainer`, so a job gives the same bits everywhere.

``runtime.batch_jobs`` = G: a rank trains up to G pending jobs together (train/batched.py).
The in-process executor, asked for a result it has not trained, takes that job and the G - 1
other pending jobs that finish first (virtual time); a worker takes its G earliest-finishing
queued jobs. G = 1 trains one job at a time with train_job, today's bits; so does a model the
fused step cannot train exactly (one line says why, before anything trains).

On a GPU with ``runtime.cuda_graphs`` (the default) the G jobs instead train at once as CUDA
graphs on G streams (train/graphed.py), each to the bits it has alone, so G changes no result.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

import torch

from seafl_dist.codecs import ErrorFeedback, UpdateCodec
from seafl_dist.runtime import controls
from seafl_dist.sim import stream_seed
from seafl_dist.threats import Threats
from seafl_dist.train import FlatLayout, train_job, train_jobs
from seafl_dist.train.batched import fusion_blocker
from seafl_dist.train.graphed import Slot, graph_blocker, train_slots


@dataclass(frozen=True)
class JobSpec:
    job: int
    device: int
    version: int  # the global version the job starts from
    epochs: int  # epochs it will train (SEAFL²: fewer when notified)
    finish: float  # planned virtual finish time, used for worker queue order
    steps: int = 0  # a step-counted job's local steps (FedCompass: its last epoch cut short); 0: epochs whole

    @classmethod
    def of(cls, start: dict, lookahead) -> "JobSpec":
        """The job a start event begins: the epochs it will really train and its finish (the schedule's
        :class:`~seafl_dist.sim.Lookahead` peeks ahead for them, SEAFL²'s notifications included), and a step-counted
        job's steps, which its start event carries."""
        job = start["job"]
        return cls(job, start["device"], start["version"], lookahead.final_epochs(job), lookahead.finish_time(job),
                   start.get("steps", 0))


def job_seeds(cfg, spec: JobSpec) -> dict:
    """The job's own named streams: its data order and augmentation (``seed``) and the random
    numbers its layers draw, Dropout and the like (``torch_seed``); keyed by (run seed, purpose,
    device, job index), so a job trains to the same bits on any rank, in any order, after a resume."""
    return {"seed": stream_seed(cfg.run.seed, "train", spec.device, spec.job),
            "torch_seed": stream_seed(cfg.run.seed, "torch", spec.device, spec.job)}


def dp_sgd_of(exp, spec: JobSpec) -> dict:
    """``train.dp_sgd``'s arguments of a job: the section (σ calibrated under ``target_epsilon``: the Experiment's
    ``dp_sgd``), and its Poisson batches' seed (in place of the data-order ``seed``) and noise seed, both drawn from
    the devices' secret key (privacy/device_key.py), never from ``run.seed``; {} when off."""
    if not exp.cfg.train.dp_sgd.enabled:
        return {}
    if exp.dp_key is None:
        raise RuntimeError("a DP-SGD job needs the devices' key: the runner sets Experiment.dp_key "
                           "(privacy/device_key.py DeviceKey) before it trains")
    seeds = exp.dp_key.seeds(spec.device, spec.job)
    return {"dp_sgd": exp.dp_sgd, "seed": seeds["sample"], "dp_seed": seeds["noise"]}


def compress_seed(cfg, spec: JobSpec) -> int:
    """The job's named stream for its codec's randomness (QSGD's stochastic rounding)."""
    return stream_seed(cfg.run.seed, "compress", spec.device, spec.job)


def run_job(exp, model, spec: JobSpec, start: torch.Tensor, on_step=None, result_on_device=False,
            logged: dict | None = None, control=None) -> torch.Tensor:
    """Train one job of ``exp`` (an Experiment) on ``model`` from flat ``start``; the result is on
    the CPU, or with ``result_on_device`` on the device that trained it (a worker's outbox copies it
    off the GPU without holding up the next job). ``logged`` gets what the module logged (train/standin.py);
    ``control``: SCAFFOLD's correction of the job (train/controls.py)."""
    cfg, t = exp.cfg, exp.cfg.train
    seeds = {**job_seeds(cfg, spec), **dp_sgd_of(exp, spec)}  # DP-SGD: its batches from the devices' key
    return train_job(model, start, exp.train.to(exp.device), exp.shard(spec.device), epochs=spec.epochs,
                     batch_size=t.batch_size, **seeds, augment=cfg.data.augment,
                     device=exp.device, precision=cfg.runtime.precision, on_step=on_step,
                     result_device=exp.device if result_on_device else "cpu", loop=t.loop,
                     clip=(t.grad_clip_val, t.grad_clip_algorithm), logged=logged, prox_mu=t.prox_mu,
                     steps=spec.steps or None, control=control)


def run_graphed(exp, slots, specs: list[JobSpec], starts: list[torch.Tensor], on_step=None) -> list[torch.Tensor]:
    """Train the jobs as CUDA graphs on ``slots`` (train/graphed.py); results in order, on the CPU."""
    cfg = exp.cfg
    return train_slots(slots, starts, exp.train.to(exp.device), [exp.shard(s.device) for s in specs],
                       epochs=[s.epochs for s in specs], batch_size=cfg.train.batch_size,
                       seeds=[job_seeds(cfg, s)["seed"] for s in specs], augment=cfg.data.augment, on_step=on_step)


def run_jobs(exp, model, specs: list[JobSpec], starts: list[torch.Tensor], on_step=None) -> list[torch.Tensor]:
    """Train several jobs together (one fused step for all, train/batched.py); results in order."""
    cfg = exp.cfg
    seeds = [job_seeds(cfg, s) for s in specs]
    return train_jobs(model, starts, exp.train.to(exp.device), [exp.shard(s.device) for s in specs],
                      epochs=[s.epochs for s in specs], batch_size=cfg.train.batch_size,
                      seeds=[s["seed"] for s in seeds], torch_seeds=[s["torch_seed"] for s in seeds],
                      augment=cfg.data.augment, device=exp.device, precision=cfg.runtime.precision, on_step=on_step,
                      prox_mu=cfg.train.prox_mu)


def loop_blocker(train, algorithm=None) -> str | None:
    """Why ``train`` (the config's section) or ``algorithm`` (its section) needs each job's own loop, so neither fused
    steps nor CUDA graphs."""
    if algorithm is not None and algorithm.name == "fedcompass":
        return "algorithm.name is fedcompass (a step-counted job, whose last epoch is cut short, trains in its own loop)"
    if algorithm is not None and algorithm.name == "scaffold":
        return "algorithm.name is scaffold (the control variates' correction runs in a job's own loop)"
    if train.loop == "lightning":
        return "train.loop is lightning (each job is one lightning.Trainer.fit)"
    if train.dp_sgd.enabled:
        return "train.dp_sgd.enabled is true (Poisson batches vary in size, which neither can take)"
    if train.grad_clip_val is not None:
        return f"train.grad_clip_val is {train.grad_clip_val:g} (clipping runs in a job's own loop)"
    return None


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is, or was raised while handling, running out of GPU memory (a capture that
    runs out ends in an error of its own about the capture)."""
    while err is not None:
        if isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


class GroupTrainer:
    """Trains a group of at most ``limit`` jobs (``runtime.batch_jobs``) on one reused model.

    Out of GPU memory with a large group: the group is retrained in halves (each job's result
    does not depend on its group), the limit drops to what fit, and one line names
    ``runtime.batch_jobs`` and that value, instead of a CUDA traceback."""

    def __init__(self, exp, model=None, graphs: bool | None = None):
        self.exp = exp
        train = exp.cfg.train
        self.model = model if model is not None else exp.new_model(lightning=train.loop == "lightning")
        self.limit = exp.cfg.runtime.batch_jobs
        self.codec = UpdateCodec(exp.cfg.compression, FlatLayout.of(self.model))  # what a job uploads
        scaffold = controls.active(exp.cfg)  # SCAFFOLD's c_k: the controls part of the same device state
        self.feedback = ErrorFeedback() if exp.cfg.compression.error_feedback or scaffold else None  # devices' state
        self.controls = controls.JobControls(exp, FlatLayout.of(self.model), self.feedback) if scaffold else None
        self.threats = Threats(exp.cfg, exp.num_devices, FlatLayout.of(self.model).mask("param"))  # local attacks
        self.slots: list | None = None  # CUDA graph slots, made at the first group
        self.logs: dict[int, dict] = {}  # job -> what its module logged (modules that log: one job at a time)
        # graphs=True on a CPU: the slots' code stepping eagerly (the tests' way to run it end to end)
        self.graphs = exp.device.type == "cuda" and exp.cfg.runtime.cuda_graphs if graphs is None else graphs
        own = loop_blocker(train, exp.cfg.algorithm)  # what only a job's own loop does: lightning, clipping, steps
        if self.graphs:
            why = own or graph_blocker(self.model) or (None if getattr(exp.train, "static_shapes", True) else
                                                       "data.name's batches come from a DataModule's collate, "
                                                       "whose shapes may vary from batch to batch")
            if why is not None:
                self._eager(f"its jobs cannot be captured as CUDA graphs: {why}")
        if self.limit > 1 and not self.graphs:  # before anything trains: can this model's jobs be fused exactly?
            why = own or fusion_blocker(self.model, exp.train.to(exp.device), exp.device, exp.cfg.runtime.precision)
            if why is not None:
                print(f"seafl: runtime.batch_jobs={self.limit}: training one job at a time, since the fused step "
                      f"cannot train this model exactly: {why}", file=sys.stderr)
                self.limit = 1

    def _eager(self, why: str) -> None:
        print(f"seafl: runtime.cuda_graphs: training eagerly, since {why}", file=sys.stderr)
        self.graphs = False

    def _make_slots(self) -> list | None:
        """``limit`` slots (halved while out of GPU memory), or None (and eager from now on) where capture fails."""
        exp = self.exp
        while self.slots is None:
            made, oom = [], False
            try:
                for _ in range(self.limit):
                    made.append(Slot(self.model, exp.train.to(exp.device), exp.cfg.train.batch_size, exp.device,
                                     exp.cfg.runtime.precision, exp.cfg.train.prox_mu))
                self.slots = made
            except Exception as err:  # noqa: BLE001 -- named in the line; eager steps then meet any real error
                oom = out_of_memory(err)
                if oom and self.limit == 1:
                    raise
                if not oom:
                    self._eager(f"capturing its step failed ({type(err).__name__}: {str(err).splitlines()[0][:160]})")
            if not oom and self.slots is None:
                return None
            if oom:  # outside the except: its traceback no longer holds the half-made slots' memory
                made.clear()
                self._halve(self.limit)
        return self.slots

    def _halve(self, n: int) -> None:
        torch.cuda.empty_cache()
        half = n // 2
        print(f"seafl: out of GPU memory training {n} jobs at once; set runtime.batch_jobs={half} "
              f"(was {self.exp.cfg.runtime.batch_jobs}); continuing with groups of {half}", file=sys.stderr)
        self.limit = half
        if self.slots is not None:
            self.slots = self.slots[:half]

    def train(self, specs: list[JobSpec], starts: list[torch.Tensor], on_step=None,
              result_on_device=False) -> list[torch.Tensor]:
        """The jobs' uploads in order (``compression.codec``: the trained models, or their compressed
        deltas; codecs/), on the CPU; a lone job's stays on its device with ``result_on_device`` (see run_job).
        Every training path hands back its models here, so this is the one place uploads are made (SCAFFOLD's: y and
        Δc_k, one job at a time, runtime/controls.py)."""
        if self.controls is not None:
            return [self.controls.train(lambda spec, w, step: self._run_one(spec, w, on_step, result_on_device, step),
                                        s, start) for s, start in zip(specs, starts)]
        flats = self._train(specs, starts, on_step, result_on_device)
        uploads = [None] * len(specs)
        for i in sorted(range(len(specs)), key=lambda i: (specs[i].finish, specs[i].job)):  # error feedback: a
            s = specs[i]  # device's jobs in the order they finish (codecs/feedback.py)
            trained = self.threats.upload(flats[i], starts[i], s.device, s.job)  # a malicious device's attack
            uploads[i] = self.codec.encode(trained, starts[i], compress_seed(self.exp.cfg, s), self.feedback,
                                           device=s.device, job=s.job, finish=s.finish)
        return uploads

    def _run_one(self, spec: JobSpec, start: torch.Tensor, on_step, result_on_device, control=None) -> torch.Tensor:
        """One job in its own loop; what its module logged kept for the server."""
        logged: dict = {}
        flat = run_job(self.exp, self.model, spec, start, on_step, result_on_device, logged, control)
        if logged:
            self.logs[spec.job] = logged
        return flat

    def _train(self, specs: list[JobSpec], starts: list[torch.Tensor], on_step=None,
               result_on_device=False) -> list[torch.Tensor]:
        """The trained models in order (as :meth:`train` says)."""
        if self.graphs and self._make_slots() is not None:
            try:
                return run_graphed(self.exp, self.slots, specs, starts, on_step)
            except torch.cuda.OutOfMemoryError:
                if len(self.slots) == 1:
                    raise
            self._halve(len(self.slots))  # each job's bits do not depend on its slot: the group trains again
            return self._train(specs, starts, on_step, result_on_device)
        if len(specs) == 1:
            return [self._run_one(specs[0], starts[0], on_step, result_on_device)]
        try:
            return run_jobs(self.exp, self.model, specs, starts, on_step)
        except torch.cuda.OutOfMemoryError:
            half = len(specs) // 2
            if half < self.limit:
                self._halve(len(specs))
            else:
                torch.cuda.empty_cache()
        return (self._train(specs[:half], starts[:half], on_step, result_on_device)
                + self._train(specs[half:], starts[half:], on_step, result_on_device))


class InProcessExecutor:
    """Trains in this process, one model instance (or one set of graph slots) reused for every job.

    Lazily by default: a job trains when its result is first asked for, with the G - 1 other
    pending jobs that finish first. With CUDA-graph slots (a job's bits do not depend on its group)
    a thread trains ahead instead: whatever is pending, earliest finish first, G at a time, while
    the server aggregates and evaluates, so the GPU does not wait for them."""

    def __init__(self, exp, graphs: bool | None = None):
        self.exp = exp
        self.trainer = GroupTrainer(exp, graphs=graphs)
        self.model, self.feedback = self.trainer.model, self.trainer.feedback  # residuals: in the checkpoints
        self._pending: dict[int, tuple[JobSpec, torch.Tensor]] = {}
        self._done: dict[int, torch.Tensor] = {}  # trained with an earlier group, not yet asked for
        self._ahead = None
        if self.trainer.graphs and self.trainer._make_slots() is not None:
            self._ahead = threading.Condition()
            self._error: BaseException | None = None
            self._closed = False
            self._thread = threading.Thread(target=self._train_ahead, name="seafl-train-ahead", daemon=True)
            self._thread.start()

    def _take_group(self, n: int) -> list:
        """The ``n`` pending jobs that finish first (or all), taken out of the pending ones."""
        group = sorted(self._pending.values(), key=lambda p: (p[0].finish, p[0].job))[:n]
        for spec, _ in group:
            del self._pending[spec.job]
        return group

    def _train_ahead(self) -> None:
        if self.exp.device.type == "cuda":
            torch.cuda.set_device(self.exp.device)
        while True:
            with self._ahead:
                while not self._pending and not self._closed:
                    self._ahead.wait()
                if self._closed:
                    return
                group = self._take_group(self.trainer.limit)
            try:
                flats = self.trainer.train([g[0] for g in group], [g[1] for g in group])
            except BaseException as err:  # noqa: BLE001 -- raised again where the result is asked for
                with self._ahead:
                    self._error = err
                    self._ahead.notify_all()
                return
            with self._ahead:
                self._done.update((spec.job, flat) for (spec, _), flat in zip(group, flats))
                self._ahead.notify_all()

    def submit(self, spec: JobSpec, start: torch.Tensor) -> None:
        if self.trainer.controls is not None:
            self.feedback.started(spec.job, spec.device)  # the job trains from the device's c_k as it is now
        if self._ahead is None:
            self._pending[spec.job] = (spec, start)
            return
        with self._ahead:
            self._pending[spec.job] = (spec, start)
            self._ahead.notify_all()

    def result(self, job: int) -> torch.Tensor:
        return self._result(job)

    def taken(self, updates: list[dict]) -> None:
        """The server took these jobs (aggregated, each ``rejected`` or not): a resume never trains them again, and an
        accepted one's Δc_k joins its device's c_k (codecs/feedback.py)."""
        if self.feedback is not None:
            for u in updates:
                self.feedback.taken(u["job"], not u.get("rejected"))

    def _result(self, job: int) -> torch.Tensor:
        if self._ahead is not None:
            with self._ahead:
                while job not in self._done:
                    if self._error is not None:
                        raise self._error
                    self._ahead.wait(timeout=0.5)  # a timeout, so that signals are handled meanwhile
                return self._done.pop(job)
        if job in self._done:
            return self._done.pop(job)
        group = [self._pending.pop(job)]
        group += self._take_group(self.trainer.limit - 1)  # the G - 1 others that finish first (none when G = 1)
        flats = self.trainer.train([g[0] for g in group], [g[1] for g in group])
        for (spec, _), flat in zip(group[1:], flats[1:]):
            self._done[spec.job] = flat
        return flats[0]

    def logged(self, job: int) -> dict:
        """What the module logged in ``job`` (after its result was taken), reduced over the job; {} if nothing."""
        return self.trainer.logs.pop(job, {})

    def close(self) -> None:
        """Forget what is pending; the thread (if any) ends after the group it is training."""
        if self._ahead is not None:
            with self._ahead:
                self._closed = True
                self._ahead.notify_all()
            if self._thread is not threading.current_thread():
                self._thread.join()
        self._pending.clear()
        self._done.clear()
