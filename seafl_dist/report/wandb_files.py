"""Read W&B's offline ``.wandb`` files: which steps a resumed offline run has already written.

A ``.wandb`` file is W&B's record log: a 7-byte header (``:W&B``, 0xBEE1, version 0), then
32 KiB blocks of chunked records (LevelDB's log format: CRC, length, type full/first/middle/last),
each record a ``wandb_internal_pb2.Record`` protobuf. wandb 0.31 ships no Python reader (its Go
core reads them), so this is one, kept small. A file cut short by a kill ends at its last whole
record. W&B's offline mode ignores ``resume``: each process of a resumed run writes its own
``offline-run-<YYYYmmdd_HHMMSS>-<id>`` folder (``...-<id>-1``, ``-2``, ... when a process of the same
run started within the same second as an earlier one), and the sink (report/wandb_sink.py) reads
the earlier ones so that no version is logged twice.
"""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

BLOCK = 32768
HEADER = (b":W&B", 0xBEE1, 0)


def records(path: Path):
    """Yield the ``Record`` protobufs of a ``.wandb`` file, stopping at the first incomplete one."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if len(data) < 7 or struct.unpack("<4sHB", data[:7]) != HEADER:
        raise ValueError(f"{path} is not a W&B record log (header {data[:7].hex()})")
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # zero padding to the block's end
            pos += left
            continue
        if pos + 7 + length > len(data):  # cut by a kill mid-record
            return
        payload, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = payload if kind in (1, 2) else pending + payload  # full/first start a record
        if kind in (1, 4):  # full, last
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(pending)
            yield rec


def item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(run_file: Path) -> dict:
    """History rows (with ``_step``), summary, config and the run record of one ``.wandb`` file."""
    out: dict = {"history": [], "summary": {}, "config": {}, "run": None}
    for rec in records(run_file):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = {item_key(i): json.loads(i.value_json) for i in rec.history.item}
            row.setdefault("_step", rec.history.step.num)
            out["history"].append(row)
        elif kind == "summary":
            out["summary"].update({item_key(i): json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "config":
            out["config"].update({item_key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "run":
            out["run"] = rec.run
            out["config"].update({item_key(i): json.loads(i.value_json) for i in rec.run.config.update})
    return out


def offline_files(wandb_dir: Path, run_id: str) -> list[Path]:
    """The ``.wandb`` files of run ``run_id`` under ``wandb_dir``, oldest first: by the start second in
    the folder's name, then by the number W&B appends to a folder whose name was taken that second."""
    name = re.compile(rf"offline-run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?")
    found = []
    for f in Path(wandb_dir).glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb"):
        m = name.fullmatch(f.parent.name)
        if m:
            found.append(((m.group(1), int(m.group(2) or 0)), f))
    return [f for _, f in sorted(found)]


def last_step(files) -> int:
    """The highest history step written in ``files`` (-1 if none)."""
    top = -1
    for f in files:
        for rec in records(f):
            if rec.WhichOneof("record_type") == "history":
                top = max(top, rec.history.step.num)
    return top
