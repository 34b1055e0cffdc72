"""User mistakes stop the CLI with exit status 2 and one line naming the key, the value and what is
allowed, never a traceback; ``--help`` explains the command."""
import subprocess
import sys
from pathlib import Path

import pytest

import seafl_dist
from one_line import one_error_line
from seafl_dist.cli import main
from seafl_dist.settings import ConfigError

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")

# (overrides, fragments the message must contain); quickstart has N = 30, M = 10, K = 5
BAD = {
    "unknown key": (["algorithm.bufer_size=3"], ["algorithm.bufer_size", "3", "did you mean 'algorithm.buffer_size'?"]),
    "unknown section": (["trainer.epochs=3"], ["trainer.epochs", "did you mean 'train.epochs'?", "algorithm"]),
    "key in another section": (["train.buffer_size=3"], ["train.buffer_size", "did you mean 'algorithm.buffer_size'?"]),
    "wrong type": (["devices.num=ten"], ["devices.num", "'ten'", "integer"]),
    "wrong type float": (["train.lr=fast"], ["train.lr", "'fast'", "number"]),
    "K < 1": (["algorithm.buffer_size=0"], ["algorithm.buffer_size", "0", ">= 1"]),
    "K > M": (["algorithm.buffer_size=11"], ["algorithm.buffer_size", "11", "devices.concurrency"]),
    "beta < 0": (["algorithm.staleness_limit=-1"], ["algorithm.staleness_limit", "-1", ">= 0"]),
    "M > N": (["devices.concurrency=40"], ["devices.concurrency", "40", "devices.num"]),
    "theta > 1": (["algorithm.theta=1.5"], ["algorithm.theta", "1.5", "(0, 1]"]),
    "theta = 0": (["algorithm.theta=0"], ["algorithm.theta", "0", "(0, 1]"]),
    "negative lr": (["train.lr=-0.1"], ["train.lr", "-0.1", "> 0"]),
    "negative momentum": (["train.momentum=-1"], ["train.momentum", "-1", ">= 0"]),
    "unknown algorithm": (["algorithm.name=fedprox"], ["algorithm.name", "'fedprox'", "seafl2", "fedavg"]),
    "unknown idle distribution": (["clock.idle.distribution=gauss"], ["clock.idle.distribution", "gauss", "pareto"]),
    "override without =": (["algorithm.name"], ["algorithm.name", "key.sub=value"]),
}


one_line_error = one_error_line


@pytest.mark.parametrize("case", list(BAD))
def test_bad_config_in_process(case, capsys):
    overrides, fragments = BAD[case]
    assert main(["run", QUICKSTART, *overrides]) == 2
    captured = capsys.readouterr()
    line = one_line_error(captured.err)
    for f in fragments:
        assert f in line, f"{f!r} not in {line!r}"
    assert captured.out == ""


def test_missing_config_file(capsys, tmp_path):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "nope.yaml" in line and "does not exist" in line


def test_bad_yaml_file(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: [unclosed\n")
    assert main(["run", str(bad)]) == 2
    one_line_error(capsys.readouterr().err, "not valid YAML: line 2, column 1: expected ',' or ']'")
    bad.write_text("devices:\n  num: 10\n  concurency: 4\n")
    assert main(["run", str(bad)]) == 2
    assert "devices.concurency" in one_line_error(capsys.readouterr().err)


def test_a_sweep_file_given_to_run_and_a_run_config_given_to_sweep_name_the_other_command(capsys, tmp_path):
    sweep_file = ROOT / "configs" / "digits" / "buffer_size.yaml"
    for argv in (["run", str(sweep_file)], ["run", "digits/buffer_size", "--dry-run"]):
        assert main(argv) == 2
        one_line_error(capsys.readouterr().err, "is a sweep file (it has base: and grid:), not a run config",
                       "run it with `seafl sweep ")
    out = tmp_path / "s"
    assert main(["sweep", QUICKSTART, "--out", str(out)]) == 2 and not out.exists()
    one_line_error(capsys.readouterr().err, "is a run config, not a sweep file", "run it with `seafl run ",
                   "--grid KEY=V1,V2 or --seeds 0,1,2")
    assert main(["sweep", QUICKSTART, "--seeds", "0", "--out", str(out), "--dry-run"]) == 0  # something varies
    with pytest.raises(ConfigError, match="is a sweep file .* `seafl sweep "):
        seafl_dist.run(str(sweep_file))  # the API refuses it alike


@pytest.mark.parametrize("args, fragment", [
    (["run", QUICKSTART, "algorithm.bufer_size=3"], "algorithm.bufer_size"),
    (["run", QUICKSTART, "algorithm.theta=2"], "algorithm.theta"),
    (["run", "no/such/config.yaml"], "does not exist"),
])
def test_bad_config_in_a_real_process_exits_2_without_traceback(args, fragment, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", *args, "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert fragment in one_line_error(proc.stderr)
    assert not (tmp_path / "out").exists()  # nothing was started


@pytest.mark.parametrize("args, fragments", [
    (["--help"], ["usage: seafl", "run", "torchrun"]),
    (["run", "--help"], ["usage: seafl run", "config", "--out", "key.sub=value",
                         "runs/<config-name>-<timestamp>"]),
])
def test_help(args, fragments):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    for f in fragments:
        assert f in proc.stdout, f"{f!r} not in help:\n{proc.stdout}"
    exe = Path(sys.executable).with_name("seafl")
    if exe.exists():
        proc2 = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        assert proc2.returncode == 0 and proc2.stdout == proc.stdout


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: seafl" in capsys.readouterr().out


def test_unknown_command_is_an_argparse_error():
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "train"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and "Traceback" not in proc.stderr
