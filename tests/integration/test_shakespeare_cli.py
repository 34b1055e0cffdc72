"""`seafl run configs/shakespeare_lstm.yaml` on small files in LEAF's Shakespeare format, end to end, in this
process: one device per role, a tiny LSTM, SEAFL, FedBuff and FedAsync, next-character accuracy in metrics.csv;
and the pairings that cannot work refused in one line, before a run dir exists."""
import csv
import json
from pathlib import Path

import pytest

from leaf_files import ROLES, write_shakespeare
from one_line import one_error_line
from seafl_dist.cli import main
from seafl_dist.data import clear_cache
from seafl_dist.report.trace import check_run

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "shakespeare_lstm.yaml")
SMALL = ["devices.concurrency=2", "algorithm.buffer_size=1", "run.max_aggregations=3", "model.width=0.05",
         "logging.progress=none", "runtime.threads=1"]


@pytest.fixture(autouse=True)
def _fresh_cache(request):
    clear_cache()
    request.addfinalizer(clear_cache)


@pytest.mark.parametrize("algorithm", ["seafl", "fedbuff", "fedasync"])
def test_a_run_per_algorithm_ends_with_next_character_accuracy(tmp_path, algorithm, capsys):
    write_shakespeare(tmp_path)
    out = tmp_path / "run"
    assert main(["run", CONFIG, f"data.root={tmp_path}", f"algorithm.name={algorithm}", *SMALL,
                 "--out", str(out)]) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["aggregations"] == 3
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [int(r["version"]) for r in rows] == [0, 1, 2, 3]
    assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)  # over the 6 test samples of the 4 roles
    part = json.loads((out / "partition.json").read_text())
    assert part["dataset"] == "shakespeare" and part["method"] == "natural" and sorted(part["writers"]) == sorted(ROLES)
    assert check_run(out) == []


def test_dry_run_reports_token_sequences(tmp_path, capsys):
    write_shakespeare(tmp_path)
    assert main(["run", CONFIG, f"data.root={tmp_path}", *SMALL, "--out", str(tmp_path / "run"), "--dry-run"]) == 0
    report = capsys.readouterr().out
    assert "data: shakespeare" in report and "18 training and 6 test sequences of 80 token ids (vocabulary 80)" in report
    assert "model: lstm (width 0.05)" in report and "devices: 4 simulated (one per writer, of 4)" in report
    assert not (tmp_path / "run").exists() and not (tmp_path / "shakespeare" / ".train.seafl-cache.npz").exists()


@pytest.mark.parametrize("config, overrides, fragment", [
    (CONFIG, ["model.name=lenet5"], "'model.name' has value 'lenet5'; allowed: lstm or an import path for "
                                    "data.name=shakespeare"),
    ("quickstart", ["model.name=lstm"], "'model.name' has value 'lstm'; allowed: lenet5, resnet18, vgg16 or an "
                                        "import path for data.name=digits"),
    (CONFIG, ["data.augment=true"], "'data.augment' has value True; allowed: false for data.name=shakespeare"),
])
def test_refusals_are_one_line_exit_2_and_no_run_dir(tmp_path, config, overrides, fragment, capsys):
    write_shakespeare(tmp_path)
    out = tmp_path / "run"
    assert main(["run", config, f"data.root={tmp_path}", *overrides, "--out", str(out)]) == 2
    one_error_line(capsys.readouterr().err, fragment)
    assert not out.exists()
