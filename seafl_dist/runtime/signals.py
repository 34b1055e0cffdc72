"""Stopping cleanly on SIGTERM, SIGINT and SIGUSR1: one mechanism for runs and sweeps.

:class:`Interrupts` is a context manager. Inside it the first of these signals raises
:class:`RunInterrupted` (a ``KeyboardInterrupt``) wherever the main thread is (training,
waiting on a worker, evaluating); later ones are ignored, so a second SIGTERM (Slurm and
torchrun both send more than one) cannot cut a checkpoint short. On leaving it the caller's
own handlers come back and nothing is left set, so two runs in a row in one process (a
notebook) both honour Ctrl-C. SIGUSR1 is what ``#SBATCH --signal=USR1@120`` sends before a
job's time limit. A run then checkpoints the last completed aggregation, writes summary.json
with status ``interrupted`` and raises; a sweep stops its runs (each checkpoints) and raises
:class:`SweepSignal`.

Off the main thread Python cannot install handlers: the run goes on without them (a signal
then does what the process's own handlers make of it) and says so once per process.

:meth:`Interrupts.default_disposition` puts the operating system's default back for a while
(the signal ends the process at once): a blocking C++ call such as forming a process group
never returns to Python, so a Python handler would leave torchrun's SIGTERM unanswered until
torchrun's 30 s SIGKILL. Nothing is lost there: nothing has been written yet.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class RunInterrupted(KeyboardInterrupt):
    """A run was stopped by SIGTERM, SIGINT or SIGUSR1 (``.signal``: its name, e.g. ``"SIGTERM"``).

    Raised by :func:`seafl_dist.run` on every rank after rank 0 wrote a checkpoint and
    summary.json (status ``interrupted``); rerunning the same call resumes the run. A
    ``KeyboardInterrupt``, so code that already stops on Ctrl-C stops on it too."""

    def __init__(self, message: str = "interrupted", signal_name: str | None = None):
        super().__init__(message)
        self.signal = signal_name


class SweepSignal(RunInterrupted):
    """SIGTERM, SIGINT or SIGUSR1 reached a sweep (scancel, preemption, a Slurm time-limit
    warning, Ctrl-C): its running runs were stopped, each with a checkpoint; rerun to resume."""


_warned_off_main = False


class Interrupts:
    """``with Interrupts(): ...``: the signals raise ``raise_as`` once; the caller's handlers come back after."""

    def __init__(self, raise_as: type[RunInterrupted] = RunInterrupted, what: str = "the run"):
        self.raise_as, self.what = raise_as, what
        self.fired: str | None = None  # the first signal's name, once one came
        self._previous: dict = {}
        self.active = False

    def __enter__(self) -> "Interrupts":
        global _warned_off_main
        if threading.current_thread() is not threading.main_thread():
            if not _warned_off_main:
                _warned_off_main = True
                print(f"seafl: {self.what} is not on the main thread, where Python delivers signals: SIGTERM, "
                      f"SIGINT and SIGUSR1 are not caught (no checkpoint on them); call it from the main "
                      f"thread for that", file=sys.stderr)
            return self
        self.active = True
        self._previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
        self._install()
        return self

    def __exit__(self, *exc) -> None:
        if self.active:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            self.active = False

    def _install(self) -> None:
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame) -> None:
        if self.fired:
            return
        self.fired = signal.Signals(signum).name
        if _Held.depth:  # inside a write that must not be cut: raised when it ends (held)
            _Held.pending = self
            return
        raise self.raise_as(f"received signal {self.fired}", self.fired)

    @contextmanager
    def default_disposition(self):
        """The OS default (end the process) for these signals, then this object's handler again."""
        if not self.active:
            yield
            return
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        try:
            yield
        finally:
            self._install()


class _Held:
    """How many :func:`held` blocks the main thread is in, and the interrupt that came meanwhile."""
    depth = 0
    pending: "Interrupts | None" = None


@contextmanager
def held():
    """SIGTERM, SIGINT and SIGUSR1 held back for the block: an interrupt that comes inside is raised as the
    block ends. A signal's KeyboardInterrupt raised inside ``torch.save``'s zip writer tears the file and
    comes out as torch's RuntimeError ("unexpected pos ..."), so the run ended ``failed`` instead of
    ``interrupted`` (1 of 20 SIGTERMs in the tests): a checkpoint's write is never cut. (Blocking the
    signal in the main thread would not do: the kernel hands it to another thread, and Python still runs
    the handler in the main one.)"""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        pending = _Held.pending if _Held.depth == 0 else None
        if pending is not None:
            _Held.pending = None
            if sys.exc_info()[1] is None:  # an error already on its way out ends the run as it is
                raise pending.raise_as(f"received signal {pending.fired}", pending.fired)
