"""``seafl ARGS`` in the test's own process, as a finished process: what the CLI tests run when the real process is
not the point (docs/testing.md, "Runs in the test's own process").

It owns the isolation a fresh interpreter would have given the run for free:
- torch's global RNG (forked, so the test's own draws are untouched) and its thread count (restored);
- the dataset cache (cleared after, so a test never reads another's arrays);
- the working directory (``cwd``) and argparse's refusal (its SystemExit becomes the exit code);
- the console: the run's stdout and stderr as strings, and with ``console=True`` also what a fresh interpreter
  prints beyond seafl's own lines: the warnings its default filters show (pytest would record them instead) and
  Lightning's log records (its packages give their loggers a console handler when the root logger has none).

Killed, resumed and torchrun runs, sweeps' children and the console script stay real processes
(resuming.cli, launching).
"""
import contextlib
import io
import logging
import subprocess
import warnings

import torch

from seafl_dist.cli import main as seafl_main
from seafl_dist.data import clear_cache

# A fresh interpreter's default warning filters (python -W none, no -X dev): DeprecationWarning shown only from
# __main__, the other three hidden.
FRESH_FILTERS = [("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                 ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                 ("ignore", ResourceWarning, "")]
LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")


class _Console(logging.Handler):
    """Lightning's records as a fresh interpreter prints them: each once (a record may pass two of its loggers, and
    pytest's root handler propagates), as a line of the run's stderr."""

    def __init__(self, stream):
        super().__init__()
        self.stream, self.seen = stream, []

    def emit(self, record):
        if not any(r is record for r in self.seen):
            self.seen.append(record)
            self.stream.write(self.format(record) + "\n")


def seafl(*args, cwd=None, console: bool = False) -> subprocess.CompletedProcess:
    """``seafl ARGS`` here: (args, exit code, stdout, stderr) as ``subprocess.run`` would give them."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    handler = _Console(err) if console else None
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS] if console else []
    for lg in loggers:
        lg.addHandler(handler)
    try:
        with contextlib.ExitStack() as stack:
            if cwd is not None:
                stack.enter_context(contextlib.chdir(cwd))
            caught = stack.enter_context(warnings.catch_warnings(record=True)) if console else []
            if console:
                warnings.resetwarnings()
                for action, category, module in FRESH_FILTERS:
                    warnings.filterwarnings(action, category=category, module=module, append=True)
            stack.enter_context(torch.random.fork_rng(devices=[]))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            try:
                code = seafl_main(argv)
            except SystemExit as exit:
                code = exit.code
        for w in caught:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        torch.set_num_threads(threads)
        clear_cache()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
