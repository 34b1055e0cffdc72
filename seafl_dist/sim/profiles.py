"""Device profiles (SPEC "Device populations"): a plain CSV read once, checked row by row.

One row per profile; device k later takes one of them (sim/population.py). Columns:

- ``sec_per_sample``: compute seconds per sample per epoch (replaces ``clock.sec_per_sample``),
- ``download_bytes_per_s``, ``upload_bytes_per_s``: bandwidth in bytes per second (``inf``
  allowed: no transfer time); the time of a transfer is the flat float32 model's bytes over it,
- ``windows``: ``always``, ``never``, or availability windows ``on:off`` in seconds separated by spaces,
  each the half-open interval [on, off), sorted, not overlapping,
- ``period_s`` (optional column; empty cell = the windows happen once): the windows repeat
  every ``period_s`` seconds, so they must lie in [0, period_s],
- ``id`` (optional): a name for reports; the row number otherwise.

Lines starting with ``#`` are comments. Example::

    id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows
    phone,0.004,2500000,500000,86400,0:28800 72000:86400
    laptop,0.0005,12500000,2500000,,always

Touching windows are merged ([0, 10) and [10, 20) are [0, 20)), also across the period's end
(``72000:86400`` and ``0:28800`` above are one window of 10 hours that wraps: it is stored as
[72000, 115200)). A bad file stops with one line naming the file, the line and the field.
"""
from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from seafl_dist.settings import ConfigError

REQUIRED = ("sec_per_sample", "download_bytes_per_s", "upload_bytes_per_s", "windows")
OPTIONAL = ("id", "period_s")


class ProfileError(ConfigError):
    """A device profile file that cannot be used; printed as one line by the CLI."""


@dataclass(frozen=True)
class Profile:
    """One row. ``windows`` is None for ``always``, () for ``never``; else sorted, merged [on, off) pairs in seconds
    (a window that wraps the period's end has off > period). ``period`` None: no repetition."""
    id: str
    sec_per_sample: float
    download_bytes_per_s: float
    upload_bytes_per_s: float
    period: Optional[float]
    windows: Optional[tuple]


@dataclass(frozen=True)
class ProfileTable:
    path: str
    sha256: str  # of the file's bytes: a resumed run compares content, not the path
    rows: tuple  # of Profile

    def __len__(self) -> int:
        return len(self.rows)


class _Row:
    """Error messages that name the file, the line and the field."""

    def __init__(self, path: str, line: int, cells: dict):
        self.path, self.line, self.cells = path, line, cells

    def fail(self, field: str, msg: str) -> None:
        raise ProfileError(f"profile {self.path} line {self.line} field '{field}': {msg}")

    def number(self, field: str, *, positive: bool = False, allow_inf: bool = False) -> float:
        text = (self.cells.get(field) or "").strip()
        try:
            x = float(text)
        except ValueError:
            self.fail(field, f"{text!r} is not a number")
        if math.isnan(x) or (math.isinf(x) and not allow_inf):
            self.fail(field, f"{text!r} is not a finite number")
        if x < 0 or (positive and x == 0):
            self.fail(field, f"{text!r} must be {'> 0' if positive else '>= 0'}")
        return x


def _parse_windows(row: _Row, period: Optional[float]) -> Optional[tuple]:
    text = (row.cells.get("windows") or "").strip()
    if text.lower() == "always":
        return None
    if text.lower() == "never":  # e.g. a traced phone never seen online: it takes no jobs
        return ()
    if not text:
        row.fail("windows", "empty; write 'always', 'never' or on:off pairs such as '0:3600 7200:9000'")
    pairs = []
    for part in text.split():
        on_off = part.split(":")
        try:
            on, off = (float(x) for x in on_off) if len(on_off) == 2 else (math.nan, math.nan)
        except ValueError:
            on = off = math.nan
        if not (math.isfinite(on) and math.isfinite(off)):
            row.fail("windows", f"{part!r} is not on:off with two finite numbers of seconds")
        if on < 0 or off <= on:
            row.fail("windows", f"{part!r} needs 0 <= on < off")
        if period is not None and off > period:
            row.fail("windows", f"{part!r} ends after the period ({period:g} s); windows repeat within [0, period_s]")
        if pairs and on < pairs[-1][1]:
            how = "overlaps" if on >= pairs[-1][0] else "comes before"
            row.fail("windows", f"{part!r} {how} the window before it; sort the windows and merge overlaps")
        if pairs and on == pairs[-1][1]:  # touching: one window
            pairs[-1] = (pairs[-1][0], off)
        else:
            pairs.append((on, off))
    if period is not None and len(pairs) > 1 and pairs[0][0] == 0 and pairs[-1][1] == period:
        first = pairs.pop(0)  # the last window runs on into the next period's first one
        pairs[-1] = (pairs[-1][0], period + first[1])
    if period is not None and pairs[0] == (0.0, period):
        return None  # on for the whole period: always
    return tuple(pairs)


def _parse_row(row: _Row, index: int) -> Profile:
    period = None
    if (row.cells.get("period_s") or "").strip():
        period = row.number("period_s", positive=True)
    return Profile(id=(row.cells.get("id") or "").strip() or str(index),
                   sec_per_sample=row.number("sec_per_sample"),
                   download_bytes_per_s=row.number("download_bytes_per_s", positive=True, allow_inf=True),
                   upload_bytes_per_s=row.number("upload_bytes_per_s", positive=True, allow_inf=True),
                   period=period, windows=_parse_windows(row, period))


def read_profiles(path: str | Path) -> ProfileTable:
    """Read and check a profile CSV; a :class:`ProfileError` of one line on any problem."""
    path = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ProfileError(f"profile {path} cannot be read ({err.strerror or err}); check devices.profile") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileError(f"profile {path} is not UTF-8 text; write it as CSV (see docs/devices.md)") from None
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), start=1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ProfileError(f"profile {path} is empty; it needs a header line and at least one profile row")
    reader = csv.reader([ln for _, ln in lines])
    header = [h.strip() for h in next(reader)]
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        what = f"lacks column(s) {missing}" if missing else f"has unknown column(s) {unknown}"
        raise ProfileError(f"profile {path} line {lines[0][0]} (header) {what}; "
                           f"columns: {', '.join(REQUIRED)} and optionally {', '.join(OPTIONAL)}")
    rows = []
    for (line, _), cells in zip(lines[1:], reader):
        if len(cells) != len(header):
            raise ProfileError(f"profile {path} line {line}: {len(cells)} cells, the header has {len(header)}")
        rows.append(_parse_row(_Row(path, line, dict(zip(header, cells))), len(rows)))
    if not rows:
        raise ProfileError(f"profile {path} has a header but no profile rows")
    return ProfileTable(path=path, sha256=hashlib.sha256(raw).hexdigest(), rows=tuple(rows))
