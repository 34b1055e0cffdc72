"""The secure mode's write-ahead record (``privacy.secure_noise``): what was released, kept so that a resume
replays it instead of drawing it again.

Secure noise is drawn fresh from ``os.urandom`` and never kept, so a resume that recomputed the aggregations after
its checkpoint would release the same pre-noise models a second time, under new independent draws, while the
accountant counts each once. Instead, each aggregation's noised model w′ (the mechanism's output, before the
server optimizer, which is post-processing) is written to ``<run>/private/released-<t:08d>.pt`` and fsynced
(privacy/keys.py ``durable_write``) before anything derived from it is printed, written or sent. A resume from the
checkpoint at version c takes w′ of every t > c that the record holds from here, never from fresh noise; only past
the record's end is new noise drawn. Entries at or below a written checkpoint's version are no longer needed and
are deleted (:meth:`ReleaseRecord.prune`), so the record holds the models since the last checkpoint. Under
adaptive clipping each aggregation's noised count (privacy/adaptive.py), from which C_{t+1} follows, is kept beside
it (``clip-count-<t:08d>.json``) and replayed the same way. It is
server-private: it holds released models, but beside the checkpoint they would tell which draws a resume skipped.
"""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import torch

from .keys import durable_write

ENTRY = re.compile(r"^released-(\d{8})\.pt$")
COUNT_ENTRY = re.compile(r"^clip-count-(\d{8})\.json$")


class ReleaseRecord:
    """The write-ahead record in ``private`` (the run dir's server-private folder)."""

    def __init__(self, private: Path):
        self.private = Path(private)

    def path(self, version: int) -> Path:
        return self.private / f"released-{version:08d}.pt"

    def count_path(self, version: int) -> Path:
        return self.private / f"clip-count-{version:08d}.json"

    def versions(self, entry: re.Pattern = ENTRY) -> list[int]:
        if not self.private.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.private.iterdir() if (m := entry.match(p.name)))

    def write_count(self, version: int, value: float) -> None:
        """Keep aggregation ``version``'s noised count for good (fsynced) before anything derived from it is
        released (JSON holds a float's exact value)."""
        durable_write(self.count_path(version), json.dumps({"count": value}).encode())

    def get_count(self, version: int) -> float | None:
        """Aggregation ``version``'s noised count as drawn, or None when the record has none."""
        path = self.count_path(version)
        return float(json.loads(path.read_text())["count"]) if path.is_file() else None

    def write(self, version: int, flat: torch.Tensor) -> None:
        """Keep w′ of aggregation ``version`` for good (fsynced) before it is released."""
        buf = io.BytesIO()
        torch.save(flat.detach().cpu(), buf)
        durable_write(self.path(version), buf.getvalue())

    def get(self, version: int, like: torch.Tensor) -> torch.Tensor | None:
        """w′ of aggregation ``version`` as released (on ``like``'s device), or None when the record has none."""
        path = self.path(version)
        if not path.is_file():
            return None
        flat = torch.load(path, weights_only=True)
        if flat.shape != like.shape or flat.dtype != like.dtype:
            raise ValueError(f"{path} holds a {tuple(flat.shape)} {flat.dtype} model, not this run's "
                             f"{tuple(like.shape)} {like.dtype}; it is another run's: rerun with --overwrite")
        return flat.to(like.device)

    def prune(self, upto: int) -> None:
        """Delete the entries at or below ``upto`` (a checkpoint at that version holds what they led to)."""
        for v in self.versions():
            if v <= upto:
                self.path(v).unlink(missing_ok=True)
        for v in self.versions(COUNT_ENTRY):
            if v <= upto:
                self.count_path(v).unlink(missing_ok=True)
