"""The in-process executor's thread that trains ahead (CUDA-graph slots, whose jobs train to their
own bits in any group) on the CPU, where the slots step eagerly through the same code: a whole
run gives the bytes of the lazy one-job-at-a-time run, a failure in the thread fails the run where
its result is asked for, and the thread ends with the run."""
import json
import threading

import pytest

from seafl_dist.runtime import executor as ex
from seafl_dist.runtime.server import Server
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import load_config
from small_runs import QUICKSTART, SMALL

ARGS = [*SMALL, "train.epochs=2", "algorithm.name=seafl2", "algorithm.staleness_limit=1", "run.seed=2"]


def run(out, graphs, g):
    exp = prepare(load_config(QUICKSTART, [*ARGS, f"runtime.batch_jobs={g}"]))
    executor = ex.InProcessExecutor(exp, graphs=graphs)
    assert (executor._ahead is not None) == graphs
    try:
        return Server(exp, executor, out).run()
    finally:
        executor.close()
        assert not any(t.name == "seafl-train-ahead" for t in threading.enumerate())


@pytest.mark.parametrize("g", [1, 3])
def test_training_ahead_gives_the_lazy_runs_bytes(tmp_path, g):
    run(tmp_path / "lazy", graphs=False, g=1)
    run(tmp_path / "ahead", graphs=True, g=g)
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "lazy" / name).read_bytes() == (tmp_path / "ahead" / name).read_bytes(), name


def test_a_failure_in_the_thread_fails_the_run(tmp_path, monkeypatch):
    real, calls = ex.train_slots, []

    def third_fails(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the GPU fell off the bus (simulated)")
        return real(*a, **kw)
    monkeypatch.setattr(ex, "train_slots", third_fails)
    with pytest.raises(RuntimeError, match="fell off the bus"):
        run(tmp_path / "run", graphs=True, g=2)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "fell off the bus" in summary["error"]
