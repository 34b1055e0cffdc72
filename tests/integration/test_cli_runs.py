"""The CLI end to end on the bundled digits data: every algorithm, its run dir, its trace, determinism.

Each run is tiny (10 devices, 4 in flight, 6 aggregations, one torch thread); one thread also keeps a
run quick when other processes share the cores (two spinning intra-op threads on two busy cores are many
times slower). The runs are in this process (``here``: no interpreter start importing torch and Lightning),
but for the one through the installed console script and the console script's own check.
"""
import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from seafl_dist.report.trace import check_run
import in_process
from small_runs import PER_ALGORITHM, QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[2]
FILES = ("config.yaml", "events.jsonl", "metrics.csv", "summary.json")


def seafl(*args, cwd=None, command=None, timeout=300):
    cmd = command or [sys.executable, "-m", "seafl_dist"]
    return subprocess.run([*cmd, *map(str, args)], cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout)


def here(*args, cwd=None):
    """``seafl ARGS`` in this process (tests/in_process.py), in the repository root unless ``cwd``."""
    return in_process.seafl(*args, cwd=cwd or ROOT)


def console_script():
    """The ``seafl`` entry point installed beside this interpreter, if any."""
    exe = Path(sys.executable).with_name("seafl")
    return [str(exe)] if exe.exists() else None


_RUNS: dict = {}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """run_dir(algorithm) -> the dir of one CLI run of it (made once per module)."""
    def get(name):
        if name not in _RUNS:
            out = tmp_path_factory.mktemp(name) / "run"
            proc = here("run", QUICKSTART, *SMALL, f"algorithm.name={name}", *PER_ALGORITHM[name], "--out", out)
            assert proc.returncode == 0, proc.stderr[-3000:]
            _RUNS[name] = (out, proc)
        return _RUNS[name]
    return get


def events(out):
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def of(evs, kind):
    return [e for e in evs if e["event"] == kind]


@pytest.mark.parametrize("name", list(PER_ALGORITHM))
def test_each_algorithm_writes_a_valid_run_dir(run_dir, name):
    out, proc = run_dir(name)
    for f in FILES:
        assert (out / f).is_file(), f
    assert check_run(out) == []
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["algorithm"]["name"] == name and cfg["devices"]["concurrency"] == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["algorithm"] == name
    assert summary["aggregations"] == 6
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["version"]) for r in rows] == list(range(7))
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in rows)
    evs = events(out)
    aggs = of(evs, "aggregate")
    assert len(aggs) == 6 and summary["events"]["aggregate"] == 6
    assert summary["events"]["start"] == len(of(evs, "start"))
    assert f"run quickstart ({name}): completed" in proc.stdout
    assert (len(of(evs, "notify")) > 0) == (name == "seafl2")
    sizes = [len(a["updates"]) for a in aggs]
    stale = [u["staleness"] for a in aggs for u in a["updates"]]
    if name == "fedavg":  # K = M, beta = 0: synchronous rounds
        assert cfg["algorithm"]["buffer_size"] == 4 and cfg["algorithm"]["staleness_limit"] == 0
        assert sizes == [4] * 6 and set(stale) == {0}
    elif name in ("fedasync", "asyncsgd"):  # K = 1, beta = infinity
        assert cfg["algorithm"]["buffer_size"] == 1 and cfg["algorithm"]["staleness_limit"] is None
        assert sizes == [1] * 6 and max(stale) > 0
    elif name in ("fedbuff", "fadas"):  # beta = infinity: never blocked, exactly K each time
        assert cfg["algorithm"]["staleness_limit"] is None and sizes == [2] * 6
    elif name == "fedstaleweight":  # beta = infinity; with c = 1 its normalised weights sum to 1
        assert cfg["algorithm"]["staleness_limit"] is None and sizes == [2] * 6
        assert all("avg_staleness" in u for a in aggs for u in a["updates"])
        assert all(sum(u["weight"] for u in a["updates"]) == pytest.approx(1.0) for a in aggs)
    else:
        beta = cfg["algorithm"]["staleness_limit"]
        assert max(stale) <= beta
        own = {"cos", "weight"} if name == "port" else {"gamma", "s", "cos", "weight"}  # port: its c_k alone
        assert all(own <= set(u) for a in aggs for u in a["updates"])
        assert all(sum(u["weight"] for u in a["updates"]) == pytest.approx(1.0) for a in aggs)


@pytest.mark.parametrize("name", ["fedbuff", "fedasync"])
def test_baselines_with_a_finite_staleness_limit_wait_like_seafl(tmp_path, name):
    """PLATO's setup: FedBuff / FedAsync with beta = 1 block on stragglers (never notify them)."""
    proc = here("run", QUICKSTART, *SMALL, f"algorithm.name={name}", "algorithm.staleness_limit=1",
                "run.max_aggregations=12", "--out", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert cfg["algorithm"]["staleness_limit"] == 1
    evs = events(tmp_path / "r")
    assert check_run(tmp_path / "r") == [] and not of(evs, "notify")
    stale = [u["staleness"] for a in of(evs, "aggregate") for u in a["updates"]]
    assert max(stale) == 1  # waited for the straggler at exactly beta
    K = 1 if name == "fedasync" else 2
    assert any(len(a["updates"]) > K for a in of(evs, "aggregate"))  # a blocked aggregation took more than K


def test_seafl2_notified_jobs_upload_early(run_dir):
    out, _ = run_dir("seafl2")
    evs = events(out)
    notified = {e["job"] for e in of(evs, "notify")}
    short = [e for e in of(evs, "finish") if e["job"] in notified and e["epochs"] < 2]
    assert short, "no notified job uploaded before its last epoch"
    aggregated = {u["job"]: u["epochs"] for a in of(evs, "aggregate") for u in a["updates"]}
    assert any(aggregated.get(e["job"]) == e["epochs"] for e in short)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["notifications"] == len(notified)


def test_rerun_is_byte_identical_and_lands_in_the_default_out_dir(run_dir, tmp_path):
    first, _ = run_dir("seafl")
    proc = here("run", QUICKSTART, *SMALL, "algorithm.name=seafl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = list((tmp_path / "runs").iterdir())
    assert len(made) == 1 and re.fullmatch(r"quickstart-\d{8}-\d{6}", made[0].name), made
    assert str(Path("runs") / made[0].name) in proc.stderr + proc.stdout
    for f in ("events.jsonl", "metrics.csv"):
        assert (made[0] / f).read_bytes() == (first / f).read_bytes(), f


def test_another_seed_gives_another_trace(run_dir, tmp_path):
    first, _ = run_dir("seafl")
    # a real process: the installed console script, where there is one (else python -m)
    proc = seafl("run", QUICKSTART, *SMALL, "algorithm.name=seafl", "run.seed=1", "--out", tmp_path / "s1",
                 command=console_script())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "s1" / "events.jsonl").read_bytes() != (first / "events.jsonl").read_bytes()
    assert check_run(tmp_path / "s1") == []


def test_console_script_is_installed():
    if console_script() is None and shutil.which("seafl") is None:
        pytest.skip("no seafl console script beside this interpreter (package not pip-installed)")
    exe = console_script() or [shutil.which("seafl")]
    proc = seafl("--help", command=exe)
    assert proc.returncode == 0 and "run" in proc.stdout


def test_overrides_may_follow_options(tmp_path):
    out = tmp_path / "late"
    proc = here("run", str(QUICKSTART), "--out", str(out), *SMALL, "run.max_aggregations=2")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "summary.json").read_text())["aggregations"] == 2
    bad = here("run", str(QUICKSTART), "--out", str(out), "--bogus")
    assert bad.returncode == 2 and "--bogus" in bad.stderr
