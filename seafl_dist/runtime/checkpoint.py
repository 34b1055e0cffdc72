"""Checkpoints of a run (SPEC "Checkpoint and resume"): what to keep, how to write it, when to resume.

The schedule is a pure function of config and seed, so a checkpoint holds only what cannot be
recomputed, taken at the end of an aggregation (the last consistent state, never half of one):
- every model version still referenced: the global one and the bases of the in-flight jobs,
- the aggregation count (``version``), virtual time, metric rows, the event counters and
  staleness list the summary needs, the real seconds spent so far,
- the byte lengths of ``events.jsonl`` and ``metrics.csv`` at that point (the run files are
  fsynced first, so the lengths are on disk before the checkpoint that records them),
- the resolved config (YAML) and a format number.
A resumed run replays the schedule up to that aggregation without training, truncates the run
files to the recorded lengths, re-dispatches the jobs that were in flight (same seeds, same
bits) and appends; its files end byte-identical to an uninterrupted run's.

Files: ``<run>/checkpoint-<version:08d>.pt``, written to a temp file, fsynced, renamed, the
directory fsynced; the last two are kept. A completed run deletes them (its ``summary.json``
says ``completed`` and ``model.pt`` holds the final model), so a sweep of ResNet runs does not
keep a gigabyte per run. Checkpoints are read with ``torch.load(weights_only=True)``: plain
containers and tensors only, nothing executable.

Which config keys may change on resume: ``runtime.*``, ``logging.*``, ``name`` and
``run.checkpoint_every``/``_s`` (where and how it runs, not what it computes). Any other
difference is refused with the keys named.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from seafl_dist.settings import ConfigError, dump_config

FORMAT = 1
KEEP = 2
_NAME = re.compile(r"^checkpoint-(\d{8})\.pt$")
_FREE_SECTIONS = ("runtime", "logging")
_FREE_KEYS = ("name", "run.checkpoint_every", "run.checkpoint_every_s")


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed from; the CLI prints it as one line and exits 2."""


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
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def checkpoints(run_dir: Path) -> list[Path]:
    """The run dir's checkpoints, oldest first."""
    if not Path(run_dir).is_dir():
        return []
    found = [(int(m.group(1)), p) for p in Path(run_dir).iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def save(run_dir: Path, state: dict) -> Path:
    """Write ``state`` (see :meth:`Server._checkpoint_state`) as the newest checkpoint; keep the last two."""
    path = Path(run_dir) / f"checkpoint-{state['version']:08d}.pt"
    atomic_save({"format": FORMAT, **state}, path)
    for old in checkpoints(run_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def remove_all(run_dir: Path) -> None:
    for p in checkpoints(run_dir):
        p.unlink(missing_ok=True)


# ---- reading and checking -----------------------------------------------------------------

def _flat(tree, prefix=""):
    out = {}
    for k, v in (tree or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def config_diff(saved: dict, current: dict) -> list[str]:
    """Dotted keys whose values differ between two config trees, ignoring the keys free to change."""
    a, b = _flat(saved), _flat(current)
    keys = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>")
            and k.split(".")[0] not in _FREE_SECTIONS and k not in _FREE_KEYS]


def _describe_diff(keys: list[str], saved: dict, current: dict) -> str:
    a, b = _flat(saved), _flat(current)
    shown = ", ".join(f"{k} ({a.get(k, '<absent>')!r} there, {b.get(k, '<absent>')!r} now)" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def config_tree(cfg) -> dict:
    """The config as YAML would give it back (tuples as lists), for comparisons."""
    return yaml.safe_load(dump_config(cfg))


def load(path: Path, cfg, *, mmap: bool = False) -> dict:
    """Read and check a checkpoint against ``cfg``; a :class:`CheckpointError` of one line if unusable.

    ``mmap=True`` maps the tensors instead of reading them: every torchrun rank can check a
    checkpoint of gigabytes before the run starts, at the cost of reading its small header."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # zip/pickle errors of a cut or damaged file come in many types
        older = [p for p in checkpoints(path.parent) if p != path]
        hint = (f"delete it to resume from {older[-1].name}" if older else
                "delete it (and the run dir's other files) to start the run afresh")
        why = (str(err).splitlines() or ["unreadable"])[0].split(". ")[0][:120]
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({why}); {hint}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint {path} has format {got!r}, this seafl reads format {FORMAT}; "
                              f"resume it with the seafl version that wrote it")
    saved = yaml.safe_load(state["config"])
    diff = config_diff(saved, config_tree(cfg))
    if diff:
        raise CheckpointError(f"checkpoint {path} is of another config: {_describe_diff(diff, saved, config_tree(cfg))}"
                              f"; resume with the run's own config (seafl run --resume {path.parent}) or use another --out")
    for name, key in (("events.jsonl", "events_bytes"), ("metrics.csv", "metrics_bytes")):
        f = path.parent / name
        have = f.stat().st_size if f.exists() else None
        if have is None or have < state[key]:
            raise CheckpointError(f"{f} is {'missing' if have is None else f'{have} bytes'}, shorter than the "
                                  f"{state[key]} bytes checkpoint {path.name} recorded; the run dir was changed "
                                  f"after the checkpoint, so it cannot be resumed exactly")
    return state


@dataclass(frozen=True)
class Plan:
    """What ``seafl run`` does with its run dir: ``fresh``, ``resume`` (from ``checkpoint``) or ``completed``."""
    action: str
    checkpoint: Path | None = None


def _summary_status(run_dir: Path) -> str | None:
    import json
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def plan(cfg, run_dir, *, explicit: bool) -> Plan:
    """Decide, before anything is written, whether ``run_dir`` is started, resumed or already done.

    ``explicit`` is ``--resume``: then a dir without a checkpoint is an error; without it (``--out``
    of a new or finished-with-another-config dir) the run starts afresh, as it always did."""
    run_dir = Path(run_dir)
    if _summary_status(run_dir) == "completed":
        try:
            saved = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            saved = None
        diff = config_diff(saved, config_tree(cfg)) if saved is not None else ["config.yaml"]
        if not diff:
            return Plan("completed")
        if explicit:
            raise CheckpointError(f"run dir {run_dir} holds a completed run of another config: "
                                  f"{_describe_diff(diff, saved or {}, config_tree(cfg))}; use another --out")
        return Plan("fresh")
    found = checkpoints(run_dir)
    if found:
        load(found[-1], cfg, mmap=True)
        return Plan("resume", found[-1])
    if explicit:
        why = "is not a directory" if not run_dir.is_dir() else "holds no checkpoint (checkpoint-*.pt)"
        raise CheckpointError(f"cannot resume {run_dir}: it {why}; start the run with "
                              f"seafl run CONFIG --out {run_dir}")
    return Plan("fresh")


def replay(lookahead, version: int) -> list[dict]:
    """Consume the schedule up to the consistent state after aggregation ``version``, training nothing.

    Returns the start events of the jobs that were dispatched then and not yet aggregated (the
    in-flight jobs to train again), in job order, which is also non-decreasing version order, the
    order workers expect. Start events only come at time 0 and right after an aggregation."""
    in_flight: dict[int, dict] = {}

    def take_starts():
        for st in lookahead.take_while(lambda e: e["event"] == "start"):
            if lookahead.final_epochs(st["job"]) is not None:  # as Server._dispatch decides
                in_flight[st["job"]] = st

    take_starts()
    done = 0
    while done < version:
        ev = next(lookahead, None)
        if ev is None:
            raise CheckpointError(f"the schedule ends before aggregation {version}, where the checkpoint was "
                                  f"taken; it does not belong to this config")
        if ev["event"] == "aggregate":
            for u in ev["updates"]:
                in_flight.pop(u["job"], None)
            done = ev["version"]
            take_starts()
    return [in_flight[j] for j in sorted(in_flight)]
