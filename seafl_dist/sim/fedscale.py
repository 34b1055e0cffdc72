"""FedScale's device traces into a profile CSV (docs/devices.md, "Real traces").

    python -m seafl_dist.sim.fedscale client_device_capacity client_behave_trace --out profile.csv

FedScale publishes two pickled dicts (its benchmark's ``device_info`` data; see docs/devices.md):

- ``client_device_capacity``: ``{id: {'computation': inference ms per sample,
  'communication': bandwidth in kbit/s}}`` (AI-Benchmark and MobiPerf measurements);
- ``client_behave_trace``: ``{id: {'duration', 'inactive': [...], 'active': [...],
  'finish_time', 'model'}}`` (FLASH: when each of 136k phones was online over a week).

The conversion does what FedScale's own client does (fedscale/cloud/internal/client_metadata.py):

- training costs 3 × inference (its ``augmentation_factor``: the backward pass takes about twice
  the forward one), so ``sec_per_sample = 3 × computation / 1000``;
- FedScale sizes a model in kbit as bytes / 1024 × 8 and charges (upload + download) / bandwidth,
  one bandwidth both ways, so ``download_bytes_per_s = upload_bytes_per_s = communication × 128``;
- a client is active when ``active[i] <= t mod finish_time <= inactive[i]``: the windows are
  [active_i, inactive_i) repeating with ``period_s = finish_time``; windows are clipped to
  [0, finish_time], sorted and merged where they overlap (FedScale's closed ends differ from our
  half-open ones only at single instants); a client with none left is ``never``;
- FedScale pairs its client c = 1, 2, ... with capacity key ``c % len(capacity)`` (a missing key
  gets its default ``{'computation': 1.0, 'communication': 1.0}``) and with the behaviour entry
  at position ``c % len(behave)`` of the dict's order. Row r of the CSV is client c = r + 1, for
  max(len(capacity), len(behave)) rows unless ``rows`` says otherwise. (Which device takes which
  row is then our seeded rule, not FedScale's c = k + 1.)

A pickle is a program: the files are read by :func:`load_plain` (the package's one safe
unpickler, seafl_dist/data/safepickle.py) which admits dicts, lists, tuples, strings, numbers,
booleans and None, and refuses anything that names a global (a class or a function) with one
line, before it runs.
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path
from typing import Optional

from seafl_dist.settings import ConfigError

AUGMENTATION = 3.0  # FedScale's augmentation_factor: training = 3 x inference
KBIT_BYTES = 1024 / 8  # FedScale's kbit: bytes / 1024 * 8
DEFAULT_CAPACITY = {"computation": 1.0, "communication": 1.0}  # FedScale's fallback for a missing key
_PLAIN = (dict, list, tuple, str, int, float, bool, type(None))


class TraceError(ConfigError):
    """A FedScale trace file that cannot be converted; printed as one line."""


def _check_plain(obj, path: str) -> None:
    stack = [obj]
    while stack:
        x = stack.pop()
        if not isinstance(x, _PLAIN):
            raise TraceError(f"{path} holds a {type(x).__name__}; only dicts, lists, strings and numbers are admitted")
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)


def load_plain(path: str | Path):
    """Unpickle ``path`` admitting plain data only: the project's one safe unpickler
    (seafl_dist/data/safepickle.py, ``allow=PLAIN``) refuses any global before it runs; sets and bytes,
    which need none, are refused after."""
    from seafl_dist.data.missing import DataError  # here: importing seafl_dist.data loads torch
    from seafl_dist.data.safepickle import PLAIN, load_pickle
    try:
        obj = load_pickle(path, allow=PLAIN)
    except DataError as err:  # a refused global, a truncated file, a file that cannot be read: one line
        raise TraceError(str(err)) from None
    _check_plain(obj, str(path))
    return obj


def _number(path: str, key, field: str, value, *, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value >= 0
    if not ok or (positive and value == 0) or value == float("inf"):
        raise TraceError(f"{path} client {key!r} field '{field}': {value!r} is not a finite number "
                         f"{'> 0' if positive else '>= 0'}")
    return float(value)


def _windows(path: str, key, trace) -> tuple[float, str]:
    """(period, windows cell) of one behaviour entry."""
    if not isinstance(trace, dict) or not all(k in trace for k in ("active", "inactive", "finish_time")):
        raise TraceError(f"{path} client {key!r}: expected a dict with 'active', 'inactive' and 'finish_time'")
    period = _number(path, key, "finish_time", trace["finish_time"], positive=True)
    on, off = trace["active"], trace["inactive"]
    if not isinstance(on, list) or not isinstance(off, list) or len(on) != len(off):
        raise TraceError(f"{path} client {key!r}: 'active' and 'inactive' must be lists of the same length")
    spans = sorted((min(_number(path, key, "active", a), period), min(_number(path, key, "inactive", b), period))
                   for a, b in zip(on, off))
    merged: list = []
    for a, b in spans:
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return period, " ".join(f"{a!r}:{b!r}" for a, b in merged) or "never"


def convert(capacity: dict, behave: dict, *, rows: Optional[int] = None, names=("capacity", "behave")) -> str:
    """The profile CSV text of FedScale's two dicts (see the module docstring for the rules)."""
    if not isinstance(capacity, dict) or not capacity:
        raise TraceError(f"{names[0]} is not a non-empty dict of client id -> capacity")
    if not isinstance(behave, dict) or not behave:
        raise TraceError(f"{names[1]} is not a non-empty dict of client id -> behaviour trace")
    if not any(isinstance(k, int) for k in capacity):  # else every lookup would fall back to the default
        raise TraceError(f"{names[0]} has no integer client ids (keys like {next(iter(capacity))!r}); FedScale looks "
                         f"capacities up by integer id")
    if rows is not None and rows < 1:
        raise TraceError(f"rows must be >= 1, got {rows}")
    keys = list(behave)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "sec_per_sample", "download_bytes_per_s", "upload_bytes_per_s", "period_s", "windows"])
    for r in range(rows or max(len(capacity), len(behave))):
        c = r + 1  # FedScale's client ids start at 1
        cap = capacity.get(c % len(capacity), DEFAULT_CAPACITY)
        if not isinstance(cap, dict) or "computation" not in cap or "communication" not in cap:
            raise TraceError(f"{names[0]} client {c % len(capacity)!r}: expected a dict with 'computation' and "
                             f"'communication'")
        ms = _number(names[0], c % len(capacity), "computation", cap["computation"])
        bw = _number(names[0], c % len(capacity), "communication", cap["communication"], positive=True) * KBIT_BYTES
        period, windows = _windows(names[1], keys[c % len(keys)], behave[keys[c % len(keys)]])
        writer.writerow([f"fedscale-{c}", repr(AUGMENTATION * ms / 1000), repr(bw), repr(bw), repr(period), windows])
    return out.getvalue()


def import_fedscale(capacity_path: str | Path, behave_path: str | Path, out: str | Path,
                    rows: Optional[int] = None) -> int:
    """Convert the two files into ``out``; the number of rows written."""
    text = convert(load_plain(capacity_path), load_plain(behave_path), rows=rows,
                   names=(str(capacity_path), str(behave_path)))
    Path(out).write_text(text)
    return text.count("\n") - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seafl_dist.sim.fedscale",
                                     description="Convert FedScale's client_device_capacity and client_behave_trace "
                                                 "into a device profile CSV (docs/devices.md).")
    parser.add_argument("capacity", metavar="CAPACITY")
    parser.add_argument("behave", metavar="BEHAVE")
    parser.add_argument("--out", required=True, help="the profile CSV to write")
    parser.add_argument("--rows", type=int, default=None, help="rows to write (default: the larger dict's size)")
    args = parser.parse_args(argv)
    try:
        n = import_fedscale(args.capacity, args.behave, args.out, rows=args.rows)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {n} profiles to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
