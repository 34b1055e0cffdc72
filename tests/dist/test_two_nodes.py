"""Two nodes for real on one machine: two torchrun agents (``--nnodes=2``, 2 ranks each) meeting in a c10d
rendezvous on localhost, as slurm/multinode.sbatch starts them on a cluster (tests/dist/two_nodes.py).

- 2 x 2 ranks give the one-process run's bytes;
- a worker on the second node SIGKILLed (``SEAFL_FAULT=after_aggregate:3:KILL@2``): under
  ``--max-restarts`` both nodes' ranks restart and the run ends byte-identical;
- the second node lost (its agent and its rank SIGKILLed), with and without ``--max-restarts``:
  the first node ends within ``runtime.timeout_s`` plus the join timeout, rank 0's line names the
  lost rank, the checkpoint is kept, and the same command on two nodes (or one process) resumes
  to the same bytes. One rank per node here (the rank layout of 2 x 2 is the tests above), which
  keeps the tier under three minutes on two cores;
- a node that never arrives: the agent ends after the join timeout in one line of ours (not torchrun's
  traceback), nothing written.
"""
import time

import pytest

from resuming import assert_same_run, checkpoint_versions, cli, reference, run_args, summary
from one_line import one_error_line
from small_runs import SMALL
from two_nodes import Nodes

pytestmark = pytest.mark.dist

TIMEOUT_S, JOIN_S = 20, 5
RUN = [*SMALL, "run.max_aggregations=8", "run.checkpoint_every=1", f"runtime.timeout_s={TIMEOUT_S}"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("two_nodes") / "ref", RUN)


@pytest.fixture
def nodes():
    """nodes(*run_args, cwd=..., **kw) -> Nodes; every agent and rank is killed at teardown."""
    started = []

    def start(*run_args, **kw):
        started.append(Nodes(*run_args, **kw))
        return started[-1]

    yield start
    for job in started:
        job.kill_all()


def test_two_nodes_give_the_one_process_bytes(ref, nodes, tmp_path):
    job = nodes(*RUN, "--out", "run", cwd=tmp_path)
    (rc0, err0), (rc1, err1) = job.wait_all()
    assert rc0 == 0 and rc1 == 0, err0[-3000:] + err1[-3000:]
    assert "on 4 ranks (gloo)" in err0 + err1
    assert_same_run(ref, tmp_path / "run")


def test_a_worker_killed_on_the_second_node_restarts_both_nodes(ref, nodes, tmp_path):
    job = nodes(*RUN, "--out", "run", cwd=tmp_path, restarts=1, fault="after_aggregate:3:KILL@2")
    (rc0, err0), (rc1, err1) = job.wait_all()
    assert rc0 == 0 and rc1 == 0, err0[-3000:] + err1[-3000:]
    both = err0 + err1
    assert both.count("seafl: running quickstart") == 2, both[-3000:]  # rank 0, once per attempt
    assert "seafl: resumed run after aggregation" in both, both[-3000:]
    assert_same_run(ref, tmp_path / "run")


@pytest.mark.parametrize("restarts,resume_on", [(1, "two nodes"), (0, "one process")])
def test_a_lost_node_ends_the_first_within_the_timeouts_and_the_run_resumes(restarts, resume_on, ref, nodes, tmp_path):
    # rank 0 SIGSTOPs rank 1, the second node's, after aggregation 3 (so the run cannot end before the
    # node is lost), then the second node goes: its agent and its rank SIGKILLed
    out = tmp_path / "run"
    cmd = [*RUN, "--out", out]
    job = nodes(*cmd, cwd=tmp_path, nproc=1, restarts=restarts, join_timeout=JOIN_S, fault="after_aggregate:3:STOP@1",
                pin_host=True)  # the store lives on the node that stays
    first, _ = job.node(0)
    assert first is job.agents[0], "node 0 is not the agent that hosts the rendezvous store"
    while not (out / "events.jsonl").exists() or (out / "events.jsonl").read_text().count('"aggregate"') < 3:
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.1)
    job.lose(1)
    t0 = time.monotonic()
    rc, err = job.wait(first, timeout=TIMEOUT_S + JOIN_S + 60)
    elapsed = time.monotonic() - t0
    assert rc != 0
    assert elapsed < TIMEOUT_S + JOIN_S, f"the first node took {elapsed:.1f}s to end after the second was lost"
    lines = [ln for ln in err.splitlines() if ln.startswith("seafl: error on rank 0:")]
    assert len(lines) == 1 and "rank 1" in lines[0], err[-3000:]
    s = summary(out)
    assert s["status"] == "failed" and s["error"] in lines[0], s
    if restarts:  # the first node waited for the lost one to rejoin: the agent ends in one line of ours too
        assert "Traceback" not in err and "seafl: error: the nodes did not meet at" in err, err[-3000:]
    kept = checkpoint_versions(out)
    assert kept and kept[-1] >= 3 and kept[-1] == s["aggregations"] < 8, (kept, s)
    if resume_on == "two nodes":  # the same command again
        (rc0, err0), (rc1, err1) = nodes(*cmd, cwd=tmp_path, nproc=1).wait_all()
        assert rc0 == 0 and rc1 == 0, err0[-3000:] + err1[-3000:]
        resumed = err0 + err1
    else:
        proc = cli(*run_args(cmd[:-2], out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        resumed = proc.stderr
    assert f"resumed {out} after aggregation {kept[-1]}" in resumed, resumed[-3000:]
    assert_same_run(ref, out)


def test_a_node_that_never_arrives_ends_after_the_join_timeout_with_nothing_written(nodes, tmp_path):
    t0 = time.monotonic()
    job = nodes(*RUN, "--out", "run", cwd=tmp_path, count=1, join_timeout=JOIN_S)
    [(rc, err)] = job.wait_all(timeout=JOIN_S + 60)
    elapsed = time.monotonic() - t0
    assert rc != 0
    assert JOIN_S <= elapsed < JOIN_S + 30, f"the lone node ended after {elapsed:.1f}s (join timeout {JOIN_S}s)"
    one_error_line(err, "the nodes did not meet at the c10d rendezvous at 127.0.0.1:", "2 nodes (--nnodes=2) were due",
                   f"join timeout of {JOIN_S} s", "SEAFL_JOIN_TIMEOUT")
    assert "seafl: running" not in err and not (tmp_path / "run").exists()
