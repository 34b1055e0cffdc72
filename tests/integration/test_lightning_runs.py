"""LightningModules in whole runs (issue "LightningModules as Lightning's own documentation writes them").

A module that logs: each update carries its job's values on its entry of the aggregate event,
train_log.csv holds the n_k-weighted mean over each aggregation's accepted updates, and a killed and
resumed run ends with every file byte-identical to an uninterrupted one. ``train.loop: lightning``
gives the plain loop's bytes. Modules that break Lightning's contract are refused in one line
naming ``model.name`` (exit 2, no run dir), in ``--dry-run`` too. A module with hooks of its own is
never fused (``runtime.batch_jobs`` > 1): one line says why, and the run is the one-at-a-time run.
"""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import in_process
from one_line import one_error_line
from resuming import QUICKSTART, SMALL, assert_same_run, checkpoint_versions, reference, run_args
from seafl_dist.report.trainlog import read_train_log

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
LOGGING = [*SMALL, "model.name=lightning_modules:log_reduce_fx", "run.checkpoint_every=2"]
HOOKS = [*SMALL, "model.name=lightning_modules:lenet_with_hook", "train.epochs=2"]


def seafl(*args, fault=None, extra_path=None):
    """``python -m seafl_dist ARGS`` with tests/ (and ``extra_path``) importable, one thread."""
    env = {k: v for k, v in os.environ.items() if k != "SEAFL_FAULT"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), extra_path])))
    if fault:
        env["SEAFL_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "seafl_dist", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def here(monkeypatch):
    """``seafl`` (above) in this process (tests/in_process.py), in the repository root: a finished process whose
    stderr holds what a real process's console would beyond seafl's own lines, Lightning's log records and the
    warnings the interpreter's default filters show."""
    monkeypatch.delenv("SEAFL_FAULT", raising=False)
    return functools.partial(in_process.seafl, cwd=ROOT, console=True)


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("logged") / "run", LOGGING)


def test_each_update_carries_its_jobs_values_and_train_log_holds_their_weighted_mean(logged_run):
    events = [json.loads(line) for line in (logged_run / "events.jsonl").read_text().splitlines()]
    aggs = [e for e in events if e["event"] == "aggregate"]
    assert len(aggs) == 6
    names = {"loss_max", "loss_sum", "ones", "weighted", "epoch_mark"}
    for e in aggs:
        for u in e["updates"]:
            assert set(u["logged"]) == names
            assert u["logged"]["epoch_mark"] == 0.0  # train.epochs=1: logged in epoch 0 only
            assert u["logged"]["ones"] > 1  # a sum over the job's steps, not a mean
    rows = read_train_log(logged_run / "train_log.csv")
    assert [(r["version"], r["name"]) for r in rows] == [(e["version"], n) for e in aggs for n in sorted(names)]
    first = aggs[0]
    total = sum(u["n_samples"] for u in first["updates"])
    want = sum(u["n_samples"] * u["logged"]["loss_max"] for u in first["updates"]) / total
    assert rows[1]["name"] == "loss_max" and rows[1]["value"] == pytest.approx(want, rel=1e-12)
    by_hand = [sum(u["n_samples"] * u["logged"][n] for u in e["updates"]) / sum(u["n_samples"] for u in e["updates"])
               for e in aggs for n in sorted(names)]  # every update logged every name (asserted above)
    assert [r["value"] for r in rows] == pytest.approx(by_hand, rel=1e-12)
    summary = json.loads((logged_run / "summary.json").read_text())
    assert "train_log.csv" in summary["files"]


def test_a_killed_and_resumed_logging_run_is_the_uninterrupted_run(logged_run, tmp_path):
    killed = tmp_path / "killed"
    proc = seafl(*run_args(LOGGING, killed), fault="after_aggregate:3")
    assert proc.returncode != 0 and checkpoint_versions(killed) == [2], proc.stderr[-2000:]
    proc = seafl(*run_args(LOGGING, killed))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_same_run(logged_run, killed)
    assert (killed / "train_log.csv").read_bytes() == (logged_run / "train_log.csv").read_bytes()


def test_the_lightning_loop_gives_the_plain_loops_bytes(logged_run, tmp_path, here):
    out = tmp_path / "lightning"
    proc = here(*run_args([*LOGGING, "train.loop=lightning"], out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("events.jsonl", "metrics.csv", "train_log.csv", "model.pt"):
        assert (out / name).read_bytes() == (logged_run / name).read_bytes(), name
    assert "GPU available" not in proc.stderr + proc.stdout  # Lightning's per-Trainer lines stay quiet
    assert all(line.startswith("seafl: ") for line in proc.stderr.splitlines() if line.strip()), proc.stderr[-2000:]


def test_a_built_in_model_logs_nothing_and_trains_alike_in_both_loops(tmp_path, here):
    plain = reference(tmp_path / "plain", SMALL)
    proc = here(*run_args([*SMALL, "train.loop=lightning"], tmp_path / "lightning"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "lightning" / name).read_bytes() == (plain / name).read_bytes(), name
    assert not (plain / "train_log.csv").exists() and '"logged"' not in (plain / "events.jsonl").read_text()


def test_hooks_are_never_fused_and_one_line_says_why(tmp_path, here):
    one = reference(tmp_path / "one", HOOKS)
    proc = here(*run_args([*HOOKS, "runtime.batch_jobs=3"], tmp_path / "three"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "runtime.batch_jobs=3: training one job at a time" in proc.stderr
    assert "it overrides Lightning's on_train_epoch_start, which only a job's own loop runs" in proc.stderr
    assert '"logged": {"epoch": 0.5, "train_loss": ' in (one / "events.jsonl").read_text()  # hook in epochs 0, 1
    for name in ("events.jsonl", "metrics.csv", "train_log.csv", "model.pt"):
        assert (tmp_path / "three" / name).read_bytes() == (one / name).read_bytes(), name


def test_clipping_is_a_jobs_own_and_never_fused(tmp_path, here):
    clip = [*SMALL, "train.grad_clip_val=0.1", "train.grad_clip_algorithm=value"]
    one = reference(tmp_path / "one", clip)
    unclipped = reference(tmp_path / "unclipped", SMALL)
    proc = here(*run_args([*clip, "runtime.batch_jobs=2"], tmp_path / "two"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "train.grad_clip_val is 0.1" in proc.stderr
    assert (tmp_path / "two" / "model.pt").read_bytes() == (one / "model.pt").read_bytes()
    assert (one / "model.pt").read_bytes() != (unclipped / "model.pt").read_bytes()


BAD = '''
import torch, lightning as L
from torch import nn
import torch.nn.functional as F


class Good(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def build(**methods):
    cls = type("Bad", (Good,), methods)
    return lambda num_classes, in_channels, image_size, width: cls()


def sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


def manual_init(self):
    Good.__init__(self)
    self.automatic_optimization = False


no_optimizer = build(configure_optimizers=lambda self: None)
two_optimizers = build(configure_optimizers=lambda self: [sgd(self), sgd(self)])
unknown_form = build(configure_optimizers=lambda self: {"opt": sgd(self)})
bad_interval = build(configure_optimizers=lambda self: (lambda o: {"optimizer": o, "lr_scheduler": {
    "scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "interval": "batch"}})(sgd(self)))
def every(frequency):
    return build(configure_optimizers=lambda self: (lambda o: {"optimizer": o, "lr_scheduler": {
        "scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "frequency": frequency}})(sgd(self)))


frequency_zero, frequency_negative, frequency_true = every(0), every(-1), every(True)
val_monitor = build(configure_optimizers=lambda self: (lambda o: {"optimizer": o, "lr_scheduler": {
    "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(o), "monitor": "val_loss"}})(sgd(self)))
vector_loss = build(training_step=lambda self, b, i: F.cross_entropy(self(b[0]), b[1], reduction="none"))
returns_text = build(training_step=lambda self, b, i: "loss")
dict_without_loss = build(training_step=lambda self, b, i: {"total": F.cross_entropy(self(b[0]), b[1])})
transfer_hook = build(transfer_batch_to_device=lambda self, batch, device, idx: batch)
own_dataloader = build(train_dataloader=lambda self: [])
callbacks = build(configure_callbacks=lambda self: [])
manual = build(__init__=manual_init)
other_trainer_attribute = build(on_train_start=lambda self: self.trainer.check_val_every_n_epoch)
sets_trainer = build(on_train_start=lambda self: setattr(self.trainer, "should_stop", True))


def log_metric_of_nowhere(self, batch, batch_idx):
    import torchmetrics
    accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=10)  # not an attribute of the module
    accuracy(self(batch[0]), batch[1])
    self.log("acc", accuracy)
    return Good.training_step(self, batch, batch_idx)


metric_not_attribute = build(training_step=log_metric_of_nowhere)
logs_text = build(on_train_epoch_start=lambda self: self.log("phase", "warm"))
'''
REFUSALS = {
    "no_optimizer": "configure_optimizers returned None",
    "two_optimizers": "configure_optimizers returned 2 optimizers",
    "unknown_form": "configure_optimizers returned a dict without 'optimizer'",
    "bad_interval": "lr_scheduler 'interval' is 'batch'",
    "frequency_zero": "configure_optimizers: lr_scheduler 'frequency' is 0; allowed: an integer >= 1",
    "frequency_negative": "configure_optimizers: lr_scheduler 'frequency' is -1; allowed: an integer >= 1",
    "frequency_true": "configure_optimizers: lr_scheduler 'frequency' is True; allowed: an integer >= 1",
    "val_monitor": "ReduceLROnPlateau monitors 'val_loss', which the module did not log",
    "vector_loss": "training_step's loss is a tensor of shape (2,)",
    "returns_text": "training_step returned a str",
    "dict_without_loss": "training_step returned a dict without 'loss'",
    "transfer_hook": "it overrides transfer_batch_to_device, which the plain loop does not run",
    "own_dataloader": "it overrides train_dataloader, which a job does not run",
    "callbacks": "it overrides configure_callbacks, which the plain loop does not run",
    "manual": "automatic_optimization = False (manual optimization)",
    "other_trainer_attribute": "stand-in Trainer has no 'check_val_every_n_epoch'",
    "sets_trainer": "stand-in Trainer is read-only (setting 'should_stop')",
    "metric_not_attribute": "Lightning logs a torchmetrics Metric only when it is an attribute of the LightningModule",
    "logs_text": "self.log('phase', ...) got a str; Lightning logs numbers, one-element tensors and torchmetrics Metrics",
}


@pytest.fixture
def bad_modules(tmp_path, monkeypatch):
    (tmp_path / "badmods.py").write_text(BAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_a_module_that_breaks_lightnings_contract_is_refused_in_one_line(name, dry, bad_modules, tmp_path):
    out = tmp_path / "run"
    proc = in_process.seafl(*run_args([*SMALL, f"model.name=badmods:{name}"], out), *(["--dry-run"] if dry else []))
    err = proc.stderr
    assert proc.returncode == 2, err[-2000:]
    one_error_line(err, f"'model.name' has value 'badmods:{name}'", REFUSALS[name])
    assert not out.exists()


@pytest.mark.parametrize("model, optim, warned", [
    ("lightning_modules:form_optimizer", ["train.lr=0.05", "train.momentum=0.9"], "train.lr=0.05, train.momentum=0.9"),
    ("lightning_modules:form_optimizer", ["train.weight_decay=0.001"], "train.weight_decay=0.001 is not used"),
    ("lightning_modules:form_optimizer", [], None),  # the defaults: nothing set that could be missed
    ("user_extensions_plain:tiny_mlp", ["train.lr=0.05", "train.momentum=0.9"], None),  # wrapped: trained with them
])
@pytest.mark.parametrize("dry", [True, False])
def test_optimizer_keys_a_modules_own_optimizer_ignores_are_named(model, optim, warned, dry, tmp_path, monkeypatch):
    """A LightningModule's configure_optimizers makes its optimizer: train.lr, train.momentum and
    train.weight_decay set in the config do nothing, and one warning says so before the run trains."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "user_extensions_plain.py").write_text(
        "import torch\ndef tiny_mlp(num_classes, in_channels, image_size, width):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_channels * image_size ** 2, num_classes))\n")
    defaults = ["train.lr=0.01", "train.momentum=0", "train.weight_decay=0"]  # the schema's: SMALL's quickstart sets some
    args = ["run", QUICKSTART, *SMALL, *defaults, f"model.name={model}", *optim, "run.max_aggregations=1", "--out", tmp_path / "r"]
    proc = in_process.seafl(*args, *(["--dry-run"] if dry else []))
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("seafl: warning:")]
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warned in warnings[0] and "brings its own configure_optimizers" in warnings[0]
