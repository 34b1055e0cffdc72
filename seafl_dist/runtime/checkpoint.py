"""Checkpoints of a run (SPEC "Checkpoint and resume"): what to keep, how to write it, when to resume.

The schedule is a pure function of config and seed, so a checkpoint holds only what cannot be
recomputed, taken at the end of an aggregation (the last consistent state, never half of one):
- every model version still referenced: the global one and the bases of the in-flight jobs,
- the aggregation count (``version``), virtual time, metric rows, the event counters and
  staleness list the summary needs, the real seconds spent so far,
- with a server optimizer (``algorithm.server_opt``), its m, v (float64) and step count,
- with error feedback (``compression.error_feedback``), each device's residual before its first job not yet
  aggregated (codecs/feedback.py): inline (``feedback``) from one process; under torchrun, where each worker
  holds its devices' residuals, the names of the files the workers wrote at the same version (``residuals``;
  runtime/residuals.py), which go with the checkpoint; either resumes under any W,
- the byte lengths of ``events.jsonl`` and ``metrics.csv`` at that point (the run files are
  fsynced first, so the lengths are on disk before the checkpoint that records them), and with device
  evaluation on, those of ``device_metrics.csv`` and ``device_summary.csv`` and its last summary,
- the resolved config (YAML), a format number, and the package and numerics versions of the code
  that wrote it (seafl_dist/versions.py).
A resumed run replays the schedule up to that aggregation without training, truncates the run
files to the recorded lengths, re-dispatches the jobs that were in flight (same seeds, same
bits) and appends; its files end byte-identical to an uninterrupted run's.

Files: ``<run>/private/checkpoint-<version:08d>.pt`` (the run dir's server-private part, runtime/rundir.py
private_dir), written to a temp file, fsynced, renamed, the directory fsynced; the last two are kept. A run
dir written before the move to private/ holds them at its top level: it resumes from there, and the resumed run
writes into private/ (pruning the old ones as it goes). A completed run deletes them and private/ with them (its
``summary.json`` says ``completed`` and ``model.pt`` holds the final model), so a sweep of ResNet runs does not
keep a gigabyte per run, and nothing server-private is left to publish by mistake. Checkpoints are read with ``torch.load(weights_only=True)``: plain
containers and tensors only, nothing executable.

Which config keys may change on resume: those runtime/rundir.py names (where and how it runs,
not what it computes: ``runtime.device``/``threads``/``backend``/``placement``/``timeout_s``,
``logging.*``, ``name``, ``run.checkpoint_every``/``_s``). Any other difference, ``runtime.precision``
and ``runtime.batch_jobs`` included, is refused with the keys named. :func:`plan` also refuses a
dir that holds another config's run (unless ``overwrite``), a dir another live run holds
(runtime/runlock.py), and reports "completed" only when the files are the completed run's own.
A checkpoint or completed run of another numerics version (its bits are not this code's) is refused
with both versions named, unless ``overwrite`` (then the run starts afresh); a package version
alone may differ.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from seafl_dist.report.device_eval import DEVICE_METRICS, DEVICE_SUMMARY
from seafl_dist.report.sinks import FINISHED, read_config, read_summary, writing
from seafl_dist.runtime import runlock, signals
from seafl_dist.runtime.rundir import (check_writable, checkpoints, config_diff, config_tree, describe_diff,
                                       numerics_fix, numerics_mismatch, private_dir, profile_mismatch,
                                       proof_mismatch, remove_private, run_of)
from seafl_dist.settings import ConfigError
from seafl_dist.versions import stamp

FORMAT = 1
KEEP = 2


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed from; the CLI prints it as one line and exits 2."""


class NumericsError(CheckpointError):
    """A run dir whose bits another numerics version trained; ``--overwrite`` starts it afresh."""


OVERWRITE = "--overwrite (overwrite=True in seafl_dist.run) or another --out"


# ---- writing ------------------------------------------------------------------------------

def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_save(obj, path: Path) -> None:
    """torch.save to ``path`` so that a reader sees the old file or the whole new one, never half.

    The temp name is the same for every run, so the bytes (torch writes the archive's name
    into the file) are too: two runs that end with the same model write the same model.pt."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with signals.held():  # a SIGTERM now waits for the write to end, rather than tear it
        try:
            with writing(path), open(tmp, "wb") as f:
                torch.save(obj, f)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:  # a full disk: the previous file stays, no temp
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
        fsync_dir(path.parent)


def private_place(run_dir: Path) -> Path:
    """The run dir's private/ (runtime/rundir.py), made (and its entry fsynced into the run dir) if absent."""
    place = private_dir(run_dir)
    if not place.is_dir():
        place.mkdir(parents=True, exist_ok=True)
        fsync_dir(place.parent)
    return place


def save(run_dir: Path, state: dict) -> Path:
    """Write ``state`` (see :meth:`Server._checkpoint_state`) as the newest checkpoint, in private/; keep the last
    two (a run dir written before the move: its top-level ones count among them, and go as new ones come)."""
    path = private_place(run_dir) / f"checkpoint-{state['version']:08d}.pt"
    atomic_save({"format": FORMAT, **stamp(), **state}, path)
    for old in checkpoints(run_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path  # the workers' residual files go with their checkpoints: runtime/residuals.py retain()


remove_all = remove_private  # private/ whole, every checkpoint and every temp file of a cut-short write


# ---- reading and checking -----------------------------------------------------------------

def feedback_unresumable(path, why: str) -> str:
    """Why a run with error feedback cannot resume from ``path`` (codecs/feedback.py), in one line."""
    return (f"checkpoint {path}: a run with compression.error_feedback cannot resume byte-identically {why}; delete it "
            f"to resume from an older checkpoint, if any, or start afresh ({OVERWRITE})")


def residuals_missing(path: Path, state: dict) -> str | None:
    """Why the workers' residual files checkpoint ``path`` names (runtime/residuals.py) are not all there at their
    sizes, or None."""
    for name, size in state["residuals"].items():
        f = Path(path).parent / name
        have = f.stat().st_size if f.exists() else None
        if have != size:
            return (f"its devices' residuals {f} are {'missing' if have is None else f'{have} bytes, not {size}'} "
                    f"(the run dir was changed after the checkpoint)")
    return None


def load(path: Path, cfg, *, mmap: bool = False) -> dict:
    """Read and check a checkpoint against ``cfg``; a :class:`CheckpointError` of one line if unusable.

    ``mmap=True`` maps the tensors instead of reading them: every torchrun rank can check a
    checkpoint of gigabytes before the run starts, at the cost of reading its small header."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # zip/pickle errors of a cut or damaged file come in many types
        older = [p for p in checkpoints(run_of(path)) if p != path]
        hint = (f"delete it to resume from {older[-1].name}" if older else
                "delete it (and the run dir's other files) to start the run afresh")
        why = (str(err).splitlines() or ["unreadable"])[0].split(". ")[0][:120]
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({why}); {hint}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint {path} has format {got!r}, this seafl reads format {FORMAT}; "
                              f"resume it with the seafl version that wrote it")
    stale = numerics_mismatch(state)
    if stale:
        raise NumericsError(f"checkpoint {path} was trained {stale}; {numerics_fix(state, OVERWRITE)}")
    saved = yaml.safe_load(state["config"])
    diff = config_diff(saved, config_tree(cfg))
    if diff:
        raise CheckpointError(f"checkpoint {path} is of another config: {describe_diff(diff, saved, config_tree(cfg))}"
                              f"; resume with the run's own config (seafl run --resume {run_of(path)}), use another "
                              f"--out, or --overwrite to replace that run")
    why = profile_mismatch(cfg, state.get("profile_sha256"))
    if why:
        raise CheckpointError(f"checkpoint {path}: {why}; resume with the run's own profile file (at any path), use "
                              f"another --out, or --overwrite to replace that run")
    if cfg.compression.error_feedback and "feedback" not in state and "residuals" not in state:
        raise CheckpointError(feedback_unresumable(path, "without its devices' residuals (a torchrun run of an "
                                                         "earlier seafl kept them on its workers)"))
    if (cfg.compression.error_feedback or cfg.algorithm.name == "scaffold") and "residuals" in state:  # device state
        why = residuals_missing(path, state)
        if why:
            raise CheckpointError(feedback_unresumable(path, f"without its devices' residuals: {why}"))
    lengths = [("events.jsonl", state["events_bytes"]), ("metrics.csv", state["metrics_bytes"])]
    if "device_eval" in state:  # device evaluation's files (runtime/device_eval.py)
        lengths += zip((DEVICE_METRICS, DEVICE_SUMMARY), state["device_eval"]["bytes"])
    for name, size in lengths:
        f = run_of(path) / name
        have = f.stat().st_size if f.exists() else None
        if have is None or have < size:
            raise CheckpointError(f"{f} is {'missing' if have is None else f'{have} bytes'}, shorter than the "
                                  f"{size} bytes checkpoint {path.name} recorded; the run dir was changed "
                                  f"after the checkpoint, so it cannot be resumed exactly")
    return state


def edited_config(run_dir: Path, cfg) -> str | None:
    """How ``cfg`` (the run dir's own config.yaml) differs from what its newest checkpoint was trained with
    ("train.lr (0.05 there, 0.1 now)"), or None: no checkpoint, the same, or one :func:`load` will word."""
    found = checkpoints(Path(run_dir))
    if not found:
        return None
    try:
        saved = yaml.safe_load(torch.load(found[-1], map_location="cpu", weights_only=True, mmap=True)["config"])
    except Exception:  # noqa: BLE001 -- a damaged checkpoint: load() says which and what to do
        return None
    diff = config_diff(saved, config_tree(cfg))
    return f"{describe_diff(diff, saved, config_tree(cfg))} (there: {found[-1].name})" if diff else None


@dataclass(frozen=True)
class Plan:
    """What ``seafl run`` does with its run dir: ``fresh``, ``resume`` (from ``checkpoint``) or ``completed``.

    A fresh run clears the dir of any earlier run's files first (runtime/server.py)."""
    action: str
    checkpoint: Path | None = None


def _other_config(run_dir: Path, summary: dict | None, diff: list[str], saved: dict, cfg) -> CheckpointError:
    what = {"completed": "a completed run", "interrupted": "an interrupted run", "failed": "a failed run"}.get(
        (summary or {}).get("status"), "an unfinished run")
    return CheckpointError(f"run dir {run_dir} holds {what} of another config: "
                           f"{describe_diff(diff, saved, config_tree(cfg))}; use another --out, or --overwrite "
                           f"(overwrite=True in seafl_dist.run) to delete that run and start this one")


def plan(cfg, run_dir, *, explicit: bool, overwrite: bool = False) -> Plan:
    """Decide, before anything is written, whether ``run_dir`` is started, resumed or already done.

    ``explicit`` is ``--resume``: then a dir without a checkpoint is an error. A dir holding a run
    of another config (finished or not) is refused unless ``overwrite``; a dir of this config is
    completed (its summary says so and every file matches the sizes and sha256 it records),
    resumed from its last checkpoint, or started over. Reads only; every torchrun rank calls it."""
    run_dir = Path(run_dir)
    check_writable(run_dir)
    runlock.check_free(run_dir)
    saved, summary = read_config(run_dir), read_summary(run_dir)
    found = checkpoints(run_dir)
    diff = config_diff(saved, config_tree(cfg)) if saved is not None else []
    if diff and overwrite:
        return Plan("fresh")
    if diff and not found:
        raise _other_config(run_dir, summary, diff, saved, cfg)
    status = (summary or {}).get("status")
    if saved is not None and not diff and status in FINISHED:
        stale = numerics_mismatch(summary)
        if stale and not overwrite:
            raise NumericsError(f"run dir {run_dir} holds a {status} run trained {stale}; "
                                f"{numerics_fix(summary, OVERWRITE)}")
        why = stale or proof_mismatch(run_dir, summary) or profile_mismatch(cfg, summary.get("profile_sha256"))
        if why is None:
            return Plan("completed")
        if not overwrite:
            raise CheckpointError(f"run dir {run_dir}: its summary.json says {status}, but {why}; use another "
                                  f"--out, or --overwrite (overwrite=True in seafl_dist.run) to run it again")
        return Plan("fresh")
    if found:
        try:
            load(found[-1], cfg, mmap=True)  # another config's checkpoint is refused here, naming the keys
        except NumericsError:
            if overwrite:
                return Plan("fresh")
            raise
        if diff:  # config.yaml of another config beside a checkpoint of this one: the dir was tampered with
            raise _other_config(run_dir, summary, diff, saved, cfg)
        return Plan("resume", found[-1])
    if explicit:
        why = "is not a directory" if not run_dir.is_dir() else "holds no checkpoint (private/checkpoint-*.pt)"
        raise CheckpointError(f"cannot resume {run_dir}: it {why}; start the run with "
                              f"seafl run CONFIG --out {run_dir}")
    return Plan("fresh")


def replay(lookahead, version: int) -> list[dict]:
    """Consume the schedule up to the consistent state after aggregation ``version``, training nothing.

    Returns the start events of the jobs that were dispatched then and not yet aggregated (the
    in-flight jobs to train again), in job order, which is also non-decreasing version order, the
    order workers expect. Starts come at time 0 and right after an aggregation, and with device
    churn (docs/devices.md) also between aggregations; dropped jobs were never dispatched."""
    in_flight: dict[int, dict] = {}

    def keep(st):
        if lookahead.final_epochs(st["job"]) is not None:  # as Server._dispatch decides
            in_flight[st["job"]] = st

    def take_starts():
        for st in lookahead.take_while(lambda e: e["event"] == "start"):
            keep(st)

    take_starts()
    done = 0
    while done < version:
        ev = next(lookahead, None)
        if ev is None:
            raise CheckpointError(f"the schedule ends before aggregation {version}, where the checkpoint was "
                                  f"taken; it does not belong to this config")
        if ev["event"] == "start":  # a start between aggregations (a slot refilled after a drop or a wait)
            keep(ev)
        elif ev["event"] == "aggregate":
            for u in ev["updates"]:
                in_flight.pop(u["job"], None)
            done = ev["version"]
            take_starts()
    return [in_flight[j] for j in sorted(in_flight)]
