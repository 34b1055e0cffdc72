"""Progress: plain periodic lines when stderr is not a terminal (CI, SLURM logs), a bar on a terminal."""
import io
import os
import re
import subprocess
import sys

from seafl_dist.report.metric import Metric
from seafl_dist.report.progress import Progress

TINY = """\
algorithm: {name: fedbuff, buffer_size: 2}
devices: {num: 8, concurrency: 4}
train: {epochs: 1, batch_size: 16, lr: 0.05}
clock: {sec_per_sample: 0.01, idle: {distribution: none}}
data: {name: digits, partition: iid}
model: {name: lenet5}
runtime: {threads: 1}
run: {seed: 0, max_aggregations: 4}
"""
LINE = re.compile(r"^version (\d+)/4 +virtual +[\d.]+s +acc [\d.]+ +best [\d.]+ +real +[\d.]+s$")


def test_cli_run_prints_plain_lines_when_not_a_terminal(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(tmp_path / "tiny.yaml"),
                           "logging.progress=auto", "logging.progress_every_s=0", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("version ")]
    assert [int(LINE.match(line).group(1)) for line in lines] == [0, 1, 2, 3, 4]


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_auto_picks_a_bar_on_a_terminal_and_lines_elsewhere():
    tty, pipe = FakeTTY(), io.StringIO()
    for stream in (tty, pipe):
        p = Progress("auto", total=3, every_s=3600, stream=stream)
        for v in range(4):
            p.update(v, 10.0 * v, 0.2 * v)
        p.close()
    assert tty.getvalue().count("\r") == 4 and tty.getvalue().endswith("\n")
    lines = pipe.getvalue().splitlines()  # throttled: the first update, then the last at close
    assert "\r" not in pipe.getvalue() and len(lines) == 2
    assert lines[0].startswith("version 0/3") and lines[1].startswith("version 3/3") and "best 0.6000" in lines[1]


def test_the_best_of_a_metric_to_minimise_is_its_lowest():
    """run.target_mode: min (a loss): the line's best is the lowest value so far, under the metric's name."""
    s = io.StringIO()
    p = Progress("lines", total=3, every_s=0, stream=s, metric=Metric("test_loss", "min"))
    for v, value in enumerate([2.5, 0.75, None, 1.5]):
        p.update(v, 10.0 * v, value)
    p.close()
    shown = [re.search(r"test_loss (\S+)  best (\S+)", line).groups() for line in s.getvalue().splitlines()]
    assert shown == [("2.5000", "2.5000"), ("0.7500", "0.7500"), ("-", "0.7500"), ("1.5000", "0.7500")]


def test_a_line_without_a_total_and_a_bar_hold_the_exact_text():
    s, bar = io.StringIO(), FakeTTY()
    for stream, total in ((s, None), (bar, 40)):
        p = Progress("auto", total=total, every_s=0, stream=stream)
        p.update(3, 12.25, 0.25)
        p.update(4, 1234.5, None)
        p.close()
    line = r"version {}  virtual {}s  acc {}  best 0\.2500  real +\d\.\ds"  # seconds since the Progress began
    first, second = s.getvalue().splitlines()
    assert re.fullmatch(line.format("3", " +12\\.2", "0\\.2500"), first), first
    assert re.fullmatch(line.format("4", "   1234\\.5", "-"), second), second
    drawn = bar.getvalue().split("\r")[1:]
    assert [len(d) for d in drawn] == [100, 101] and drawn[1].endswith(" " * 20 + "\n")
    assert re.fullmatch(line.format("4/40", "   1234\\.5", "-"), drawn[1].rstrip()), drawn[1]


def test_lines_come_every_every_s_and_a_bar_is_cut_at_100_characters(monkeypatch):
    import seafl_dist.report.progress as progress
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    s = io.StringIO()
    p = Progress("lines", total=9, every_s=5, stream=s)
    for v, t in enumerate((100.0, 104.0, 105.0, 109.0)):
        now[0] = t
        p.update(v, 1.0, 0.5)
    assert [line.split()[1] for line in s.getvalue().splitlines()] == ["0/9", "2/9"]  # 5 s after the first: due
    p.close()
    assert s.getvalue().splitlines()[-1].startswith("version 3/9")
    bar = FakeTTY()
    p = Progress("bar", stream=bar, metric=Metric("m" * 80, "max"))
    p.update(1, 1.0, 0.5)
    assert bar.getvalue() == "\r" + ("version 1  virtual       1.0s  " + "m" * 80)[:100]


def test_none_prints_nothing():
    s = io.StringIO()
    p = Progress("none", stream=s)
    p.update(1, 1.0, 0.5)
    p.close()
    assert s.getvalue() == ""
