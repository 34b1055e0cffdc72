"""The one launch path of ``seafl run`` and :func:`seafl_dist.run`.

Rank and world size are read here, once, and passed down: torchrun (WORLD_SIZE > 1) or this
process alone. Either way :func:`launch` decides what the run dir needs (one call to
``checkpoint.plan``: fresh, resume or completed), runs it under :class:`~.signals.Interrupts`
(the caller's signal handlers come back afterwards), and returns the summary that summary.json
holds (rank 0; the other ranks get None) or raises:

- :class:`~.signals.RunInterrupted` on SIGTERM/SIGINT/SIGUSR1, on every rank, after rank 0
  wrote a checkpoint and summary.json (status ``interrupted``);
- :class:`RunFailed` when the run failed, on every rank, after rank 0 wrote summary.json
  (status ``failed``) and kept its last checkpoint;
- :class:`~seafl_dist.settings.ConfigError` (a one-line message) or ``FileNotFoundError`` for bad
  input, before anything trains.
Nothing here ends the process: the CLI decides that (runtime/elastic.py: torchrun's restarts).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from seafl_dist.report.sinks import RunFileError, read_summary
from seafl_dist.runtime import faults
from seafl_dist.runtime.signals import Interrupts, RunInterrupted
from seafl_dist.settings import ConfigError


class RunFailed(RuntimeError):
    """A run failed (an error on some rank, a lost worker, a full disk ...): raised on every rank.

    ``run_dir``: where the run wrote what it had (summary.json says ``failed`` and why; the last
    checkpoint is kept, so rerunning resumes); ``summary``: that summary on rank 0, else None."""

    def __init__(self, message: str, run_dir: Path | None = None, summary: dict | None = None):
        super().__init__(message)
        self.run_dir, self.summary = run_dir, summary


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Ranks":
        env = os.environ
        return cls(int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0")))


def default_out_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


@dataclass(frozen=True)
class Target:
    """Where a launch runs and what it may do there: ``explicit`` is ``--resume`` (a dir without a
    checkpoint is refused), ``overwrite`` replaces a run of another config (``--overwrite``)."""
    explicit: bool = False
    overwrite: bool = False


def launch(cfg, out_dir=None, *, explicit: bool = False, overwrite: bool = False) -> dict | None:
    """Run ``cfg`` into ``out_dir`` (None: ``runs/<name>-<timestamp>``). Returns the summary on
    rank 0, None elsewhere."""
    ranks, target = Ranks.from_env(), Target(explicit, overwrite)
    with Interrupts() as interrupts:
        if ranks.world > 1:
            return launch_ranks(cfg, out_dir, target, ranks, interrupts)
        return _one_process(cfg, Path(out_dir) if out_dir is not None else default_out_dir(cfg.name), target)


def decide(cfg, out: Path, target: Target):
    """The run dir's plan (fresh, resume, completed; another config's run refused unless overwrite),
    decided once per launch: rank 0 alone under torchrun."""
    from seafl_dist.runtime.checkpoint import plan
    return plan(cfg, out, explicit=target.explicit, overwrite=target.overwrite)


def say_completed(out: Path) -> None:
    status = (read_summary(out) or {}).get("status", "completed")  # or "stalled" (docs/devices.md)
    print(f"seafl: {out} already holds a {status} run of this config (summary.json, model.pt); nothing to do",
          file=sys.stderr)


def _one_process(cfg, out: Path, target: Target) -> dict | None:
    decided = decide(cfg, out, target)
    if decided.action == "completed":
        say_completed(out)
        return read_summary(out)
    from seafl_dist.runtime.inprocess import run_inprocess
    from seafl_dist.runtime.server import format_summary
    use_threads(cfg)
    print(f"seafl: running {cfg.name} ({cfg.algorithm.name}) in one process; output in {out}", file=sys.stderr)
    if cfg.algorithm.limit_line():  # a rule of your own under a β it did not choose (issue 63)
        print(cfg.algorithm.limit_line(), file=sys.stderr)
    with outcome(out, 0):
        summary = run_inprocess(cfg, out, resume=decided.checkpoint, hook=faults.from_env())
    print(format_summary(summary))
    # what summary.json holds (a never-reached target is null there, not inf), so a rerun that
    # finds the run completed returns the same dict
    return read_summary(out)


class outcome:
    """Turn what a run raises into the documented exceptions; bad input passes through as it is."""

    def __init__(self, out: Path | None, rank: int, on_interrupt=None):
        self.out, self.rank, self.on_interrupt = out, rank, on_interrupt

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is None or isinstance(err, (ConfigError, FileNotFoundError)):
            return False
        if isinstance(err, KeyboardInterrupt):
            if self.on_interrupt is not None:
                self.on_interrupt()
            if isinstance(err, RunInterrupted):
                return False
            raise RunInterrupted(str(err) or "interrupted") from err
        if not isinstance(err, Exception):  # SystemExit, GeneratorExit: not ours to translate
            return False
        where = f" on rank {self.rank}" if self.rank else ""
        summary = read_summary(self.out) if self.out is not None and self.rank == 0 else None
        raise RunFailed(f"run failed{where}: {type(err).__name__}: {err}"
                        + (f"; what it had is in {self.out}" if self.out is not None and self.out.exists() else ""),
                        self.out, summary) from err


def use_threads(cfg) -> None:
    """One process: ``runtime.threads`` torch threads, with a warning when they outnumber the CPUs."""
    if cfg.runtime.threads:
        import torch

        from seafl_dist.runtime.cpus import cpus_here, oversubscription
        torch.set_num_threads(cfg.runtime.threads)
        warning = oversubscription(cfg.runtime.threads, 1, cpus_here())
        if warning and (cfg.runtime.device == "cpu" or not torch.cuda.is_available()):
            print(warning, file=sys.stderr)


def bounded(fn, seconds: float, what: str) -> None:
    """Call ``fn`` on a helper thread and wait at most ``seconds``: tearing down a process group
    whose peers are gone must not hang the caller's process."""
    t = threading.Thread(target=fn, name=f"seafl-{what}", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        print(f"seafl: {what} did not finish within {seconds:g}s; left behind", file=sys.stderr)


def launch_ranks(cfg, out_dir, target: Target, ranks: Ranks, interrupts: Interrupts) -> dict | None:
    """Under torchrun: agree on the attempt and the plan (runtime/elastic.py), form the group, run."""
    import datetime

    import torch.distributed as dist

    from seafl_dist.runtime import elastic
    from seafl_dist.runtime.distributed import run_distributed, say_failure
    rank, world = ranks.rank, ranks.world
    # A worker may legitimately hear nothing for hours; liveness comes from the heartbeats,
    # so the process group's own timeout is only a last resort.
    pg_timeout_s = max(cfg.runtime.timeout_s, 86400)
    run_key, out, error = elastic.next_run_key(), None, None
    with interrupts.default_disposition():  # blocking C++ waits: a signal ends this rank at once
        faults.from_env(rank=rank).at("before_group")
        base = elastic.connect(rank, world, pg_timeout_s)
        if rank == 0:
            out = Path(out_dir) if out_dir is not None else \
                Path(elastic.agree_run_dir(base, run_key, str(default_out_dir(cfg.name))))
            if elastic.refused_before(base, run_key):  # said once, by an earlier attempt: torchrun's restarts end
                plan = {"action": "refused"}
            else:
                plan, error = _plan_for_all(cfg, out, target, elastic.previous_interrupted(base, run_key))
                if plan["action"] == "error":
                    elastic.mark_refused(base, run_key)
            plan["run_dir"] = str(out)  # the workers write error feedback's residuals there (runtime/residuals.py)
            attempt = elastic.lead(base, run_key, world, plan)
        else:
            attempt = elastic.join(base, run_key, rank)
        action = attempt.plan["action"]
        if action in ("fresh", "resume"):
            dist.init_process_group("gloo", store=attempt.group_store(), rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=pg_timeout_s))
    if error is not None:
        raise error
    if action == "error":
        raise ConfigError(attempt.plan["error"])
    if action == "refused":
        raise elastic.Refused()
    if action == "interrupted":
        attempt.mark_interrupted()
        raise RunInterrupted("the previous attempt was interrupted (every rank stopped on a signal): an interrupt "
                             "stops the job, torchrun's restart does not resume it; rerun to resume")
    if action == "completed":
        if rank == 0:
            say_completed(out)
        return read_summary(out) if rank == 0 else None
    ok = False
    try:
        attempt.store.set(f"pid/{rank}", str(os.getpid()))  # for the SEAFL_FAULT hook's @RANK
        hook = faults.from_env(rank=rank, world=world, pid_of=lambda r: int(attempt.store.get(f"pid/{r}")))
        with outcome(out, rank, on_interrupt=attempt.mark_interrupted):
            try:
                where = out if rank == 0 else Path(attempt.plan["run_dir"])  # workers: error feedback's files
                run_distributed(cfg, where, rank=rank, world_size=world, local_rank=ranks.local_rank,
                                store=attempt.store, pg_timeout_s=pg_timeout_s, resume=attempt.plan.get("checkpoint"),
                                hook=hook)
            except KeyboardInterrupt as err:
                print(f"seafl: rank {rank} stopped: {err or 'interrupted'}", file=sys.stderr)
                raise
            except (ConfigError, FileNotFoundError):  # bad input: one line, from rank 0 (the CLI's), said once
                elastic.mark_refused(attempt.base, run_key)
                raise
            except Exception as err:
                say_failure(rank, err)  # unless run_distributed said it, before its farewell
                raise
        ok = True
        return read_summary(out) if rank == 0 else None
    finally:
        sys.stderr.flush()
        bounded(elastic.end_group, 60.0 if ok else 10.0, "process group teardown")


def _plan_for_all(cfg, out: Path, target: Target, interrupted: bool) -> tuple[dict, Exception | None]:
    """Rank 0's decision, as the other ranks receive it (and the error to raise here, if any)."""
    if interrupted:
        return {"action": "interrupted"}, None
    try:
        decided = decide(cfg, out, target)
    except (ConfigError, FileNotFoundError, RunFileError) as err:  # another config's run, a busy or unwritable dir
        return {"action": "error", "error": str(err)}, err
    return {"action": decided.action, "checkpoint": str(decided.checkpoint) if decided.checkpoint else None}, None
