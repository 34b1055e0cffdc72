"""report/clip_plot.py: central DP's C_t per aggregation, read from made events.jsonl traces of an adaptive run (C
moves) and a fixed one (C stays): the rows in the traces' order, the adaptive line solid and the fixed one dashed, on
a log axis; nothing when no run's C moved (fixed C only, or no DP)."""
import csv
import json
from types import SimpleNamespace

from seafl_dist.report import clip_plot
from seafl_dist.report.clip_plot import bound_rows, write_clipping_bound

# (time, C_t): an adaptive run records each; a fixed run records none (FIXED: its events say nothing, its config 0.5)
FIXED = "config"
TRACES = {"adaptive": [(4.0, 0.1), (8.0, 0.13), (12.5, 0.2)], "fixed": [(4.0, FIXED), (9.0, FIXED)]}


def made(tmp_path, traces=TRACES):
    tmp_path.mkdir(parents=True, exist_ok=True)
    groups = []
    for name, points in traces.items():
        d = tmp_path / name
        d.mkdir()
        lines = [{"event": "start", "time": 0.0}]
        lines += [{"event": "aggregate", "time": t, "version": v + 1, "updates": [],
                   "privacy": None if c is None else {"epsilon": 1.0} if c == FIXED else
                   {"clipping_bound": c, "epsilon": 1.0}}
                  for v, (t, c) in enumerate(points)]
        (d / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        run = SimpleNamespace(dir=d, name=name, seed=0, label=name, point=(), config={"privacy.clipping_bound": 0.5},
                              summary={})
        groups.append(SimpleNamespace(label=name, runs=[run], config={"algorithm.name": "fedbuff"}, sweep=""))
    return groups


def test_the_rows_are_each_aggregations_bound_in_trace_order(tmp_path):
    rows = bound_rows(made(tmp_path))
    assert [(r["run"], r["version"], r["time"], r["clipping_bound"]) for r in rows] == \
        [(name, v + 1, t, 0.5 if c == FIXED else c) for name, pts in TRACES.items() for v, (t, c) in enumerate(pts)]


def test_an_adaptive_run_is_solid_a_fixed_one_dashed_on_a_log_axis(tmp_path, monkeypatch):
    figs = []
    real = clip_plot.plot_clipping_bound
    monkeypatch.setattr(clip_plot, "plot_clipping_bound", lambda *a: figs.append(real(*a)) or figs[-1])
    files = write_clipping_bound(made(tmp_path), tmp_path)
    assert sorted(files) == ["clipping_bound.csv", "clipping_bound.pdf", "clipping_bound.png"]
    ax = figs[0].axes[0]
    lines = {ln.get_linestyle(): list(ln.get_ydata()) for ln in ax.get_lines()}
    assert lines == {"-": [0.1, 0.13, 0.2], "--": [0.5, 0.5]} and ax.get_yscale() == "log"
    with open(files["clipping_bound.csv"]) as f:
        assert len(list(csv.DictReader(f))) == 5


def test_nothing_is_drawn_when_no_runs_bound_moved(tmp_path):
    assert write_clipping_bound(made(tmp_path / "a", {"fixed": [(4.0, FIXED), (9.0, FIXED)]}), tmp_path) == {}
    assert write_clipping_bound(made(tmp_path / "b", {"plain": [(4.0, None)]}), tmp_path) == {}
