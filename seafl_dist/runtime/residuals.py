"""Error feedback's residuals in a torchrun run's checkpoints (``compression.error_feedback``, codecs/feedback.py).

Under torchrun a device's residual lives on the one worker that trains its jobs (``runtime.placement: device``),
so each worker writes its own devices' residuals, and rank 0's checkpoint names those files:

- **Taken.** When rank 0's server takes a job's upload (it aggregates it), it sends that job's worker a TAKEN
  message, the distributed form of one process's ``ErrorFeedback.taken``: the worker may forget the residual
  the job replaced. So a worker holds no more than one process does between checkpoints.
- **Save.** A checkpoint at aggregation V (rank 0, runtime/snapshots.py) sends every worker SAVE(V). A worker
  takes it between two optimiser steps, writes ``private/residuals-<V:08d>-rank<r>.pt`` (the run dir's
  server-private part, runtime/rundir.py; ``{device: r_k}``, each
  device's residual before its first job not yet taken, as one process checkpoints it) atomically (temp,
  fsync, rename, dir fsync: checkpoint.atomic_save), and answers SAVED with the file's bytes. Rank 0 writes
  ``private/checkpoint-<V:08d>.pt`` only once every worker answered and it sees every file at its size, and that
  checkpoint lists them (``residuals``: {name: bytes}): a rank-0 checkpoint on disk is a complete one. A kill
  between the two leaves files no checkpoint names; the next checkpoint's pruning removes them.
- **Retention.** Files go with their checkpoint: those of a version no kept checkpoint has (checkpoint.KEEP),
  or of the newest version but not named by it, are deleted after each checkpoint; a finished run or a fresh
  start deletes them all (rundir.remove_private). A run dir written before the move holds them at its top level,
  beside its checkpoints: they are read and pruned there (:func:`files_of` finds both places).
- **Resume, under any W.** Residuals are keyed by device, so a worker of any later attempt, with any W, reads
  the residuals of the devices it now holds from every listed file (memory-mapped: it reads only its own), and
  one process (``W = 1``) reads them all. A one-process checkpoint keeps its residuals inline (``feedback``),
  unchanged, and a torchrun resume of it reads them from there.
- **On the way out** (a signal, a lost rank) rank 0 writes no new checkpoint of such a run: its workers may be
  gone, so the last periodic checkpoint (``run.checkpoint_every``/``_s``) is the one resumed.
- **Disk.** A run is refused before anything is written when its residual checkpoints (``KEEP`` + the one being
  written, 4 bytes a trainable parameter a device) do not fit on the run dir's disk (:func:`check_disk`).

**Device state on workers, one mechanism.** SCAFFOLD's control variates (``algorithm.name: scaffold``,
runtime/controls.py) are the other part of the same device state (codecs/feedback.py): the same TAKEN (whose
``epochs`` says whether the server accepted the update: only then is its Δc_k kept), the same SAVE and files, whose
``controls`` part holds ``{"c": {device: c_k}, "seen": {job: the c_k its start read}}`` beside ``residuals``; a worker
marks each job it receives as started (the c_k it will train from). A one-process checkpoint holds them inline
(``controls``). The disk check (:func:`check_disk`) and the memory check (runtime/model_checks.py) count them too.

Why per-worker ``torch.save`` files and not ``torch.distributed.checkpoint``: docs/failures.md ("Error feedback's
residuals") gives the measurements (benchmarks/residual_checkpoint.py).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from seafl_dist.runtime.checkpoint import FORMAT, KEEP, atomic_save, private_place
from seafl_dist.runtime.rundir import CHECKPOINT, RESIDUALS, checkpoints, private_dir, residual_files
from seafl_dist.settings import ConfigError

PATTERN = RESIDUALS
PATTERN_CKPT = CHECKPOINT


def file_name(version: int, rank: int) -> str:
    return f"residuals-{version:08d}-rank{rank}.pt"


def files_of(run_dir: Path) -> list[tuple[int, int, Path]]:
    """(version, rank, path) of every residual file of ``run_dir`` (in private/, or at the top level of a run dir
    written before the move)."""
    return residual_files(run_dir)


# ---- a worker -------------------------------------------------------------------------------

class WorkerResiduals:
    """A worker's side: forget what the server took, write its devices' state when rank 0 says SAVE."""

    def __init__(self, feedback, run_dir: Path, rank: int, outbox, controls: bool = False):
        self.feedback, self.dir, self.rank, self.outbox = feedback, Path(run_dir), rank, outbox
        self.controls = controls  # SCAFFOLD's c_k: the controls part

    def started(self, job: int, device: int) -> None:
        if self.controls:
            self.feedback.started(job, device)

    def taken(self, job: int, accepted: bool = True) -> None:
        self.feedback.taken(job, accepted)

    def save(self, version: int) -> None:
        from seafl_dist.transport import SAVED, Header
        path = private_place(self.dir) / file_name(version, self.rank)
        state = {int(d): r for d, r in self.feedback.state().items()}
        extra = {"controls": self.feedback.controls_state()} if self.controls else {}
        atomic_save({"format": FORMAT, "version": version, "rank": self.rank, "residuals": state, **extra}, path)
        self.outbox.send(0, Header(SAVED, version=version, job=path.stat().st_size))


# ---- rank 0 ---------------------------------------------------------------------------------

def check_written(run_dir: Path, version: int, sizes: dict[int, int]) -> dict[str, int]:
    """The files the workers said they wrote (``{rank: bytes}``), as rank 0 sees them: ``{name: bytes}``."""
    out = {}
    for rank, size in sorted(sizes.items()):
        path = private_dir(run_dir) / file_name(version, rank)
        have = path.stat().st_size if path.exists() else None
        if have != size:
            raise RuntimeError(f"worker rank {rank} wrote its devices' residuals to {path} ({size} bytes), but rank 0 "
                               f"sees {'no such file' if have is None else f'{have} bytes'}: with "
                               f"compression.error_feedback on several nodes, the run dir must be on a filesystem "
                               f"every node shares")
        out[path.name] = size
    return out


def retain(run_dir: Path, newest: dict[str, int] | None) -> None:
    """After checkpoint.save: the residual files of the checkpoints it kept stay, the others go (``newest``: the
    files the checkpoint just written names; None: it holds its residuals inline, or has none)."""
    prune(run_dir, [int(PATTERN_CKPT.match(p.name).group(1)) for p in checkpoints(run_dir)], newest or {})


def prune(run_dir: Path, kept_versions: list[int], newest: dict[str, int]) -> None:
    """Delete the residual files no kept checkpoint names (see the module's Retention)."""
    last = max(kept_versions, default=None)
    for version, _, path in files_of(run_dir):
        if version not in kept_versions or (version == last and path.name not in newest):
            path.unlink(missing_ok=True)


def device_state(path, devices=None) -> dict:
    """Both parts of the device state checkpoint ``path`` holds (a worker's, at a resume): ``residuals`` and
    ``controls``, only ``devices``' if given."""
    return {"residuals": gather(path, devices), "controls": gather(path, devices, part="controls")}


def gather(path, devices=None, part: str = "residuals") -> dict:
    """The residuals (``part="residuals"``: {device: r_k}) or SCAFFOLD's controls (``"controls"``: {"c": {device: c_k},
    "seen": {job: c_k}}) checkpoint ``path`` holds, inline or in its workers' files; only ``devices``' if given."""
    path = Path(path)
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    if part == "controls":
        return _controls(path, state, devices)
    if "feedback" in state:
        found = state["feedback"]
    else:
        found = {}
        for name in state.get("residuals", {}):
            part = torch.load(path.parent / name, map_location="cpu", weights_only=True, mmap=True)["residuals"]
            found.update(part)
    keep = None if devices is None else set(devices)
    return {int(d): r.clone() for d, r in found.items() if keep is None or int(d) in keep}


def _controls(path: Path, state: dict, devices) -> dict:
    found = state.get("controls") or {"c": {}, "seen": {}}
    if "controls" not in state:
        for name in state.get("residuals", {}):
            part = torch.load(path.parent / name, map_location="cpu", weights_only=True, mmap=True).get("controls", {})
            found["c"].update(part.get("c", {}))
            found["seen"].update(part.get("seen", {}))
    keep = None if devices is None else set(devices)
    return {"c": {int(d): c.clone() for d, c in found["c"].items() if keep is None or int(d) in keep},
            "seen": {int(j): c.clone() for j, c in found["seen"].items()}}


# ---- the disk ---------------------------------------------------------------------------------

def needed_bytes(params: int, num_devices: int) -> int:
    """Disk that a run's residual checkpoints may take at once: KEEP kept, and one being written."""
    return (KEEP + 1) * 4 * params * num_devices


def check_disk(cfg, exp, run_dir, free: int | None = None) -> None:
    """Refuse, before anything is written, a run with error feedback whose residual checkpoints do not fit on the
    run dir's disk (what its checkpoints already hold there counts as free: they are replaced). ``exp``: the
    prepared run (its ``new_model()`` and ``num_devices``). SCAFFOLD's c_k (the controls part) count alike."""
    scaffold = cfg.algorithm.name == "scaffold"
    if not cfg.compression.error_feedback and not scaffold:
        return
    num_devices = exp.num_devices
    params = sum(p.numel() for p in exp.new_model().parameters() if p.requires_grad)
    need = needed_bytes(params, num_devices) * (int(cfg.compression.error_feedback) + int(scaffold))
    run_dir = Path(run_dir)
    free = free_for(run_dir, free)
    if need > free and scaffold:
        raise ConfigError(f"config key 'algorithm.name' has value 'scaffold': the checkpoints of {num_devices} devices' "
                          f"control variates c_k{' and residuals' if cfg.compression.error_feedback else ''} "
                          f"({4 * params / 1e6:.1f} MB a device each; {KEEP} kept and one being written) take "
                          f"{_size(need)}, more than the {_size(free)} free for {run_dir}; free disk, use another "
                          f"--out, fewer devices, or another algorithm.name")
    if need > free:
        raise ConfigError(f"config key 'compression.error_feedback' has value True: the residual checkpoints of "
                          f"{num_devices} devices ({4 * params / 1e6:.1f} MB a device; {KEEP} kept and one being "
                          f"written) take {_size(need)}, more than the {_size(free)} free for {run_dir}; free disk, "
                          f"use another --out, fewer devices, or turn error feedback off")


def free_for(run_dir: Path, free: int | None = None) -> int:
    """The disk free for ``run_dir``'s checkpoints (``free``, or its filesystem's), what its checkpoints and residual
    files already hold counted as free: they are replaced."""
    run_dir = Path(run_dir)
    if free is None:
        probe = run_dir
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
    old = checkpoints(run_dir) + [p for _, _, p in files_of(run_dir)]
    return free + sum(p.stat().st_size for p in old if p.exists())


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"

