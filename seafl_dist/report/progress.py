"""Live progress of a run: a one-line bar on a terminal, periodic plain lines elsewhere (CI, SLURM logs);
each shows the run's target metric (``acc`` by default) and its best so far, and with device evaluation on
the devices' worst-side decile (``devices p10``) of the last one, and the real seconds since the start unless
``real=False`` (under DP without ``privacy.diagnostics``: real time carries the devices' data, docs/privacy.md,
"No wall-clock channel"; the ``lines`` mode then picks its lines by version, not by the clock)."""
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
    ``real=False``: no real time on the line, and ``lines`` prints the first and last update and one in each
    hundredth of ``total`` versions (every update without a total), whatever the clock says.
    """

    def __init__(self, mode: str = "auto", *, total: int | None = None, every_s: float = 10.0, stream=None,
                 metric=None, real: bool = True):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode, self.total, self.every_s, self.real = mode, total, every_s, real
        self.t0 = time.monotonic()
        self._last_line = -1e9  # when the last line was printed: real seconds, or (real=False) its version's bucket
        self.metric = metric or Metric()  # what the line shows: the run's target metric
        self.tag = "acc" if self.metric.name == "accuracy" else self.metric.name
        self.best = None
        self.note: str | None = None  # the last device evaluation's, shown beside the central metric
        self._pending = None

    @classmethod
    def of(cls, cfg, metric=None) -> "Progress":
        """A run's progress as ``cfg.logging`` asks, without real time under DP unless ``privacy.diagnostics``."""
        lc = cfg.logging
        return cls(lc.progress, total=cfg.run.max_aggregations, every_s=lc.progress_every_s, metric=metric,
                   real=not cfg.privacy.withheld)

    def _text(self, version: int, vtime: float, value) -> str:
        done = f"{version}/{self.total}" if self.total else str(version)
        note = f"  {self.note}" if self.note else ""
        real = f"  real {time.monotonic() - self.t0:6.1f}s" if self.real else ""
        return f"version {done}  virtual {vtime:9.1f}s  {self.tag} {_num(value)}  best {_num(self.best)}{note}{real}"

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
        if self.real:
            now = time.monotonic()
            due = now - self._last_line >= self.every_s
        else:  # by version: which lines appear must not depend on the clock either
            now = version * 100 // self.total if self.total else version
            due = now != self._last_line
        if due:
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
