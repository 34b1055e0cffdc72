"""participation.csv's numbers (report/participation.py) on hand-written traces, and each rule's coefficient of
w_k in w_{t+1} read off the rule's own output on a small buffer."""
import csv
import json

import numpy as np
import pytest
import torch

from seafl_dist.algo import BufferedUpdate, aggregate
from seafl_dist.report.participation import COLUMNS, arm_quartiles, coefficient, run_participation, run_quartiles
from seafl_dist.report.participation_plot import participation_of, plot_participation, write_participation
from seafl_dist.report.runs import find_runs
from seafl_dist.report.tables import group_runs
from seafl_dist.settings import AlgorithmConfig
from tests.unit.test_report_tables import make_run


def trace(w_a, w_b, w_c):
    """Six devices: 0 two jobs accepted; 1 one rejected; 2 one dropped, then one finished but never aggregated;
    3 one accepted; 4 one in flight at the end; 5 never ran. ``w_*``: the recorded weights of the accepted ones."""
    def start(t, d, j, v):
        return {"event": "start", "time": t, "device": d, "job": j, "version": v, "epoch_ends": [t + 1]}

    def finish(t, d, j):
        return {"event": "finish", "time": t, "device": d, "job": j, "epochs": 1}

    def update(d, j, s, w, rejected=False):
        return {"device": d, "job": j, "staleness": s, "base_version": 0, "n_samples": 10 * (d + 1), "epochs": 1,
                "weight": 0.0 if rejected else w, "rejected": rejected, "reason": "non-finite" if rejected else None}

    return [{"event": "eval", "time": 0.0, "version": 0, "accuracy": 0.1, "loss": 2.0},
            *[start(0.0, d, d, 0) for d in range(4)],
            {"event": "drop", "time": 1.5, "device": 2, "job": 2, "cause": "dropout"},
            finish(2.0, 0, 0), finish(3.0, 3, 3),
            {"event": "aggregate", "time": 3.0, "version": 1, "updates": [update(0, 0, 0, w_a), update(3, 3, 0, w_b)]},
            start(3.0, 0, 4, 1), start(3.0, 4, 5, 1), start(3.0, 2, 6, 1),
            finish(4.0, 1, 1), finish(5.0, 0, 4),
            {"event": "aggregate", "time": 5.0, "version": 2, "updates": [update(1, 1, 1, None, rejected=True),
                                                                          update(0, 4, 0, w_c)]},
            finish(6.0, 2, 6)]


RECORDED = {  # rule -> the weights it records for the three accepted updates (algo/*.py), and their coefficients
    "seafl": ((0.6, 0.4, 1.0), lambda w: 0.5 * w),  # p_k, normalised per aggregation; ϑ = 0.5 below
    "seafl2": ((0.7, 0.3, 1.0), lambda w: 0.5 * w),
    "fedbuff": ((0.5, 0.5, 1.0), lambda w: w),  # η_g·c_k/|B|: the rejected update is not in |B|
    "fedasync": ((0.24, 0.6, 0.6), lambda w: w),  # a_k·Π(1 − a_j) with a = 0.6, a buffer of two
    "fedavg": ((0.25, 0.75, 1.0), lambda w: w),  # n_k/Σn
    "mine.rules:median": ((2.0, 3.0, 5.0), lambda w: None),  # a rule of one's own: no coefficient
}


@pytest.mark.parametrize("rule", list(RECORDED))
def test_counts_durations_shares_and_coefficients_of_a_made_trace(rule):
    (w_a, w_b, w_c), coef = RECORDED[rule]
    rows = run_participation(trace(w_a, w_b, w_c), {"algorithm.name": rule, "algorithm.theta": 0.5, "devices.num": 6})
    assert [r["device"] for r in rows] == list(range(6))  # device 5 never ran: a row all the same
    cols = ("jobs_started", "updates_accepted", "updates_rejected", "jobs_dropped", "jobs_unaggregated")
    assert [tuple(r[c] for c in cols) for r in rows] == [(2, 2, 0, 0, 0), (1, 0, 1, 0, 0), (2, 0, 0, 1, 1),
                                                         (1, 1, 0, 0, 0), (1, 0, 0, 0, 1), (0, 0, 0, 0, 0)]
    assert [r["mean_job_s"] for r in rows] == [2.0, 4.0, 3.0, 3.0, None, None]  # drops and jobs in flight left out
    # percentiles of [2, 3, 3, 4]: 2.75, 3, 3.25; a device on a boundary (3) is in the faster quartile
    assert [r["speed_quartile"] for r in rows] == [1, 4, 2, 2, None, None]
    assert [r["mean_staleness"] for r in rows] == [0.0, 1.0, None, 0.0, None, None]  # the rejected update counts
    assert [r["n_samples"] for r in rows] == [10, 20, None, 40, None, None]
    total = w_a + w_b + w_c
    assert [r["weight"] for r in rows] == pytest.approx([w_a + w_c, 0, 0, w_b, 0, 0])
    assert [r["weight_share"] for r in rows] == pytest.approx([(w_a + w_c) / total, 0, 0, w_b / total, 0, 0])
    assert sum(r["weight_share"] for r in rows) == pytest.approx(1.0)
    if coef(1.0) is None:
        assert all(r["coefficient"] is None and r["mean_coefficient"] is None for r in rows)
    else:
        assert [r["coefficient"] for r in rows] == pytest.approx([coef(w_a) + coef(w_c), 0, 0, coef(w_b), 0, 0])
        assert rows[0]["mean_coefficient"] == pytest.approx((coef(w_a) + coef(w_c)) / 2)
        assert [r["mean_coefficient"] for r in rows[1:]] == [None, None, pytest.approx(coef(w_b)), None, None]


def test_a_run_that_recorded_no_weight_has_no_shares():
    rows = run_participation(trace(0.0, 0.0, 0.0), {"algorithm.name": "seafl", "devices.num": 6})
    assert all(r["weight_share"] is None for r in rows) and run_quartiles(rows) is None
    assert rows[0]["coefficient"] == 0.0  # ϑ from AlgorithmConfig's default: config.yaml always has it today


def test_quartiles_of_a_run_and_their_mean_over_seeds():
    rows = run_participation(trace(0.6, 0.4, 1.0), {"algorithm.name": "fedavg", "devices.num": 6})
    qs = run_quartiles(rows)
    assert [q["devices"] for q in qs] == [1, 2, 0, 1]
    assert [q["share"] for q in qs] == pytest.approx([0.8, 0.2, 0.0, 0.0])
    assert [(q["job_s_from"], q["job_s_to"]) for q in qs] == [(2.0, 2.75), (2.75, 3.0), (3.0, 3.25), (3.25, 4.0)]
    other = [{**q, "share": s, "device_share": s / q["devices"] if q["devices"] else None}
             for q, s in zip(qs, (0.4, 0.4, 0.0, 0.2))]
    mean = arm_quartiles([qs, other, None])  # a seed without quartiles is left out
    assert [m["seeds"] for m in mean] == [2] * 4
    assert [m["share_mean"] for m in mean] == pytest.approx([0.6, 0.3, 0.0, 0.1])
    assert [(m["share_min"], m["share_max"]) for m in mean][0] == pytest.approx((0.4, 0.8))
    assert mean[2]["device_share_mean"] is None and mean[3]["device_share_mean"] == pytest.approx(0.1)


# ---- each rule's coefficient, read off the rule's output ------------------------------------------------------------

RULES = [AlgorithmConfig(name="seafl", theta=0.7, staleness_limit=4),
         AlgorithmConfig(name="seafl2", theta=0.3, staleness_limit=None),
         AlgorithmConfig(name="fedbuff", server_lr=0.5, staleness_scaling="sqrt"),
         AlgorithmConfig(name="fedasync", staleness_fn="polynomial", staleness_limit=4),
         AlgorithmConfig(name="fedavg"),
         AlgorithmConfig(name="fedstaleweight")]  # a first aggregation: each device's average is its update's S


@pytest.mark.parametrize("cfg", RULES, ids=lambda c: c.name)
def test_each_rules_coefficient_is_that_of_w_k_in_its_new_global_model(cfg):
    """Three updates (different base versions and sizes) and a rejected one: w_{t+1} regressed on w_t, every
    w_{t_k} and every w_k (independent random vectors) gives each w_k's coefficient, which must be the one the
    report computes from the trace's weight alone."""
    gen = torch.Generator().manual_seed(0)
    t, d = 3, 40
    versions = {v: torch.randn(d, generator=gen, dtype=torch.float64) for v in range(t + 1)}
    models = [torch.randn(d, generator=gen, dtype=torch.float64) for _ in range(3)]
    updates = [BufferedUpdate(k, k, w, 10 * (k + 1), base_version=k, epochs=1) for k, w in enumerate(models)]
    updates.append(BufferedUpdate(3, 3, torch.full((d,), float("nan"), dtype=torch.float64), 5, 2, 1))
    result = aggregate(cfg, t, versions[t], updates, versions.__getitem__)
    basis = torch.stack([*versions.values(), *models], dim=1).numpy()
    solved = np.linalg.lstsq(basis, result.new_global.numpy(), rcond=None)[0][len(versions):]
    event = {"event": "aggregate", "time": 1.0, "version": t + 1, "updates": [
        {"device": u.device, "job": u.job, "n_samples": u.n_samples, **info} for u, info in zip(updates, result.info)]}
    rows = run_participation([event], {"algorithm.name": cfg.name, "algorithm.theta": cfg.theta, "devices.num": 4})
    assert [r["coefficient"] for r in rows[:3]] == pytest.approx(list(solved), abs=1e-9)
    assert rows[3]["updates_rejected"] == 1 and rows[3]["coefficient"] == 0.0
    assert sum(r["weight_share"] for r in rows) == pytest.approx(1.0)
    assert all(abs(c) > 0.01 for c in solved)  # every update moved the model: the check is not vacuous


def test_the_coefficient_table():
    assert coefficient("seafl", 0.5, 0.8) == pytest.approx(0.4) and coefficient("seafl2", 0.5, 0.5) == 0.25
    assert [coefficient(a, 0.3, 0.8) for a in ("fedbuff", "fedasync", "fedavg")] == [0.3] * 3
    assert coefficient("pkg.mod:rule", 0.3, 0.8) is None


# ---- the files and the figure ---------------------------------------------------------------------------------------

def sweep_with_traces(root):
    """Two arms x two seeds of hand-made runs, each with the made trace (its weights per algorithm)."""
    runs = []
    for alg in ("seafl", "fedbuff"):
        for seed in (0, 1):
            name = f"algorithm={alg},seed={seed}"
            run = make_run(root / name, [(0, 0.1), (5, 0.5)], algorithm=alg, seed=seed, 
                           extra=["devices.num=6", "devices.concurrency=4", "algorithm.buffer_size=2"])
            events = trace(*RECORDED[alg][0])
            (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
            runs.append({"name": name, "label": f"algorithm={alg}", "point": {"algorithm.name": alg}, "seed": seed})
    (root / "sweep.json").write_text(json.dumps({"name": root.name, "runs": runs}))
    return group_runs(find_runs([root]))


def test_files_and_panels_of_a_sweep(tmp_path):
    groups = sweep_with_traces(tmp_path / "sw")
    files = write_participation(groups, tmp_path)
    assert sorted(files) == ["participation.csv", "participation.pdf", "participation.png",
                             "participation_quartiles.csv"]
    assert files["participation.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files["participation.pdf"].read_bytes()[:5] == b"%PDF-"
    with open(files["participation.csv"]) as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == COLUMNS and len(rows) == 2 * 2 * 6
    assert {(r["label"], r["point"]) for r in rows} == {("SEAFL, β = 10", "algorithm=seafl"),
                                                     ("FedBuff, β = ∞", "algorithm=fedbuff")}
    for run in {r["run"] for r in rows}:
        assert sum(float(r["weight_share"]) for r in rows if r["run"] == run) == pytest.approx(1.0)
    never = [r for r in rows if r["device"] == "5"]
    assert all(r["jobs_started"] == "0" and r["mean_job_s"] == "" and r["speed_quartile"] == "" for r in never)
    with open(files["participation_quartiles.csv"]) as f:
        quartiles = list(csv.DictReader(f))
    assert [(q["label"], q["quartile"], q["seeds"]) for q in quartiles][:4] == [("SEAFL, β = 10", str(i), "2") for i in range(1, 5)]
    assert float(quartiles[0]["share_mean"]) == pytest.approx(1.6 / 2.0)  # device 0: w_a + w_c of 2.0


def test_the_figure_marks_quartiles_and_says_what_is_not_drawn(tmp_path):
    rows, _, panels = participation_of(sweep_with_traces(tmp_path / "sw"))
    fig = plot_participation(panels, "made", tmp_path / "participation.png", rows)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2
    heading = axes[0].get_title()
    assert heading.startswith("SEAFL, β = 10\nQ1–Q4 share: 80% · 20% · 0% · 0%")
    assert "not drawn: 2 never ran, 2 finished no job (2 seeds)" in heading.replace(",\n", ", ")
    boundaries = sorted(line.get_xdata()[0] for line in axes[0].get_lines() if line.get_linestyle() == "--")
    assert boundaries == pytest.approx([2.75, 3.0, 3.25])
    assert [t.get_text() for t in axes[0].texts] == ["Q1", "Q2", "Q3", "Q4"]
    assert axes[0].get_ylabel() == "share of the aggregation weight"
    assert axes[0].get_xlabel().startswith("mean job duration (s)") and axes[1].get_xlabel() == axes[0].get_xlabel()
    assert [t.get_text() for t in fig.legends[0].get_texts()][0] == "a device (each seed)"
    assert fig.legends[0].get_title().get_text() == "mean over 2 seeds, matched by speed quartile"
    dots = [c for c in axes[0].collections if c.get_offsets().shape[0] == 4]  # a seed's devices with a speed
    assert len(dots) == 2 and sorted(dots[0].get_offsets()[:, 1]) == pytest.approx([0.0, 0.0, 0.2, 0.8])


def test_a_withheld_weight_is_left_empty_not_zero_in_the_csv_and_never_drawn_at_zero(tmp_path):
    """SEAFL under DP without diagnostics writes no ``weight`` (issue 60 E): participation.csv leaves the device's
    weight, coefficient and every share of that run empty, and the figure draws none of them (a dot at 0 would read
    "no say"); a run that records its weights (FedBuff here, in the same report) still has every cell."""
    root, runs = tmp_path / "sw", []
    for alg in ("seafl", "fedbuff"):
        name = f"algorithm={alg}"
        run = make_run(root / name, [(0, 0.1), (5, 0.5)], algorithm=alg,
                       extra=["devices.num=6", "devices.concurrency=4", "algorithm.buffer_size=2"])
        events = trace(*RECORDED[alg][0])
        if alg == "seafl":  # as privacy/mechanism.py releases SEAFL's entries: no weight key at all
            events = [{**e, "updates": [{k: v for k, v in u.items() if k != "weight"} for u in e["updates"]]}
                      if e["event"] == "aggregate" else e for e in events]
        (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        runs.append({"name": name, "label": name, "point": {"algorithm.name": alg}, "seed": 0})
    (root / "sweep.json").write_text(json.dumps({"name": "sw", "runs": runs}))
    rows, _, panels = participation_of(group_runs(find_runs([root])))
    fig = plot_participation(panels, "made", tmp_path / "participation.png", rows)  # and participation.csv
    with open(tmp_path / "participation.csv") as f:
        rows = {(r["point"], int(r["device"])): r for r in csv.DictReader(f)}
    seafl = [rows[("algorithm=seafl", k)] for k in range(6)]
    assert [r["weight"] for r in seafl] == ["", "0.0", "0.0", "", "0.0", "0.0"]  # 0 and 3: accepted, weight withheld
    assert all(r["weight_share"] == "" for r in seafl)
    assert seafl[0]["coefficient"] == seafl[0]["mean_coefficient"] == seafl[3]["coefficient"] == ""
    assert seafl[0]["updates_accepted"] == "2"  # what the trace does say is still there
    fedbuff = [rows[("algorithm=fedbuff", k)] for k in range(6)]
    assert [float(r["weight"]) for r in fedbuff] == pytest.approx([1.5, 0, 0, 0.5, 0, 0])
    assert [float(r["weight_share"]) for r in fedbuff] == pytest.approx([0.75, 0, 0, 0.25, 0, 0])
    withheld, recorded = [ax for ax in fig.axes if ax.get_visible()]
    assert not any(c.get_offsets().shape[0] for c in withheld.collections)  # no dot, at 0 or anywhere
    assert "weights withheld under DP (1 of 1 runs)" in withheld.get_title().replace("\n", " ")
    assert "withheld" not in recorded.get_title() and any(c.get_offsets().shape[0] == 4 for c in recorded.collections)
