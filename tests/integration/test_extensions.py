"""Bring your own model, dataset, partition and rule: `seafl run` and the Python API run them end to end."""
import json
import os
import subprocess
import sys

import pytest
import torch

import seafl_dist
from seafl_dist.settings import parse_override
from seafl_dist.report.trace import check_run

from small_runs import QUICKSTART, SMALL
from user_extensions import EXTENDED, write


def env_with(folder):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        yield
    torch.set_num_threads(threads)


def test_seafl_run_trains_a_users_model_data_split_and_rule(tmp_path):
    mod = write(tmp_path)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *EXTENDED(mod),
                           "--out", str(out)], env=env_with(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["algorithm"] == f"{mod}:uniform_mean"
    assert summary["aggregations"] == 6 and summary["best_accuracy"] > 0.4  # 4 classes: chance is 0.25
    assert check_run(out) == []
    run = seafl_dist.load_run(out)
    for ev in (e for e in run.events if e["event"] == "aggregate"):
        assert [u["weight"] for u in ev["updates"]] == [1 / len(ev["updates"])] * len(ev["updates"])
    assert run.partition["dataset"] == f"{mod}:bands" and run.partition["method"] == f"{mod}:sorted_blocks"
    assert run.partition["n_samples"] == [40] * 10
    assert [sum(1 for c in h if c) for h in run.partition["label_histograms"]] == [1, 1, 2, 1, 1, 1, 1, 2, 1, 1]


def test_a_bad_import_path_stops_the_cli_with_one_line_before_anything_runs(tmp_path):
    mod = write(tmp_path)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL,
                           f"model.name={mod}:no_such_builder", "--out", str(out)],
                          env=env_with(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.name" in lines[0] and f"{mod}:no_such_builder" in lines[0], proc.stderr
    assert not out.exists()


def test_the_python_api_runs_a_path_a_dict_or_a_config_with_overrides(tmp_path, monkeypatch, keep_threads):
    mod = write(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    kw = {k.replace(".", "__"): v for k, v in map(parse_override, SMALL)}
    a = seafl_dist.run("quickstart", out=tmp_path / "a", **kw, model={"name": f"{mod}:tiny_mlp"},
                       data__name=f"{mod}:bands", **{"data.partition": f"{mod}:sorted_blocks"})
    cfg = seafl_dist.load_run(tmp_path / "a").to_config()
    assert (cfg.model.name, cfg.data.name, cfg.devices.num, cfg.run.max_aggregations) == \
        (f"{mod}:tiny_mlp", f"{mod}:bands", 10, 6)
    b = seafl_dist.run(cfg.to_dict(), out=tmp_path / "b")
    c = seafl_dist.run(cfg, out=tmp_path / "c", algorithm__name="fedbuff")
    assert a["status"] == b["status"] == c["status"] == "completed"
    mtime = (tmp_path / "b" / "events.jsonl").stat().st_mtime_ns
    assert seafl_dist.run(cfg, out=tmp_path / "b") == b  # completed with this config: returned, not rerun
    assert (tmp_path / "b" / "events.jsonl").stat().st_mtime_ns == mtime
    assert (tmp_path / "a" / "events.jsonl").read_bytes() == (tmp_path / "b" / "events.jsonl").read_bytes()
    # a resolved Config carries SEAFL's beta = 10 as a given value, which FedBuff keeps (PLATO's staleness bound)
    assert c["algorithm"] == "fedbuff" and seafl_dist.load_run(tmp_path / "c").config["algorithm"]["staleness_limit"] == 10
    runs = [seafl_dist.load_run(tmp_path / d) for d in "ab"]
    assert runs[0].metrics == runs[1].metrics and len(runs[0].metrics) == 7 and runs[0].summary == a
    with pytest.raises(seafl_dist.api.ConfigError, match="config key 'train.lr' has value -1"):
        seafl_dist.run("quickstart", out=tmp_path / "d", train__lr=-1)
    assert not (tmp_path / "d").exists()
