"""The same arms across settings (report/across.py, docs/leaderboard.md's point-3 table): which arms, in what
order, each setting's cell, rank and ratio written out by hand; the refusals; the page's block regenerated from
its committed extracts byte for byte by the command itself."""
import json
import re
import shutil
from pathlib import Path

import in_process
from seafl_dist.report import across
from seafl_dist.report.runs import RunResult

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "leaderboard.md"


def run(label, seed, t50, tmp_path, best=None):
    """A finished run reaching accuracy 0.5 at virtual time ``t50`` (None: never; its best then 0.4)."""
    rows = [{"version": 0, "time": 0.0, "accuracy": 0.1, "updates": 0, "mean_staleness": 0.0, "notifications": 0}]
    if t50 is not None:
        rows.append({"version": 1, "time": float(t50), "accuracy": 0.5, "updates": 2, "mean_staleness": 0.0,
                     "notifications": 0})
    rows.append({"version": 2, "time": 2000.0, "accuracy": best or (0.52 if t50 is not None else 0.4), "updates": 2,
                 "mean_staleness": 0.0, "notifications": 0})
    d = tmp_path / f"{label},seed={seed}"
    d.mkdir(parents=True)
    return RunResult(d, {"algorithm.name": "fedbuff", "run.seed": seed}, rows, {"status": "completed"}, sweep="s",
                     label=label)


def setting(tmp_path, name, spec):
    return name, [run(label, seed, t, tmp_path / name) for label, times in spec.items()
                  for seed, t in enumerate(times)]


SPEC = {"base": {"a": [100, 120, 110], "b": [200, 220, None], "c": [50, 70, 60], "d": [10, 10, 10]},
        "s1": {"a": [300, 330, 360], "b": [150, 150, 150]},
        "s2": {"b": [None, None, None], "c": [80, 100, 90], "e": [40, 60, 50]}}


def test_the_table_holds_the_settings_arms_in_the_bases_rank_each_cell_rank_and_ratio_by_hand(tmp_path):
    """d is the base's fastest but no setting holds it: not a row, and not counted in the base's ranks (c 1/3).
    e is no arm of the base: after the base's arms. a is the baseline: s2 lacks it, so s2 has no ratios. b never
    reaches 0.5 in s2: last of s2's three."""
    settings = [setting(tmp_path, n, SPEC[n]) for n in ("base", "s1", "s2")]
    arms = across.table(settings, 0.5)
    assert [a["label"] for a in arms] == ["c", "a", "b", "e"]
    assert arms[3]["cells"]["base"] is None and arms[1]["cells"]["s2"] is None
    text = across.markdown(arms, ["base", "s1", "s2"], 0.5, "a")
    lines = text.splitlines()
    assert lines[0] == ("| arm | base: to 0.5, mean ± sd (k/n) | base: rank | base: ÷ a | s1: to 0.5, mean ± sd (k/n) | "
                        "s1: rank | s1: ÷ a | s2: to 0.5, mean ± sd (k/n) | s2: rank | s2: ÷ a |")
    assert lines[2:6] == [
        "| c | 60 ± 10 (3/3) | 1/3 | 0.55 | not run | — | — | 90 ± 10 (3/3) | 2/3 | — |",
        "| a | 110 ± 10 (3/3) | 2/3 | 1.00 | 330 ± 30 (3/3) | 2/2 | 1.00 | not run | — | — |",
        "| b | 210 ± 14 (2/3) | 3/3 | 1.91 | 150 ± 0 (3/3) | 1/2 | 0.45 | never (0/3) | 3/3 | — |",
        "| e | not run | — | — | not run | — | — | 50 ± 10 (3/3) | 1/3 | — |"]
    assert lines[7].endswith("; ÷ a: the arm's mean time over a's in the same setting.")
    plain = across.markdown(arms, ["base", "s1", "s2"], 0.5, None).splitlines()
    assert plain[2] == "| c | 60 ± 10 (3/3) | 1/3 | not run | — | 90 ± 10 (3/3) | 2/3 |"
    assert plain[-1].endswith("then the mean best accuracy.")


def test_a_tie_on_seeds_and_median_falls_to_the_best_accuracy_and_the_target_is_the_one_given(tmp_path):
    base = ("base", [run("x", 0, 100, tmp_path / "b", best=0.55), run("y", 0, 100, tmp_path / "b", best=0.60)])
    later = ("s", [run("x", 0, 90, tmp_path / "s"), run("y", 0, None, tmp_path / "s")])
    arms = across.table([base, later], 0.5)
    assert [(a["label"], a["cells"]["base"]["rank"], a["cells"]["s"]["rank"]) for a in arms] == [("y", 1, 2),
                                                                                                  ("x", 2, 1)]
    assert [a["cells"]["s"]["times"][0.6] for a in across.table([base, later], 0.6)] == [[float("inf")]] * 2


def test_the_command_refuses_in_one_line_what_it_cannot_make(tmp_path):
    base, tail = ROOT / "docs" / "leaderboard" / "cifar10", ROOT / "docs" / "leaderboard" / "cifar10-heavy-tail"
    for argv in ([base, "--across"], [base, tail, "--across", "--leaderboard"], [base, tail, "--across", "--baseline",
                                                                                    "seafl"],
                 [base, tmp_path, "--across"]):
        proc = in_process.seafl("report", *argv, "--out", tmp_path / "out")
        assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0, proc.stderr
        assert not (tmp_path / "out" / "across.md").exists()
    assert "--baseline 'seafl' is not an arm of the settings (fedbuff, " in in_process.seafl(
        "report", base, tail, "--across", "--baseline", "seafl").stderr


BLOCK = re.compile(r"<!-- across:(?P<names>[\w+-]+) -->\n(?P<body>.*?)<!-- /across:(?P=names) -->", re.S)


def test_the_pages_across_tables_are_the_command_run_on_the_committed_extracts(tmp_path):
    """Each `<!-- across:A+B+C -->` block of docs/leaderboard.md is `seafl report docs/leaderboard/A
    docs/leaderboard/B docs/leaderboard/C --across`'s across.md, byte for byte."""
    blocks = list(BLOCK.finditer(PAGE.read_text()))
    assert blocks, "docs/leaderboard.md holds no <!-- across:NAMES --> block"
    for i, m in enumerate(blocks):
        dirs = [ROOT / "docs" / "leaderboard" / n for n in m["names"].split("+")]
        proc = in_process.seafl("report", *dirs, "--across", "--out", tmp_path / str(i))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert m["body"] == (tmp_path / str(i) / "across.md").read_text(), m["names"]


def test_without_out_the_table_goes_beside_the_base(tmp_path):
    for n in ("cifar10", "cifar10-heavy-tail"):
        shutil.copytree(ROOT / "docs" / "leaderboard" / n, tmp_path / n)
    proc = in_process.seafl("report", tmp_path / "cifar10", tmp_path / "cifar10-heavy-tail", "--across")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "cifar10" / "across.md").read_text().startswith("| arm | cifar10: to 0.5")
    assert not (tmp_path / "cifar10-heavy-tail" / "across.md").exists()


def test_an_unfinished_run_in_a_setting_is_not_counted(tmp_path):
    for n in ("cifar10", "cifar10-heavy-tail"):
        shutil.copytree(ROOT / "docs" / "leaderboard" / n, tmp_path / n)
    cut = tmp_path / "cifar10-heavy-tail" / "fedbuff,seed=9"
    shutil.copytree(tmp_path / "cifar10-heavy-tail" / "fedbuff,seed=0", cut)
    summary = json.loads((cut / "summary.json").read_text())
    (cut / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    meta_path = tmp_path / "cifar10-heavy-tail" / "sweep.json"
    meta = json.loads(meta_path.read_text())
    entry = next(r for r in meta["runs"] if r["name"] == "fedbuff,seed=0")
    meta_path.write_text(json.dumps({**meta, "runs": meta["runs"] + [{**entry, "name": cut.name}]}))
    proc = in_process.seafl("report", tmp_path / "cifar10", tmp_path / "cifar10-heavy-tail", "--across",
                            "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-2000:]
    fedbuff = next(r for r in (tmp_path / "out" / "across.md").read_text().splitlines() if r.startswith("| fedbuff |"))
    assert fedbuff.split(" | ")[4] == "834 ± 121 (3/3)", fedbuff
