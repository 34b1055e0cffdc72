"""The project's own slurm/*.sbatch scripts, submitted to a real Slurm of one node, or two (conftest.py starts it).

Each job runs the tiny quickstart of tests/small_runs.py with one thread per rank; its trace must
be byte-identical to the same config run in one process, as on a laptop.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from small_runs import QUICKSTART, ROOT, SMALL

pytestmark = pytest.mark.slurm


def seafl(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"seafl {' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc


def status(run_dir):
    return json.loads((run_dir / "summary.json").read_text())["status"]


def same_trace(run_dir, ref):
    ref_dir = ref.dir()
    for name in ("events.jsonl", "metrics.csv"):
        assert (run_dir / name).read_bytes() == (ref_dir / name).read_bytes(), f"{name} differs from the in-process run"


class Reference:
    """A run in one process, started in the background so that it overlaps the first job; ``dir()`` waits for it."""

    def __init__(self, out, *run_args):
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-m", "seafl_dist", "run", QUICKSTART, *run_args, "--out", out],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def dir(self):
        output, _ = self.proc.communicate(timeout=300)
        assert self.proc.returncode == 0, f"the in-process reference run exited {self.proc.returncode}:\n{output}"
        return self.out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny quickstart run in one process: the trace every job must reproduce."""
    ref = Reference(tmp_path_factory.mktemp("ref") / "run", *SMALL)
    yield ref
    ref.stop()


@pytest.fixture
def submit(slurm, tmp_path):
    """submit(*sbatch_args) -> CompletedProcess, from the repository root, with the project's python."""
    env = {**slurm.env, "SEAFL_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}

    def run(*args, timeout=120):
        return slurm.cmd("sbatch", *args, cwd=ROOT, env=env, timeout=timeout)
    return run


def job_log(path):
    return path.read_text(errors="replace") if path.exists() else "(no job output)"


def test_run_sbatch_matches_the_in_process_run(slurm, submit, reference, tmp_path):
    out, log = tmp_path / "run", tmp_path / "job.out"
    t0 = time.monotonic()
    submit("--wait", "--cpus-per-task=2", f"--output={log}", "slurm/run.sbatch", QUICKSTART, *SMALL, "--out", out)
    text = job_log(log)
    assert "3 rank(s), 0 GPU(s), 2 CPU(s)" in text, text  # C + 1 ranks on C CPUs
    assert "on 3 ranks (gloo)" in text, text
    assert status(out) == "completed", text
    same_trace(out, reference)
    print(f"sbatch --wait run.sbatch: {time.monotonic() - t0:.1f}s")


def test_multinode_sbatch_on_one_node(slurm, submit, reference, tmp_path):
    out, log = tmp_path / "run", tmp_path / "job.out"
    job = submit("--parsable", "--nodes=1", "--cpus-per-task=2", f"--output={log}", "slurm/multinode.sbatch", QUICKSTART,
                 *SMALL, "--out", out).stdout.split(";")[0].strip()
    state = slurm.wait_job(job)
    text = job_log(log)
    assert state.get("JobState", "COMPLETED") == "COMPLETED", (state, text)
    assert f"1 node(s) x 2 rank(s), rendezvous {slurm.host}:" in text, text
    assert status(out) == "completed", text
    same_trace(out, reference)


def test_multinode_sbatch_on_two_nodes(slurm, submit, reference, tmp_path):
    """Two slurmd on this host (partition ``two``): srun starts one torchrun on each, 2 x 2 ranks meet at the first."""
    out, log = tmp_path / "run", tmp_path / "job.out"
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    job = submit("--parsable", "-p", "two", "--nodes=2", "--cpus-per-task=2", f"--export=ALL,SEAFL_PORT={free}",
                 f"--output={log}", "slurm/multinode.sbatch", QUICKSTART, *SMALL, "--out", out).stdout.split(";")[0]
    state = slurm.wait_job(job.strip(), timeout=180)
    text = job_log(log)
    assert state.get("JobState", "COMPLETED") == "COMPLETED", (state, text)
    assert f"2 node(s) x 2 rank(s), rendezvous {slurm.host}:{free}" in text, text
    assert "on 4 ranks (gloo)" in text, text
    assert status(out) == "completed", text
    same_trace(out, reference)


def test_sweep_array_then_dependent_report(slurm, submit, tmp_path):
    """The README's recipe: --list, an array of --list's size, a report job after it (afterok)."""
    out = tmp_path / "sweep"
    args = [QUICKSTART, *SMALL, "run.max_aggregations=3", "--grid", "algorithm.name=seafl,fedbuff", "--seeds", "0,1",
            "--out", out]
    listed = seafl("sweep", *args, "--list").stdout.splitlines()
    assert [line.split("\t")[0] for line in listed] == ["0", "1", "2", "3"]
    array = submit("--parsable", "--array=0-3", "--cpus-per-task=1", f"--output={tmp_path}/task-%a.out",
                   "slurm/sweep.sbatch", *args).stdout.split(";")[0].strip()
    report_log = tmp_path / "report.out"
    report = submit("--parsable", f"--dependency=afterok:{array}", f"--output={report_log}",
                    f"--wrap={sys.executable} -m seafl_dist report {out}").stdout.split(";")[0].strip()
    state = slurm.wait_job(report, timeout=240)
    assert state.get("JobState", "COMPLETED") == "COMPLETED", (state, job_log(report_log))
    logs = [job_log(tmp_path / f"task-{i}.out") for i in range(4)]
    for i, text in enumerate(logs):  # one run per array task
        assert f"--index {i}" in text and f"run {i} (" in text, text
    names = [line.split("\t")[1] for line in listed]
    for name in names:
        assert status(out / name) == "completed", "".join(logs)
    index = {r["name"]: r["index"] for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert index == {name: i for i, name in enumerate(names)}
    report = (out / "report.md").read_text()
    assert all(name in report for name in names), job_log(report_log)


@pytest.fixture
def references():
    """references(out, *overrides) -> a Reference run, stopped at teardown if still running."""
    started = []

    def start(out, *args):
        started.append(Reference(out, *args))
        return started[-1]
    yield start
    for ref in started:
        ref.stop()


def test_requeued_job_continues_in_the_same_run_dir(slurm, submit, references, tmp_path):
    """`scontrol requeue` mid-run: the job stops the run (summary interrupted), starts again with the same
    command and run dir (the default one, runs/<config stem>-<job id>, found again by the requeued job) and
    ends with the trace of an uninterrupted run, having resumed from the checkpoint the first attempt
    wrote on its way out rather than starting over. With top-k error feedback (issue 52) the residuals live on
    the worker, which a preemption stops too, so the run resumes from its last periodic checkpoint (every 5
    aggregations here), whose private/residuals-<V>-rank1.pt the worker wrote, and ends with the same model.pt bytes."""
    long = [*SMALL, "run.max_aggregations=40", "compression.codec=topk", "compression.fraction=0.1",
            "compression.error_feedback=true", "runtime.placement=device", "run.checkpoint_every=5"]
    ref = references(tmp_path / "ref", *long)
    log = tmp_path / "job.out"
    job = submit("--parsable", "--cpus-per-task=1", f"--chdir={tmp_path}", f"--output={log}",
                 ROOT / "slurm" / "run.sbatch", QUICKSTART, *long).stdout.split(";")[0].strip()
    out = tmp_path / "runs" / f"quickstart-{job}"
    events = out / "events.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # requeue after a quarter of the aggregations
        if events.exists() and events.read_text().count('"aggregate"') >= 10:
            break
        assert slurm.job_state(job).get("JobState") in ("PENDING", "RUNNING"), job_log(log)
        time.sleep(0.2)
    else:
        pytest.fail("the run never reached 10 aggregations\n" + job_log(log))
    slurm.cmd("scontrol", "requeue", job)
    deadline = time.monotonic() + 60
    while slurm.job_state(job).get("JobState") != "PENDING":  # stopped, requeued, held (see below)
        assert time.monotonic() < deadline, f"job {job} not requeued: {slurm.job_state(job)}\n{job_log(log)}"
        time.sleep(0.2)
    assert status(out) == "interrupted", job_log(log)  # the first attempt stopped midway, on SIGTERM
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now")  # else Slurm holds a requeued job ~2 min
    state = slurm.wait_job(job, timeout=120)
    text = job_log(log)
    assert state.get("JobState", "COMPLETED") == "COMPLETED" and state.get("Restarts", "1") == "1", (state, text)
    assert "(restart 0)" in text and "(restart 1)" in text, text
    assert status(out) == "completed", text
    same_trace(out, ref)
    assert (out / "model.pt").read_bytes() == (ref.dir() / "model.pt").read_bytes()
    after_requeue = text.split("(restart 1)", 1)[1].split("\n", 1)[1]  # what the second attempt printed
    assert re.search(r"seafl: resumed \S+ after aggregation [1-9]", after_requeue), text


def test_bad_config_fails_the_job_within_seconds(slurm, tmp_path):
    """run.sbatch dry-runs `seafl run` before torchrun: a misspelt key ends the job with the one-line error,
    before any rank or rendezvous starts, and no run dir is made."""
    out, log = tmp_path / "run", tmp_path / "job.out"
    env = {**slurm.env, "SEAFL_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    proc = slurm.cmd("sbatch", "--wait", "--cpus-per-task=2", f"--output={log}", "slurm/run.sbatch", QUICKSTART,
                     *SMALL, "algorithm.bufer_size=3", "--out", out, cwd=ROOT, env=env, check=False, timeout=120)
    took = time.monotonic() - t0
    text = job_log(log)
    assert proc.returncode == 2, (proc.stdout, proc.stderr, text)  # sbatch --wait exits with the job's status
    assert "seafl: error: config key 'algorithm.bufer_size'" in text, text
    assert "run.sbatch: the dry run failed (exit 2, its error above); nothing was started" in text, text
    assert "torch.distributed" not in text and not out.exists(), text
    assert took < 60, f"the job took {took:.0f}s to fail"
    print(f"sbatch --wait of a bad config: failed after {took:.1f}s")


def rank_pids(job, rank):
    """Pids of the processes of Slurm job ``job`` whose environment says RANK=rank (a torchrun rank)."""
    found = []
    for env_file in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = env_file.read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in env and f"RANK={rank}".encode() in env:
            found.append(int(env_file.parent.name))
    return found


def test_worker_killed_mid_job_is_restarted_by_torchrun_and_ends_byte_identical(slurm, submit, references, tmp_path):
    """SIGKILL of worker rank 1 under run.sbatch: torchrun (--max-restarts) restarts the ranks, which resume
    from the run dir's checkpoint; the job completes with the trace and model of an uninterrupted run."""
    long = [*SMALL, "run.max_aggregations=40", "run.checkpoint_every=1"]
    ref = references(tmp_path / "ref", *long)
    out, log = tmp_path / "run", tmp_path / "job.out"
    job = submit("--parsable", "--cpus-per-task=2", f"--output={log}", "slurm/run.sbatch", QUICKSTART, *long,
                 "--out", out).stdout.split(";")[0].strip()
    events = out / "events.jsonl"
    deadline = time.monotonic() + 120
    while not (events.exists() and events.read_text().count('"aggregate"') >= 10):
        assert time.monotonic() < deadline, "the run never reached 10 aggregations\n" + job_log(log)
        assert slurm.job_state(job).get("JobState") in ("PENDING", "RUNNING"), job_log(log)
        time.sleep(0.2)
    victims = rank_pids(job, 1)
    assert victims, "no process with RANK=1 in the job"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    state = slurm.wait_job(job, timeout=240)
    text = job_log(log)
    assert state.get("JobState", "COMPLETED") == "COMPLETED", (state, text)
    assert status(out) == "completed", text
    same_trace(out, ref)
    assert (out / "model.pt").read_bytes() == (ref.dir() / "model.pt").read_bytes()
