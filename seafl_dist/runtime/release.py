"""``seafl release RUN_DIR OUT``: the copy of a run dir that holds only what is released, for a user to publish;
and ``--check OTHER``, the comparison of two neighbouring runs' released files (docs/privacy.md, "Publishing a
run: seafl release").

What is released: the run files of runtime/rundir.py (``RUN_FILES``) that the run wrote, and W&B's pointers
(``wandb_run.json``, ``wandb_sync.txt``). Nothing else is copied: not ``private/`` (checkpoints, the workers'
residual files, the noise key, the write-ahead record), not a run dir's top-level checkpoints or residual files
of before the move to private/, not ``wandb/`` (W&B stamps every row with real time), temps, the lock, logs or a
user's own files. Every copied file's modification time (and OUT's) is set to :data:`RELEASE_TIME`, so the
times say nothing of how long the run took.

Refused, in one line (exit 2): a dir that holds no run, a dir a live run holds, a run under DP with
``privacy.diagnostics`` (it holds values outside the guarantee), a finished run whose files are not those its
summary.json proves, an OUT that exists and is not empty, and an unfinished run (interrupted, failed, or no
summary.json) unless ``partial``: then what it has so far is copied and one line says the release is partial.

The neighbours' comparison (:func:`compare`) is the one tests/integration/test_privacy_neighbours.py asserts:
two runs whose only difference is one device's data, made with the same config and key, must release the same
bytes before t*, the first aggregation that includes that device; from t* on they may differ only in the
evaluation of the noised model (eval events' accuracy, loss and metrics; metrics.csv's accuracy and loss), the
floats of model.pt, and what summary.json derives from them. Every leaf of every released file is compared, so
a field added later that carries an un-noised value is found without anyone naming it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from seafl_dist.report.sinks import FINISHED, METRIC_COLUMNS, read_config, read_summary
from seafl_dist.runtime import runlock
from seafl_dist.runtime.rundir import RUN_FILES, proof_mismatch
from seafl_dist.settings import ConfigError

POINTERS = ("wandb_run.json", "wandb_sync.txt")  # W&B's run id and sync command (report/wandb_sink.py)
RELEASE_TIME = 946684800  # 2000-01-01T00:00:00Z: every released file's modification time (zip takes none before 1980)
# the leaves that may differ from t* on: the evaluation of the noised model, and what the summary derives from it
EVAL_KEYS = {"accuracy", "loss", "metrics"}
SHOWN = 12  # allowed differences printed by --check (every one outside is)
SUMMARY_DERIVED = re.compile(r"^(final_accuracy|final_loss|best_accuracy|final|best|status|diverged_at(\..*)?|"
                             r"time_to_target\..*|files\.(events\.jsonl|metrics\.csv|model\.pt|summary\.json)\..*)$")


class ReleaseError(ConfigError):
    """A run dir that cannot be released as asked; the CLI prints it as one line and exits 2."""


# ---- what is released ---------------------------------------------------------------------

def released(run_dir: Path) -> list[str]:
    """The names of the released files ``run_dir`` holds: the run files it wrote and W&B's pointers."""
    return [n for n in (*RUN_FILES, *POINTERS) if (Path(run_dir) / n).is_file()]


def _privacy(run_dir: Path) -> dict:
    """config.yaml's privacy section (absent: the defaults, privacy off)."""
    return (read_config(run_dir) or {}).get("privacy") or {}


def check_releasable(run_dir: Path, *, partial: bool = False) -> dict | None:
    """Refuse (:class:`ReleaseError`, one line) a ``run_dir`` that cannot be released; its summary.json if any."""
    run_dir = Path(run_dir)
    if read_config(run_dir) is None:
        raise ReleaseError(f"run dir {run_dir} holds no readable config.yaml, so no run to release; give a run dir "
                           f"(the --out of seafl run)")
    runlock.check_free(run_dir)
    privacy = _privacy(run_dir)
    if privacy.get("enabled") and privacy.get("diagnostics"):
        raise ReleaseError(f"run dir {run_dir} was run with privacy.diagnostics=true: it holds values outside the "
                           f"guarantee (update norms, clip counts, SEAFL's weights, logged training values); rerun "
                           f"it with privacy.diagnostics=false to release it")
    summary = read_summary(run_dir)
    status = (summary or {}).get("status")
    if status in FINISHED:
        why = proof_mismatch(run_dir, summary)
        if why:
            raise ReleaseError(f"run dir {run_dir}: its summary.json says {status}, but {why}; release the run's own "
                               f"files (rerun it into a new --out)")
    elif not partial:
        what = f"summary.json says {status!r}" if status else "it has no summary.json"
        raise ReleaseError(f"run dir {run_dir} holds an unfinished run ({what}); resume it to its end (seafl run "
                           f"--resume {run_dir}) and release it then, or give --partial to release what it has so far")
    return summary


def release(run_dir: Path, out: Path, *, partial: bool = False) -> list[str]:
    """Copy ``run_dir``'s released files into the new or empty ``out``, their times set to :data:`RELEASE_TIME`;
    the names copied. Refused as :func:`check_releasable` says, and for an ``out`` that holds anything."""
    run_dir, out = Path(run_dir), Path(out)
    summary = check_releasable(run_dir, partial=partial)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"OUT {out} exists and is {'a file' if not out.is_dir() else 'not empty'}; give a new "
                           f"or empty directory for the release")
    names = released(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(run_dir / name, out / name)
        os.utime(out / name, (RELEASE_TIME, RELEASE_TIME))
    os.utime(out, (RELEASE_TIME, RELEASE_TIME))
    status = (summary or {}).get("status")
    if status not in FINISHED:
        print(f"seafl: {out} is a partial release: the run in {run_dir} is unfinished "
              f"({f'status {status}' if status else 'no summary.json'}), so its files end where it stopped",
              file=sys.stderr)
    return names


# ---- two neighbouring runs --------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    """One difference between two runs' released files: in ``file``, at ``where``; ``allowed`` when it is the
    evaluation of the noised model from t* on, or what derives from it."""
    file: str
    where: str
    allowed: bool

    def __str__(self) -> str:
        return f"{self.file}: {self.where}"


def leaves(obj, prefix=""):
    """{dotted path: value} of a JSON value's leaves."""
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in leaves(val, f"{prefix}{key}.").items()} or {prefix: obj}
    if isinstance(obj, list):
        return {k: v for i, val in enumerate(obj) for k, v in leaves(val, f"{prefix}{i}.").items()} or {prefix: obj}
    return {prefix.rstrip("."): obj}


def differing(a, b) -> set[str]:
    """The dotted paths of the leaves in which two JSON values differ (one absent counts)."""
    la, lb = leaves(a), leaves(b)
    return {k for k in la.keys() | lb.keys() if la.get(k, "<absent>") != lb.get(k, "<absent>")}


def events_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines()]


def first_inclusions(run_dir: Path) -> dict[int, int]:
    """{device: the version of the first aggregation that includes it} from a run dir's events.jsonl."""
    first: dict[int, int] = {}
    for e in events_of(run_dir):
        if e["event"] == "aggregate":
            for u in e["updates"]:
                first.setdefault(u["device"], e["version"])
    return first


def _first_eval_difference(ev_a: list[dict], ev_b: list[dict]) -> int | None:
    return next((x["version"] for x, y in zip(ev_a, ev_b) if x["event"] == "eval" and x != y), None)


def compare(a: Path, b: Path, t: int | None = None) -> tuple[int | None, list[Difference]]:
    """Every difference between the released files of runs ``a`` and ``b``, each marked allowed or not, and t*:
    ``t`` if given (the first aggregation that includes the device whose data differ), else the version of the
    first evaluation that differs (None: none does)."""
    a, b = Path(a), Path(b)
    names = set(released(a)) - set(POINTERS)  # the pointers hold W&B's random run id
    out = [Difference(n, "present in one run only", False) for n in sorted(names ^ (set(released(b)) - set(POINTERS)))]
    names &= set(released(b))
    if "train_log.csv" in names:
        out.append(Difference("train_log.csv", "a module's logged training values are released", False))
    for name in sorted(names & {"config.yaml", "partition.json", "partition.npz", "train_log.csv",
                                "device_metrics.csv", "device_summary.csv"}):
        if (a / name).read_bytes() != (b / name).read_bytes():
            out.append(Difference(name, "the bytes differ", False))
    ev_a, ev_b = (events_of(a), events_of(b)) if "events.jsonl" in names else ([], [])
    t = _first_eval_difference(ev_a, ev_b) if t is None else t
    after = (lambda version: False) if t is None else (lambda version: version is not None and version >= t)
    if len(ev_a) != len(ev_b):
        out.append(Difference("events.jsonl", f"{len(ev_a)} events against {len(ev_b)}", False))
    for i, (x, y) in enumerate(zip(ev_a, ev_b), 1):
        diff = differing(x, y)
        if diff:
            ok = x["event"] == "eval" and after(x.get("version")) and {k.split(".")[0] for k in diff} <= EVAL_KEYS
            out.append(Difference("events.jsonl", f"line {i} ({x['event']} of version {x.get('version')}): "
                                                  f"{', '.join(sorted(diff))}", ok))
    if "metrics.csv" in names:
        out += _rows(a, b, after)
    if "summary.json" in names:
        sa, sb = read_summary(a) or {}, read_summary(b) or {}
        for key in sorted(differing(sa, sb)):
            why = " (real time)" if key == "wall_time_s" else ""
            out.append(Difference("summary.json", key + why, bool(SUMMARY_DERIVED.match(key))))
    if "model.pt" in names:
        out += _models(a, b)
    return t, out


def _rows(a: Path, b: Path, after) -> list[Difference]:
    rows_a, rows_b = [(d / "metrics.csv").read_text().splitlines() for d in (a, b)]
    if not rows_a or not rows_b or rows_a[0] != rows_b[0]:
        return [Difference("metrics.csv", "the header differs", False)]
    header = rows_a[0].split(",")
    evaluation = {"accuracy", "loss"} | (set(header) - set(METRIC_COLUMNS) - {"drops"})  # a module's logged values
    out = [] if len(rows_a) == len(rows_b) else [Difference("metrics.csv", f"{len(rows_a)} lines against "
                                                                           f"{len(rows_b)}", False)]
    for i, (ra, rb) in enumerate(zip(rows_a[1:], rows_b[1:]), 2):
        cells = [h for h, x, y in zip(header, ra.split(","), rb.split(",")) if x != y]
        if cells:
            version = int(ra.split(",")[0])
            out.append(Difference("metrics.csv", f"line {i} (version {version}): {', '.join(cells)}",
                                  after(version) and set(cells) <= evaluation))
    return out


def _models(a: Path, b: Path) -> list[Difference]:
    import torch
    ma, mb = [torch.load(d / "model.pt", map_location="cpu", weights_only=True) for d in (a, b)]
    out = [Difference("model.pt", f"entry {k} in one model only", False) for k in sorted(ma.keys() ^ mb.keys())]
    for key in sorted(ma.keys() & mb.keys()):
        x, y = ma[key], mb[key]
        if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
            # a noised float may differ; an entry without noise (an integer counter) must not
            out.append(Difference("model.pt", f"{key}", x.is_floating_point() and x.shape == y.shape))
    return out


def check(a: Path, b: Path, device: int | None = None) -> int:
    """``--check``: compare the released files of neighbouring runs ``a`` and ``b``, print what differs and where
    (stderr), and return the exit status: 0 when every difference is allowed, 1 otherwise."""
    for d in (a, b):
        if read_config(d) is None:
            raise ReleaseError(f"--check {d} holds no readable config.yaml; give a run dir or its release")
    if not _privacy(a).get("enabled"):
        raise ReleaseError(f"--check compares two neighbouring runs under DP, and run dir {a} has privacy.enabled "
                           f"false; check runs made with privacy.enabled=true")
    t = None
    if device is not None:
        t = first_inclusions(a).get(device)
        if t is None:
            raise ReleaseError(f"--device {device}: no aggregation of {a} includes device {device}; give the device "
                               f"whose data differ between the two runs")
    t, found = compare(a, b, t)
    outside = [d for d in found if not d.allowed]
    where = "no evaluation differs" if t is None else f"t* = aggregation {t}"
    print(f"seafl: release --check {a} against {b}: {len(found)} differences ({where}), "
          f"{len(outside)} outside the evaluation of the noised model and what derives from it", file=sys.stderr)
    allowed = [d for d in found if d.allowed]
    for d in outside + allowed[:SHOWN]:
        print(f"  {'allowed' if d.allowed else 'OUTSIDE'}  {d}", file=sys.stderr)
    if len(allowed) > SHOWN:
        print(f"  ... and {len(allowed) - SHOWN} more allowed", file=sys.stderr)
    return 1 if outside else 0
