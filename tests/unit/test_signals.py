"""runtime/signals.py and runtime/faults.py in this process: real signals sent to ourselves."""
import os
import signal
import threading

import pytest

from seafl_dist.runtime import faults
from seafl_dist.runtime.signals import SIGNALS, Interrupts, RunInterrupted, SweepSignal


def test_the_first_signal_raises_once_and_the_callers_handlers_come_back():
    seen = []

    def mine(signum, frame):
        seen.append(signum)

    before = {s: signal.signal(s, mine) for s in SIGNALS}
    try:
        for _ in range(2):  # twice in a row: the second call honours the signal too
            with pytest.raises(RunInterrupted) as info:
                with Interrupts():
                    os.kill(os.getpid(), signal.SIGUSR1)
                    for _ in range(1000):  # the handler runs at the next bytecode
                        pass
            assert info.value.signal == "SIGUSR1" and isinstance(info.value, KeyboardInterrupt)
            assert all(signal.getsignal(s) is mine for s in SIGNALS)
        with Interrupts() as catching:
            with pytest.raises(RunInterrupted):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass
            os.kill(os.getpid(), signal.SIGTERM)  # while the first is handled: ignored
            os.kill(os.getpid(), signal.SIGINT)
            assert catching.fired == "SIGTERM"
        assert seen == []
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def test_sweeps_raise_their_own_kind_and_default_disposition_is_temporary():
    with Interrupts(raise_as=SweepSignal) as catching:
        with catching.default_disposition():
            assert all(signal.getsignal(s) is signal.SIG_DFL for s in SIGNALS)
        with pytest.raises(SweepSignal):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass


def test_off_the_main_thread_nothing_is_installed_and_it_says_so_once(capsys):
    before = signal.getsignal(signal.SIGTERM)
    results = []

    def body():
        with Interrupts() as catching:
            results.append(catching.active)

    for _ in range(2):
        t = threading.Thread(target=body)
        t.start()
        t.join()
    assert results == [False, False] and signal.getsignal(signal.SIGTERM) is before
    assert capsys.readouterr().err.count("not on the main thread") <= 1  # once per process


@pytest.mark.parametrize("spec", ["after_aggregate", "nowhere:3", "after_aggregate:x", "after_aggregate:3@two",
                                  "during_aggregate:2:NOSUCH"])
def test_a_bad_fault_spec_is_refused(spec):
    with pytest.raises((ValueError, AttributeError)):
        faults.from_env(environ={"SEAFL_FAULT": spec})


def test_a_fault_fires_on_its_rank_in_the_first_attempt_only():
    env = {"SEAFL_FAULT": "after_aggregate:3:KILL@2"}
    assert isinstance(faults.from_env(rank=0, world=3, environ=env), faults.Fault)
    assert faults.from_env(rank=2, world=3, environ=env) is faults.NO_FAULT  # rank 0 sends it
    assert faults.from_env(rank=0, environ={**env, "TORCHELASTIC_RESTART_COUNT": "1"}) is faults.NO_FAULT
    # '#N': in attempt N only (a soak's kills, one per restart)
    second = {"SEAFL_FAULT": "after_aggregate:3:KILL@2#2"}
    for count, armed in (("0", False), ("1", False), ("2", True), ("3", False)):
        got = faults.from_env(rank=0, world=3, environ={**second, "TORCHELASTIC_RESTART_COUNT": count})
        assert isinstance(got, faults.Fault) is armed, count
    assert faults.from_env(rank=0, world=3, environ={**second, "TORCHELASTIC_RESTART_COUNT": "2"}).target == 2
    hang = {"SEAFL_FAULT": "before_group:0:HANG@1"}
    assert faults.from_env(rank=1, environ=hang) is not faults.NO_FAULT
    assert faults.from_env(rank=0, environ=hang) is faults.NO_FAULT
    sent = []
    fault = faults.Fault("during_aggregate:2:TERM@*", rank=0, world=3, pid_of=lambda r: sent.append(r) or 0)
    fault.signal = 0  # signal 0: checks the pid exists, delivers nothing
    fault.at("during_aggregate", 1)
    fault.at("during_aggregate", 2, flush=lambda: sent.append("flush"))
    fault.at("during_aggregate", 2)  # fires once
    assert sent == ["flush", 1, 2]


def test_a_signal_during_a_held_write_is_raised_when_the_write_is_done():
    """runtime/checkpoint.py's writes hold the signals back (signals.held): a SIGTERM that arrives mid-write
    is the run's interrupt once the file is whole, never a torn file (torch.save's RuntimeError)."""
    import os
    import time

    from seafl_dist.runtime.signals import held
    done = []
    with Interrupts():
        with pytest.raises(RunInterrupted, match="SIGTERM"):
            with held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # without held(), the handler would raise here
                done.append("the write")
    assert done == ["the write"]
