"""W&B offline: a run with logging.wandb.mode=offline leaves an offline run whose history holds the
metrics. Read back from the run's ``.wandb`` file (W&B's record log: a LevelDB-style log of
``wandb_internal_pb2.Record`` protobufs), with no API key and no network."""
import csv
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

wandb_pb2 = pytest.importorskip("wandb.proto.wandb_internal_pb2")

TINY = """\
algorithm: {name: seafl2, buffer_size: 2, staleness_limit: 1}
devices: {num: 8, concurrency: 4}
train: {epochs: 2, batch_size: 16, lr: 0.05, momentum: 0.9}
clock: {sec_per_sample: 0.01, idle: {distribution: zipf, s: 1.7, max: 20}}
data: {name: digits, partition: dirichlet, concentration: 0.5}
model: {name: lenet5}
runtime: {threads: 1}
run: {seed: 0, max_aggregations: 5, targets: [0.3, 0.999]}
logging: {progress: none}
"""


def wandb_records(path: Path):
    """Yield the protobuf records of a ``.wandb`` file (7-byte header, 32 KiB blocks, chunked records)."""
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        payload, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):  # full, first
            pending = payload
        else:  # middle, last
            pending += payload
        if kind in (1, 4):
            rec = wandb_pb2.Record()
            rec.ParseFromString(pending)
            yield rec


def item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(run_file: Path) -> dict:
    out = {"history": [], "summary": {}, "config": {}, "run": None}
    for rec in wandb_records(run_file):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            out["history"].append({item_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            out["summary"].update({item_key(i): json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "config":
            out["config"].update({item_key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "run":
            out["run"] = rec.run
            out["config"].update({item_key(i): json.loads(i.value_json) for i in rec.run.config.update})
    return out


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wb")
    (tmp / "tiny.yaml").write_text(TINY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_CONFIG_DIR=str(tmp / "wbconfig"), WANDB_CACHE_DIR=str(tmp / "wbcache"),
               WANDB_DATA_DIR=str(tmp / "wbdata"), NETRC=str(tmp / "no-netrc"))
    out = tmp / "run"
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(tmp / "tiny.yaml"),
                           "logging.wandb.enabled=true", "logging.wandb.mode=offline", "logging.wandb.group=g1",
                           "logging.wandb.tags=[tiny,test]", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, list(out.rglob("*"))
    return out, read_offline_run(files[0])


def test_history_holds_every_eval_and_aggregation(offline_run):
    out, wb = offline_run
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    evals = [h for h in wb["history"] if "eval/accuracy" in h]
    assert [h["version"] for h in evals] == [int(r["version"]) for r in rows]
    assert [h["eval/accuracy"] for h in evals] == pytest.approx([float(r["accuracy"]) for r in rows])
    assert [h["eval/loss"] for h in evals] == pytest.approx([float(r["loss"]) for r in rows])
    assert [h["virtual_time"] for h in evals] == pytest.approx([float(r["time"]) for r in rows])
    aggs = [h for h in wb["history"] if "agg/updates" in h]
    assert [h["version"] for h in aggs] == [1, 2, 3, 4, 5]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [h["agg/updates"] for h in aggs] == [len(e["updates"]) for e in events if e["event"] == "aggregate"]
    images = {k.rsplit("/", 1)[0] for h in wb["history"] for k in h if k.startswith("plots/")}
    assert images == {"plots/accuracy_vs_time", "plots/timeline"}  # logged as wandb.Image


def test_config_summary_group_and_sync_note(offline_run):
    out, wb = offline_run
    assert wb["config"]["algorithm"]["name"] == "seafl2" and wb["config"]["run"]["max_aggregations"] == 5
    assert wb["run"].run_group == "g1" and list(wb["run"].tags) == ["tiny", "test"]
    summary = json.loads((out / "summary.json").read_text())
    assert wb["summary"]["final_accuracy"] == pytest.approx(summary["final_accuracy"])
    assert wb["summary"]["aggregations"] == 5 and wb["summary"]["status"] == "completed"
    assert wb["summary"]["time_to_target/0.999"] is None  # never reached
    note = (out / "wandb_sync.txt").read_text()
    sync_dir = Path(note.split("wandb sync ", 1)[1].strip())
    assert sync_dir.is_dir() and sync_dir.parent == (out / "wandb").resolve()
    assert list(sync_dir.glob("files/media/images/plots/*.png"))


def test_no_callbacks_and_no_wandb_import_unless_enabled():
    code = ("import sys\n"
            "from seafl_dist.settings import config_from_dict\n"
            "from seafl_dist.runtime.inprocess import run_inprocess\n"
            "from seafl_dist.report.wandb_sink import make_callbacks\n"
            "assert make_callbacks(config_from_dict({}), '.') == []\n"
            "cfg = config_from_dict({}, ['logging.wandb.enabled=true', 'logging.wandb.mode=disabled'])\n"
            "assert make_callbacks(cfg, '.') == []\n"
            "assert 'wandb' not in sys.modules, 'wandb imported by a plain run'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
