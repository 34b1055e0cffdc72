"""Packaged configs by name (`seafl run quickstart`, `seafl configs`) and the sweep API.

The installed-wheel check itself (a fresh venv, outside the clone) is .ci/check_wheel."""
import json
import subprocess
import sys

import pytest

import seafl_dist
from seafl_dist.settings import parse_override
from seafl_dist.cli import main
from seafl_dist.settings import ConfigError, load_config
from seafl_dist.settings.files import find_config, packaged

from small_runs import QUICKSTART, SMALL


def test_configs_are_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("quickstart", "quickstart.yaml", "configs/quickstart.yaml"):
        assert find_config(name).resolve() == QUICKSTART.resolve()
    assert load_config("quickstart").name == "quickstart"
    assert find_config("digits/buffer_size").name == "buffer_size.yaml"
    with pytest.raises(ConfigError) as err:
        load_config("quikstart")
    assert "quikstart" in str(err.value) and "quickstart" in str(err.value) and "\n" not in str(err.value)


def test_seafl_configs_lists_every_packaged_config(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in out]
    assert names == list(packaged()) and {"quickstart", "digits/buffer_size", "paper/seafl2_cifar10"} <= set(names)
    assert any(line.startswith("quickstart ") and "digits" in line for line in out)


def test_a_sweep_by_name_from_elsewhere_via_the_python_api(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    small = {k.replace(".", "__"): v for k, v in map(parse_override, SMALL)}
    small["run__max_aggregations"] = 3
    result = seafl_dist.sweep("quickstart", grid={"algorithm.name": ["seafl", "fedbuff"]}, seeds=[0], jobs=2,
                              report=False, **small)
    assert result["ok"] and result["dir"] == tmp_path.joinpath("runs", "quickstart").relative_to(tmp_path)
    assert sorted(result["runs"]) == ["algorithm=fedbuff,seed=0", "algorithm=seafl,seed=0"]
    for name, summary in result["runs"].items():
        assert summary["status"] == "completed" and summary["aggregations"] == 3
        assert summary["algorithm"] == name.split(",")[0].split("=")[1]
    # run again: both are complete, so nothing runs and the same summaries come back
    again = seafl_dist.sweep("quickstart", grid={"algorithm.name": ["seafl", "fedbuff"]}, seeds=[0], report=False,
                             **small)
    assert again["runs"] == result["runs"]


def test_seafl_run_takes_a_packaged_name(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", "quickstart", *SMALL, "--out", str(tmp_path / "r")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["name"] == "quickstart"
