"""The report's figures, read back from their matplotlib objects: a sweep over algorithm x K with three
seeds (mean curves, bands, legend texts, target labels, axis range, time to target, the plot against K)
and a sweep over beta (infinity at the axis' end); the PDF and CSV files beside each PNG."""
import csv
import json
import math

import numpy as np
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import rgb_to_hsv, to_rgb
from matplotlib.markers import MarkerStyle

from seafl_dist.report.build import write_report
from seafl_dist.report.figures import plot_accuracy_vs_time, plot_time_to_target
from seafl_dist.report.runs import find_runs
from seafl_dist.report.tables import group_runs
from seafl_dist.report.value_plots import plot_time_vs_value, swept_keys
from tests.unit.test_report_tables import make_run

CURVES = {  # (algorithm, K) -> one curve per seed 0, 1, 2
    ("seafl", 5): [[(0, .1), (10, .5), (20, .8)], [(0, .1), (15, .6), (30, .9)], [(0, .1), (40, .95)]],
    ("seafl", 10): [[(0, .1), (5, .7), (12, .92)], [(0, .1), (8, .9), (16, .93)], [(0, .1), (6, .86), (20, .92)]],
    ("fedbuff", 5): [[(0, .1), (30, .6), (60, .91)], [(0, .1), (35, .7), (70, .9)], [(0, .1), (50, .92)]],
    ("fedbuff", 10): [[(0, .1), (20, .8), (45, .95)], [(0, .1), (25, .9)], [(0, .1), (22, .93)]],
    ("seafl", 1): [[(0, .1), (50, .3), (100, .4)], [(0, .1), (60, .35)], [(0, .1), (80, .5)]],
}
LABELS = ["SEAFL, K = 5, β = 10", "SEAFL, K = 10, β = 10", "FedBuff, K = 5, β = ∞", "FedBuff, K = 10, β = ∞",
          "SEAFL, K = 1, β = 10"]  # β: the defaults of SEAFL (10) and FedBuff (∞)


def sweep(root, curves, key, value_of, targets):
    """A sweep dir as `seafl sweep` lays it out: one run per (point, seed), sweep.json listing them."""
    runs = []
    for (alg, v), seeds in curves.items():
        for seed, curve in enumerate(seeds):
            name = f"algorithm={alg},{key}={v},seed={seed}"
            make_run(root / name, curve, algorithm=alg, seed=seed, extra=[f"algorithm.{key}={value_of(v)}"])
            runs.append({"name": name, "label": f"algorithm={alg},{key}={v}", "seed": seed})
    (root / "sweep.json").write_text(json.dumps({"name": root.name, "targets": targets, "runs": runs}))
    return group_runs(find_runs([root]))


@pytest.fixture
def k_groups(tmp_path):
    return sweep(tmp_path / "k", CURVES, "buffer_size", str, [0.85, 0.9])


MARKS = ("where a run ends", "where a run diverged")  # the legend's entries that are no arm


def arm_entries(legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts() if t.get_text() not in MARKS]


def curve_lines(ax) -> list:
    """The axes' lines but the bars where runs end (their runs end at different times)."""
    return [line for line in ax.get_lines() if line.get_marker() != "|"]


def mean_lines(fig):
    ax = fig.axes[0]
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def test_one_mean_curve_and_band_per_grid_point_named_in_the_readers_words(k_groups, tmp_path):
    fig = plot_accuracy_vs_time(k_groups, [0.85, 0.9], tmp_path / "a.png")
    lines = mean_lines(fig)
    assert list(lines) == LABELS
    assert arm_entries(fig.legends[0]) == LABELS
    assert fig.legends[0].get_title().get_text() == "mean of 3 seeds; band: min–max"
    # over both panels; β is each algorithm's default, which the sweep did not set: not said to vary
    assert fig.get_suptitle() == "digits, LeNet-5: algorithm and K vary, 3 seeds each"
    k5 = lines[LABELS[0]]  # seed 1 ends at 20 s and seed 2 at 40 s: both held at their last value
    assert list(k5.get_xdata()) == [0, 10, 15, 20, 30, 40]
    assert k5.get_ydata() == pytest.approx([.1, .7 / 3, 1.2 / 3, 1.5 / 3, 1.8 / 3, 2.65 / 3])
    bands = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 5  # every point has three seeds
    ys = set(np.round(bands[0].get_paths()[0].vertices[:, 1], 6))
    assert {.1, .5, .6, .8, .9, .95} <= ys and min(ys) == pytest.approx(.1)  # max and min over the seeds
    assert all(to_rgb(b.get_facecolor()[0]) == pytest.approx(to_rgb(line.get_color()))
               for b, line in zip(bands, lines.values()))
    assert len(curve_lines(fig.axes[0])) == 5 + 2  # no per-seed curves: the means and the two target lines
    faint = plot_accuracy_vs_time(k_groups, [0.85, 0.9], tmp_path / "b.png", seed_curves=True)
    assert len(curve_lines(faint.axes[0])) == 5 + 15 + 2


def test_a_close_up_panel_beside_shows_the_same_curves_around_the_targets(k_groups, tmp_path):
    fig = plot_accuracy_vs_time(k_groups, [0.85, 0.9], tmp_path / "a.png")
    full, close = fig.axes
    assert full.get_ylim() == (0.0, 1.0)
    assert full.get_xlim() == pytest.approx((0, 100.0)) and close.get_xlim() == pytest.approx((0, 77.0))
    # from the lowest target less max(0.05, half the targets' span) to the highest band within the
    # time axis (FedBuff K = 10's 0.95 by 77 s) plus max(0.01, a fifth of the span)
    assert close.get_ylim() == pytest.approx((0.80, 0.96))
    assert close.get_title() == "close-up: accuracy from 80%"
    assert [line.get_label() for line in close.get_lines() if not line.get_label().startswith("_")] == LABELS
    for a, b in zip(mean_lines(fig).values(), [x for x in close.get_lines() if not x.get_label().startswith("_")]):
        assert list(a.get_xdata()) == list(b.get_xdata()) and list(a.get_ydata()) == list(b.get_ydata())
    assert len([c for c in close.collections if isinstance(c, PolyCollection)]) == 5
    assert [t.get_text() for t in close.texts] == ["85%", "90%"]  # each panel labels its target lines
    assert [t.get_text() for t in full.texts] == ["85%", "90%"]
    assert len(fig.legends) == 1  # one legend for both
    one = plot_accuracy_vs_time(k_groups, [0.85, 0.9], tmp_path / "b.png", zoom=False)
    assert len(one.axes) == 1 and one.axes[0].get_title() == fig.get_suptitle()
    assert len(plot_accuracy_vs_time(k_groups, [0.99], tmp_path / "c.png").axes) == 1  # no mean reaches 99%
    assert len(plot_accuracy_vs_time(k_groups, [0.4], tmp_path / "d.png").axes) == 1  # not a close-up from 35%


def test_the_algorithm_sets_the_hue_and_every_arm_has_its_own_line_style_and_marker(k_groups, tmp_path):
    lines = mean_lines(plot_accuracy_vs_time(k_groups, [0.9], tmp_path / "a.png"))
    hue = {label: rgb_to_hsv(to_rgb(line.get_color()))[0] for label, line in lines.items()}
    seafl = [hue[x] for x in LABELS if x.startswith("SEAFL")]
    fedbuff = [hue[x] for x in LABELS if x.startswith("FedBuff")]
    assert max(seafl) - min(seafl) < 0.05 and max(fedbuff) - min(fedbuff) < 0.05
    assert min(abs(a - b) for a in seafl for b in fedbuff) > 0.3
    assert len({line.get_color() for line in lines.values()}) == 5  # shades differ within an algorithm
    assert len({line.get_marker() for line in lines.values()}) == 5  # no two arms share a marker
    seafl_styles = [lines[x].get_linestyle() for x in LABELS if x.startswith("SEAFL")]
    assert len(set(seafl_styles)) == 3  # nor two arms of one algorithm (one hue) a line style


def test_target_labels_never_overlap(k_groups, tmp_path):
    targets = [0.85, 0.86, 0.9, 0.91]
    fig = plot_accuracy_vs_time(k_groups, targets, tmp_path / "a.png")
    fig.canvas.draw()
    texts = [t for t in fig.axes[0].texts if t.get_text().endswith("%")]
    assert [t.get_text() for t in texts] == ["85%", "86%", "90%", "91%"]
    boxes = [t.get_window_extent(fig.canvas.get_renderer()) for t in texts]
    assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert [b.y0 for b in boxes] == sorted(b.y0 for b in boxes)  # still in the targets' order
    ax = fig.axes[0]
    line_85 = ax.transData.transform((0, 0.85))[1]
    assert abs((boxes[0].y0 + boxes[0].y1) / 2 - line_85) < 2  # the lowest stays at its line


def test_the_main_panel_shows_every_run_to_its_end_and_the_close_up_the_targets(k_groups, tmp_path):
    """The longest run (SEAFL K=1, seed 0) ends at 100 s; the means reach 90%: SEAFL K=10 at 16 s, FedBuff
    K=10 at 45 s, FedBuff K=5 at 70 s, SEAFL K=5 and K=1 never: the close-up ends at 70 s + 10%."""
    def xlims(fig):
        return [x for ax in fig.axes for x in ax.get_xlim()]
    assert xlims(plot_accuracy_vs_time(k_groups, [0.85, 0.9], tmp_path / "a.png")) == \
        pytest.approx([0, 100.0, 0, 77.0])
    assert xlims(plot_accuracy_vs_time(k_groups, [0.85, 0.9], tmp_path / "n.png", zoom=False)) == \
        pytest.approx([0, 100.0])  # with or without the close-up
    assert xlims(plot_accuracy_vs_time(k_groups, [0.99], tmp_path / "b.png")) == pytest.approx([0, 100.0])
    assert xlims(plot_accuracy_vs_time(k_groups, [0.9], tmp_path / "c.png", until=50)) == \
        pytest.approx([0, 50.0, 0, 50.0])  # --until cuts both
    fig = plot_accuracy_vs_time(k_groups, [0.9], tmp_path / "d.png", log_x=True)
    assert fig.axes[0].get_xscale() == "log" and xlims(fig) == pytest.approx([5.0, 100.0, 5.0, 77.0])


def test_time_to_target_draws_each_seed_the_mean_and_never(k_groups, tmp_path):
    fig = plot_time_to_target(k_groups, [0.85, 0.9], tmp_path / "t.png")
    ax = fig.axes[1]  # to 90%
    assert ax.get_title() == "to 90%"
    ticks = {t.get_text(): t.get_position()[0] for t in ax.get_xticklabels()}
    never = ticks["never"]
    assert never > 70  # past every finite time (the slowest seed: 70 s)
    cross = MarkerStyle("X")
    cross = cross.get_path().transformed(cross.get_transform()).vertices
    by_row, crosses = {}, {}
    for c in (c for c in ax.collections if isinstance(c, PathCollection)):
        row, xs = int(round(c.get_offsets()[0][1])), list(c.get_offsets()[:, 0])
        by_row[row] = sorted(by_row.get(row, []) + xs)
        if np.array_equal(c.get_paths()[0].vertices, cross):
            crosses[row] = crosses.get(row, []) + xs
    assert by_row[0] == pytest.approx([30, 40, never])  # SEAFL K=5: seed 0 never reached 90%
    assert by_row[1] == pytest.approx([8, 12, 20])
    assert by_row[4] == pytest.approx([never] * 3)  # SEAFL K=1: never, drawn, not dropped
    # a seed that never reached it is a cross, as the caption says, also beside seeds of its arm that did
    assert crosses == {0: pytest.approx([never]), 4: pytest.approx([never] * 3)}
    bars = {int(round(b.get_y() + b.get_height() / 2)): b.get_width() for c in ax.containers for b in c}
    assert bars == pytest.approx({0: 35.0, 1: 40 / 3, 2: 60.0, 3: 92 / 3})  # no bar for K=1: no seed reached
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == LABELS
    for groups in (k_groups, k_groups[:2]):  # two targets and short labels: the narrowest figure
        fig = plot_time_to_target(groups, [0.85, 0.9], tmp_path / "t.png")
        fig.canvas.draw()  # the title and its caption inside the figure (a one-line caption ran off both edges)
        b, box = fig._suptitle.get_window_extent(fig.canvas.get_renderer()), fig.bbox
        assert box.x0 <= b.x0 and b.x1 <= box.x1 and box.y0 <= b.y0 and b.y1 <= box.y1, fig._suptitle.get_text()


def test_time_to_target_against_k_one_line_per_algorithm(k_groups, tmp_path):
    assert swept_keys(k_groups) == ["algorithm.buffer_size"]
    fig = plot_time_vs_value(k_groups, "algorithm.buffer_size", [0.85, 0.9], tmp_path / "v.png")
    ax = fig.axes[1]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert list(lines) == ["SEAFL, β = 10", "FedBuff, β = ∞"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(lines)
    assert list(lines["SEAFL, β = 10"].get_xdata()) == [5, 10]  # K = 1 never reached 90%: not on the line...
    assert lines["SEAFL, β = 10"].get_ydata() == pytest.approx([35.0, 40 / 3])
    fedbuff = lines["FedBuff, β = ∞"]
    assert list(fedbuff.get_xdata()) == [5, 10] and fedbuff.get_ydata() == pytest.approx([60, 92 / 3])
    never = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}["never"]
    hollow = [c.get_offsets() for c in ax.collections if isinstance(c, PathCollection) and c.get_sizes()[0] == 30]
    assert [list(o[0]) for o in hollow] == [[1, never]]  # ...but drawn at "never"
    assert ax.get_xlabel() == "K" and [t.get_text() for t in ax.get_xticklabels()] == ["1", "5", "10"]


def test_beta_infinity_sits_at_the_axis_end_labelled(tmp_path):
    curves = {("seafl", b): [[(0, .1), (t, .9)], [(0, .1), (t + 2, .9)]] for b, t in ((2, 40), (10, 20), (None, 30))}
    groups = sweep(tmp_path / "b", curves, "staleness_limit", lambda v: "null" if v is None else v, [0.9])
    assert [g.label for g in groups] == ["algorithm=seafl,staleness_limit=2", "algorithm=seafl,staleness_limit=10",
                                         "algorithm=seafl,staleness_limit=None"]
    fig = plot_time_vs_value(groups, "algorithm.staleness_limit", [0.9], tmp_path / "v.png")
    ax = fig.axes[0]
    ticks = [(t.get_text(), t.get_position()[0]) for t in ax.get_xticklabels()]
    assert ticks == [("2", 2), ("10", 10), ("∞", 12)]
    line = [line for line in ax.get_lines() if line.get_label() == "SEAFL"][0]
    assert list(line.get_xdata()) == [2, 10, 12] and line.get_ydata() == pytest.approx([41, 21, 31])
    assert ax.get_xlabel() == "β"
    legend = plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png").legends[0]
    assert arm_entries(legend) == ["β = 2", "β = 10", "β = ∞"]


def test_report_writes_each_figure_as_png_pdf_and_csv(k_groups, tmp_path):
    out = tmp_path / "rep"
    files = write_report([tmp_path / "k"], out)["files"]
    for stem in ("accuracy_vs_time", "time_to_target", "time_to_target_vs_buffer_size"):
        assert files[f"{stem}.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert files[f"{stem}.pdf"].read_bytes()[:5] == b"%PDF-" and files[f"{stem}.pdf"].stat().st_size > 5000
    with open(out / "accuracy_vs_time.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] == LABELS[0]]
    assert [float(r["time"]) for r in rows] == [0, 10, 15, 20, 30, 40]
    assert [float(r["mean"]) for r in rows] == pytest.approx([.1, .7 / 3, 1.2 / 3, 1.5 / 3, 1.8 / 3, 2.65 / 3])
    assert [float(r["max"]) for r in rows] == pytest.approx([.1, .5, .6, .8, .9, .95])
    assert {r["point"] for r in rows} == {"algorithm=seafl,buffer_size=5"} and rows[0]["seeds"] == "3"
    with open(out / "time_to_target.csv") as f:
        ttt = [r for r in csv.DictReader(f) if r["label"] == LABELS[0] and r["target"] == "0.9"]
    assert [(r["seed"], float(r["time"])) for r in ttt] == [("0", math.inf), ("1", 30.0), ("2", 40.0)]
    with open(out / "time_to_target_vs_buffer_size.csv") as f:
        vs = [r for r in csv.DictReader(f) if r["line"] == "FedBuff, β = ∞" and r["target"] == "0.9"]
    assert [(r["algorithm.buffer_size"], float(r["mean_of_reached"])) for r in vs][::3] == [("5", 60.0), ("10", pytest.approx(92 / 3))]


def test_long_labels_and_titles_stay_inside_the_figure(tmp_path):
    """Arms differing in many keys: their labels and the title wrap at ", " instead of running off the edge."""
    extra = ["data.concentration={}", "train.lr={}", "train.momentum={}", "algorithm.theta={}", "clock.sec_per_sample={}"]
    for i, scale in enumerate((0.5, 0.25)):
        make_run(tmp_path / "w" / f"r{i}", [(0, .1), (10 * (i + 1), .9)], seed=0,
                 extra=[e.format(v) for e, v in zip(extra, (scale, scale / 10, scale, scale, scale / 100))])
    groups = group_runs(find_runs([tmp_path / "w"]))
    for zoom, width in ((False, 60), (True, 100)):  # the title spans both panels when there are two
        fig = plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png", zoom=zoom)
        assert len(fig.axes) == (2 if zoom else 1)
        fig.canvas.draw()
        renderer, box = fig.canvas.get_renderer(), fig.bbox
        title = fig._suptitle if zoom else fig.axes[0].title
        assert max(len(line) for line in title.get_text().split("\n")) <= width
        assert max(len(line) for t in fig.legends[0].get_texts() for line in t.get_text().split("\n")) <= 60
        assert all("\n" in t for t in arm_entries(fig.legends[0]))  # each too long for one line
        assert ("\n" in title.get_text()) != zoom  # too long for one panel's width, not for two
        for t in [*fig.legends[0].get_texts(), title]:
            b = t.get_window_extent(renderer)
            assert box.x0 <= b.x0 and b.x1 <= box.x1 and box.y0 <= b.y0 and b.y1 <= box.y1, t.get_text()
    assert fig.legends[0].get_texts()[0].get_text().replace(",\n", ", ") == \
        "ϑ = 0.5, lr = 0.05, momentum = 0.5, sec_per_sample = 0.005, concentration = 0.5"  # in config order


def test_a_grid_point_two_sweeps_share_is_named_with_its_sweep(tmp_path):
    curves = {("seafl", 5): CURVES[("seafl", 5)]}
    for name in ("first", "second"):
        sweep(tmp_path / name, curves, "buffer_size", str, [0.9])
    groups = group_runs(find_runs([tmp_path / "first", tmp_path / "second"]))
    curves = {("seafl", 5): CURVES[("seafl", 10)]}  # another curve: the two sweeps' arms differ
    sweep(tmp_path / "third", curves, "buffer_size", str, [0.9])
    groups = group_runs(find_runs([tmp_path / "first", tmp_path / "third"]))
    lines = mean_lines(plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png"))
    assert list(lines) == ["SEAFL (first)", "SEAFL (third)"]


def test_a_dropout_sweep_plots_no_dropout_as_zero(tmp_path):
    curves = {("seafl", p): [[(0, .1), (t, .9)]] for p, t in ((None, 20), (0.1, 30), (0.3, 50))}
    runs = []
    for (alg, p), (curve,) in curves.items():
        name = f"dropout={p}"
        make_run(tmp_path / "d" / name, curve, extra=[f"devices.dropout={'null' if p is None else p}"])
        runs.append({"name": name, "label": name, "seed": 0})
    (tmp_path / "d" / "sweep.json").write_text(json.dumps({"name": "d", "targets": [0.9], "runs": runs}))
    groups = group_runs(find_runs([tmp_path / "d"]))
    assert swept_keys(groups) == ["devices.dropout"]
    ax = plot_time_vs_value(groups, "devices.dropout", [0.9], tmp_path / "v.png").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "0.1", "0.3"] and ax.get_xlabel() == "dropout"
    line = [line for line in ax.get_lines() if line.get_label() == "SEAFL"][0]
    assert list(line.get_xdata()) == [0, 0.1, 0.3] and list(line.get_ydata()) == [20, 30, 50]


def test_the_report_command_hands_its_figure_options_to_every_time_axis(k_groups, tmp_path, monkeypatch):
    from seafl_dist import cli
    from seafl_dist.report import build
    drawn = []
    real = build.write_report
    monkeypatch.setattr(build, "write_report", lambda *a, **kw: drawn.append(real(*a, **kw)) or drawn[-1])
    out = tmp_path / "rep"
    assert cli.main(["report", str(tmp_path / "k"), "--out", str(out), "--until", "50", "--log-x", "--seed-curves"]) == 0
    ax = drawn[0]["figures"]["accuracy_vs_time"].axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlim()[1] == 50 and len(curve_lines(ax)) == 5 + 15 + 2
    assert set(drawn[0]["figures"]) == {"accuracy_vs_time", "time_to_target", "time_to_target_vs_buffer_size"}


def test_arms_whose_means_coincide_share_one_line_and_a_legend_entry_naming_both(tmp_path):
    """The README's figure drew FedBuff β = ∞ exactly under FedBuff β = 10 (no wait ever happens there)."""
    same = [[(0, .1), (10, .6), (30, .92)], [(0, .1), (12, .7), (30, .91)]]
    curves = {("fedbuff", 10): same, ("fedbuff", None): same, ("seafl", 10): [[(0, .1), (20, .93)]] * 2}
    groups = sweep(tmp_path / "s", curves, "staleness_limit", lambda v: "null" if v is None else v, [0.9])
    fig = plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png")
    assert list(mean_lines(fig)) == ["FedBuff, β = 10\n= FedBuff, β = ∞ (one curve)", "SEAFL, β = 10"]
    assert arm_entries(fig.legends[0]) == list(mean_lines(fig))
    nudged = {**curves, ("fedbuff", None): [[(0, .1), (10, .6 + 2e-9), (30, .92)], same[1]]}
    groups = sweep(tmp_path / "t", nudged, "staleness_limit", lambda v: "null" if v is None else v, [0.9])
    assert len(mean_lines(plot_accuracy_vs_time(groups, [0.9], tmp_path / "b.png"))) == 3  # 1e-9 apart: two


def test_a_run_that_diverged_is_marked_on_its_arms_curve(tmp_path):
    make_run(tmp_path / "d" / "fb", [(0, .1), (20, .9), (40, .1), (60, .1)], algorithm="fedbuff",
             diverged_at={"version": 2, "time": 40.0})
    make_run(tmp_path / "d" / "s", [(0, .1), (20, .92), (40, .95)], extra=["train.lr=0.02"])
    groups = group_runs(find_runs([tmp_path / "d"]))
    fig = plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png")
    crosses = [line for line in fig.axes[0].get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [40.0] and list(crosses[0].get_ydata()) == [.1]
    assert fig.axes[0].get_xlim() == pytest.approx((0, 60.0))  # the collapse after the targets shows
    assert "where a run diverged" in [t.get_text() for t in fig.legends[0].get_texts()]
    plain = plot_accuracy_vs_time(groups[1:], [0.9], tmp_path / "b.png")
    assert "where a run diverged" not in [t.get_text() for t in plain.legends[0].get_texts()]


def test_runs_that_end_at_different_times_are_marked_where_each_ends(tmp_path, capsys):
    """FedBuff's seeds capped by run.max_aggregations ended at 40 s and 80 s, SEAFL's at 100 s: a bar on each arm's
    mean where a run ends before the last, and one line (report.md and stderr) suggesting run.max_time."""
    root = tmp_path / "e"
    make_run(root / "fb0", [(0, .1), (20, .5), (40, .7)], algorithm="fedbuff")
    make_run(root / "fb1", [(0, .1), (40, .6), (80, .8)], algorithm="fedbuff", seed=1)
    make_run(root / "s0", [(0, .1), (50, .6), (100, .9)])
    groups = group_runs(find_runs([root]))
    fig = plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png", zoom=False)
    bars = [line for line in fig.axes[0].get_lines() if line.get_marker() == "|"]
    assert [(list(b.get_xdata()), list(b.get_ydata())) for b in bars] == [([40.0, 80.0], pytest.approx([.65, .75]))]
    assert "where a run ends" in [t.get_text() for t in fig.legends[0].get_texts()]
    write_report([root], tmp_path / "rep", targets=[0.9])
    note = "The runs end at different virtual times, from 40.0 s to 100.0 s"
    assert note in (tmp_path / "rep" / "report.md").read_text() and "set run.max_time" in capsys.readouterr().err
    even = plot_accuracy_vs_time(groups[1:], [0.9], tmp_path / "b.png")  # one run: nothing to mark
    assert not [line for line in even.axes[0].get_lines() if line.get_marker() == "|"]


def labelled_sweep(root, points: dict) -> list:
    """A sweep dir of one seed per point, each point labelled in the sweep file: {label: (algorithm, curve)}."""
    runs = []
    for label, (alg, curve) in points.items():
        make_run(root / label, curve, algorithm=alg)
        runs.append({"name": label, "label": label, "point": {"algorithm.name": alg}, "seed": 0})
    (root / "sweep.json").write_text(json.dumps({"name": root.name, "targets": [0.9], "runs": runs}))
    return group_runs(find_runs([root]))


def test_legends_use_the_points_labels_and_arms_get_distinct_colour_blind_safe_colours(tmp_path):
    groups = labelled_sweep(tmp_path / "l", {"stalebuff": ("user_extensions:mean_of_any", [(0, .1), (30, .9)]),
                                             "fedbuff": ("fedbuff", [(0, .1), (30, .8)]),
                                             "seafl": ("seafl", [(0, .1), (30, .85)])})
    fig = plot_accuracy_vs_time(groups, [0.9], tmp_path / "a.png", zoom=False)
    assert arm_entries(fig.legends[0]) == ["stalebuff", "fedbuff", "seafl"]  # not user_extensions:mean_of_any
    colours = {label: to_rgb(line.get_color()) for label, line in mean_lines(fig).items()}
    okabe_ito = {"stalebuff": "#CC79A7", "fedbuff": "#E69F00", "seafl": "#0072B2"}  # reddish purple, orange, blue
    assert colours == {label: pytest.approx(to_rgb(c)) for label, c in okabe_ito.items()}
    ttt = plot_time_to_target(groups, [0.9], tmp_path / "t.png")
    assert [t.get_text() for t in ttt.axes[0].get_yticklabels()] == ["stalebuff", "fedbuff", "seafl"]


def test_no_close_up_with_the_default_targets_as_docs_sweeps_says(k_groups, tmp_path):
    """The means reach 50%, but a close-up from 30% (0.5 less half the span of 0.5, 0.7, 0.9) would be none."""
    assert len(plot_accuracy_vs_time(k_groups, [0.5, 0.7, 0.9], tmp_path / "a.png").axes) == 1
    assert len(plot_accuracy_vs_time(k_groups, [0.8, 0.9], tmp_path / "b.png").axes) == 2
