"""Report tables on hand-made run dirs: time to target (incl. never), mean ± std, baseline ratios."""
import csv
import functools
import json
import math

import pytest

from seafl_dist.settings import ConfigError, config_from_dict, dump_config
from seafl_dist.report.build import fmt_ratio, fmt_ttt, write_report
from seafl_dist.report.metric import Metric
from seafl_dist.report.sinks import METRIC_COLUMNS
from seafl_dist.report.runs import common_metric, find_runs
from seafl_dist.report.tables import group_rows, group_runs, run_rows


def make_run(path, curve, *, algorithm="seafl", seed=0, label=None, status="completed", extra=(), notify=0, drops=None,
             diverged_at=None):
    """A run dir whose metrics.csv has one row per (time, accuracy) in ``curve``."""
    path.mkdir(parents=True)
    cfg = config_from_dict({"algorithm": {"name": algorithm}, "run": {"seed": seed}}, list(extra))
    (path / "config.yaml").write_text(dump_config(cfg))
    with open(path / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        for v, (t, acc) in enumerate(curve):
            w.writerow({"version": v, "time": t, "accuracy": acc, "loss": 1 - acc, "updates": 2 if v else 0,
                        "mean_staleness": 1.0 if v else 0.0, "max_staleness": 1 if v else 0,
                        "notifications": notify, "rejected": 0})
    summary = {"status": status, "aggregations": len(curve) - 1, "mean_staleness": 1.0, "notifications": notify,
               "wall_time_s": 1.5}
    if drops is not None:  # a run with churn (docs/devices.md)
        summary["drops"] = {"total": drops, "offline": 0, "dropout": drops}
    if diverged_at is not None:  # {"version", "time"} (report/divergence.py)
        summary["diverged_at"] = diverged_at
    (path / "summary.json").write_text(json.dumps(summary))
    return path


@pytest.fixture
def sweep_dir(tmp_path):
    """Two algorithms x two seeds, as `seafl sweep` lays them out."""
    root = tmp_path / "sw"
    curves = {("seafl", 0): [(0, 0.1), (10, 0.55), (20, 0.75)],
              ("seafl", 1): [(0, 0.1), (12, 0.6), (30, 0.72)],
              ("fedbuff", 0): [(0, 0.1), (20, 0.5), (40, 0.65)],  # never 0.7
              ("fedbuff", 1): [(0, 0.1), (30, 0.52), (50, 0.71)]}
    runs = []
    for (alg, seed), curve in curves.items():
        name = f"algorithm={alg},seed={seed}"
        make_run(root / name, curve, algorithm=alg, seed=seed)
        runs.append({"name": name, "label": f"algorithm={alg}", "point": {"algorithm.name": alg}, "seed": seed})
    (root / "sweep.json").write_text(json.dumps({"name": "sw", "targets": [0.5, 0.7, 0.9], "baseline": "fedbuff",
                                                 "runs": runs}))
    return root


def test_time_to_target_mean_std_and_never(sweep_dir):
    groups = group_runs(find_runs([sweep_dir]))
    assert [g.label for g in groups] == ["algorithm=seafl", "algorithm=fedbuff"]
    rows = {r["label"]: r for r in group_rows(groups, [0.5, 0.7, 0.9], "fedbuff")}
    s, fb = rows["algorithm=seafl"], rows["algorithm=fedbuff"]
    assert s["ttt_0.5"]["mean"] == pytest.approx(11.0) and s["ttt_0.5"]["std"] == pytest.approx(math.sqrt(2))
    assert s["ttt_0.7"]["mean"] == pytest.approx(25.0) and s["ttt_0.7"]["reached"] == 2
    assert fb["ttt_0.7"] == {"mean": 50.0, "std": 0.0, "reached": 1, "n": 2}
    assert math.isinf(s["ttt_0.9"]["mean"]) and s["ttt_0.9"]["reached"] == 0
    assert s["ratio_0.5"] == pytest.approx(11.0 / 25.0)
    assert math.isnan(s["ratio_0.7"])  # baseline reached 0.7 in only one of two seeds
    assert fb["ratio_0.5"] == pytest.approx(1.0)
    assert s["best_accuracy"] == (pytest.approx(0.735), pytest.approx(math.sqrt(2 * 0.015 ** 2)))
    assert fmt_ttt(s["ttt_0.9"]) == "never" and fmt_ttt(fb["ttt_0.7"]) == "50.0 (1/2)"
    assert fmt_ratio(0.78) == "0.78× (-22%)" and fmt_ratio(math.nan) == "—" and fmt_ratio(math.inf) == "never"


def test_run_rows_and_files(sweep_dir, tmp_path):
    out = tmp_path / "rep"
    result = write_report([sweep_dir], out)
    assert result["targets"] == [0.5, 0.7, 0.9] and result["baseline"] == "fedbuff"  # from sweep.json
    md = (out / "report.md").read_text()
    assert "| algorithm=fedbuff |" in md and "never" in md and "vs fedbuff" in md
    assert "ε" not in md and "## Privacy" not in md  # no DP run: no ε column, no composition
    with open(out / "runs.csv") as f:
        runs = {r["run"]: r for r in csv.DictReader(f)}
    assert float(runs["algorithm=fedbuff,seed=0"]["ttt_0.7"]) == math.inf
    assert float(runs["algorithm=seafl,seed=1"]["ttt_0.5"]) == 12.0
    assert float(runs["algorithm=seafl,seed=1"]["best_accuracy"]) == 0.72
    with open(out / "report.csv") as f:
        groups = {r["label"]: r for r in csv.DictReader(f)}
    assert float(groups["algorithm=seafl"]["ttt_0.5_mean"]) == 11.0
    assert groups["algorithm=fedbuff"]["ttt_0.7_reached"] == "1"
    assert groups["algorithm=seafl"]["algorithm.name"] == "seafl"
    png = (out / "accuracy_vs_time.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "timeline.png" not in result["files"]  # only for a single run


def test_a_metric_to_minimise_reports_its_lowest_as_best(tmp_path):
    """run.target_metric=loss, run.target_mode=min: best_loss is the lowest loss (make_run writes 1 - accuracy)."""
    make_run(tmp_path / "r", [(0, 0.1), (5, 0.8), (9, 0.6)], extra=["run.target_metric=loss", "run.target_mode=min"])
    (run,) = find_runs([tmp_path / "r"])
    figures = run.figures()
    assert figures["best_loss"] == pytest.approx(0.2) and figures["final_loss"] == pytest.approx(0.4)
    assert "best_accuracy" not in figures


def test_the_target_metric_its_direction_and_its_words():
    """report/metric.py: what a run's config names (config.yaml leaves the defaults out), when a value reaches a
    target, the best of values (None, NaN and booleans are no values), and how tables and lines name it."""
    assert Metric.of(config_from_dict({}, ["run.target_metric=loss", "run.target_mode=min"]).run) == \
        Metric("loss", "min")
    assert Metric.of_tree({"run": {"target_metric": "test_loss", "target_mode": "min"}}) == Metric("test_loss", "min")
    assert Metric.of_tree(None) == Metric.of_tree({"run": None}) == Metric.of_tree({"run": {"seed": 1}}) == \
        Metric("accuracy", "max")
    low, high = Metric("test_loss", "min"), Metric()
    assert [low.reached(v, 0.5) for v in (0.4, 0.5, 0.6, None, math.nan, False)] == [True, True, False, False, False,
                                                                                     False]
    assert [high.reached(v, 0.5) for v in (0.4, 0.5, 0.6, None, math.nan, True)] == [False, True, True, False, False,
                                                                                     False]
    values = [None, math.nan, 2.0, True, 1.5, 3]
    assert (low.best(values), high.best(values), low.best([None, math.nan]), high.best([])) == (1.5, 3, None, None)
    assert (high.label, Metric("loss", "min").label, low.label) == ("test accuracy", "test loss", "test_loss")
    assert (high.direction, low.direction) == ("higher is better", "lower is better")
    assert high.is_accuracy and not Metric("accuracy", "min").is_accuracy and not Metric("loss").is_accuracy
    assert (high.target_text(0.9), low.target_text(0.25), Metric("score").target_text(3)) == ("90%", "≤0.25", "≥3")


def test_a_runs_figures_from_its_summary_or_else_from_its_rows(tmp_path):
    make_run(tmp_path / "r", [(0, 0.1), (4, 0.6), (9, 0.5)], notify=3, drops=2)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    summary.update(aggregations=7, mean_staleness=2.5, notifications=9)  # summary.json's word, not the rows'
    (tmp_path / "r" / "summary.json").write_text(json.dumps(summary))
    (run,) = find_runs([tmp_path / "r"])
    assert run.figures() == {"best_accuracy": 0.6, "final_accuracy": 0.5, "aggregations": 7, "virtual_time": 9.0,
                             "mean_staleness": 2.5, "notifications": 9, "drops": 2, "wall_time_s": 1.5}
    # no summary.json (a run killed before it wrote one): the rows' own figures, the staleness weighed by updates
    (tmp_path / "r" / "summary.json").unlink()
    with open(tmp_path / "r" / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        for v, (t, acc, n, stale) in enumerate([(0, 0.1, "", 7.0), (4, 0.6, 1, 4.0), (9, 0.5, 3, 0.0)]):
            w.writerow({"version": v, "time": t, "accuracy": acc, "loss": 1 - acc, "updates": n,
                        "mean_staleness": stale, "max_staleness": 0, "notifications": 2 * v, "rejected": 0})
    (run,) = find_runs([tmp_path / "r"])
    figures = run.figures()
    assert math.isnan(figures.pop("wall_time_s"))
    assert figures == {"best_accuracy": 0.6, "final_accuracy": 0.5, "aggregations": 2, "virtual_time": 9.0,
                       "mean_staleness": 1.0, "notifications": 4.0, "drops": 0}
    # a module's own metric that metrics.csv lacks (a run of an older seafl_dist): no value, NaN
    other = make_run(tmp_path / "other", [(0, 0.1)], extra=["run.target_metric=test_loss", "run.target_mode=min"])
    figures = find_runs([other])[0].figures()
    assert math.isnan(figures["best_test_loss"]) and math.isnan(figures["final_test_loss"])
    empty = make_run(tmp_path / "empty", [])  # killed before its first evaluation
    (empty / "summary.json").unlink()
    figures = find_runs([empty])[0].figures()
    assert all(math.isnan(figures.pop(k)) for k in ("best_accuracy", "final_accuracy", "wall_time_s"))
    assert figures == {"aggregations": 0, "virtual_time": 0.0, "mean_staleness": 0.0, "notifications": 0, "drops": 0}


def test_a_dp_runs_real_time_is_not_reported_even_where_its_summary_holds_one(tmp_path):
    """Under DP without privacy.diagnostics the report reads the run's config, not summary.json's word: a summary
    written before real time was withheld (make_run's holds 1.5 s) shows none (docs/privacy.md, "No wall-clock
    channel"); with diagnostics it shows."""
    dp = ["privacy.enabled=true", "privacy.noise_multiplier=1", "algorithm.name=fedbuff"]
    make_run(tmp_path / "runs" / "dp", [(0, 0.1), (4, 0.6)], extra=dp)
    make_run(tmp_path / "runs" / "diag", [(0, 0.1), (4, 0.6)], extra=[*dp, "privacy.diagnostics=true"], seed=1)
    walls = {r.name: r.figures()["wall_time_s"] for r in find_runs([tmp_path / "runs"])}
    assert math.isnan(walls["dp"]) and walls["diag"] == 1.5


def test_runs_of_one_target_metric_report_together_and_of_two_are_refused(tmp_path):
    loss = ["run.target_metric=loss", "run.target_mode=min"]
    make_run(tmp_path / "a" / "r0", [(0, 0.1)], extra=loss)
    make_run(tmp_path / "a" / "r1", [(0, 0.1)], extra=[*loss, "run.seed=1"])
    make_run(tmp_path / "b" / "acc", [(0, 0.1)])
    assert common_metric(find_runs([tmp_path / "a"])) == Metric("loss", "min") and common_metric([]) == Metric()
    with pytest.raises(ConfigError) as refused:
        common_metric(find_runs([tmp_path / "a", tmp_path / "b"]))
    assert str(refused.value) == ("these runs follow different target metrics: loss (min) in r0; accuracy (max) in "
                                  "acc; report each metric's runs apart")


def test_drops_are_a_figure_of_runs_and_grid_points(tmp_path):
    """Jobs lost to churn: summary.json's drops total, 0 for a run without churn; in both CSVs."""
    make_run(tmp_path / "a" / "r0", [(0, 0.1), (5, 0.8)], extra=["run.seed=0"], drops=7)
    make_run(tmp_path / "a" / "r1", [(0, 0.1), (7, 0.8)], extra=["run.seed=1"], drops=3)
    make_run(tmp_path / "a" / "r2", [(0, 0.1), (6, 0.8)], extra=["run.seed=2", "algorithm.buffer_size=5"])
    rows = {r["run"]: r for r in run_rows(group_runs(find_runs([tmp_path / "a"])), [0.8], None)}
    assert (rows["r0"]["drops"], rows["r1"]["drops"], rows["r2"]["drops"]) == (7, 3, 0)
    out = tmp_path / "rep"
    write_report([tmp_path / "a"], out)
    with open(out / "report.csv") as f:
        means = sorted(float(r["drops_mean"]) for r in csv.DictReader(f))
    assert means == [0.0, 5.0]
    md = (out / "report.md").read_text()
    assert "| drops |" in md or "| drops" in md.split("## Runs")[0]


def test_groups_without_sweep_json_use_differing_keys(tmp_path):
    make_run(tmp_path / "a" / "r0", [(0, 0.1), (5, 0.8)], extra=["algorithm.buffer_size=5", "run.seed=0"])
    make_run(tmp_path / "a" / "r1", [(0, 0.1), (7, 0.8)], extra=["algorithm.buffer_size=5", "run.seed=1"])
    make_run(tmp_path / "a" / "r2", [(0, 0.1), (9, 0.8)], extra=["algorithm.buffer_size=10"])
    groups = group_runs(find_runs([tmp_path / "a"]))
    assert sorted(g.label for g in groups) == ["K=10", "K=5"]
    rows = {r["label"]: r for r in group_rows(groups, [0.8], "K=10")}
    assert rows["K=5"]["runs"] == 2 and rows["K=5"]["ratio_0.8"] == pytest.approx(6.0 / 9.0)
    per_run = run_rows(groups, [0.8], None)
    assert [r["ttt_0.8"] for r in per_run] == [5.0, 7.0, 9.0]


def test_a_run_dir_alone_gets_a_timeline(tmp_path):
    run = make_run(tmp_path / "one", [(0, 0.1), (3.0, 0.6)], algorithm="seafl2", notify=1)
    events = [
        {"event": "eval", "time": 0.0, "version": 0, "accuracy": 0.1, "loss": 2.0},
        {"event": "start", "time": 0.0, "device": 0, "job": 0, "version": 0, "epoch_ends": [1.0, 2.0]},
        {"event": "start", "time": 0.0, "device": 1, "job": 1, "version": 0, "epoch_ends": [2.0, 4.0]},
        {"event": "start", "time": 0.0, "device": 2, "job": 2, "version": 0, "epoch_ends": [5.0, 10.0]},
        {"event": "finish", "time": 2.0, "device": 0, "job": 0, "epochs": 2},
        {"event": "notify", "time": 2.0, "device": 1, "job": 1},
        {"event": "finish", "time": 2.0, "device": 1, "job": 1, "epochs": 1},
        {"event": "aggregate", "time": 3.0, "version": 1, "updates": [
            {"device": 0, "job": 0, "staleness": 0, "n_samples": 5, "weight": 0.5},
            {"device": 1, "job": 1, "staleness": 0, "n_samples": 5, "weight": 0.5}]},
        {"event": "eval", "time": 3.0, "version": 1, "accuracy": 0.6, "loss": 1.0},
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    result = write_report([run], run, targets=[0.5])
    png = result["files"]["timeline.png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "| seafl2 |" in (run / "report.md").read_text()


def test_no_runs_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no runs found"):
        write_report([tmp_path], tmp_path / "out")


def test_runs_that_diverged_are_counted_and_dated_only_where_one_did(sweep_dir, tmp_path):
    plain = write_report([sweep_dir], tmp_path / "plain")["markdown"]
    assert "diverged" not in plain  # no column without a divergence: the tables read as before
    at = {"version": 2, "time": 40.0}
    make_run(tmp_path / "d" / "fb", [(0, 0.1), (20, 0.9), (40, 0.1)], algorithm="fedbuff", diverged_at=at)
    make_run(tmp_path / "d" / "fb1", [(0, 0.1), (20, 0.9), (40, 0.95)], algorithm="fedbuff", seed=1)
    result = write_report([tmp_path / "d"], tmp_path / "rep", targets=[0.5])
    (group,) = result["groups"]
    assert group["diverged"] == 1 and group["runs"] == 2
    assert [(r["diverged_version"], r["diverged_time"]) for r in result["runs"]] == [(2, 40.0), (None, None)]
    md = result["markdown"]
    assert "| diverged |" in md.splitlines()[6] and "| 1/2 |" in md and "| version 2 (40.0 s) |" in md
    with open(tmp_path / "rep" / "runs.csv") as f:
        assert [r["diverged_version"] for r in csv.DictReader(f)] == ["2", ""]
    with open(tmp_path / "rep" / "report.csv") as f:
        assert [r["diverged"] for r in csv.DictReader(f)] == ["1"]


@pytest.mark.parametrize("values, mean, std", [
    ([math.inf, math.inf, math.inf], math.inf, 0.0),  # ε = ∞ in every seed (z = 0): the sweep's report failed on it
    ([math.inf], math.inf, 0.0),
    ([2.0, math.inf], math.inf, math.nan),
    ([math.inf, -math.inf], math.nan, math.nan),
    ([1.0, 3.0, None, math.nan], 2.0, math.sqrt(2.0)),
    ([None], math.nan, math.nan),
])
def test_mean_std_takes_infinities_and_skips_missing_values(values, mean, std):
    from seafl_dist.report.tables import mean_std
    got = mean_std(values)
    for g, want in zip(got, (mean, std)):
        assert (math.isnan(g) and math.isnan(want)) or g == pytest.approx(want)


# ---- ε over pooled runs (issue 60 E): composed, never averaged ------------------------------------------------------

@functools.lru_cache
def oracle_epsilon(pairs, delta=1e-5, kind="rdp"):
    """ε of runs ``pairs`` ((z, m), ...) composed, by dp-accounting directly: each run m Gaussian mechanisms at its z,
    ADD_OR_REMOVE_ONE as privacy/accountant.py explains; RDP (milliseconds) unless ``kind`` is pld (a second each)."""
    import dp_accounting
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    acc = dp_accounting.pld.PLDAccountant(neighboring_relation=relation) if kind == "pld" else \
        dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    for z, m in pairs:
        acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), m))
    return float(acc.get_epsilon(delta))


def dp_run(path, seed, z, m, *, data=(), noise="keyed"):
    """A hand-made FedBuff run under DP (RDP) whose summary.json says its most-included device was in m aggregations."""
    make_run(path, [(0, 0.1), (10, 0.6)], algorithm="fedbuff", seed=seed,
             extra=["privacy.enabled=true", f"privacy.noise_multiplier={z}", "privacy.accountant=rdp", *data])
    summary = json.loads((path / "summary.json").read_text())
    summary["privacy"] = {"epsilon": oracle_epsilon(((z, m),)), "delta": 1e-5, "noise_multiplier": z,
                          "clipping_bound": 1.0, "accountant": "rdp", "max_inclusions": m, "noise": noise}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_the_composed_epsilon_of_runs_is_dp_accountings_for_all_their_inclusions_at_their_own_z():
    from seafl_dist.privacy.accountant import composed_epsilon
    both = oracle_epsilon(((2.0, 3), (2.0, 4)), kind="pld")  # z = 2: a small ε, so a fast PLD
    assert composed_epsilon([(2.0, 3), (2.0, 4)], 1e-5) == pytest.approx(both, rel=1e-4)
    mixed = composed_epsilon([(1.1, 3), (0.9, 4)], 1e-5, "rdp")
    assert mixed == pytest.approx(oracle_epsilon(((1.1, 3), (0.9, 4))), rel=1e-9)
    assert mixed > oracle_epsilon(((1.1, 7),)) > oracle_epsilon(((1.1, 4),))  # z = 0.9 spends more; two runs more
    assert composed_epsilon([(1.1, 3), (0.0, 2)], 1e-5) == math.inf and composed_epsilon([(1.1, 0)], 1e-5) == 0.0


def test_a_grid_points_seeds_report_their_composed_epsilon_never_its_mean(tmp_path):
    dp_run(tmp_path / "d" / "s0", 0, 1.1, 3)
    dp_run(tmp_path / "d" / "s1", 1, 1.1, 4)
    e3, e4, both = oracle_epsilon(((1.1, 3),)), oracle_epsilon(((1.1, 4),)), oracle_epsilon(((1.1, 3), (1.1, 4)))
    assert both > e4 > e3 and f"{both:.3f}" != f"{(e3 + e4) / 2:.3f}"  # the check tells the two apart
    result = write_report([tmp_path / "d"], tmp_path / "rep", targets=[0.5])
    (group,) = result["groups"]
    assert group["runs"] == 2 and group["epsilon"] == pytest.approx(both, rel=1e-9)
    md = result["markdown"]
    point = next(line for line in md.splitlines() if line.startswith("| fedbuff |"))
    assert point.endswith(f"| {both:.3f} |") and "| ε composed |" in md
    assert f"{(e3 + e4) / 2:.3f}" not in md and "seeded" not in md  # no mean of ε anywhere; keyed noise: no flag
    assert [r["epsilon"] for r in result["runs"]] == [e3, e4]  # each run's own
    assert md.count(f"| {e3:.3f} |") == 1 and md.count(f"| {e4:.3f} |") == 1
    assert "## Privacy" in md and f"| data.name=digits, data.root=data | 2 | 1e-05 | {both:.3f} |" in md
    with open(tmp_path / "rep" / "report.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["epsilon_composed"]) == pytest.approx(both, rel=1e-9) and "epsilon_mean" not in row


def test_runs_on_other_data_are_never_composed_with_them(tmp_path):
    from seafl_dist.report.epsilon import composed_of, per_data
    dp_run(tmp_path / "a" / "s0", 0, 1.1, 3)
    dp_run(tmp_path / "a" / "s1", 1, 0.9, 4)
    dp_run(tmp_path / "b" / "s0", 0, 1.1, 3, data=["data.name=mnist"])
    runs = find_runs([tmp_path / "a", tmp_path / "b"])
    assert composed_of(runs[:2]) == pytest.approx(oracle_epsilon(((1.1, 3), (0.9, 4))), rel=1e-9)
    assert math.isnan(composed_of(runs))  # digits and mnist: not one data set, nothing composed
    pooled = per_data(runs)
    assert [(p["data"], p["runs"]) for p in pooled] == [("data.name=digits, data.root=data", 2),
                                                        ("data.name=mnist, data.root=data", 1)]
    assert pooled[0]["epsilon"] == composed_of(runs[:2]) and pooled[1]["epsilon"] == oracle_epsilon(((1.1, 3),))


def test_an_epsilon_that_seeded_noise_entered_is_flagged_in_every_table(tmp_path):
    """privacy.seeded_noise: anyone with config.yaml can subtract the noise, so that run's ε, its grid point's
    composition and its data set's carry the flag (issue 60 A's caveat, in the report); the keyed seed's own ε not."""
    dp_run(tmp_path / "d" / "s0", 0, 1.1, 3, noise="seeded")
    dp_run(tmp_path / "d" / "s1", 1, 1.1, 4)
    result = write_report([tmp_path / "d"], tmp_path / "rep", targets=[0.5])
    md, flag = result["markdown"], "(seeded: none vs config.yaml)"
    both, e3, e4 = (f"{oracle_epsilon(p):.3f}" for p in (((1.1, 3), (1.1, 4)), ((1.1, 3),), ((1.1, 4),)))
    assert next(line for line in md.splitlines() if line.startswith("| fedbuff |")).endswith(f"| {both} {flag} |")
    assert f"| {e3} {flag} |" in md and f"| {e4} |" in md and f"| {both} {flag} |" in md.split("## Privacy")[1]
    assert "privacy.seeded_noise, the noise drawn from run.seed" in md
    with open(tmp_path / "rep" / "runs.csv") as f:
        assert [r["epsilon_seeded"] for r in csv.DictReader(f)] == ["True", "False"]


def test_an_unknown_baseline_is_refused_listing_the_labels(sweep_dir, tmp_path, capsys):
    from seafl_dist.cli import main
    from one_line import one_error_line
    with pytest.raises(ConfigError) as err:
        write_report([sweep_dir], tmp_path / "a", baseline="fedbuf")
    assert str(err.value) == ("--baseline 'fedbuf' names no grid point; the labels: algorithm=seafl, algorithm=fedbuff "
                              "(or the algorithm.name of one point: seafl, fedbuff)")
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    (sweep_dir / "sweep.json").write_text(json.dumps({**meta, "baseline": "fedbuf"}))  # misspelt in the sweep file
    assert main(["report", str(sweep_dir), "--out", str(tmp_path / "b")]) == 2
    one_error_line(capsys.readouterr().err, "the sweep's baseline 'fedbuf' names no grid point",
                   "algorithm=seafl, algorithm=fedbuff", "give another with --baseline")
    assert not (tmp_path / "b").exists()
    assert write_report([sweep_dir], tmp_path / "c", baseline="seafl")["baseline"] == "seafl"  # an algorithm's name


def test_a_sweep_file_with_an_unknown_baseline_is_refused_before_it_runs(tmp_path):
    from seafl_dist.experiments.sweep import load_sweep
    from small_runs import QUICKSTART, SMALL
    points = [{"label": "stalebuff", "algorithm.name": "fedbuff", "algorithm.server_lr": 2.0},
              {"label": "fedbuff", "algorithm.name": "fedbuff"}, {"label": "seafl", "algorithm.name": "seafl"}]

    def sweep(baseline):
        (tmp_path / "s.yaml").write_text(json.dumps({"base": str(QUICKSTART), "overrides": SMALL, "points": points,
                                                     "baseline": baseline}))
        return load_sweep(tmp_path / "s.yaml")
    with pytest.raises(ConfigError) as err:
        sweep("fedbuf").expand()
    assert str(err.value) == ("sweep 's': baseline 'fedbuf' names no grid point; the labels: stalebuff, fedbuff, seafl "
                              "(or the algorithm.name of one point: fedbuff, seafl)")
    assert len(sweep("seafl").expand()) == 3
