"""The measured table of docs/robustness.md (report/robustness.py): the threat figures of a trace written out by
hand, each run's place in the table, the cells, the page and its heatmaps, the command, and the page's block
regenerated from its committed extracts byte for byte."""
import json
import math
import re
from pathlib import Path

import pytest

import in_process
from seafl_dist.report import extracts, robustness
from seafl_dist.report.runs import RunResult, find_runs
from seafl_dist.report.sinks import read_events
from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "robustness.md"


def start(device, job, t, length):
    return {"event": "start", "time": t, "device": device, "job": job, "epoch_ends": [t + length / 2, t + length]}


def upd(device, job, weight, rejected=False, malicious=False):
    u = {"device": device, "job": job, "staleness": 0, "weight": weight, "rejected": rejected}
    return {**u, "malicious": True} if malicious else u


def test_threat_figures_are_the_trace_counted_by_hand():
    """Honest devices 1-4 with mean job lengths 10, 20, 30 and 40 (device 1: jobs of 6 and 14): the median is 25,
    so 3 and 4 are slow. Device 9 is malicious (its length 1 does not move the median). Eight updates, three of
    them malicious (one rejected); honest: 1 (kept, 0.25), 2 (rejected), 3 (kept 0.25 and rejected), 4 (kept 0.5)."""
    events = [start(1, 0, 0.0, 6.0), start(1, 1, 10.0, 14.0), start(2, 2, 0.0, 20.0), start(3, 3, 0.0, 30.0),
              start(4, 4, 0.0, 40.0), start(9, 5, 0.0, 1.0),
              {"event": "aggregate", "time": 50.0, "updates": [
                  upd(1, 0, 0.25), upd(2, 2, 0.0, rejected=True), upd(9, 5, 0.0, rejected=True, malicious=True),
                  upd(9, 6, 0.5, malicious=True), upd(3, 3, 0.25)]},
              {"event": "aggregate", "time": 60.0, "updates": [
                  upd(3, 7, 0.0, rejected=True), upd(4, 4, 0.5), upd(9, 8, -0.5, malicious=True)]}]
    got = robustness.threat_figures(events)
    assert got == pytest.approx({
        "malicious_share": 3 / 8, "malicious_dropped": 1 / 3, "honest_dropped": 2 / 5,
        "slow_honest_dropped": 1 / 3,  # devices 3, 3, 4: one rejected
        "fast_honest_dropped": 1 / 2,  # devices 1, 2: one rejected
        "slow_honest_say": (0.25 + 0.5) / (0.25 + 0.5 + 0.25 + 0.5 + 0.5)})  # |−0.5| counts


def test_a_device_at_the_median_length_is_fast_and_figures_with_nothing_to_count_are_nan():
    events = [start(1, 0, 0.0, 10.0), start(2, 1, 0.0, 20.0), start(3, 2, 0.0, 30.0),
              {"event": "aggregate", "time": 40.0, "updates": [upd(1, 0, 1.0), upd(2, 1, 1.0, rejected=True),
                                                                upd(3, 2, 2.0)]}]
    got = robustness.threat_figures(events)
    assert got["slow_honest_dropped"] == 0.0 and got["fast_honest_dropped"] == 0.5  # 2 (at the median 20) is fast
    assert got["slow_honest_say"] == pytest.approx(2.0 / 4.0)
    assert got["malicious_share"] == 0.0 and math.isnan(got["malicious_dropped"])
    assert all(math.isnan(v) for v in robustness.threat_figures([]).values())


@pytest.mark.parametrize("config, label", [
    ({}, "none"), ({"algorithm.defense.name": "none"}, "none"), ({"algorithm.defense.name": "median"}, "median"),
    ({"algorithm.defense.name": "centered_clipping", "algorithm.defense.f": 3}, "centered_clipping"),
    ({"algorithm.defense.name": "trimmed_mean", "algorithm.defense.beta": 0.2, "algorithm.defense.f": 3},
     "trimmed_mean β 0.2"),
    ({"algorithm.defense.name": "multikrum", "algorithm.defense.f": 2, "algorithm.defense.beta": 0.1}, "multikrum f 2"),
    ({"algorithm.defense.name": "krum", "algorithm.defense.f": 1}, "krum f 1"),
    ({"algorithm.defense.name": "bulyan", "algorithm.defense.f": 4}, "bulyan f 4")])
def test_the_defense_label_names_the_key_that_sizes_it(config, label):
    assert robustness.defense_label(config) == label


@pytest.mark.parametrize("config, where", [
    ({}, ("seafl", "none", "clean", False)),
    ({"algorithm.name": "fedbuff", "threats.fast": True}, ("fedbuff", "none", "clean", False)),  # nobody to be fast
    ({"threats.malicious": 0.2}, ("seafl", "none", "none", False)),  # malicious but honest: attack none
    ({"threats.malicious": 0.2, "threats.attack": "ipm", "threats.fast": True}, ("seafl", "none", "ipm", True)),
    ({"threats.malicious_devices": [3], "threats.attack": "scale", "algorithm.defense.name": "median"},
     ("seafl", "median", "scale", False))])
def test_a_runs_place_is_read_from_its_config(config, where, tmp_path):
    assert robustness.place(RunResult(tmp_path, config, [], {})) == where


def fake(tmp_path, rule, defense, attack, fast, seed, final, best, trace=None):
    """A finished run: its config (defense and attack keys as config.yaml writes them), a metrics.csv whose best
    row is ``best`` and whose last is ``final``, and its trace.json."""
    config = {"algorithm.name": rule, "run.seed": seed}
    if defense != "none":
        config.update({"algorithm.defense.name": defense, "algorithm.defense.f": 2, "algorithm.defense.beta": 0.2})
    if attack != "clean":
        config.update({"threats.malicious": 0.2, "threats.attack": attack, "threats.fast": fast})
    d = tmp_path / f"{rule}-{defense}-{attack}-{fast}-{seed}"
    d.mkdir(parents=True)
    (d / "trace.json").write_text(json.dumps(trace or {}))
    rows = [{"version": v, "time": 10.0 * v, "accuracy": acc, "updates": 2, "mean_staleness": 0.0, "notifications": 0}
            for v, acc in ((1, best), (2, final))]
    return RunResult(d, config, rows, {"status": "completed", "wall_time_s": 5.0})


def grid(tmp_path):
    runs = []
    for seed, (a, b) in enumerate(((0.90, 0.95), (0.80, 0.85), (0.70, 0.99))):
        runs.append(fake(tmp_path, "fedbuff", "none", "clean", False, seed, a, b, {"slow_honest_say": 0.4 + 0.1 * seed}))
    runs.append(fake(tmp_path, "fedbuff", "multikrum", "clean", False, 0, 0.5, 0.6,
                     {"malicious_share": 0.0, "malicious_dropped": math.nan, "honest_dropped": 0.2,
                      "slow_honest_dropped": 0.3, "fast_honest_dropped": 0.1, "slow_honest_say": 0.25}))
    runs.append(fake(tmp_path, "fedbuff", "median", "ipm", True, 0, 0.3, 0.4, {"malicious_share": 0.5}))
    for seed, share in enumerate((0.2, 0.25)):
        runs.append(fake(tmp_path, "fedbuff", "none", "ipm", False, seed, 0.1, 0.2, {"malicious_share": share}))
    runs.append(fake(tmp_path, "seafl", "none", "sign_flip", True, 0, 0.6, 0.7, {"malicious_share": 0.45}))
    return runs


def test_a_seed_with_nothing_to_count_is_left_out_of_its_places_mean_not_spread_over_it(tmp_path):
    """A trace says NaN where it had nothing to count (no malicious update reached a filter in that seed); the place's
    figure is the mean of the seeds that counted, and NaN only when none did."""
    runs = [fake(tmp_path, "fedbuff", "multikrum", "ipm", False, seed, 0.5, 0.6, {"malicious_dropped": dropped})
            for seed, dropped in enumerate((math.nan, 0.4, 0.2))]
    runs.append(fake(tmp_path, "seafl", "multikrum", "ipm", False, 0, 0.5, 0.6, {"malicious_dropped": math.nan}))
    table = robustness.cells(runs)
    assert table[("fedbuff", "multikrum f 2", "ipm", False)]["malicious_dropped"] == pytest.approx(0.3)
    assert math.isnan(table[("seafl", "multikrum f 2", "ipm", False)]["malicious_dropped"])


def test_cells_and_the_page_hold_each_places_seeds_and_figures(tmp_path):
    table = robustness.cells(grid(tmp_path))
    clean = table[("fedbuff", "none", "clean", False)]
    assert (clean["seeds"], clean["final"], clean["best"]) == ([0, 1, 2], [0.90, 0.80, 0.70], [0.95, 0.85, 0.99])
    assert clean["slow_honest_say"] == pytest.approx(0.5) and math.isnan(clean["malicious_share"])
    assert table[("fedbuff", "none", "ipm", False)]["malicious_share"] == pytest.approx(0.225)
    rows, attacks, columns = robustness.axes(table)
    assert rows == [("fedbuff", "none"), ("fedbuff", "median"), ("fedbuff", "multikrum f 2"), ("seafl", "none")]
    assert attacks == ["sign_flip", "ipm"]
    assert columns == [("clean", False), ("sign_flip", True), ("ipm", False), ("ipm", True)]
    page = robustness.markdown(table, [{"runs": 9, "runs_in_sweep": 10, "machine_time_s": 45.0,
                                        "run_commits": {"a": "0123abc"}}])
    lines = page.splitlines()
    assert lines[0] == "| rule · defense | no attack (0%) | sign_flip, fast | ipm | ipm, fast |"
    # mean 0.8 ± sd 0.1 of the finals, mean best 0.93; two seeds of ipm: their count said
    assert lines[2] == "| fedbuff · none | 0.800 ± 0.100 / 0.930 | — | 0.100 ± 0.000 / 0.200 (2) | — |"
    assert lines[3] == "| fedbuff · median | — | — | — | 0.300 ± 0.000 / 0.400 (1) |"
    assert "| fedbuff | ordinary speeds | 20.0% to 25.0% |" not in page  # a mean over the seeds, not their range
    assert "| fedbuff | ordinary speeds | 22.5% |" in page and "| fedbuff | fast attackers | 50.0% |" in page
    assert "| seafl | fast attackers | 45.0% |" in page and "| seafl | ordinary speeds |" not in page
    # only a defense that dropped something gets a row of drops, with the say of its rule without a filter
    assert "| fedbuff · multikrum f 2 | no attack (0%) | — | 20% | 30% | 10% | 25% | 50% |" in page
    assert "| fedbuff · none | no attack" not in page.split("rule · filter")[1]
    assert lines[-1] == ("Runs: 9 of the sweeps' 10, made at commit `0123abc`; machine time 45 s (the runs' wall "
                         "times summed).")


def test_the_heatmaps_put_each_cells_mean_final_where_its_attack_and_defense_meet(tmp_path):
    fig = robustness.figure(robustness.cells(grid(tmp_path)))
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["fedbuff, ordinary speeds", "fedbuff, fast attackers",
                                                 "seafl, ordinary speeds", "seafl, fast attackers"]
    values = [sum(ax.images[0].get_array().filled(math.nan).tolist(), []) for ax in panels]  # row by row
    nan = math.nan
    # columns: no attack, sign_flip, ipm; fedbuff's rows none, median, multikrum f 2
    assert values[0] == pytest.approx([0.8, nan, 0.1, nan, nan, nan, 0.5, nan, nan], nan_ok=True)
    assert values[1] == pytest.approx([0.8, nan, nan, nan, nan, 0.3, 0.5, nan, nan], nan_ok=True)
    assert values[3] == pytest.approx([nan, 0.6, nan], nan_ok=True)
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["no attack", "sign_flip", "ipm"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["none", "median", "multikrum f 2"]
    assert [t.get_text() for t in panels[1].get_yticklabels()] == ["", "", ""]
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in panels)
    assert [t.get_text() for t in panels[0].texts][:3] == ["0.80", "—", "0.10"]


def test_an_extracts_trace_holds_the_threat_figures_and_the_report_writes_the_page(tmp_path):
    """A real run with a malicious device and Multi-Krum, extracted: its trace.json holds threat_figures of its
    events, and `seafl report --robustness` writes the page (stdout = robustness.md) and the heatmaps."""
    sweep = tmp_path / "sweep"
    name = "fedbuff-multikrum,seed=0"
    proc = in_process.seafl("run", QUICKSTART, *SMALL, "algorithm.name=fedbuff", "algorithm.buffer_size=5",
                            "algorithm.defense.name=multikrum", "algorithm.defense.f=1", "devices.concurrency=6",
                            "threats.malicious_devices=[0,1]", "threats.attack=sign_flip", "--out", sweep / name)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (sweep / "sweep.json").write_text(json.dumps({"name": "r", "targets": [0.5], "runs": [
        {"name": name, "label": "fedbuff-multikrum", "point": []}]}))
    out = tmp_path / "extract"
    extracts.extract(sweep, out, commit="0123abc")
    trace = json.loads((out / name / "trace.json").read_text())
    expected = robustness.threat_figures(read_events(sweep / name / "events.jsonl"))
    assert {k: trace[k] for k in robustness.FIGURES} == pytest.approx(expected, nan_ok=True)
    assert expected["malicious_share"] > 0 and expected["honest_dropped"] + expected["malicious_dropped"] > 0
    proc = in_process.seafl("report", out, "--robustness", "--out", tmp_path / "page")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "page" / "robustness.md").read_text()
    assert text == proc.stdout.rstrip("\n") + "\n" and "| fedbuff · multikrum f 1 | sign_flip |" in text
    assert (tmp_path / "page" / "robustness.png").stat().st_size > 10_000
    proc = in_process.seafl("report", tmp_path / "nothing", "--robustness")
    assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0


BLOCK = re.compile(r"<!-- robustness:(?P<names>[\w+-]+) -->\n(?P<body>.*?)<!-- /robustness:(?P=names) -->", re.S)


def test_the_pages_tables_are_their_committed_extracts_regenerated_byte_for_byte():
    """Each table block of docs/robustness.md, `<!-- robustness:A+B -->`, is `seafl report docs/robustness/A
    docs/robustness/B --robustness`'s robustness.md: no number on the page is copied by hand."""
    blocks = list(BLOCK.finditer(PAGE.read_text()))
    assert blocks, "docs/robustness.md holds no <!-- robustness:NAMES --> block"
    for m in blocks:
        dirs = [ROOT / "docs" / "robustness" / n for n in m["names"].split("+")]
        runs = [r for r in find_runs(dirs) if r.status == "completed"]
        metas = [json.loads((d / "leaderboard.json").read_text()) for d in dirs]
        assert m["body"] == robustness.markdown(robustness.cells(runs), metas), m["names"]
