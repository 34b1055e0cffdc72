"""Rank 0's end of a run with a distributed-like executor, without launching ranks.

Under torchrun, SIGTERM reaches rank 0 and the workers at once; if it lands while rank 0
evaluates (outside ``executor.result``), the workers are gone before rank 0 could say
goodbye. The summary must still be written (status "interrupted"), and the goodbye must
not be attempted. A completed run whose goodbye fails is reported as failed.
"""
import json

import pytest
import torch

from small_runs import QUICKSTART, SMALL
from seafl_dist.settings import load_config
from seafl_dist.runtime.executor import InProcessExecutor
from seafl_dist.runtime.server import Server
from seafl_dist.runtime.setup import prepare
from seafl_dist.transport.p2p import TransportError


class GoneWorkers(InProcessExecutor):
    """Trains in process; ``close()`` fails like a goodbye to dead workers; may interrupt a submit."""

    def __init__(self, exp, interrupt_at_submit=None):
        super().__init__(exp)
        self.submits, self.interrupt_at, self.closed = 0, interrupt_at_submit, 0

    def submit(self, spec, start):
        self.submits += 1
        if self.submits == self.interrupt_at:
            raise KeyboardInterrupt("received signal SIGTERM")
        super().submit(spec, start)

    def close(self):
        self.closed += 1
        raise TransportError("receiving from rank 1 failed: Connection reset by peer")


@pytest.fixture(scope="module")
def exp():
    threads = torch.get_num_threads()
    yield prepare(load_config(QUICKSTART, [*SMALL, "run.max_aggregations=3"]))
    torch.set_num_threads(threads)


def test_interrupt_outside_result_still_writes_the_summary(exp, tmp_path):
    executor = GoneWorkers(exp, interrupt_at_submit=6)  # after the first aggregation's evaluation
    with pytest.raises(KeyboardInterrupt):
        Server(exp, executor, tmp_path).run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "SIGTERM" in summary["error"]
    assert summary["aggregations"] >= 1
    assert executor.closed == 0  # no goodbye to workers that may be gone


def test_a_failed_goodbye_marks_a_finished_run_failed(exp, tmp_path):
    executor = GoneWorkers(exp)
    with pytest.raises(TransportError):
        Server(exp, executor, tmp_path).run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "TransportError" in summary["error"]
    assert summary["aggregations"] == 3 and executor.closed == 1
