"""Sweep files: every shipped sweep expands into valid configs; grid, points, seeds and labels."""
from pathlib import Path

import pytest
import yaml

from seafl_dist.settings import ConfigError
from seafl_dist.experiments import load_sweep, parse_grid_arg
from seafl_dist.experiments.sweep import is_sweep_file, parse_seeds, split_top_level

REPO = Path(__file__).resolve().parents[2]
SWEEP_FILES = [f for f in sorted((REPO / "configs").rglob("*.yaml")) if is_sweep_file(yaml.safe_load(f.read_text()))]


def test_there_is_a_sweep_per_paper_experiment():
    names = {f"{f.parent.name}/{f.stem}" for f in SWEEP_FILES}
    for folder in ("paper", "digits"):
        for exp in ("buffer_size", "staleness_limit", "importance", "alpha_mu"):
            assert f"{folder}/{exp}" in names
    assert {"paper/baselines_emnist", "paper/baselines_cifar10", "paper/baselines_cinic10",
            "paper/seafl2_cifar10", "paper/seafl2_cinic10"} <= names
    assert {"digits/baselines", "digits/seafl2_beta3", "digits/seafl2_beta12"} <= names


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_sweep_expands_and_validates(path):
    sweep = load_sweep(path)
    runs = sweep.expand()  # builds and validates every point's Config
    assert runs and len({r.name for r in runs}) == len(runs)
    seeds = sweep.seeds or [0]
    assert len(runs) % len(seeds) == 0
    for r in runs:
        assert r.config.run.seed == r.seed
        assert r.config.logging.wandb.group == sweep.name
        if sweep.targets:
            assert r.config.run.targets == sweep.targets
        for key, value in r.point.items():  # a nested key too (algorithm.server_opt.lr)
            got = r.config
            for part in key.split("."):
                got = getattr(got, part)
            assert got == value
    if sweep.baseline:  # the baseline names one of the sweep's points
        labels = {r.label for r in runs} | {r.config.algorithm.name for r in runs}
        assert sweep.baseline in labels
    if path.parent.name == "digits":
        assert all(r.config.data.name == "digits" for r in runs)


def test_grid_points_seeds_and_labels(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("devices: {num: 8, concurrency: 4}\nalgorithm: {buffer_size: 2}\n")
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "base": "base.yaml", "overrides": ["train.epochs=1"], "train": {"lr": 0.2},
        "points": [{"label": "two", "algorithm.name": "seafl2", "algorithm.staleness_limit": 3},
                   {"algorithm.name": "fedbuff"}],
        "grid": {"algorithm.mu": [0, 1]}, "seeds": [0, 1], "targets": [0.5]}))
    sweep = load_sweep(sweep_file, grid=[parse_grid_arg("clock.upload_s=0,1.5")], overrides=["train.epochs=2"])
    runs = sweep.expand(threads=1)
    assert len(runs) == 2 * 2 * 2 * 2
    assert runs[0].name == "two,mu=0,upload_s=0,seed=0" and runs[0].seed == 0 and runs[-1].seed == 1
    assert "algorithm=fedbuff,mu=1,upload_s=1.5,seed=1" in {r.name for r in runs}
    c = runs[0].config
    assert (c.algorithm.name, c.algorithm.staleness_limit, c.algorithm.mu) == ("seafl2", 3, 0)
    assert c.train.epochs == 2 and c.train.lr == 0.2 and c.runtime.threads == 1 and c.run.targets == [0.5]


def test_a_plain_config_is_swept_by_its_grid_or_seeds_and_alone_is_refused(tmp_path):
    f = tmp_path / "plain.yaml"
    f.write_text("run: {seed: 4}\n")
    with pytest.raises(ConfigError, match=r"is a run config, not a sweep file .* run it with `seafl run "):
        load_sweep(f)  # nothing varies: that is seafl run's job
    assert [r.name for r in load_sweep(f, seeds=[4]).expand()] == ["seed=4"]
    runs = load_sweep(f, grid=[parse_grid_arg("algorithm.staleness_limit=1,null")], seeds=[0]).expand()
    assert [r.name for r in runs] == ["staleness_limit=1,seed=0", "staleness_limit=null,seed=0"]
    assert runs[1].config.algorithm.staleness_limit is None


def test_bad_sweeps_are_clear_errors(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("base: nope.yaml\ngrid: {algorithm.buffer_size: [1]}\n")
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_sweep(f)
    f.write_text("grid: {algorithm.buffer_size: [1]}\nseed: [0]\n")
    with pytest.raises(ConfigError, match="unknown key.*seed"):
        load_sweep(f)
    f.write_text("grid: {algorithm.buffer_size: [1, 50]}\n")
    with pytest.raises(ConfigError, match="buffer_size=50.*at most devices.concurrency"):
        load_sweep(f).expand()
    with pytest.raises(ConfigError, match="key.sub=v1,v2"):
        parse_grid_arg("algorithm.buffer_size=")
    with pytest.raises(ConfigError, match="integers"):
        parse_seeds("0,a")


def test_split_top_level_keeps_brackets():
    assert split_top_level("1,[0.5,0.7],null") == ["1", "[0.5,0.7]", "null"]
    assert parse_grid_arg("run.targets=[0.5,0.7],[0.9]") == ("run.targets", [[0.5, 0.7], [0.9]])
