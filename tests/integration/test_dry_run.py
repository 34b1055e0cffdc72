"""``seafl run ... --dry-run`` and ``seafl sweep ... --dry-run``: every check a run makes before it
trains, a report of what it would do, and not one byte written anywhere (run dir, data root, cwd).

Most cases call the CLI's ``main`` in this process (no interpreter start); one runs the real
command in a child process with a user's plugin module in its cwd, where a careless import would
leave a ``__pycache__``.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import in_process
from fake_datasets import random_images, write_cifar, write_cinic, write_idx
from leaf_files import WRITERS, write_leaf
from resuming import checkpoint_path, cli, run_args
from one_line import one_error_line
from seafl_dist.cli import main
from seafl_dist.data import DataError, clear_cache, load_dataset
from seafl_dist.sim import stream_seed
from small_runs import QUICKSTART, SMALL
from user_extensions import EXTENDED, SOURCE, write

TINY = [str(QUICKSTART), *SMALL]


def snapshot(*folders) -> dict:
    """Every path under ``folders`` with its size and mtime: the same before and after means nothing written."""
    seen = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = p.stat()
                seen[str(p)] = (st.st_size, st.st_mtime_ns)
    return seen


def dry(args, capsys, code=0):
    """``seafl ARGS --dry-run`` in this process: (stdout, stderr), after checking the exit status."""
    assert main([*map(str, args), "--dry-run"]) == code
    captured = capsys.readouterr()
    return captured.out, captured.err


one_line = one_error_line


@pytest.fixture
def where(tmp_path, monkeypatch):
    """A cwd and a data root of their own, watched for writes."""
    cwd, data = tmp_path / "cwd", tmp_path / "data"
    cwd.mkdir(), data.mkdir()
    monkeypatch.chdir(cwd)
    return cwd, data


def test_good_config_reports_everything_and_writes_nothing(where, capsys):
    cwd, data = where
    before = snapshot(cwd, data)
    out, err = dry(["run", *TINY, "devices.num=40", "--out", cwd / "runs" / "q"], capsys)
    assert "  devices.num = 40" in out and "  algorithm.buffer_size = 2" in out
    assert "  algorithm.name" not in out  # seafl is the default
    assert "data: digits (bundled with scikit-learn): 1437 training and 360 test images of 1x28x28" in out
    assert "model: lenet5 (width 1), 61,706 parameters, 10 classes" in out
    sizes = out.split("shard sizes (dirichlet): ")[1].splitlines()[0]
    assert sizes.startswith("min ") and sizes.endswith("(total 1437 over 40 devices)")  # 40 devices: summarised
    assert "ranks: one process, on cpu" in out
    assert f"run dir: {cwd / 'runs' / 'q'}: fresh (made when the run starts)" in out
    assert "nothing was trained or written" in err
    assert snapshot(cwd, data) == before and not (cwd / "runs").exists()


def test_small_population_lists_every_shard(where, capsys):
    out, _ = dry(["run", *TINY, "--out", "r"], capsys)
    sizes = out.split("shard sizes (dirichlet): ")[1].splitlines()[0].split(", ")
    assert len(sizes) == 10 and sum(map(int, sizes)) == 1437


def test_rank_layout_under_torchrun_environment(where, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "0")
    out, _ = dry(["run", *TINY, "--out", "r"], capsys)
    assert "ranks: 4 ranks: rank 0 aggregates, 3 worker(s) train (runtime.placement=balanced), on cpu" in out
    monkeypatch.setenv("RANK", "2")  # another rank: exits at once, prints nothing
    assert dry(["run", *TINY, "--out", "r"], capsys) == ("", "")


def write_mnist(data, n_train=40, n_test=10, gz=False):
    raw = data / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", random_images(n, 28, 28), gz=gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10, gz=gz)
    return raw


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_headers_and_sizes_without_unpacking(where, capsys, gz):
    cwd, data = where
    write_mnist(data, gz=gz)
    before = snapshot(cwd, data)
    out, _ = dry(["run", *TINY, "data.name=mnist", f"data.root={data}", "data.partition=iid", "--out", "r"], capsys)
    assert f"data: mnist ({data / 'MNIST' / 'raw'}): 40 training and 10 test images of 1x28x28, 10 classes" in out
    assert "shard sizes (iid): 4, 4, 4, 4, 4, 4, 4, 4, 4, 4" in out
    assert snapshot(cwd, data) == before  # the .gz files were not unpacked beside themselves


def test_cifar_and_cinic_are_checked_without_loading_or_caching(where, capsys):
    cwd, data = where
    write_cifar(data, per_batch=4)
    write_cinic(data, "train", per_class=3)
    write_cinic(data, "test", per_class=1)
    before = snapshot(cwd, data)
    out, _ = dry(["run", *TINY, "data.name=cifar10", f"data.root={data}", "model.width=0.25", "--out", "r"], capsys)
    assert "cifar10" in out and "20 training and 4 test images of 3x32x32, 10 classes" in out
    out, _ = dry(["run", *TINY, "data.name=cinic10", f"data.root={data}", "--out", "r"], capsys)
    assert "30 training and 10 test images of 3x32x32" in out and "no decoded cache yet" in out
    assert snapshot(cwd, data) == before  # no .train.seafl-cache.npz


def test_missing_data_with_download_is_not_fetched(where, capsys):
    cwd, data = where
    out, _ = dry(["run", *TINY, "data.name=mnist", f"data.root={data}", "data.download=true", "--out", "r"], capsys)
    assert "data.download=true: the run downloads it (not checked)" in out and "shards: made after the download" in out
    assert not any(data.iterdir())


# ---- each kind of bad input: one line, exit 2, nothing written --------------------------------------

def bad(args, capsys, where) -> str:
    cwd, data = where
    before = snapshot(cwd, data)
    out, err = dry(args, capsys, code=2)
    assert out == "" and snapshot(cwd, data) == before
    return one_line(err)


def test_bad_key(where, capsys):
    line = bad(["run", *TINY, "algorithm.bufer_size=3", "--out", "r"], capsys, where)
    assert "algorithm.bufer_size" in line and "buffer_size" in line


def test_missing_data_file(where, capsys):
    raw = write_mnist(where[1])
    (raw / "t10k-labels-idx1-ubyte").unlink()
    line = bad(["run", *TINY, "data.name=mnist", f"data.root={where[1]}", "--out", "r"], capsys, where)
    assert "dataset 'mnist' not found" in line and "t10k-labels-idx1-ubyte" in line


@pytest.mark.parametrize("name", ["mnist", "mnist-gz", "cifar10", "cinic10"])
def test_truncated_or_damaged_data(where, capsys, name):
    data = where[1]
    if name.startswith("mnist"):
        gz = name.endswith("gz")
        victim = write_mnist(data, gz=gz) / ("train-images-idx3-ubyte" + (".gz" if gz else ""))
    elif name == "cifar10":
        write_cifar(data)
        victim = data / "cifar-10-batches-py" / "data_batch_3"
    else:
        write_cinic(data, "train"), write_cinic(data, "test")
        victim = next((data / "cinic10" / "train" / "dog").iterdir())
    victim.write_bytes(victim.read_bytes()[:-40] if name != "cinic10" else b"not a png at all, just text")
    line = bad(["run", *TINY, f"data.name={name.split('-')[0]}", f"data.root={data}", "--out", "r"], capsys, where)
    assert str(victim) in line
    with pytest.raises(DataError) as run:  # what the run itself says, word for word (the pickle's cause aside)
        load_dataset(name.split("-")[0], data), load_dataset(name.split("-")[0], data, train=False)
    clear_cache()
    assert line.split(" (")[0] == f"seafl: error: {run.value}".split(" (")[0]
    if name != "cifar10":
        assert line == f"seafl: error: {run.value}"


def test_femnist_writers_as_devices_read_but_not_cached(where, capsys):
    cwd, data = where
    write_leaf(data)
    before = snapshot(cwd, data)
    out, _ = dry(["run", *TINY, "data.name=femnist", f"data.root={data}", "data.partition=natural", "devices.num=null",
                  "devices.concurrency=2", "--out", "r"], capsys)
    assert (f"data: femnist ({data / 'femnist'}): 20 training and 9 test images of 1x28x28, 62 classes; 5 writers; "
            "no cache yet") in out
    order = np.random.default_rng(stream_seed(0, "partition")).permutation(5)  # data.seed: run.seed's 0
    sizes = ", ".join(str(WRITERS[list(WRITERS)[w]][0]) for w in order)
    assert f"devices: 5 simulated (one per writer, of 5), 2 training at once; shard sizes (natural): {sizes}" in out
    out, _ = dry(["run", *TINY, "data.name=femnist", f"data.root={data}", "data.partition=natural", "devices.num=3",
                  "devices.concurrency=2", "--out", "r"], capsys)
    assert f"devices: 3 simulated (one per writer, of 5), 2 training at once; shard sizes (natural): " \
           f"{', '.join(sizes.split(', ')[:3])}" in out
    assert snapshot(cwd, data) == before  # no .train.seafl-cache.npz, nothing else
    line = bad(["run", *TINY, "data.name=femnist", f"data.root={data}", "data.partition=natural", "devices.num=null",
                "devices.concurrency=6", "--out", "r"], capsys, where)
    assert "'devices.concurrency' has value 6; allowed: at most the 5 devices" in line
    line = bad(["run", *TINY, "data.partition=natural", "devices.num=null", "--out", "r"], capsys, where)
    assert "'data.partition' has value 'natural'" in line and "digits has no writers" in line


def test_bad_plugin_path(where, capsys, tmp_path):
    line = bad(["run", *TINY, "model.name=no_such_module_here:build", "--out", "r"], capsys, where)
    assert "model.name" in line and "no_such_module_here" in line and "not found" in line


def test_plugin_whose_model_does_not_fit_the_data(where, capsys):
    source = ("import torch\ndef tiny(num_classes, in_channels, image_size, width):\n"
              "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(5, num_classes))\n")
    name = write(where[0], source=source)
    line = bad(["run", *TINY, f"model.name={name}:tiny", "--out", "r"], capsys, where)
    assert f"{name}:tiny" in line and "forward failed" in line


# ---- a rule of your own: called once on a buffer of the model's size, its result checked as a run checks it ----

RULES = SOURCE + '''

def raises(cfg, version, global_flat, updates, base_model):
    raise RuntimeError("no median of an empty list")


def short(cfg, version, global_flat, updates, base_model):
    return AggregationResult(global_flat[:5].clone(), [{"weight": 0.5} for _ in updates])


def one_info(cfg, version, global_flat, updates, base_model):
    return AggregationResult(global_flat.clone(), [{"weight": 1.0}])


def delta_mean(cfg, version, global_flat, updates, base_model, parts=None):
    seen.append((version, [u.base_version for u in updates], global_flat.numel(), int(parts.params.sum())))
    step = torch.stack([u.flat - base_model(u.base_version) for u in updates]).mean(0)
    return AggregationResult(global_flat + step, [{"weight": 0.5} for _ in updates])


def remembers(cfg, version, global_flat, updates, base_model, *, state):
    seen.append((type(state).__name__, dict(state)))
    return AggregationResult(global_flat.clone(), [{"weight": 0.5} for _ in updates],
                             state={"calls": state.get("calls", 0) + 1})


def forgets(cfg, version, global_flat, updates, base_model, *, state):
    return AggregationResult(global_flat.clone(), [{"weight": 0.5} for _ in updates])


seen = []
'''


@pytest.mark.parametrize("rule, says", [("raises", "it raised RuntimeError: no median of an empty list"),
                                        ("short", "its new_global is torch.float32 (5,), not a 1-D float tensor "
                                                  "of 61706 entries"),
                                        ("one_info", "its info is not a list of 2 dicts, one per update"),
                                        ("forgets", "its result's state (None) is NoneType, not a mapping")])
def test_a_broken_rule_is_refused_before_training(where, capsys, rule, says):
    """A rule that raises or returns the wrong shape stops the dry run in one line naming it (it used to pass,
    and fail at the first aggregation, after training had started)."""
    name = write(where[0], source=RULES)
    line = bad(["run", *TINY, f"algorithm.name={name}:{rule}", "--out", "r"], capsys, where)
    assert f"'algorithm.name' has value '{name}:{rule}'" in line and says in line


def test_a_good_rule_is_called_on_two_updates_of_the_models_size(where, capsys):
    import importlib
    name = write(where[0], source=RULES)
    out, err = dry(["run", *TINY, f"algorithm.name={name}:delta_mean", "--out", "r"], capsys)
    assert f"rule: {name}:delta_mean: called on 2 updates of 61,706 entries" in out
    assert "config, data, model, rule, partition and run dir check out" in err
    # at version 0, both from version 0, w_0 of LeNet-5's 61,706 entries, all of them parameters
    assert importlib.import_module(name).seen == [(0, [0, 0], 61706, 61706)]


def test_a_rule_with_memory_is_called_with_an_empty_read_only_state(where, capsys):
    """A stateful rule of one's own (a ``state`` parameter, algo/memory.py) gets what a run's first aggregation
    gives it: ``{}``, read-only."""
    import importlib
    name = write(where[0], source=RULES)
    out, err = dry(["run", *TINY, f"algorithm.name={name}:remembers", "--out", "r"], capsys)
    assert f"rule: {name}:remembers: called on 2 updates of 61,706 entries" in out
    assert "config, data, model, rule, partition and run dir check out" in err
    assert importlib.import_module(name).seen == [("mappingproxy", {})]


# ---- a model too large for the machine: refused before anything is allocated or written --------------

HUGE_WIDTH = "5000"  # LeNet-5 with about 1.5e12 parameters: 18 TB as float32 weights, more than any machine


def refused(args, capsys, where, dry_run: bool) -> str:
    """``args`` with --dry-run (``bad``) or run for real: one line, exit 2, no run dir ``r``."""
    if dry_run:
        return bad(args, capsys, where)
    assert main(args) == 2
    assert not (where[0] / "r").exists()
    return one_line(capsys.readouterr().err)


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_built_in_model_too_large_for_this_machine(where, capsys, dry_run):
    """Counted on the meta device: one line, exit 2, no run dir, in a second (it used to allocate
    10 GB for half a minute and end in the allocator's traceback)."""
    line = refused(["run", *TINY, f"model.width={HUGE_WIDTH}", "--out", "r"], capsys, where, dry_run)
    assert f"'model.width' has value {HUGE_WIDTH}: lenet5" in line and "choose a smaller model.width" in line


OVERCOMMIT = Path("/proc/sys/vm/overcommit_memory")


@pytest.mark.skipif(OVERCOMMIT.exists() and OVERCOMMIT.read_text().strip() == "1",
                    reason="vm.overcommit_memory=1 grants any allocation (the kernel kills the process later)")
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_users_model_too_large_to_build(where, capsys, dry_run):
    """A user's model is built as its code says; the allocator's refusal (4 TB of weights) is one line."""
    source = ("import torch\ndef huge(num_classes, in_channels, image_size, width):\n"
              "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(10**6, 10**6))\n")
    name = write(where[0], source=source)
    line = refused(["run", *TINY, f"model.name={name}:huge", "--out", "r"], capsys, where, dry_run)
    assert f"model.name={name}:huge (model.width 1) cannot be built here" in line and "choose a smaller model" in line


def test_out_is_a_file(where, capsys):
    (where[0] / "afile").write_text("x")
    line = bad(["run", *TINY, "--out", "afile"], capsys, where)
    assert "--out afile is an existing file, not a directory" in line  # the same check as a real run (rundir)


def test_resume_of_a_dir_without_checkpoint(where, capsys):
    (where[0] / "empty").mkdir()
    line = bad(["run", "--resume", "empty"], capsys, where)
    assert "cannot resume empty" in line


def test_resume_and_completed_run_dirs(tmp_path, capsys):
    """A run killed after aggregation 3 (checkpointed) resumes from it; a finished one is completed."""
    out = tmp_path / "run"
    stopped = cli(*run_args([*SMALL, "run.checkpoint_every=1"], out), fault="after_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_path(out, 3).exists(), stopped.stderr
    before = snapshot(tmp_path)
    text, _ = dry(["run", "--resume", out], capsys)
    assert f"run dir: {out}: resume from checkpoint-00000003.pt (after aggregation 3)" in text
    text, _ = dry(["run", *TINY, "run.checkpoint_every=1", "--out", out], capsys)  # the same, by --out
    assert "resume from checkpoint-00000003.pt" in text
    line = one_line(dry(["run", *TINY, "run.seed=5", "--out", out], capsys, code=2)[1])
    assert "run.seed" in line and "another config" in line
    assert snapshot(tmp_path) == before
    assert in_process.seafl("run", "--resume", out).returncode == 0  # the resume itself is not the point here: in this process
    capsys.readouterr()  # its output is not the dry run's
    text, _ = dry(["run", "--resume", out], capsys)
    assert "holds a completed run of this config; the run would do nothing" in text


def test_real_process_with_a_plugin_in_cwd_leaves_no_trace(tmp_path):
    """The command as a user types it: the plugin module is imported, and no __pycache__ appears."""
    name = write(tmp_path)
    before = snapshot(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # Python's default: write it
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", *TINY, *EXTENDED(name), "--out", "runs/x",
                           "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"data: {name}:bands (a user's loader): 400 training and 120 test images of 1x8x8, 4 classes" in proc.stdout
    assert f"model: {name}:tiny_mlp" in proc.stdout and f"shard sizes ({name}:sorted_blocks): 40, 40" in proc.stdout
    assert snapshot(tmp_path) == before


# ---- seafl sweep --dry-run ----------------------------------------------------------------------------

def test_sweep_dry_run_writes_nothing_and_prints_every_command(where, capsys):
    cwd, data = where
    before = snapshot(cwd, data)
    out, err = dry(["sweep", *TINY, "--grid", "algorithm.buffer_size=1,2", "--seeds", "0,1", "--out", "sw",
                    "--launcher", "torchrun --nproc_per_node=2"], capsys)
    commands = [line for line in err.splitlines() if "-m seafl_dist run" in line]
    assert len(commands) == 4 and all(c.startswith("torchrun --nproc_per_node=2 -m seafl_dist run sw/configs/")
                                      for c in commands)
    assert snapshot(cwd, data) == before and not (cwd / "sw").exists()
    assert "4 runs, 0 already completed, 4 to run" in err and "nothing written" in err


def test_sweep_dry_run_of_a_bad_grid_value_is_one_line(where, capsys):
    line = bad(["sweep", *TINY, "--grid", "algorithm.buffer_size=1,99", "--out", "sw"], capsys, where)
    assert "algorithm.buffer_size" in line and "99" in line


def test_sweep_dry_run_of_one_index_checks_that_run_in_full(where, capsys):
    cwd, data = where
    before = snapshot(cwd, data)
    out, err = dry(["sweep", *TINY, "--grid", "data.name=digits,mnist", f"data.root={data}", "--out", "sw",
                    "--index", "0"], capsys)
    assert "-m seafl_dist run sw/configs/data=digits,seed=0.yaml --out sw/data=digits,seed=0" in err
    assert "data: digits (bundled with scikit-learn)" in out and "run dir: sw/data=digits,seed=0: fresh" in out
    assert "ranks: one process" in out
    out, _ = dry(["sweep", *TINY, "--seeds", "0", "--out", "sw", "--index", "0", "--launcher",
                  "torchrun --nproc_per_node=3"], capsys)
    assert "ranks: 3 ranks: rank 0 aggregates, 2 worker(s) train" in out  # each run's own torchrun
    err = dry(["sweep", *TINY, "--grid", "data.name=digits,mnist", f"data.root={data}", "--out", "sw",
               "--index", "1"], capsys, code=2)[1]
    assert err.splitlines()[-1].startswith("seafl: error: dataset 'mnist' not found") and "Traceback" not in err
    assert snapshot(cwd, data) == before
