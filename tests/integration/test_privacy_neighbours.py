"""Neighbouring runs (issue 50 B): two runs whose only difference is one device's training data (replace-one
adjacency, docs/privacy.md), with every seed and every noise draw the same, must release the same bytes up to
the first aggregation t* that includes that device; at t* they may differ only in what is post-processing of the
noised model (the evaluation's accuracy and loss, the floats of model.pt, what the summary derives from them).

Nothing here lists the fields a run writes: every leaf of every released file (events.jsonl, metrics.csv,
partition.json, summary.json, train_log.csv, config.yaml, model.pt: runtime/release.py's compare, which
``seafl release --check`` runs too; and here the captured stdout and stderr, and W&B's offline history) is
compared, so a field added later that carries an un-noised value of an update fails here without anyone naming it. The device's replacement data is other images with other labels, or images that make
its update non-finite (taken as a zero delta under DP). The model has batch norm, whose integer counter takes no
noise, and logs its training loss (a module's own values, train_log.csv and W&B's ``train/*``).

Each rule runs in this process at tiny scale: FedBuff, FedAsync, FedAvg, SEAFL in both forms, SEAFL², and FedBuff
with adaptive clipping (privacy.adaptive_clip: C_t moves at every aggregation)."""
import json
import os
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from resuming import reference
import in_process
from seafl_dist.data.loaders import clear_cache
from seafl_dist.runtime.release import compare, differing, first_inclusions
from seafl_dist.report.wandb_files import offline_files, records
from small_runs import DP_KEY, PER_ALGORITHM, SMALL
from wandb_runs import history_across, offline_env

SOURCE = '''
import os
import numpy as np
import torch
import torch.nn.functional as F
import lightning as L
from torch import nn

PER = 30  # training samples of a device (rows_of)
DEVICES = 8


class LoggingBN(L.LightningModule):
    """An MLP with batch norm (an integer counter) that logs its training loss."""

    def __init__(self, num_classes, in_channels, image_size):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, 16), nn.BatchNorm1d(16),
                                 nn.ReLU(), nn.Linear(16, num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def logging_bn(num_classes, in_channels, image_size, width):
    return LoggingBN(num_classes, in_channels, image_size)


def rows_of(device):
    """Device 0 holds 3 * PER rows (more steps, so the largest batch norm counter of its buffers), the others PER."""
    start = 0 if device == 0 else (device + 2) * PER
    return slice(start, start + (3 if device == 0 else 1) * PER)


def bands(root, train):
    g = torch.Generator().manual_seed(0 if train else 1)
    n = (DEVICES + 2) * PER if train else 120
    labels = torch.randint(0, 4, (n,), generator=g)
    images = torch.rand(n, 1, 8, 8, generator=g) * 0.5
    for k in range(4):
        images[labels == k, 0, 2 * k:2 * k + 2, :] += 1.0
    neighbour = os.environ.get("SEAFL_TEST_NEIGHBOUR")  # "other-D" or "huge-D": device D's data replaced
    if train and neighbour:
        kind, d = neighbour.split("-")
        rows = rows_of(int(d))
        m = rows.stop - rows.start
        other = torch.Generator().manual_seed(99)
        labels[rows] = torch.randint(0, 4, (m,), generator=other)
        images[rows] = torch.rand(m, 1, 8, 8, generator=other) * (3.0 if kind == "other" else 3e38)
    return images, labels


def blocks(labels, num_devices, seed):
    return [np.arange(len(labels))[rows_of(k)] for k in range(num_devices)]
'''

WANDB = ["logging.wandb.enabled=true", "logging.wandb.mode=offline"]  # SEAFL²: agg/*, train/*, eval/* compared too
RULES = {
    "fedbuff": ["algorithm.name=fedbuff"],
    "fedasync": ["algorithm.name=fedasync", "run.max_aggregations=16"],  # K = 1: device 0 comes later
    "fedavg": ["algorithm.name=fedavg"],
    "seafl_delta": ["algorithm.name=seafl", "privacy.seafl_form=delta"],
    "seafl_model": ["algorithm.name=seafl", "privacy.seafl_form=model"],
    "seafl2": ["algorithm.name=seafl2", *PER_ALGORITHM["seafl2"], *WANDB],
    # C_t moves (η_C = 1) on noised counts: the same before t*, the count at t* never released (issue 67 item 4)
    "fedbuff_adaptive": ["algorithm.name=fedbuff", "privacy.adaptive_clip.enabled=true",
                         "privacy.adaptive_clip.count_std=1", "privacy.adaptive_clip.lr=1"],
}
PRIVATE = ["privacy.enabled=true", "privacy.noise_multiplier=0.5", "privacy.clipping_bound=1", "devices.num=8", *DP_KEY,
           "run.max_aggregations=6", "run.eval_every=1"]


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("neighbours")
    name = f"neighbours_{abs(hash(str(folder))) % 10 ** 8}"
    (folder / f"{name}.py").write_text(SOURCE)
    import sys
    sys.path.insert(0, str(folder))
    yield name
    sys.path.remove(str(folder))


def run(out: Path, args, neighbour: str | None, capsys) -> tuple[Path, list[str]]:
    """One run in this process with device data replaced as ``neighbour`` says; its printed lines."""
    capsys.readouterr()
    clear_cache()  # the loaders keep one copy per process: the neighbour's data must be read again
    if neighbour:
        os.environ["SEAFL_TEST_NEIGHBOUR"] = neighbour
    try:
        reference(out, args)
    finally:
        os.environ.pop("SEAFL_TEST_NEIGHBOUR", None)
        clear_cache()
    got = capsys.readouterr()
    return out, (got.out + got.err).splitlines()


def assert_neighbours(a: Path, b: Path, t: int, lines_a: list[str], lines_b: list[str]) -> None:
    """What a reader of ``a`` and ``b`` (both ending at aggregation t, the first to include the changed device)
    can tell apart: only the evaluation of the noised model at t and what derives from it."""
    assert {p.name for p in a.iterdir() if p.is_file()} == {p.name for p in b.iterdir() if p.is_file()}
    assert not (a / "train_log.csv").exists(), "a module's logged training values are written under DP"
    _, found = compare(a, b, t)  # every leaf of every released file (runtime/release.py)
    outside = [str(d) for d in found if not d.allowed]
    assert not outside, outside
    assert {d.file for d in found} >= {"model.pt"} and all(d.allowed for d in found if d.file == "model.pt")
    assert {json.loads((d / "summary.json").read_text())["status"] for d in (a, b)} <= {"completed", "diverged"}
    assert "wall_time_s" not in json.loads((a / "summary.json").read_text()), "real time is released under DP"
    if (a / "wandb").exists():
        assert_wandb_neighbours(a, b, t)
    assert not [x for x in lines_a + lines_b if "norm" in x], "an update's norm is printed under DP"
    assert not [x for x in lines_a + lines_b if re.search(r"\breal\b", x)], "real time is printed under DP"
    masked = [[x.replace(str(d), "<run dir>") for x in lines] for d, lines in ((a, lines_a), (b, lines_b))]
    post = re.compile(r"accuracy|diverged|loss")  # lines that print the evaluation of the noised model
    assert [x for x in masked[0] if not post.search(x)] == [x for x in masked[1] if not post.search(x)]


def wandb_history(run_dir: Path, t: int) -> dict[int, dict]:
    """W&B's offline history rows by step, once versions 0..t are on disk and the file has stopped growing: W&B's
    service may still be writing it when ``run.finish`` returns on a loaded machine (up to 60 s). W&B's own keys
    (``_runtime``, ``_timestamp``: when a row reached W&B) are checked apart (assert_wandb_after_the_run)."""
    run_id = json.loads((run_dir / "wandb_run.json").read_text())["id"]
    last = None
    for _ in range(120):
        rows: dict[int, dict] = {}
        try:
            for row in history_across(offline_files(run_dir / "wandb", run_id)):
                rows.setdefault(row["_step"], {}).update({k: v for k, v in row.items() if not k.startswith("_")})
        except Exception:  # a record cut mid-write
            rows = {}
        if set(range(t + 1)) <= rows.keys() and rows == last:
            return rows
        last = rows
        time.sleep(0.5)
    return rows


def assert_wandb_after_the_run(run_dir: Path) -> None:
    """W&B got the run's rows only after the server's last write (summary.json), so its stamps carry no step's
    real time, and sampled no system statistics on a timer, nor the console."""
    files = offline_files(run_dir / "wandb", json.loads((run_dir / "wandb_run.json").read_text())["id"])
    ended = (run_dir / "summary.json").stat().st_mtime
    stamps = [row["_timestamp"] for row in history_across(files)]
    assert stamps and min(stamps) >= ended, f"W&B stamped rows {ended - min(stamps):.3f}s before the run ended"
    kinds = {rec.WhichOneof("record_type") for f in files for rec in records(f)}
    assert not kinds & {"stats", "output", "output_raw"}, kinds


def assert_wandb_neighbours(a: Path, b: Path, t: int) -> None:
    """Every W&B value logged before version t is the same; at t and after (the plots at the end) only the
    evaluation of the noised model and what is drawn from it may differ."""
    ha, hb = wandb_history(a, t), wandb_history(b, t)
    assert ha.keys() == hb.keys() and t in ha
    for run_dir in (a, b):
        assert_wandb_after_the_run(run_dir)
    for step in ha:
        diff = differing(ha[step], hb[step])
        allowed = (lambda k: k.startswith(("eval/", "plots/"))) if step >= t else (lambda k: False)
        assert all(allowed(k) for k in diff), (step, sorted(diff))
    assert not [k for row in ha.values() for k in row if k.startswith("train/")], "logged training values in W&B"


@pytest.mark.parametrize("rule", list(RULES))
def test_neighbouring_runs_differ_only_in_post_processing_of_the_noised_model(rule, module, tmp_path, capsys,
                                                                            monkeypatch):
    for k in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(k)
    for k, v in offline_env(tmp_path).items():
        if k.startswith("WANDB_") or k == "NETRC":
            monkeypatch.setenv(k, v)
    args = [*SMALL, *PRIVATE, *RULES[rule], f"model.name={module}:logging_bn", f"data.name={module}:bands",
            f"data.partition={module}:blocks"]
    base, _ = run(tmp_path / "base", args, None, capsys)
    first = first_inclusions(base)
    device, t = 0, first[0]  # the device with the most data: its update holds its buffers' largest counter
    assert t >= 2, first  # so that some aggregations come before it
    end = [f"run.max_aggregations={t}"]
    base, lines = run(tmp_path / "base_t", [*args, *end], None, capsys)
    if rule.endswith("_adaptive"):  # C_t has moved at every aggregation up to t*
        bounds = [json.loads(x)["privacy"]["clipping_bound"] for x in (base / "events.jsonl").read_text().splitlines()
                  if '"aggregate"' in x]
        assert len(set(bounds)) == len(bounds) == t, bounds
    counts = Counter(first.values())
    assert counts[t] >= 1
    for kind in ("other", "huge"):
        other, other_lines = run(tmp_path / kind, [*args, *end], f"{kind}-{device}", capsys)
        assert (other / "model.pt").read_bytes() != (base / "model.pt").read_bytes()  # the data did change w'
        assert_neighbours(base, other, t, lines, other_lines)
    if rule == "fedbuff":
        assert_release_check(base, other, device, t, tmp_path)


def assert_release_check(base: Path, other: Path, device: int, t: int, tmp_path: Path) -> None:
    """``seafl release --check`` of the neighbours passes (and releases); an un-noised value planted in one
    event before t* (a leak), or at t* in a field of no evaluation, fails it with the line named."""
    def copy(name: str, events: list[str] | None = None) -> Path:
        """base's files (its summary.json holds no real time under DP: issue 60 C)."""
        (tmp_path / name).mkdir()
        for p in base.iterdir():
            if p.is_file():
                (tmp_path / name / p.name).write_bytes(p.read_bytes())
        if events is not None:
            (tmp_path / name / "events.jsonl").write_text("\n".join(events) + "\n")
        return tmp_path / name

    proc = in_process.seafl("release", other, tmp_path / "released", "--check", copy("same"), "--device", device)
    assert proc.returncode == 0 and f"t* = aggregation {t}" in proc.stderr, proc.stderr
    assert (tmp_path / "released" / "model.pt").read_bytes() == (other / "model.pt").read_bytes()
    lines = (base / "events.jsonl").read_text().splitlines()
    for at, (i, line) in (("before", next((i, x) for i, x in enumerate(lines) if '"aggregate"' in x)),
                          ("at", next((i, x) for i, x in enumerate(lines) if '"eval", "time"' in x and
                                      f'"version": {t},' in x))):
        leaky = copy(f"leaky-{at}", [*lines[:i], line[:-1] + ', "norm": 0.25}', *lines[i + 1:]])
        proc = in_process.seafl("release", other, tmp_path / f"out-{at}", "--check", leaky, "--device", device)
        assert proc.returncode == 1 and not (tmp_path / f"out-{at}").exists(), proc.stderr
        assert f"OUTSIDE  events.jsonl: line {i + 1} (" in proc.stderr and "norm" in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode", ["keyed", "secure"])
def test_neighbours_across_a_kill_and_a_resume_and_nothing_released_twice(mode, module, tmp_path, capsys,
                                                                         monkeypatch):
    """The neighbour run b (device 0's data replaced; device 0 first included at aggregation 6) is killed after
    aggregation 5 with its last checkpoint at 3, so aggregations 4 and 5 were released before the kill, and
    resumed. What b released before the kill is what it holds after the resume (the same key draws the same noise;
    secure noise replays its write-ahead record). Keyed, with b's own fresh key given to the uninterrupted a, a and b
    differ only as neighbours do; secure, they agree on everything public."""
    import importlib.util
    from resuming import checkpoint_versions, cli, run_args
    folder = Path(importlib.util.find_spec(module).origin).parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    private = [x for x in PRIVATE if not x.startswith("privacy.key_file")]  # keyed: each run's own fresh key
    args = [*SMALL, *private, *RULES["fedbuff"], f"model.name={module}:logging_bn", f"data.name={module}:bands",
            f"data.partition={module}:blocks", "run.checkpoint_every=3", "run.checkpoint_every_s=null",
            *(["privacy.secure_noise=true"] if mode == "secure" else [])]
    b = tmp_path / "b"
    monkeypatch.setenv("SEAFL_TEST_NEIGHBOUR", "other-0")
    killed = cli(*run_args(args, b), fault="after_aggregate:5")
    monkeypatch.delenv("SEAFL_TEST_NEIGHBOUR")
    assert killed.returncode != 0 and checkpoint_versions(b) == [3], killed.stderr[-2000:]
    released = (b / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in released[1:]] == [0, 1, 2, 3, 4, 5]
    if mode == "keyed":
        monkeypatch.setenv("SEAFL_DP_KEY", (b / "private" / "noise.key").read_text())
    a, lines_a = run(tmp_path / "a", args, None, capsys)
    monkeypatch.delenv("SEAFL_DP_KEY", raising=False)
    b, lines_b = run(b, args, "other-0", capsys)
    assert any("after aggregation 3" in x for x in lines_b), lines_b
    assert (b / "metrics.csv").read_text().splitlines()[:len(released)] == released  # nothing released twice
    assert first_inclusions(a)[0] == 6
    if mode == "keyed":
        assert_neighbours(a, b, 6, [], [])
    else:
        evs = [[e for e in map(json.loads, (d / "events.jsonl").read_text().splitlines()) if e["event"] != "eval"]
               for d in (a, b)]
        assert evs[0] == evs[1]  # the schedule, S, σ and ε
