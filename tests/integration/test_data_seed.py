"""``data.seed`` holds the data split fixed while ``run.seed`` varies training and the schedule (SPEC "Data").
The runs are in this process (no interpreter start importing torch and Lightning)."""
import json
from pathlib import Path


import in_process
from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[2]


def run(out, *overrides):
    proc = in_process.seafl("run", QUICKSTART, *SMALL, *overrides, "--out", out, cwd=ROOT)
    code, err = proc.returncode, proc.stderr
    assert code == 0, err[-3000:]
    return json.loads((out / "partition.json").read_text()), (out / "events.jsonl").read_text()


def test_fixed_data_seed_keeps_the_split_while_run_seed_changes_the_trace(tmp_path):
    part0, trace0 = run(tmp_path / "a", "run.seed=0", "data.seed=7")
    part1, trace1 = run(tmp_path / "b", "run.seed=1", "data.seed=7")
    assert part0 == part1  # same shards, label histograms, n_k
    assert trace0 != trace1  # other devices selected, other idle times
    # without data.seed the split follows run.seed
    part2, _ = run(tmp_path / "c", "run.seed=1")
    assert part2["label_histograms"] != part1["label_histograms"]


def test_the_largest_seed_allowed_splits_and_trains_the_digits(tmp_path):
    """Seeds are refused from 2**32 on (scikit-learn's split of the digits and numpy's legacy seeding stop
    there, with a traceback); the largest allowed one runs end to end."""
    top = "4294967295"
    run(tmp_path / "run", "run.max_aggregations=1", f"run.seed={top}", f"data.seed={top}")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"
