"""Device evaluation end to end (issue 38 B): each device's held-out part, the global model of a version evaluated on
it by rank 0, device_metrics.csv and device_summary.csv, summary.json's final summary; the clock untouched; a killed
and resumed run gives the uninterrupted run's files; a module's own test_step; FEMNIST writers' own test data."""
import csv
import json
import math

import numpy as np
import pytest
import torch

import in_process
from docs_pages import ROOT, read_page
from docs_checks import page_modules
from leaf_files import write_leaf
from resuming import SMALL, assert_same_run, checkpoint_versions, cli, reference, run_args
from seafl_dist.data import load_dataset
from seafl_dist.data.holdout import HeldOut, writer_holdout
from seafl_dist.data.labels import sample_groups
from seafl_dist.models import build_model
from seafl_dist.report.device_eval import DEVICE_COLUMNS, SUMMARY_COLUMNS, read_device_metrics, read_device_summary
from seafl_dist.runtime.device_eval import eval_devices
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import load_config
from seafl_dist.train import evaluate, flatten
from small_runs import QUICKSTART

HOLDOUT = ["data.device_holdout=0.25", "run.device_eval_every=2", "run.device_eval_sample=6", "run.checkpoint_every=3"]
DEVICE_FILES = ("device_metrics.csv", "device_summary.csv")


@pytest.fixture
def here():
    """``seafl ARGS`` in this process (tests/in_process.py), as a finished process.
    The killed and the resumed runs stay real processes (``cli``)."""
    return in_process.seafl


def final_flat(model, run_dir):
    """The run's final model (model.pt) as the flat vector the server evaluated."""
    model.load_state_dict(torch.load(run_dir / "model.pt", weights_only=True))
    return flatten(model)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("dev") / "run", [*SMALL, *HOLDOUT])


def test_files_rows_and_the_final_models_accuracy_on_each_devices_own_rows(run):
    cfg = load_config(QUICKSTART, [*SMALL, *HOLDOUT])
    exp = prepare(cfg)
    chosen = eval_devices(cfg, 10)
    assert len(chosen) == 6 and np.array_equal(exp.held_out.devices, chosen)
    rows = read_device_metrics(run)
    assert list(csv.DictReader(open(run / "device_metrics.csv")).fieldnames) == DEVICE_COLUMNS + ["accuracy", "loss"]
    versions = sorted({r["version"] for r in rows})
    assert versions == [0, 2, 4, 6] and len(rows) == 4 * 6  # one row per (version, device)
    times = {int(float(r["version"])): float(r["time"]) for r in csv.DictReader(open(run / "metrics.csv"))}
    assert all(r["time"] == times[r["version"]] for r in rows)  # the version's own virtual time
    last = [r for r in rows if r["version"] == 6]
    assert [r["device"] for r in last] == chosen.tolist()
    assert [r["samples"] for r in last] == exp.held_out.sizes.tolist()
    flat = final_flat(exp.new_model(), run)
    for i, r in enumerate(last):  # recomputed with the central evaluation's own function, on the device's own rows
        acc, loss = evaluate(exp.new_model(), flat, exp.held_out.rows(i))
        assert r["accuracy"] == acc and r["loss"] == pytest.approx(loss, rel=1e-5)
    summary = json.loads((run / "summary.json").read_text())["device_eval"]
    final = [s for s in read_device_summary(run) if s["version"] == 6]
    assert list(csv.DictReader(open(run / "device_summary.csv")).fieldnames) == SUMMARY_COLUMNS
    assert [s["metric"] for s in final] == ["accuracy", "loss"] and summary["version"] == 6
    acc = summary["metrics"]["accuracy"]
    assert acc["p10"] == pytest.approx(np.quantile([r["accuracy"] for r in last], 0.1))
    assert acc["weighted_mean"] == pytest.approx(np.average([r["accuracy"] for r in last],
                                                            weights=[r["samples"] for r in last]))
    assert {k: v for k, v in final[0].items() if k not in ("version", "time", "metric")} == pytest.approx(
        {k: float(v) for k, v in acc.items()})


def test_held_out_rows_are_never_trained_on_and_n_k_shrinks_for_the_clock_and_the_weights(run):
    cfg = load_config(QUICKSTART, [*SMALL, *HOLDOUT])
    whole = prepare(load_config(QUICKSTART, SMALL))
    exp = prepare(cfg)
    full = [len(s) for s in whole.shards]
    assert exp.n_samples == [n - math.floor(0.25 * n + 0.5) for n in full]  # n_k − ⌊f·n_k + ½⌋
    for d, i in zip(exp.held_out.devices, range(len(exp.held_out.devices))):
        rows = exp.held_out.data.labels[exp.held_out.offsets[i]:exp.held_out.offsets[i + 1]]
        assert len(rows) == len(whole.shards[d]) - len(exp.shards[d])
        assert np.intersect1d(exp.shards[d], whole.shards[d]).tolist() == exp.shards[d].tolist()
    events = [json.loads(line) for line in open(run / "events.jsonl")]
    for e in events:
        if e["event"] == "aggregate":
            assert all(u["n_samples"] == exp.n_samples[u["device"]] for u in e["updates"])
        if e["event"] == "start" and len(e["epoch_ends"]) > 1:  # c_k + z_k per epoch, c_k = n_k x sec_per_sample
            step = e["epoch_ends"][1] - e["epoch_ends"][0]
            assert step >= exp.n_samples[e["device"]] * cfg.clock.sec_per_sample - 1e-9
    assert json.loads((run / "partition.json").read_text())["n_samples"] == exp.n_samples


def test_device_evaluation_does_not_move_the_clock_or_touch_the_other_files(run, tmp_path):
    plain = reference(tmp_path / "plain", [*SMALL, "data.device_holdout=0.25", "run.checkpoint_every=3"])
    for name in ("events.jsonl", "metrics.csv", "model.pt", "partition.json"):
        assert (plain / name).read_bytes() == (run / name).read_bytes(), name
    assert not (plain / "device_metrics.csv").exists()


def test_a_killed_and_resumed_run_gives_the_uninterrupted_runs_files(run, tmp_path):
    """Killed after aggregation 5 (device evaluation of version 4 written, checkpoint at 3): the resumed run cuts
    the device files back to the checkpoint's lengths, evaluates 4 and 6 again, and ends with the same bytes."""
    killed = tmp_path / "killed"
    proc = cli(*run_args([*SMALL, *HOLDOUT], killed), fault="after_aggregate:5")
    assert proc.returncode != 0 and checkpoint_versions(killed) == [3], proc.stderr[-2000:]
    assert {r["version"] for r in read_device_metrics(killed)} == {0, 2, 4}
    proc = cli(*run_args([*SMALL, *HOLDOUT], killed))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_same_run(run, killed)
    for name in DEVICE_FILES:
        assert (killed / name).read_bytes() == (run / name).read_bytes(), name


def test_the_last_evaluation_is_evaluated_on_the_devices_even_off_the_period(tmp_path):
    out = reference(tmp_path / "odd", [*SMALL, "run.max_aggregations=5", "data.device_holdout=0.25",
                                       "run.device_eval_every=2"])
    assert sorted({r["version"] for r in read_device_metrics(out)}) == [0, 2, 4, 5]
    assert json.loads((out / "summary.json").read_text())["device_eval"]["version"] == 5


AE = ["model.name=digits_autoencoder:autoencoder", "run.target_metric=test_loss", "run.target_mode=min",
      "run.targets=[0.9]", "data.device_holdout=0.3", "run.device_eval_every=3"]


def test_a_module_with_its_own_test_step_is_evaluated_by_it_on_each_device(tmp_path):
    (tmp_path / "page").mkdir()
    with page_modules([read_page(ROOT / "docs" / "extending.md")], tmp_path / "page") as names:
        assert "digits_autoencoder" in names
        out = reference(tmp_path / "ae", [*SMALL, *AE])
        exp = prepare(load_config(QUICKSTART, [*SMALL, *AE]))
        from seafl_dist.train.evaluation import evaluate_by_step
        flat = final_flat(exp.new_model(), out)
        rows = read_device_metrics(out)
        assert list(rows[0]) == DEVICE_COLUMNS + ["test_loss"]
        last = [r for r in rows if r["version"] == 6]
        for i, r in enumerate(last):
            got = evaluate_by_step(exp.new_model(), flat, exp.held_out.rows(i))
            assert r["test_loss"] == pytest.approx(got["test_loss"], rel=1e-6)
    summary = json.loads((out / "summary.json").read_text())["device_eval"]["metrics"]["test_loss"]
    worst = sorted(r["test_loss"] for r in last)[-1:]  # 10 devices: the worst 10% is the one of highest loss
    assert summary["worst10_mean"] == pytest.approx(np.mean(worst))


def test_femnist_writers_own_test_data_and_a_writer_without_any(tmp_path, here):
    writers = {"f0000_14": (5, 2), "f0001_41": (3, 0), "f0002_07": (4, 2), "f0003_33": (2, 1), "f0004_28": (6, 3)}
    made = write_leaf(tmp_path, writers)
    out = tmp_path / "run"
    proc = here("run", QUICKSTART, f"data.root={tmp_path}", "data.name=femnist", "data.partition=natural",
               "devices.num=null", "devices.concurrency=2", "algorithm.buffer_size=1", "train.epochs=1",
               "train.batch_size=4", "run.max_aggregations=3", "logging.progress=none", "runtime.threads=1",
               "data.device_test=writers", "run.device_eval_every=1", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    part = json.loads((out / "partition.json").read_text())
    rows = [r for r in read_device_metrics(out) if r["version"] == 3]
    assert [r["samples"] for r in rows] == [writers[w][1] for w in part["writers"]]
    assert part["n_samples"] == [writers[w][0] for w in part["writers"]]  # the training shards are untouched
    empty = rows[part["writers"].index("f0001_41")]
    assert empty["accuracy"] is None and empty["loss"] is None
    stats = json.loads((out / "summary.json").read_text())["device_eval"]["metrics"]["accuracy"]
    assert stats["without_holdout"] == 1 and stats["devices"] == 4
    test = load_dataset("femnist", tmp_path, train=False)
    held = HeldOut.of(test, writer_holdout(part["writers"], sample_groups(test)), range(len(writers)))
    flat = final_flat(build_model("lenet5", 62, 1, image_size=28), out)
    for i, (r, w) in enumerate(zip(rows, part["writers"])):  # the final model on the writer's own LEAF test samples
        assert held.sizes[i] == len(made["test"][w][1])
        if held.sizes[i]:
            assert r["accuracy"] == evaluate(build_model("lenet5", 62, 1, image_size=28), flat, held.rows(i))[0]


def test_the_report_draws_the_final_distribution_and_tables_it_per_speed_quartile(run, tmp_path):
    from seafl_dist.report.build import write_report
    report = write_report([run], tmp_path / "report")
    for name in ("device_eval_cdf.png", "device_eval_cdf.pdf", "device_eval_cdf.csv", "device_eval_vs_speed.png",
                 "device_eval_vs_speed.pdf", "device_eval_vs_speed.csv", "device_eval.csv"):
        assert report["files"][name].is_file(), name
    assert "## Devices' own held-out data" in report["markdown"]
    table = list(csv.DictReader(open(tmp_path / "report" / "device_eval.csv")))
    assert len(table) == 1 and table[0]["seeds"] == "1"
    final = next(s for s in read_device_summary(run) if s["version"] == 6 and s["metric"] == "accuracy")
    assert float(table[0]["p10_mean"]) == pytest.approx(final["p10"])
    assert float(table[0]["worst10_mean_mean"]) == pytest.approx(final["worst10_mean"])
    part = {int(r["device"]): r for r in csv.DictReader(open(tmp_path / "report" / "participation.csv"))}
    last = [r for r in read_device_metrics(run) if r["version"] == 6]
    for q in (1, 2, 3, 4):  # each quartile's mean over its evaluated devices, quartiles from the trace's speeds
        mine = [r["accuracy"] for r in last if part[r["device"]]["speed_quartile"] == str(q)]
        got = table[0][f"q{q}_mean_mean"]
        assert (got == "" and not mine) or float(got) == pytest.approx(np.mean(mine))
    cdf = list(csv.DictReader(open(tmp_path / "report" / "device_eval_cdf.csv")))
    at = {round(float(r["fraction_of_devices"]), 2): float(r["value_mean_over_seeds"]) for r in cdf}
    values = [r["accuracy"] for r in last]
    assert at[0.1] == pytest.approx(np.quantile(values, 0.1)) and at[0.5] == pytest.approx(np.median(values))
