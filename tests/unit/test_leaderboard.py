"""The leaderboard (report/leaderboard.py, report/extracts.py, docs/leaderboard.md): trace figures, rank, seeds won,
the extract, and the committed page regenerated from its committed extracts byte for byte."""
import json
import re
import math
import shutil
import subprocess
from pathlib import Path

import pytest

import in_process
from seafl_dist.report import extracts, leaderboard
from seafl_dist.report.runs import RunResult, find_runs
from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "leaderboard.md"
INF = math.inf


def upd(device, job, staleness, weight, rejected=False):
    return {"device": device, "job": job, "staleness": staleness, "weight": weight, "rejected": rejected}


def test_trace_figures_are_the_paces_written_out_by_hand():
    """K = 2. Aggregation 1 at 10: arrivals 3, 4 (K-th: 4, waited 6), the update of staleness 2 rejected.
    Aggregation 2 at 20: arrivals 12, 20 (K-th 20: no wait). Virtual time 40."""
    events = [{"event": "finish", "time": 3.0, "device": 1, "job": 0}, {"event": "finish", "time": 4.0, "device": 2, "job": 1},
              {"event": "finish", "time": 9.0, "device": 3, "job": 2},
              {"event": "aggregate", "time": 10.0, "updates": [upd(1, 0, 0, 0.5), upd(2, 1, 1, 0.25),
                                                                upd(3, 2, 2, 0.0, rejected=True)]},
              {"event": "finish", "time": 12.0, "device": 1, "job": 3}, {"event": "finish", "time": 20.0, "device": 2, "job": 4},
              {"event": "aggregate", "time": 20.0, "updates": [upd(1, 3, 3, 0.125), upd(2, 4, 0, 0.125)]}]
    got = extracts.trace_figures(events, 2, 40.0)
    assert got["aggregations_per_100s"] == pytest.approx(100 * 2 / 40)
    assert got["mean_staleness"] == pytest.approx((0 + 1 + 3 + 0) / 4)  # the rejected update not counted
    assert got["weighted_staleness"] == pytest.approx((0.5 * 0 + 0.25 * 1 + 0.125 * 3 + 0.125 * 0) / 1.0)
    assert got["waiting_share"] == pytest.approx(6 / 40)


def test_a_buffer_of_fewer_than_k_updates_waited_on_nothing_and_k_equal_to_its_size_waits_from_the_last():
    events = [{"event": "finish", "time": 1.0, "device": 1, "job": 0}, {"event": "finish", "time": 5.0, "device": 2, "job": 1},
              {"event": "aggregate", "time": 8.0, "updates": [upd(1, 0, 0, 1.0), upd(2, 1, 0, 1.0)]}]
    assert extracts.trace_figures(events, 3, 10.0)["waiting_share"] == 0.0  # (a run's last, cut short)
    assert extracts.trace_figures(events, 2, 10.0)["waiting_share"] == pytest.approx(3 / 10)
    assert extracts.trace_figures(events, 1, 10.0)["waiting_share"] == pytest.approx(7 / 10)
    empty = extracts.trace_figures([], 1, 0.0)
    assert all(math.isnan(v) for v in empty.values())


def run(label, seed, times_to_top, best, tmp_path, trace=None):
    """A run whose accuracy reaches 0.5 at ``times_to_top[0]`` and 0.9 at ``times_to_top[1]`` (None: never), its
    best accuracy ``best`` (below each target it never reaches)."""
    t50, t90 = times_to_top
    assert (t90 is not None or best < 0.9) and (t50 is not None or best < 0.5)
    rows = [{"version": 0, "time": 0.0, "accuracy": 0.1, "updates": 0, "mean_staleness": 0.0, "notifications": 0}]
    for v, (t, acc) in enumerate(sorted(((t50, 0.5), (t90, 0.9)), key=lambda p: (p[0] is None, p[0] or 0)), 1):
        if t is not None:
            rows.append({"version": v, "time": float(t), "accuracy": acc, "updates": 2, "mean_staleness": 0.0,
                         "notifications": 0})
    rows.append({"version": 9, "time": 1000.0, "accuracy": best, "updates": 2, "mean_staleness": 0.0,
                 "notifications": 0})
    d = tmp_path / f"{label},seed={seed}"
    d.mkdir(parents=True)
    if trace:
        (d / "trace.json").write_text(json.dumps(trace))
    return RunResult(d, {"algorithm.name": "fedbuff", "run.seed": seed}, rows,
                     {"status": "completed", "wall_time_s": 10.0}, sweep="lb", label=label)


def test_arms_rank_by_seeds_reaching_the_top_target_then_median_time_then_best_accuracy(tmp_path):
    """The top target is 0.9. fast: 3 seeds, median 90; steady: 3 seeds, median 100 (its mean, 97, would not
    order them otherwise: the median does); lucky: 2 seeds, median 20, below both; the two that never reach it
    order by best accuracy."""
    spec = {"steady": [(10, 100), (10, 100), (10, 91)], "fast": [(10, 90), (10, 80), (10, 200)],
            "lucky": [(10, 20), (10, None), (10, 20)], "never_a": [(10, None)] * 3, "never_b": [(None, None)] * 3}
    best = {"never_a": 0.85, "never_b": 0.45, "lucky": 0.89}
    runs = [run(label, seed, times, best.get(label, 0.95), tmp_path) for label, ts in spec.items()
            for seed, times in enumerate(ts)]
    arms = leaderboard.rows(runs, [0.5, 0.9])
    assert [a["label"] for a in arms] == ["fast", "steady", "lucky", "never_a", "never_b"]
    assert [a["rank"] for a in arms] == [1, 2, 3, 4, 5]
    by = {a["label"]: a for a in arms}
    assert by["lucky"]["times"][0.9] == [20.0, INF, 20.0] and by["never_b"]["times"][0.5] == [INF] * 3
    # seeds won at 0.9: seed 0: lucky (20); seed 1: fast (80); seed 2: lucky (20)
    assert {a["label"]: a["won"] for a in arms} == {"fast": 1, "steady": 0, "lucky": 2, "never_a": 0, "never_b": 0}


def test_a_tie_gives_every_tied_arm_the_seed_and_a_seed_nobody_reached_has_no_winner(tmp_path):
    runs = [run("a", 0, (5, 50), 0.95, tmp_path), run("b", 0, (5, 50), 0.95, tmp_path),
            run("a", 1, (5, None), 0.7, tmp_path), run("b", 1, (5, None), 0.7, tmp_path)]
    assert {a["label"]: a["won"] for a in leaderboard.rows(runs, [0.5, 0.9])} == {"a": 1, "b": 1}


def test_the_tables_say_each_seed_the_mean_over_those_that_reached_and_how_many(tmp_path):
    trace = {"aggregations_per_100s": 4.25, "mean_staleness": 1.5, "weighted_staleness": 1.25, "waiting_share": 0.125}
    runs = [run("x", 0, (10, 100), 0.95, tmp_path, trace), run("x", 1, (20, None), 0.88, tmp_path, trace),
            run("x", 2, (30, 140), 0.97, tmp_path, trace)]
    text = leaderboard.markdown(leaderboard.rows(runs, [0.5, 0.9]), [0.5, 0.9],
                                {"run_commits": {"a,seed=0": "abc1234", "a,seed=1": "abc1234", "b,seed=0": "def5678"},
                                 "machine_time_s": 30.0, "runs": 3, "runs_in_sweep": 4})
    arms, traces, machine = text.strip().split("\n\n")
    assert arms.splitlines()[2] == ("| 1 | x | 10 · 20 · 30 | 20 ± 10 (3/3) | 100 · never · 140 | 120 ± 28 (2/3) | "
                                    "0.9333 ± 0.0473 | 2/3 |")
    assert traces.splitlines()[2] == "| x | 4.2 | 1.50 | 1.25 | 12.5% | 30 |"
    assert "3 of the sweep's 4" in machine and "30 s" in machine
    assert "made at commits `abc1234` (2 runs: a) and `def5678` (1 run: b);" in machine, machine


def test_a_tuning_sweep_chooses_each_methods_first_trial_in_rank_order(tmp_path):
    """Trials are labelled method:setting. fedbuff's lr=2 reaches 0.9 in both seeds and lr=1 in one: lr=2 is
    chosen though lr=1 was faster in the seed it reached; seafl's only trial that reaches 0.9 is theta=0.6."""
    runs = [run("fedbuff:lr=1", 0, (10, 50), 0.95, tmp_path), run("fedbuff:lr=1", 1, (10, None), 0.85, tmp_path),
            run("fedbuff:lr=2", 0, (10, 80), 0.95, tmp_path), run("fedbuff:lr=2", 1, (10, 90), 0.95, tmp_path),
            run("seafl:theta=0.8", 0, (10, None), 0.85, tmp_path), run("seafl:theta=0.8", 1, (10, None), 0.8, tmp_path),
            run("seafl:theta=0.6", 0, (10, 300), 0.95, tmp_path), run("seafl:theta=0.6", 1, (10, None), 0.8, tmp_path)]
    arms = leaderboard.rows(runs, [0.5, 0.9])
    assert leaderboard.chosen(arms) == {"fedbuff": "fedbuff:lr=2", "seafl": "seafl:theta=0.6"}
    table = leaderboard.markdown(arms, [0.5, 0.9]).strip().split("\n\n")[2].splitlines()
    assert table[2:] == ["| fedbuff | lr=2 | 1 |", "| seafl | theta=0.6 | 3 |"]
    plain = [run("fedbuff", 0, (10, 50), 0.95, tmp_path / "plain")]
    assert len(leaderboard.markdown(leaderboard.rows(plain, [0.5, 0.9]), [0.5, 0.9]).strip().split("\n\n")) == 2


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A sweep dir as `seafl sweep` leaves it: two finished runs of the quickstart (made in this process) and one
    interrupted, named in its sweep.json."""
    root = tmp_path_factory.mktemp("sweep")
    entries = []
    for name, extra in (("fedbuff,seed=0", ["algorithm.name=fedbuff"]), ("seafl,seed=0", ["algorithm.staleness_limit=1"])):
        proc = in_process.seafl("run", QUICKSTART, *SMALL, *extra, "logging.progress=none", "--out", root / name)
        assert proc.returncode == 0, proc.stderr[-2000:]
        entries.append({"name": name, "label": name.split(",")[0], "point": []})
    cut = root / "seafl,seed=1"
    shutil.copytree(root / "seafl,seed=0", cut)
    summary = json.loads((cut / "summary.json").read_text())
    (cut / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    entries.append({"name": cut.name, "label": "seafl", "point": []})
    (root / "sweep.json").write_text(json.dumps({"name": "lb", "targets": [0.5], "baseline": "fedbuff",
                                                 "runs": entries}))
    return root


def test_the_extract_holds_each_finished_runs_small_files_and_figures_its_server_also_counted(sweep_dir, tmp_path):
    out = tmp_path / "extract"
    written = extracts.extract(sweep_dir, out, commit="0123abc")
    assert [d.name for d in written] == ["fedbuff,seed=0", "seafl,seed=0"]  # not the interrupted one
    for d in written:
        assert sorted(p.name for p in d.iterdir()) == ["config.yaml", "metrics.csv", "summary.json", "trace.json"]
        for name in extracts.SMALL_FILES:
            assert (d / name).read_bytes() == (sweep_dir / d.name / name).read_bytes()
        summary, trace = (json.loads((d / f).read_text()) for f in ("summary.json", "trace.json"))
        assert trace["mean_staleness"] == pytest.approx(summary["mean_staleness"])  # the server's own count
        assert trace["aggregations_per_100s"] == pytest.approx(100 * summary["aggregations"] / summary["virtual_time"])
    # fedbuff (β = ∞) never waits; SEAFL at β = 1 waits on its stragglers
    assert json.loads((out / "fedbuff,seed=0" / "trace.json").read_text())["waiting_share"] == 0.0
    assert json.loads((out / "seafl,seed=0" / "trace.json").read_text())["waiting_share"] > 0.0
    meta = json.loads((out / "leaderboard.json").read_text())
    assert meta == {"run_commits": {"fedbuff,seed=0": "0123abc", "seafl,seed=0": "0123abc"}, "runs": 2, "runs_in_sweep": 3, "machine_time_s": pytest.approx(
        sum(json.loads((d / "summary.json").read_text())["wall_time_s"] for d in written), abs=0.1)}
    assert [r["name"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == [d.name for d in written]
    # the extract reads as the sweep did: the same runs, labels and times
    assert [(r.label, r.ttt(0.5)) for r in find_runs([out])] == \
        [(r.label, r.ttt(0.5)) for r in find_runs([sweep_dir]) if r.status == "completed"]


def test_an_extract_keeps_the_runs_it_already_holds_each_with_the_commit_that_made_it(sweep_dir, tmp_path):
    """A sweep continued elsewhere: the extract of seafl's run alone, then of a sweep dir holding only fedbuff's,
    holds both (each with its own wall time); an arm added at a later commit keeps the earlier runs' commits, the
    same run extracted again keeps its own, and a run made again takes the new one."""
    only_seafl, only_fedbuff = tmp_path / "a", tmp_path / "b"
    for part, name in ((only_seafl, "seafl,seed=0"), (only_fedbuff, "fedbuff,seed=0")):
        part.mkdir()
        shutil.copytree(sweep_dir / name, part / name)
        shutil.copyfile(sweep_dir / "sweep.json", part / "sweep.json")
    out = tmp_path / "extract"
    assert [d.name for d in extracts.extract(only_seafl, out, commit="0123abc")] == ["seafl,seed=0"]
    assert [d.name for d in extracts.extract(only_fedbuff, out, commit="4567def")] == ["fedbuff,seed=0",
                                                                                          "seafl,seed=0"]
    meta = json.loads((out / "leaderboard.json").read_text())
    walls = [json.loads((sweep_dir / n / "summary.json").read_text())["wall_time_s"] for n in ("fedbuff,seed=0",
                                                                                                "seafl,seed=0")]
    assert (meta["runs"], meta["machine_time_s"]) == (2, pytest.approx(sum(walls), abs=0.1))
    assert meta["run_commits"] == {"fedbuff,seed=0": "4567def", "seafl,seed=0": "0123abc"}
    assert [r["name"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == ["fedbuff,seed=0",
                                                                                         "seafl,seed=0"]
    line = leaderboard.markdown(leaderboard.rows(find_runs([out]), [0.5]), [0.5], meta).splitlines()[-1]
    assert "made at commits `4567def` (1 run: fedbuff) and `0123abc` (1 run: seafl);" in line, line
    extracts.extract(only_seafl, out, commit="89abcde")  # the same seafl run, extracted again at a later commit
    assert extracts.run_commits(out) == {"fedbuff,seed=0": "4567def", "seafl,seed=0": "0123abc"}
    summary = json.loads((only_seafl / "seafl,seed=0" / "summary.json").read_text())
    (only_seafl / "seafl,seed=0" / "summary.json").write_text(json.dumps({**summary, "wall_time_s": 1.5}))
    extracts.extract(only_seafl, out, commit="89abcde")  # seafl made again at the later commit
    assert extracts.run_commits(out) == {"fedbuff,seed=0": "4567def", "seafl,seed=0": "89abcde"}
    assert json.loads((out / "leaderboard.json").read_text())["machine_time_s"] == pytest.approx(walls[0] + 1.5, abs=0.1)
    fresh = tmp_path / "fresh"  # a dir without an extract keeps nothing it did not write
    assert [d.name for d in extracts.extract(only_fedbuff, fresh, commit="4567def")] == ["fedbuff,seed=0"]
    (fresh / "seafl,seed=0").mkdir()  # files of a run the extract never recorded are not taken for one
    for f in (*extracts.SMALL_FILES, "trace.json"):
        shutil.copyfile(out / "seafl,seed=0" / f, fresh / "seafl,seed=0" / f)
    assert [d.name for d in extracts.extract(only_fedbuff, fresh, commit="4567def")] == ["fedbuff,seed=0"]


def test_report_writes_the_tables_and_figure_of_an_extract_and_refuses_a_mixed_command(sweep_dir, tmp_path):
    out = tmp_path / "extract"
    assert in_process.seafl("report", sweep_dir, "--extract", out, "--commit", "0123abc").returncode == 0
    proc = in_process.seafl("report", out, "--leaderboard", "--out", tmp_path / "page")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "page" / "leaderboard.md").read_text() == proc.stdout.rstrip("\n") + "\n"
    assert "| seafl |" in proc.stdout and "| fedbuff |" in proc.stdout and "0.5: each seed" in proc.stdout
    assert (tmp_path / "page" / "leaderboard.png").stat().st_size > 10_000
    for argv in (["report", sweep_dir, out, "--extract", tmp_path / "x"], ["report", sweep_dir, "--extract",
                                                                         tmp_path / "x", "--leaderboard"]):
        proc = in_process.seafl(*argv)
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--extract" in proc.stderr
    proc = in_process.seafl("report", out / "fedbuff,seed=0", "--extract", tmp_path / "y")
    assert proc.returncode == 2 and "sweep.json" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_the_figure_draws_each_seeds_time_as_a_dot_and_each_never_as_a_cross_at_the_edge(tmp_path):
    runs = [run("a", 0, (10, 100), 0.95, tmp_path), run("a", 1, (20, None), 0.88, tmp_path),
            run("b", 0, (40, 200), 0.95, tmp_path), run("b", 1, (30, 150), 0.95, tmp_path)]
    arms = leaderboard.rows(runs, [0.5, 0.9])
    assert [a["label"] for a in arms] == ["b", "a"]  # b: 2 seeds at 0.9
    fig = leaderboard.figure(arms, [0.5, 0.9])
    edge = 1.05 * 1000  # past where the runs (without a budget) stopped: their last rows, at 1,000 s
    panels = [[c.get_offsets().tolist() for c in ax.collections] for ax in fig.axes]
    # arms top to bottom in rank order: b at y = 1, a at y = 0
    assert panels[0] == [[[40, 1], [30, 1]], [[10, 0], [20, 0]]]
    assert panels[1] == [[[200, 1], [150, 1]], [[100, 0]], [[edge, 0]]]  # a's seed 1 never: a cross at the edge
    assert [ax.get_title() for ax in fig.axes] == ["to 0.5", "to 0.9"]
    ticks = fig.axes[0].get_yticks()
    assert dict(zip(ticks, (t.get_text() for t in fig.axes[0].get_yticklabels()))) == {1: "b", 0: "a"}


def test_never_is_drawn_past_the_largest_budget(tmp_path):
    runs = [run("a", 0, (10, None), 0.88, tmp_path)]
    runs[0].config["run.max_time"] = 1500.0
    fig = leaderboard.figure(leaderboard.rows(runs, [0.5, 0.9]), [0.5, 0.9])
    assert [c.get_offsets().tolist() for c in fig.axes[1].collections] == [[], [[1.05 * 1500, 0]]]
BLOCK = re.compile(r"<!-- leaderboard:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /leaderboard:(?P=name) -->", re.S)


def test_the_pages_tables_are_their_committed_extracts_regenerated_byte_for_byte():
    """Every table block of docs/leaderboard.md is `seafl report docs/leaderboard/<name> --leaderboard`'s
    leaderboard.md, from the committed extract alone: no number on the page is copied by hand."""
    blocks = list(BLOCK.finditer(PAGE.read_text()))
    assert blocks, "docs/leaderboard.md holds no <!-- leaderboard:NAME --> block"
    for m in blocks:
        extract = ROOT / "docs" / "leaderboard" / m["name"]
        runs = find_runs([extract])
        targets = json.loads((extract / "sweep.json").read_text())["targets"]
        text = leaderboard.markdown(leaderboard.rows(runs, targets), targets,
                                    json.loads((extract / "leaderboard.json").read_text()))
        assert m["body"] == text, m["name"]


def test_the_commit_an_extract_records_by_default_is_gits_short_hash_and_unknown_outside_a_checkout(tmp_path,
                                                                                                   monkeypatch):
    """An extract without ``commit=`` names the checkout's commit as ``git rev-parse --short HEAD`` prints it (the
    form the page's commits take), and ``unknown`` where the package does not run from a git checkout."""
    here = Path(extracts.__file__).resolve().parent
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    if git.returncode != 0:
        pytest.skip("the package does not run from a git checkout here")
    assert extracts.git_commit() == git.stdout.strip()
    outside = tmp_path / "pkg"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(extracts, "__file__", str(outside / "extracts.py"))
    assert extracts.git_commit() == "unknown"
