"""Any task, not only classification: docs/extending.md's autoencoder (its module block, written out as
the page ships it), evaluated by its own test_step, with run.target_metric=test_loss and
run.target_mode=min. The run stops at its loss target, gives a time to each target, writes test_loss
after the built-in columns of metrics.csv; a killed and resumed run is the uninterrupted one; its
report names the metric; runs and sweeps of two target metrics are refused; bad input is one line."""
import csv
import json
import os
import subprocess
import sys

import pytest
import torch

from docs_pages import ROOT, read_page
from docs_checks import page_modules
from one_line import one_error_line
from resuming import SMALL, assert_same_run, checkpoint_versions, reference, run_args
from seafl_dist.cli import main as seafl_main
from seafl_dist.report.build import write_report
from seafl_dist.report.sinks import METRIC_COLUMNS

AE = ["model.name=digits_autoencoder:autoencoder", "run.target_metric=test_loss", "run.target_mode=min",
      "run.targets=[0.9,0.8]", "run.checkpoint_every=2"]


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """The page's module blocks as files (digits_autoencoder.py among them), importable meanwhile."""
    folder = tmp_path_factory.mktemp("page")
    with page_modules([read_page(ROOT / "docs" / "extending.md")], folder) as names:
        assert "digits_autoencoder" in names
        yield folder


@pytest.fixture(scope="module")
def ae_run(modules, tmp_path_factory):
    return reference(tmp_path_factory.mktemp("ae") / "run", [*SMALL, *AE])


def test_the_module_is_evaluated_by_its_test_step_and_the_targets_follow_its_loss(ae_run):
    summary = json.loads((ae_run / "summary.json").read_text())
    assert summary["target_metric"] == "test_loss" and summary["target_mode"] == "min"
    rows = list(csv.DictReader(open(ae_run / "metrics.csv")))
    assert list(rows[0]) == [*METRIC_COLUMNS, "test_loss"]
    losses = [float(r["test_loss"]) for r in rows]
    assert all(r["accuracy"] == "" and r["loss"] == "" for r in rows)
    assert summary["best"] == min(losses) and summary["final"] == losses[-1] and summary["final_accuracy"] is None
    first = next(float(r["time"]) for r in rows if float(r["test_loss"]) <= 0.9)
    assert summary["time_to_target"]["0.9"] == first  # the first evaluation at or below the target
    evals = [json.loads(line) for line in (ae_run / "events.jsonl").read_text().splitlines() if '"eval"' in line]
    assert [e["metrics"]["test_loss"] for e in evals] == losses and evals[0]["accuracy"] is None


def test_a_loss_target_stops_the_run_where_it_is_reached(modules, ae_run, tmp_path):
    rows = list(csv.DictReader(open(ae_run / "metrics.csv")))
    stop = float(rows[3]["test_loss"])
    out = reference(tmp_path / "stop", [*SMALL, *AE, f"run.target_accuracy={stop}"])
    kept = list(csv.DictReader(open(out / "metrics.csv")))
    reached = next(i for i, r in enumerate(rows) if float(r["test_loss"]) <= stop)
    assert len(kept) == reached + 1 and kept == rows[:reached + 1]


def test_a_killed_and_resumed_run_is_the_uninterrupted_one(modules, ae_run, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SEAFL_FAULT": "after_aggregate:3",
           "PYTHONPATH": os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")])}
    killed = tmp_path / "killed"
    args = [sys.executable, "-m", "seafl_dist", *map(str, run_args([*SMALL, *AE], killed))]
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and checkpoint_versions(killed) == [2], proc.stderr[-2000:]
    del env["SEAFL_FAULT"]
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_same_run(ae_run, killed)


def test_the_report_names_the_metric_and_refuses_two_metrics(ae_run, tmp_path, capsys):
    report = write_report([ae_run], tmp_path / "report")
    fig = report["figures"]["test_loss_vs_time"]
    assert fig.axes[0].get_ylabel() == "test_loss (lower is better)"
    assert [ax.get_title() for ax in report["figures"]["time_to_target"].axes] == ["to ≤0.9", "to ≤0.8"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "time to ≤0.9" in md and "best test_loss" in md and "lower is better" in md
    other = reference(tmp_path / "accuracy", SMALL)
    code = seafl_main(["report", str(ae_run), str(other), "--out", str(tmp_path / "both")])
    assert code == 2
    one_error_line(capsys.readouterr().err, "different target metrics", "test_loss (min)", "accuracy (max)")


def test_a_sweep_over_the_target_metric_is_refused(tmp_path, capsys):
    (tmp_path / "sweep.yaml").write_text(f"base: {ROOT / 'configs' / 'quickstart.yaml'}\n"
                                         "grid:\n  run.target_metric: [accuracy, loss]\n")
    assert seafl_main(["sweep", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "s"), "--dry-run"]) == 2
    one_error_line(capsys.readouterr().err, "different target metrics", "vary run.target_metric")


BAD = '''
import math
import torch
from digits_autoencoder import AutoEncoder


class Silent(AutoEncoder):
    def test_step(self, batch, batch_idx):
        pass


class NotFinite(AutoEncoder):
    def test_step(self, batch, batch_idx):
        self.log("test_loss", math.nan)


def silent(num_classes, in_channels, image_size, width):
    return Silent(in_channels, image_size)


def not_finite(num_classes, in_channels, image_size, width):
    return NotFinite(in_channels, image_size)
'''
REFUSED = {
    "silent": (["model.name=bad_eval:silent", "run.target_metric=test_loss"],
               ["'model.name' has value 'bad_eval:silent'", "its test_step logs nothing"]),
    "not_finite": (["model.name=bad_eval:not_finite", "run.target_metric=test_loss"],
                   ["'model.name' has value 'bad_eval:not_finite'", "test_loss = nan", "not finite"]),
    "unlogged_metric": (["model.name=digits_autoencoder:autoencoder", "run.target_metric=test_acc"],
                        ["'run.target_metric' has value 'test_acc'", "a name its evaluation step logs: test_loss"]),
    "default_metric": (["model.name=digits_autoencoder:autoencoder"],
                       ["'run.target_metric' has value 'accuracy'", "a name its evaluation step logs: test_loss"]),
    "built_in_metric": (["run.target_metric=f1"], ["'run.target_metric' has value 'f1'", "accuracy or loss"]),
    "mode": (["run.target_mode=down"], ["'run.target_mode' has value 'down'", "max, min"]),
    "accuracy_above_1": (["run.targets=[0.5,1.5]"], ["'run.targets'", "run.target_metric=accuracy in (0, 1]"]),
    "negative_loss": (["run.target_metric=loss", "run.target_mode=min", "run.target_accuracy=-0.1"],
                      ["'run.target_accuracy' has value -0.1", "run.target_metric=loss in (0, inf]"]),
}


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_evaluations_and_targets_are_refused_in_one_line(case, dry, modules, tmp_path, capsys, monkeypatch):
    (tmp_path / "bad_eval.py").write_text(BAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    threads = torch.get_num_threads()
    out = tmp_path / "run"
    overrides, fragments = REFUSED[case]
    try:
        code = seafl_main([*map(str, run_args([*SMALL, *overrides], out)), *(["--dry-run"] if dry else [])])
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    one_error_line(err, *fragments)
    assert not out.exists()
