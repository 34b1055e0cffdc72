"""report/dp_sgd_tradeoff.py: accuracy against the largest device ε, over made DP-SGD runs of two rules at two σ and
two seeds each, beside their runs without DP-SGD: the rows, each rule's line through its (σ) means computed here, the
dashed references, the log axis at a wide ε span and not at a narrow one, runs at ε ∞ left out and counted."""
import csv
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from seafl_dist.report.dp_sgd_tradeoff import tradeoff_rows, write_dp_sgd_tradeoff

# (rule, σ or None without DP-SGD, seed, largest ε, final accuracy)
RUNS = [("fedbuff", 2.0, 0, 1.5, 0.80), ("fedbuff", 2.0, 1, 2.5, 0.84), ("fedbuff", 0.5, 0, 40.0, 0.90),
        ("fedbuff", 0.5, 1, 60.0, 0.92), ("fedbuff", None, 0, None, 0.97), ("fedbuff", None, 1, None, 0.95),
        ("seafl", 2.0, 0, 1.0, 0.70), ("seafl", 2.0, 1, 3.0, 0.74), ("seafl", 0.5, 0, 30.0, 0.85),
        ("seafl", 0.5, 1, 50.0, 0.87), ("seafl", None, 0, None, 0.93)]


def run(rule, sigma, seed, eps, acc):
    s = {"algorithm": rule, "final_accuracy": acc, "best_accuracy": acc + 0.01}
    if sigma is not None:
        s["dp_sgd"] = {"noise_multiplier": sigma, "epsilon": {"max": eps, "quantiles": {"p50": eps and eps / 2}}}
    return SimpleNamespace(summary=s, name=f"{rule}-{sigma}-{seed}", seed=seed, point=())


def groups(runs=RUNS):
    points = {}
    for r in runs:
        points.setdefault((r[0], r[1]), []).append(run(*r))
    return [SimpleNamespace(label=f"{rule}-{sigma}", runs=rs, config={}, sweep="") for (rule, sigma), rs in
            points.items()]


def test_the_rows_split_dp_sgd_runs_from_the_others():
    dp, plain = tradeoff_rows(groups())
    assert [(r["algorithm"], r["noise_multiplier"], r["seed"], r["epsilon_max"], r["final_accuracy"]) for r in dp] == \
        [r for r in RUNS if r[1] is not None]
    assert [(r["algorithm"], r["seed"], r["final_accuracy"]) for r in plain] == \
        [(r[0], r[2], r[4]) for r in RUNS if r[1] is None]
    assert dp[0]["epsilon_p50"] == 0.75 and dp[0]["best_accuracy"] == pytest.approx(0.81)
    assert plain[0]["noise_multiplier"] is None and plain[0]["epsilon_max"] is None


def test_each_rule_gets_its_line_through_its_sigma_means_and_its_reference(tmp_path, monkeypatch):
    figs = []
    import seafl_dist.report.dp_sgd_tradeoff as mod
    real = mod.plot_dp_sgd_tradeoff
    monkeypatch.setattr(mod, "plot_dp_sgd_tradeoff", lambda *a: figs.append(real(*a)) or figs[-1])
    files = write_dp_sgd_tradeoff(groups(), tmp_path)
    assert sorted(files) == ["dp_sgd_tradeoff.csv", "dp_sgd_tradeoff.pdf", "dp_sgd_tradeoff.png"]
    assert files["dp_sgd_tradeoff.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = figs[0].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    for rule, line in zip(("fedbuff", "seafl"), lines):
        want = []
        for sigma in (2.0, 0.5):  # σ descending: ε grows along the line
            mine = [r for r in RUNS if r[0] == rule and r[1] == sigma]
            want += [sum(r[3] for r in mine) / 2, sum(r[4] for r in mine) / 2]
        got = [v for xy in zip(line.get_xdata(), line.get_ydata()) for v in xy]
        assert got == pytest.approx(want)
    refs = sorted(ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--")
    assert refs == pytest.approx([0.93, 0.96])  # SEAFL's one run, FedBuff's two seeds' mean
    assert ax.get_xscale() == "log"  # ε from 1 to 60
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]  # no σ 0 run: no dotted line
    assert sorted(t.get_text() for t in ax.texts) == ["σ 0.5", "σ 0.5", "σ 2", "σ 2"]
    with open(files["dp_sgd_tradeoff.csv"]) as f:
        assert len(list(csv.DictReader(f))) == len(RUNS)


def test_a_narrow_span_is_linear_sigma_0_is_a_dotted_reference_and_epsilon_0_is_counted(tmp_path, monkeypatch):
    figs = []
    import seafl_dist.report.dp_sgd_tradeoff as mod
    real = mod.plot_dp_sgd_tradeoff
    monkeypatch.setattr(mod, "plot_dp_sgd_tradeoff", lambda *a: figs.append(real(*a)) or figs[-1])
    # σ 0: ε ∞, which summary.json writes as null
    narrow = [("fedbuff", 2.0, 0, 2.0, 0.8), ("fedbuff", 1.0, 0, 19.0, 0.9), ("fedbuff", 0.0, 0, math.inf, 0.95),
              ("fedbuff", 0.0, 1, None, 0.91), ("fedbuff", 4.0, 0, 0.0, 0.5)]
    write_dp_sgd_tradeoff(groups(narrow), tmp_path)
    ax = figs[0].axes[0]
    assert ax.get_xscale() == "linear"  # 19 / 2 < 10
    assert sum(len(c.get_offsets()) for c in ax.collections) == 2
    dotted = [ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert dotted == pytest.approx([0.93])  # the σ 0 runs' mean: what clipping alone costs
    assert "1 run(s) with ε 0 not drawn" in figs[0]._suptitle.get_text()
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]  # no run without DP-SGD: no reference
    assert write_dp_sgd_tradeoff(groups([r for r in RUNS if r[1] is None]), Path(tmp_path) / "none") == {}
