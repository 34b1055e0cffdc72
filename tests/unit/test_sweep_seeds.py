"""Seeds are seeds: a grid over run.seed is the sweep's seeds, every key the sweep sets itself is
honoured or refused as docs/sweeps.md says, names never repeat a key, the report groups by grid
point and counts distinct seeds, and an old sweep dir named with a repeated key is flagged."""
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from one_line import one_line_message
from seafl_dist.experiments.runner import run_sweep
from seafl_dist.experiments.sweep import load_sweep, parse_grid_arg
from seafl_dist.report.build import write_report
from seafl_dist.report.runs import find_runs, flatten
from seafl_dist.report.tables import group_rows, group_runs
from seafl_dist.runtime.rundir import config_tree
from seafl_dist.settings import ConfigError, config_from_dict, load_yaml
from test_report_tables import make_run

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "configs" / "quickstart.yaml"
# what a user may give for each key the sweep sets itself, and what docs/sweeps.md promises
USER_VALUE = {"run.seed": 7, "run.targets": [0.3], "name": "mine", "logging.wandb.group": "g",
              "logging.wandb.job_type": "jt", "runtime.threads": 3}


def one_line_error(call, *needles):
    """``call()`` raises ConfigError in one line that names each of ``needles``."""
    with pytest.raises(ConfigError) as err:
        call()
    return one_line_message(str(err.value), *needles)


def test_the_issue_example_runs_each_seed_once_per_algorithm():
    sweep = load_sweep(QUICK, grid=[parse_grid_arg("algorithm.name=seafl,fedbuff"), parse_grid_arg("run.seed=0,1")])
    runs = sweep.expand()
    assert sorted(r.name for r in runs) == ["algorithm=fedbuff,seed=0", "algorithm=fedbuff,seed=1",
                                           "algorithm=seafl,seed=0", "algorithm=seafl,seed=1"]
    for r in runs:
        assert r.config.run.seed == r.seed == int(r.name.rsplit("seed=", 1)[1])
    assert "run.seed" not in sweep.grid and sweep.seeds == [0, 1]


def test_a_seed_given_twice_is_refused_in_one_line(tmp_path):
    grid = [parse_grid_arg("run.seed=0,1")]
    one_line_error(lambda: load_sweep(QUICK, grid=grid, seeds=[3]), "run.seed=0,1", "[3]", "--seeds 0,1")
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": str(QUICK), "seeds": [0, 1]}))
    one_line_error(lambda: load_sweep(sweep_file, grid=grid), "run.seed=0,1", "[0, 1]")
    one_line_error(lambda: load_sweep(QUICK, grid=grid, overrides=["run.seed=4"]), "run.seed=4")
    sweep_file.write_text(yaml.safe_dump({"base": str(QUICK), "points": [{"label": "a", "run.seed": 2}]}))
    one_line_error(lambda: load_sweep(sweep_file), "a point sets run.seed", "seeds")
    one_line_error(lambda: load_sweep(QUICK, grid=[parse_grid_arg("run.seed=0,x")]), "a seed must be an integer")


def _flat(cfg) -> dict:
    return flatten(config_tree(cfg))


def test_every_key_the_sweep_sets_itself_is_honoured_or_refused_as_documented(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("devices: {num: 8, concurrency: 4}\n")

    def sweep(targets=None, overrides=()):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"base": "base.yaml", "grid": {"algorithm.buffer_size": [2, 3]},
                                        **({"targets": targets} if targets else {})}))
        return load_sweep(path, overrides=list(overrides))

    # the keys the sweep sets itself: those where a run's config differs from base + its point
    s5 = sweep(targets=[0.5])
    s5.seeds = [5]
    run = s5.expand(threads=2)[0]
    plain = _flat(config_from_dict(load_yaml(base), [f"{k}={v}" for k, v in run.point.items()]))
    own = {k for k, v in _flat(run.config).items() if plain[k] != v}
    assert own == set(USER_VALUE), "a key the sweep sets itself is missing from USER_VALUE and docs/sweeps.md"
    doc = (ROOT / "docs" / "sweeps.md").read_text()
    for key, value in USER_VALUE.items():
        row = re.search(rf"^\| `{re.escape(key)}` \| (honoured|refused)", doc, re.M)
        assert row, f"docs/sweeps.md has no row saying whether a user's {key} is honoured or refused"
        given = f"{key}={json.dumps(value)}"
        for targets in (None, [0.5]):  # run.targets is refused only beside the sweep's own targets
            expect = "refused" if key == "name" or (key == "run.targets" and targets) else "honoured"
            if expect == "refused":
                one_line_error(lambda: sweep(targets, [given]).expand(threads=2), key)
            else:
                assert all(_flat(r.config)[key] == value for r in sweep(targets, [given]).expand(threads=2)), key
            if key != "run.targets":
                assert row.group(1) == expect, f"docs/sweeps.md says {key} is {row.group(1)}; the sweep: {expect}"


def test_names_never_repeat_a_key():
    runs = load_sweep(QUICK, grid=[parse_grid_arg("data.seed=0,1")], seeds=[0, 1]).expand()
    assert {r.name for r in runs} == {"data.seed=0,seed=0", "data.seed=1,seed=0", "data.seed=0,seed=1",
                                      "data.seed=1,seed=1"}


def _sweep_dir(root, runs):
    """A sweep dir of hand-made runs: runs = [(dir name, label, seed, extra overrides)]."""
    meta = []
    for i, (name, label, seed, extra) in enumerate(runs):
        make_run(root / name, [(0, 0.1), (10 + i, 0.6)], seed=seed, extra=extra)
        meta.append({"name": name, "label": label, "seed": seed})
    (root / "sweep.json").write_text(json.dumps({"name": root.name, "runs": meta}))
    return root


def test_the_report_groups_by_grid_point_and_counts_distinct_seeds(tmp_path, capsys):
    sw = _sweep_dir(tmp_path / "bj", [("batch_jobs=1,seed=0", "batch_jobs=1", 0, ["runtime.batch_jobs=1"]),
                                      ("batch_jobs=2,seed=0", "batch_jobs=2", 0, ["runtime.batch_jobs=2"])])
    groups = group_runs(find_runs([sw]))
    assert [g.label for g in groups] == ["batch_jobs=1", "batch_jobs=2"]  # not one point "averaged over seeds"
    old = _sweep_dir(tmp_path / "old", [("algorithm=seafl,seed=1,seed=0", "algorithm=seafl,seed=1", 0, []),
                                        ("algorithm=seafl,seed=0,seed=0", "algorithm=seafl,seed=0", 0, []),
                                        ("algorithm=seafl,seed=0", "algorithm=seafl", 0, []),
                                        ("algorithm=seafl,seed=0b", "algorithm=seafl", 0, [])])
    rows = {r["label"]: r for r in group_rows(group_runs(find_runs([old])), [0.5], None)}
    assert (rows["algorithm=seafl"]["runs"], rows["algorithm=seafl"]["seeds"]) == (2, 1)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(old) in err[0] and "seed twice" in err[0], err
    write_report([old], tmp_path / "rep")
    assert "| 1 (2 runs) |" in (tmp_path / "rep" / "report.md").read_text()


def test_resuming_an_old_sweep_dir_flags_its_repeated_keys(tmp_path):
    old = _sweep_dir(tmp_path / "old", [("algorithm=seafl,seed=1,seed=0", "algorithm=seafl,seed=1", 0, [])])
    stream = io.StringIO()
    run_sweep(load_sweep(QUICK, seeds=[0]), old, dry_run=True, stream=stream)
    flagged = [ln for ln in stream.getvalue().splitlines() if "repeated key" in ln]
    assert len(flagged) == 1 and "algorithm=seafl,seed=1,seed=0" in flagged[0], stream.getvalue()
    fresh = io.StringIO()
    run_sweep(load_sweep(QUICK, seeds=[0]), tmp_path / "new", dry_run=True, stream=fresh)
    assert "repeated key" not in fresh.getvalue()


def test_a_sweeps_base_is_a_file_beside_it_or_a_packaged_configs_name(tmp_path):
    """issue 63, 7: `base: quickstart` from any folder; a file beside the sweep first; neither: one line saying both."""
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text("base: quickstart\nseeds: [0, 1]\n")
    assert load_sweep(sweep_file).base == load_yaml(QUICK)
    sweep_file.write_text("base: quickstart.yaml\nseeds: [0, 1]\n")
    assert load_sweep(sweep_file).base == load_yaml(QUICK)
    (tmp_path / "quickstart.yaml").write_text("devices: {num: 7, concurrency: 3}\n")  # beside it: wins
    assert load_sweep(sweep_file).base == {"devices": {"num": 7, "concurrency": 3}}
    sweep_file.write_text("base: quickstrt\nseeds: [0, 1]\n")
    message = one_line_error(lambda: load_sweep(sweep_file), f"sweep file '{sweep_file}': base 'quickstrt' is neither "
                             f"a file beside it ({tmp_path / 'quickstrt'} does not exist) nor the name of a packaged "
                             "config", "did you mean 'quickstart'?")
    assert "digits/buffer_size" in message
