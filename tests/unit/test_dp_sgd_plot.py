"""report/dp_sgd_plot.py and participation.csv's ``dp_sgd_epsilon``: each device's ε (a DP-SGD run's summary.json)
beside its speed, on test_participation.py's made trace (two arms x two seeds; only SEAFL's runs are DP-SGD runs).

The made trace's speeds (mean finish − start): device 0 2 s (two jobs of 2 s), 1 4 s, 2 3 s (finished, never
aggregated), 3 3 s; 4 (in flight) and 5 (never ran) have none."""
import csv
import json

import pytest

from seafl_dist.report.dp_sgd_plot import plot_dp_sgd_epsilon, write_dp_sgd_epsilon
from seafl_dist.report.participation import dp_sgd_epsilon
from seafl_dist.report.participation_plot import participation_of, write_participation
from seafl_dist.report.runs import find_runs
from seafl_dist.report.tables import group_runs
from tests.unit.test_participation import sweep_with_traces

EPS = {0: [5.0, 1.0, 0.0, 2.0, 0.0, 0.0], 1: [6.0, 1.5, 0.0, 2.5, 0.0, 0.0]}  # seed -> ε of devices 0..5


def dp_sweep(root):
    sweep_with_traces(root)
    for seed, eps in EPS.items():
        path = root / f"algorithm=seafl,seed={seed}" / "summary.json"
        s = json.loads(path.read_text())
        path.write_text(json.dumps({**s, "dp_sgd": {"epsilon": {"by_device": eps, "max": max(eps)}}}))
    return group_runs(find_runs([root]))


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_summarys_epsilon_is_read_where_there_is_one():
    assert dp_sgd_epsilon({"dp_sgd": {"epsilon": {"by_device": [1.0, 0.0]}}}) == [1.0, 0.0]
    assert dp_sgd_epsilon({"dp_sgd": {"clip": 1.0}}) is None and dp_sgd_epsilon({}) is None
    assert dp_sgd_epsilon(None) is None


def test_participation_csv_has_each_devices_epsilon_and_blank_without_dp_sgd(tmp_path):
    groups = dp_sweep(tmp_path / "sw")
    rows = read(write_participation(groups, tmp_path)["participation.csv"])
    for seed, eps in EPS.items():
        mine = [r for r in rows if r["run"] == f"algorithm=seafl,seed={seed}"]
        assert [float(r["dp_sgd_epsilon"]) for r in mine] == eps
    assert all(r["dp_sgd_epsilon"] == "" for r in rows if "fedbuff" in r["run"])


def test_the_files_hold_only_dp_sgd_runs_devices(tmp_path):
    files = write_dp_sgd_epsilon(dp_sweep(tmp_path / "sw"), tmp_path)
    assert sorted(files) == ["dp_sgd_epsilon.csv", "dp_sgd_epsilon.pdf", "dp_sgd_epsilon.png"]
    assert files["dp_sgd_epsilon.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read(files["dp_sgd_epsilon.csv"])
    assert [(r["seed"], r["device"], float(r["dp_sgd_epsilon"])) for r in rows] == \
        [(str(s), str(k), e) for s, eps in EPS.items() for k, e in enumerate(eps)]
    assert [r["mean_job_s"] for r in rows[:6]] == ["2.0", "4.0", "3.0", "3.0", "", ""]
    assert write_dp_sgd_epsilon(sweep_with_traces(tmp_path / "plain"), tmp_path / "none") == {}  # no DP-SGD run


def test_the_figure_draws_epsilon_against_speed_and_says_what_is_not_drawn(tmp_path):
    groups = dp_sweep(tmp_path / "sw")
    _, _, panels = participation_of(groups)
    panels = [(label, look, per_run) for label, look, per_run, _ in panels if "SEAFL" in label]
    fig = plot_dp_sgd_epsilon(panels, "made", tmp_path / "e.png", [])
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 1
    heading = axes[0].get_title()
    # max over both seeds' 12 devices 6; median of 0 x 6, 1.0, 1.5, 2.0, 2.5, 5, 6: (0 + 1.0) / 2
    assert heading.split("\n")[1] == "max ε 6 · median 0.5"
    assert "not drawn: 4 finished no job (ε 0)" in heading.replace("\n", " ")
    dots = [c.get_offsets() for c in axes[0].collections]
    assert [sorted(map(tuple, d.tolist())) for d in dots] == [[(2, 5), (3, 0), (3, 2), (4, 1)],
                                                              [(2, 6), (3, 0), (3, 2.5), (4, 1.5)]]
    assert [line.get_ydata()[0] for line in axes[0].get_lines() if line.get_linestyle() == "--"] == [6.0]
    assert axes[0].get_xscale() == "linear" and axes[0].get_ylim() == pytest.approx((0, 1.15 * 6))
    assert axes[0].get_ylabel() == "the device's ε (record level)"


@pytest.mark.parametrize("slowest,log", [(10.0, False), (10.5, True)])  # slowest / fastest against LOG_RATIO = 10
def test_the_duration_axis_is_logarithmic_only_past_ten_times(tmp_path, slowest, log):
    devices = [{"mean_job_s": 1.0, "dp_sgd_epsilon": 3.0}, {"mean_job_s": slowest, "dp_sgd_epsilon": 1.0},
               {"mean_job_s": None, "dp_sgd_epsilon": 0.0}]
    fig = plot_dp_sgd_epsilon([("arm", {"color": "C0", "marker": "o"}, [devices])], "t", tmp_path / "e.png", [])
    assert fig.axes[0].get_xscale() == ("log" if log else "linear")
    assert fig.axes[0].get_xlabel().startswith("mean job duration (s)" + (", log scale" if log else "\n"))


def test_no_noise_is_said_and_not_drawn(tmp_path):
    devices = [{"mean_job_s": 1.0, "dp_sgd_epsilon": float("inf")}, {"mean_job_s": 2.0, "dp_sgd_epsilon": 0.0}]
    fig = plot_dp_sgd_epsilon([("arm", {"color": "C0", "marker": "o"}, [devices])], "t", tmp_path / "e.png", [])
    assert "(σ = 0: ε = ∞)" in fig.axes[0].get_title()
    assert fig.axes[0].collections[0].get_offsets().tolist() == [[2.0, 0.0]]


def test_four_arms_are_two_rows_of_three_labelled_at_their_left_and_bottom(tmp_path):
    devices = [{"mean_job_s": 1.0, "dp_sgd_epsilon": 3.0}]
    panels = [(f"arm {i}", {"color": "C0", "marker": "o"}, [devices]) for i in range(4)]
    fig = plot_dp_sgd_epsilon(panels, "t", tmp_path / "e.png", [])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 6 and len(shown) == 4  # 3 columns, 2 rows, the last two hidden
    assert [bool(ax.get_ylabel()) for ax in shown] == [True, False, False, True]  # columns 0: panels 0 and 3
    assert [bool(ax.get_xlabel()) for ax in shown] == [False, True, True, True]  # nothing below: 1, 2 and 3
    assert fig.legends[0].get_frame_on() is False
