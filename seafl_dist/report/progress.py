"""Live progress of a run: a one-line bar on a terminal, periodic plain lines elsewhere (CI, SLURM logs);
each shows the run's target metric (``acc`` by default) and its best so far, and with device evaluation on
the devices' worst-side decile (``devices p10``) of the last one."""
from __future__ import annotations

import sys
import time

from seafl_dist.report.metric import Metric


def _num(value) -> str:
    return "-" if value is None else f"{value:.4f}"


class Progress:
    """``update(...)`` after every evaluation; ``close()`` at the end.

    mode: ``bar`` redraws one line with a carriage return, ``lines`` prints a line at most every
    ``every_s`` real seconds (and for the first and last update), ``none`` prints nothing,
    ``auto`` picks ``bar`` when the stream is a terminal and ``lines`` otherwise.
    """

    def __init__(self, mode: str = "auto", *, total: int | None = None, every_s: float = 10.0, stream=None,
                 metric=None):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode, self.total, self.every_s = mode, total, every_s
        self.t0 = time.monotonic()
        self._last_line = -1e9
        self.metric = metric or Metric()  # what the line shows: the run's target metric
        self.tag = "acc" if self.metric.name == "accuracy" else self.metric.name
        self.best = None
        self.note: str | None = None  # the last device evaluation's, shown beside the central metric
        self._pending = None

    def _text(self, version: int, vtime: float, value) -> str:
        done = f"{version}/{self.total}" if self.total else str(version)
        note = f"  {self.note}" if self.note else ""
        return (f"version {done}  virtual {vtime:9.1f}s  {self.tag} {_num(value)}  best {_num(self.best)}{note}"
                f"  real {time.monotonic() - self.t0:6.1f}s")

    def update(self, version: int, vtime: float, value, note: str | None = None) -> None:
        """After an evaluation: ``value`` is the target metric's (None if the evaluation did not give it); ``note``,
        the device evaluation's (``devices p10 0.8123``: runtime/device_eval.py), shown from then on beside it."""
        self.best = self.metric.best([self.best, value])
        self.note = note or self.note
        if self.mode == "none":
            return
        text = self._text(version, vtime, value)
        if self.mode == "bar":
            self.stream.write("\r" + text.ljust(100)[:100])
            self.stream.flush()
            return
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_line, self._pending = now, None
        else:
            self._pending = text

    def close(self) -> None:
        if self.mode == "bar":
            self.stream.write("\n")
        elif self.mode == "lines" and self._pending:
            self.stream.write(self._pending + "\n")
        self.stream.flush()
