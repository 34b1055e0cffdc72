"""Rank 0's CPU evaluation runs on one nice-19 thread and hands back its result or its error."""
import os
import sys
import threading

import pytest

from seafl_dist.runtime.lowprio import LowPriority


def _whoami():
    return threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_calls_run_on_one_lowest_priority_daemon_thread():
    lp = LowPriority()
    tid, nice = lp(_whoami)
    assert nice == 19 and tid != threading.get_native_id()
    assert lp(_whoami)[0] == tid  # the same thread every time
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != 19  # the caller keeps its priority
    assert lp._thread.daemon  # an interrupted run does not wait for an evaluation to end


def test_results_and_errors_come_back_to_the_caller():
    lp = LowPriority()
    assert lp(lambda a, b=0: a * b, 6, b=7) == 42
    with pytest.raises(ZeroDivisionError):
        lp(lambda: 1 / 0)
    assert lp(sum, [1, 2, 3]) == 6  # still serving after an error
