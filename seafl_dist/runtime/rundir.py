"""What a run dir holds and whose run it is: the config comparer, the files' proof, clearing, writability.

A run dir belongs to one config. ``summary.json`` of a completed run records the size and
sha256 of every file the run wrote (``files``), so a later ``seafl run`` reports "completed"
only when the dir's files are that run's, byte for byte; the files themselves stay identical
between runs. :func:`config_diff` is the one comparison of configs that ``seafl run``, resume
(runtime/checkpoint.py) and ``seafl sweep`` use.

Which config keys may differ between a run dir and the command that reuses it (resume, or the
"completed" check): where and how it runs, not what it computes: ``runtime.device``,
``.threads``, ``.backend``, ``.placement``, ``.timeout_s``, ``.cuda_graphs`` (a graph gives the eager step's
bits), every ``logging.*`` key, ``name`` and
``run.checkpoint_every``/``_s``, ``devices.profile``'s path: its content is compared instead (the
sha256 that summary.json and the checkpoints record), and ``privacy.key_file``'s path: its key is compared instead
(the fingerprint the checkpoints record, privacy/keys.py). Every other key, ``runtime.precision``, ``runtime.batch_jobs``
and ``runtime.deterministic`` included (they change the trained bits far beyond the last ones), must be equal.

Beside the config, the code: a run dir's bits belong to one numerics version (seafl_dist/versions.py,
recorded in summary.json and checkpoints; absent: version 1). :func:`numerics_mismatch` says why a
dir of another numerics version can be neither resumed nor counted as completed; the package version
alone may differ.

The server-private part: ``private/`` (:func:`private_dir`) holds what docs/privacy.md calls server-private
(checkpoints, the workers' residual files, the noise key, the write-ahead record); a run dir written before the
move holds its checkpoints and residual files at its top level, and :func:`checkpoints` and
:func:`residual_files` find them there too (they are resumed from and pruned, never written there again).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import yaml

from seafl_dist.settings import ConfigError, dump_config
from seafl_dist import versions

FREE_SECTIONS = ("logging",)
FREE_KEYS = ("name", "run.checkpoint_every", "run.checkpoint_every_s", "runtime.device", "runtime.threads",
             "runtime.backend", "runtime.placement", "runtime.timeout_s", "runtime.cuda_graphs", "devices.profile",
             "privacy.key_file", "train.dp_sgd.key_file")
# What a run writes (and a fresh start or --overwrite removes); the proof covers those a completed run keeps.
PROVEN = ("config.yaml", "events.jsonl", "metrics.csv", "train_log.csv", "model.pt", "partition.json",
          "partition.npz", "device_metrics.csv", "device_summary.csv")
RUN_FILES = PROVEN + ("summary.json",)
CHECKPOINT = re.compile(r"^checkpoint-(\d{8})\.pt$")
# Temp names of the run's own atomic writes (runtime/checkpoint.py atomic_save, report/sinks.py write_json).
TEMP_PATTERNS = ("checkpoint-*.pt.tmp", "residuals-*.pt.tmp", "model.pt.tmp", "summary.json.tmp", "partition.json.tmp",
                 "partition.*.tmp.npz")


# ---- the config comparer ------------------------------------------------------------------

def flat_keys(tree, prefix="") -> dict:
    """A config tree as ``{dotted key: value}``."""
    out = {}
    for k, v in (tree or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat_keys(v, key + "."))
        else:
            out[key] = v
    return out


def is_free(key: str) -> bool:
    """A key that may differ between a run dir's config and the command reusing it."""
    return key.split(".")[0] in FREE_SECTIONS or key in FREE_KEYS


def config_diff(saved: dict, current: dict) -> list[str]:
    """Dotted keys whose values differ between two config trees, ignoring the keys free to change."""
    a, b = flat_keys(saved), flat_keys(current)
    keys = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>") and not is_free(k)]


def describe_diff(keys: list[str], saved: dict, current: dict) -> str:
    """``key (old there, new now), ...``: at most four keys, then how many more."""
    a, b = flat_keys(saved), flat_keys(current)
    shown = ", ".join(f"{k} ({a.get(k, '<absent>')!r} there, {b.get(k, '<absent>')!r} now)" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def config_tree(cfg) -> dict:
    """The config as YAML would give it back (tuples as lists), for comparisons."""
    return yaml.safe_load(dump_config(cfg))


def profile_sha256(cfg) -> str | None:
    """The sha256 of ``devices.profile``'s bytes (None without a profile)."""
    path = cfg.devices.profile
    if path is None:
        return None
    try:
        return _sha256(Path(path))
    except OSError as err:
        from seafl_dist.sim.profiles import ProfileError
        raise ProfileError(f"profile {path} cannot be read ({err.strerror or err}); check devices.profile") from None


def profile_mismatch(cfg, recorded: str | None) -> str | None:
    """Why ``cfg``'s device profile is not the run's (``recorded``: the sha256 the run dir holds), or None.
    The path may change; the content may not."""
    now = profile_sha256(cfg)
    if now == recorded:
        return None
    if recorded is None or now is None:
        return f"devices.profile is {cfg.devices.profile!r} now, the run had {'none' if recorded is None else 'one'}"
    return (f"devices.profile {cfg.devices.profile} has other content (sha256 {now[:12]}...) than the profile the "
            f"run used (sha256 {recorded[:12]}...)")


def numerics_mismatch(record: dict | None) -> str | None:
    """Why the bits a summary.json or checkpoint ``record`` belongs to are not this code's, or None.
    The reason reads after "it was trained": both versions, package and numerics, named."""
    had = versions.numerics_of(record)
    if had == versions.NUMERICS:
        return None
    by = (record or {}).get("seafl_version")
    return (f"by {f'seafl {by}' if by else 'a seafl that recorded no version'} with numerics version {had}, and "
            f"this seafl {versions.__version__} trains numerics version {versions.NUMERICS} (other bits)")


def numerics_fix(record: dict | None, rerun: str) -> str:
    """The way out of a :func:`numerics_mismatch`: the version that wrote it, or ``rerun`` afresh."""
    by = (record or {}).get("seafl_version")
    return f"use {f'seafl {by}' if by else 'the seafl that wrote it'} for it, or {rerun} to run it afresh with this one"


# ---- the proof that the files are the run's -----------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_proof(run_dir: Path) -> dict:
    """``{name: {"bytes": n, "sha256": hex}}`` of the run files present (summary.json's ``files``)."""
    run_dir = Path(run_dir)
    return {name: {"bytes": (run_dir / name).stat().st_size, "sha256": _sha256(run_dir / name)}
            for name in PROVEN if (run_dir / name).is_file()}


def proof_mismatch(run_dir: Path, summary: dict) -> str | None:
    """Why the dir's files are not those ``summary`` recorded (None: they are, byte for byte)."""
    files = summary.get("files")
    if not isinstance(files, dict) or "config.yaml" not in files:
        return "its summary.json records no sizes and checksums of the run's files (an older seafl wrote it)"
    for name, want in sorted(files.items()):
        path = Path(run_dir) / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want.get("bytes") or _sha256(path) != want.get("sha256"):
            return f"{name} is not the file the run wrote (size or sha256 differs from summary.json)"
    return None


# ---- the server-private part ----------------------------------------------------------------

PRIVATE = "private"  # docs/privacy.md, "Every output and its status": what never leaves the server
RESIDUALS = re.compile(r"^residuals-(\d{8})-rank(\d+)\.pt$")  # the workers' files (runtime/residuals.py)


def private_dir(run_dir: Path) -> Path:
    """The one place inside a run dir for what is server-private: the checkpoints, the workers' residual files,
    their temps, the noise key and the write-ahead record of released models: ``<run>/private``. Nothing in it is
    released (``seafl release``, runtime/release.py, leaves it out); a fresh start, ``--overwrite`` and a run's
    normal end delete it whole."""
    return Path(run_dir) / PRIVATE


def places(run_dir: Path) -> tuple[Path, Path]:
    """Where a run dir's checkpoints and residual files may be: ``private/`` (where they are written), then the
    run dir's top level, where a seafl before the move wrote them (read, resumed from, pruned, never written)."""
    return private_dir(run_dir), Path(run_dir)


def run_of(path: Path) -> Path:
    """The run dir a checkpoint or residual file at ``path`` belongs to: the parent of ``private/``, or the dir it
    lies in (a run dir written before the move; such a dir holds config.yaml, and private/ never does)."""
    parent = Path(path).parent
    return parent.parent if parent.name == PRIVATE and not (parent / "config.yaml").is_file() else parent


def _found(run_dir: Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    """(version, path) of the files matching ``pattern`` in both :func:`places`, oldest first; of one version,
    the one in private/ last."""
    hits = [(int(m.group(1)), -i, p) for i, d in enumerate(places(run_dir)) if d.is_dir()
            for p in d.iterdir() if (m := pattern.match(p.name))]
    return [(v, p) for v, _, p in sorted(hits)]


def private_files(run_dir: Path) -> list[Path]:
    """The server-private files a run dir holds: all of private/, and the checkpoints and residual files at its
    top level (a run dir written before the move)."""
    inside = sorted(p for p in private_dir(run_dir).rglob("*") if p.is_file()) if private_dir(run_dir).is_dir() else []
    top = [p for _, p in _found(run_dir, CHECKPOINT) + _found(run_dir, RESIDUALS) if p.parent == Path(run_dir)]
    return inside + top


def private_note(run_dir: Path) -> str | None:
    """The one stderr line of a run that ends interrupted or failed (and of a SIGTERM) while its dir holds
    server-private files: which folder, and how to publish the run without them; None when it holds none."""
    if not private_files(run_dir):
        return None
    where = private_dir(run_dir) if private_dir(run_dir).is_dir() else Path(run_dir)
    return (f"seafl: {run_dir} holds server-private files in {where} (checkpoints, devices' residuals, the noise "
            f"key: never publish them); to publish this run, copy only what is released: seafl release {run_dir} OUT")


# ---- checkpoints and clearing -------------------------------------------------------------

def checkpoints(run_dir: Path) -> list[Path]:
    """The run dir's checkpoints (``checkpoint-<version:08d>.pt``) in private/, and at the top level of a run
    dir written before the move; oldest first."""
    return [p for _, p in _found(run_dir, CHECKPOINT)]


def residual_files(run_dir: Path) -> list[tuple[int, int, Path]]:
    """(version, rank, path) of every residual file of the run dir (runtime/residuals.py), in both places."""
    return [(v, int(RESIDUALS.match(p.name).group(2)), p) for v, p in _found(run_dir, RESIDUALS)]


def remove_checkpoints(run_dir: Path) -> None:
    """Delete every checkpoint, the workers' residual files (runtime/residuals.py), and every temp file of a
    cut-short write; private/ too, if nothing else is left in it."""
    for p in checkpoints(run_dir):
        p.unlink(missing_ok=True)
    for _, _, p in residual_files(run_dir):
        p.unlink(missing_ok=True)
    remove_temps(run_dir)
    try:
        private_dir(run_dir).rmdir()
    except OSError:  # absent, or it holds the noise key or the write-ahead record
        pass


def remove_private(run_dir: Path) -> None:
    """Delete everything server-private: private/ whole (the noise key too) and the checkpoints and residual files
    of a run dir written before the move. A fresh start of another config, ``--overwrite`` and a run's normal end
    call it (:func:`clear` keeps the key and the record for a restart of the same config)."""
    remove_checkpoints(run_dir)
    if private_dir(run_dir).is_dir():
        shutil.rmtree(private_dir(run_dir))


def remove_temps(run_dir: Path) -> None:
    """Delete the temp files of writes a kill or a full disk cut short (hundreds of MB for ResNet checkpoints)."""
    for place in places(run_dir):
        if place.is_dir():
            for pattern in TEMP_PATTERNS:
                for p in place.glob(pattern):
                    p.unlink(missing_ok=True)


def clear(run_dir: Path, extra: tuple = (), *, cfg=None) -> None:
    """Remove every file an earlier run wrote (checkpoints, residual files and temps included, in private/ and at
    the top level of a run dir written before the move), so nothing mixes.

    Only the run's own names go; anything else a user keeps in the dir stays, and so does ``wandb/``:
    W&B keeps each run in its own folder there, and the sink of the run about to start has opened
    its own already (it is built before the server takes the dir).

    The server-private part goes whole too (:func:`remove_private`), unless ``cfg`` is the config of the dir's earlier attempt (config.yaml
    without a difference in a key that is not free): that attempt ended before its first checkpoint, so this one
    starts over, and what it released under DP was drawn from the noise key or written to secure noise's record
    kept there. Keeping them, the restart draws the same noise again or replays the record, and releases nothing
    twice (privacy/keys.py, privacy/released.py)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    remove_checkpoints(run_dir)  # private/ stays if it holds the key or the record, and goes below unless kept
    if cfg is None or not same_run(run_dir, cfg):
        remove_private(run_dir)
    for name in RUN_FILES + tuple(extra):
        (run_dir / name).unlink(missing_ok=True)


def same_run(run_dir: Path, cfg) -> bool:
    """True when ``run_dir``'s config.yaml is ``cfg``'s but for the keys free to differ."""
    try:
        saved = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(saved, dict) and not config_diff(saved, config_tree(cfg))


# ---- what the dir is ----------------------------------------------------------------------

def check_writable(run_dir: Path) -> None:
    """A :class:`ConfigError` of one line if ``run_dir`` cannot be a run dir; writes nothing."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--out {run_dir} is an existing file, not a directory; give a new or run directory")
    here = run_dir.absolute()
    while not here.exists() and here != here.parent:  # the nearest existing ancestor must be a writable dir
        here = here.parent
    if not here.is_dir():
        raise ConfigError(f"--out {run_dir}: {here} is a file, so the run dir cannot be created under it")
    read_only = bool(os.statvfs(here).f_flag & os.ST_RDONLY)
    if read_only or not os.access(here, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if read_only else "is not writable by this user"
        raise ConfigError(f"--out {run_dir}: {here} {why}; give a --out where the run can write")
