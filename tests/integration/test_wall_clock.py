"""No wall-clock channel (issue 60 C, docs/privacy.md "No wall-clock channel"): under DP without
``privacy.diagnostics`` no real time reaches the progress lines, the final summary lines, summary.json or the report
(runs.csv, report.csv), and under ``privacy.diagnostics`` or without DP every one of them is there as before; the
progress lines are then chosen by version, not by the clock; a sweep's "done" line says how long a run took only
without DP. Each run is in this process at tiny scale."""
import io
import json
import math
import os
import re
import sys
import time

import pytest

from resuming import reference
from seafl_dist.experiments.runner import _Pool
from seafl_dist.experiments.sweep import SweepRun
from seafl_dist.report.progress import Progress
from seafl_dist.report.runs import find_runs
from seafl_dist.report.tables import group_rows, group_runs, run_rows
from seafl_dist.settings import config_from_dict
from small_runs import SMALL

PRIVATE = ["algorithm.name=fedbuff", "privacy.enabled=true", "privacy.noise_multiplier=0.5"]
MODES = {"no_dp": [], "dp": PRIVATE, "dp_diagnostics": [*PRIVATE, "privacy.diagnostics=true"]}
REAL = re.compile(r"\breal\b")  # the progress line's "real 1.2s", the summary line's "real time 1.2s"


@pytest.mark.parametrize("mode", list(MODES))
def test_real_time_is_withheld_under_dp_and_shown_under_diagnostics_or_without_dp(mode, tmp_path, capsys):
    capsys.readouterr()
    out = reference(tmp_path / mode, [*SMALL, *MODES[mode], "run.max_aggregations=2", "logging.progress=lines",
                                      "logging.progress_every_s=0"])
    printed = capsys.readouterr()
    lines = (printed.out + printed.err).splitlines()
    progress = [x for x in lines if x.startswith("version ")]
    assert [x.split()[1] for x in progress] == ["0/2", "1/2", "2/2"]  # every_s=0: each evaluation's line
    summary = json.loads((out / "summary.json").read_text())
    groups = group_runs(find_runs([out]))  # the report's tables: runs.csv's row and report.csv's (write_csvs)
    (run_row,), (point_row,) = run_rows(groups, [0.5], None), group_rows(groups, [0.5], None)
    if mode == "dp":
        assert not [x for x in lines if REAL.search(x)], "real time is printed under DP"
        assert "wall_time_s" not in summary
        assert math.isnan(run_row["wall_time_s"]) and all(map(math.isnan, point_row["wall_time_s"]))
    else:
        assert all(re.search(r"  real +\d+\.\ds$", x) for x in progress), progress
        assert [x for x in lines if re.search(r" aggregations, real time \d+\.\ds$", x)], lines
        wall = summary["wall_time_s"]
        assert isinstance(wall, float) and 0 < wall < 600
        assert run_row["wall_time_s"] == wall and point_row["wall_time_s"][0] == wall


def test_lines_without_real_time_come_by_version_whatever_the_clock(monkeypatch):
    """real=False: a line at each hundredth of the total versions (and the last at close), none by the clock."""
    import seafl_dist.report.progress as progress
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    s = io.StringIO()
    p = Progress("lines", total=300, every_s=3600, stream=s, real=False)
    for v in range(0, 300, 2):
        now[0] = 1000.0 * (v % 7)  # a clock that jumps about: it must change nothing
        p.update(v, float(v), 0.5)
    p.close()
    shown = [int(x.split()[1].split("/")[0]) for x in s.getvalue().splitlines()]
    expected = sorted({min(v for v in range(0, 300, 2) if v * 100 // 300 == b) for b in range(100)} | {298})
    assert shown == expected
    assert not [x for x in s.getvalue().splitlines() if REAL.search(x)]


@pytest.mark.parametrize("dp", [False, True])
def test_a_sweep_says_how_long_a_run_took_only_without_dp(dp, tmp_path):
    """The sweep's "done" line gives the run's real seconds, except for a run under DP without diagnostics."""
    cfg = config_from_dict({}, PRIVATE if dp else [])
    run, out = SweepRun("r", "r", {}, 0, cfg), io.StringIO()
    pool = _Pool(1, dict(os.environ), out)
    summary = json.dumps({"status": "completed", "best": 0.5, "time_to_target": {"0.5": 3.0}})
    write = f"open({str(tmp_path / 'summary.json')!r}, 'w').write({summary!r})"
    pool.start("[1/1]", run, [sys.executable, "-c", write], tmp_path)
    while not pool.reap():
        time.sleep(0.02)
    (line,) = [x for x in out.getvalue().splitlines() if " done " in x]
    took = "" if dp else r" in \d+s"
    assert re.fullmatch(rf"\[1/1\] done  r{took}: best acc 0\.5000, time to 50% 3s", line), line
