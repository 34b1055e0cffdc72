"""tests/in_process.py gives a test what a fresh `seafl` process would have printed and left: the guards of the CLI
tests (a stderr of seafl's lines only) hold only if a warning or a Lightning log line does reach that stderr."""
import logging
import warnings

import pytest
import torch

import in_process


def fake_main(argv):
    """Stands in for the CLI: prints, warns, logs through Lightning's logger twice over, draws from torch's RNG,
    changes the thread count, and exits as argparse does for ``--bad``."""
    print("out:", *argv)
    warnings.warn("a user warning", UserWarning)
    warnings.warn("a deprecation", DeprecationWarning)
    logging.getLogger("lightning.pytorch").warning("a Lightning line")
    torch.rand(3)
    torch.set_num_threads(1)
    if "--bad" in argv:
        raise SystemExit(2)
    return 0


@pytest.mark.filterwarnings("ignore:a user warning", "ignore:a deprecation")
def test_console_shows_what_a_fresh_interpreter_would_and_the_process_state_comes_back(monkeypatch):
    monkeypatch.setattr(in_process, "seafl_main", fake_main)
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    expected_next = torch.rand(2)
    torch.manual_seed(0)
    proc = in_process.seafl("run", 3, console=True)
    assert torch.equal(torch.rand(2), expected_next)  # the run's draw came from a forked RNG
    assert torch.get_num_threads() == threads
    assert proc.args == ["run", "3"] and proc.returncode == 0 and proc.stdout == "out: run 3\n"
    lines = proc.stderr.splitlines()
    assert lines.count("a Lightning line") == 1  # once, though it passes two of Lightning's loggers
    assert any("UserWarning: a user warning" in line for line in lines)
    assert not any("DeprecationWarning" in line for line in lines)  # hidden outside __main__, as at a fresh start

    quiet = in_process.seafl("run", "--bad")
    assert quiet.returncode == 2 and quiet.stdout == "out: run --bad\n"
    assert "a Lightning line" not in quiet.stderr and "a user warning" not in quiet.stderr
