"""The warning for more torch threads than CPUs (ranks x runtime.threads), which thrash."""
from seafl_dist.runtime.cpus import oversubscription


def test_oversubscribed_threads_are_warned_about_with_a_fix():
    assert oversubscription(1, 2, 2) is None  # two workers of one thread on two CPUs: fine
    assert oversubscription(8, 1, 8) is None
    msg = oversubscription(2, 2, 2)
    assert "4 threads on 2 CPUs" in msg and "runtime.threads=1" in msg and "fewer ranks" in msg
    msg = oversubscription(16, 1, 4)
    assert "16 torch threads" in msg and "runtime.threads=4" in msg and "ranks" not in msg


# ---- sweep threads: the CPUs this process may use, shared by parallel runs and their ranks ----

import os  # noqa: E402

from seafl_dist.experiments.runner import ranks_per_run, threads_per_run  # noqa: E402
from seafl_dist.runtime.cpus import cpus_here  # noqa: E402


def test_cpus_here_is_the_affinity_capped_by_the_slurm_allocation():
    mask = len(os.sched_getaffinity(0))
    assert cpus_here({}) == mask
    assert cpus_here({"SLURM_CPUS_PER_TASK": "1", "SLURM_CPUS_ON_NODE": "64"}) == 1  # per task wins
    assert cpus_here({"SLURM_CPUS_ON_NODE": "1"}) == 1
    assert cpus_here({"SLURM_CPUS_ON_NODE": str(mask + 100)}) == mask  # never more than the mask allows
    assert cpus_here({"SLURM_CPUS_PER_TASK": "", "SLURM_CPUS_ON_NODE": "junk"}) == mask


def test_ranks_per_run_reads_torchrun_nproc_per_node():
    assert ranks_per_run([], 16) == 1
    assert ranks_per_run(["torchrun", "--standalone", "--nproc_per_node=4"], 16) == 4
    assert ranks_per_run(["torchrun", "--nproc-per-node", "3"], 16) == 3
    assert ranks_per_run(["python", "-m", "torch.distributed.run", "--nproc_per_node", "2"], 16) == 2
    assert ranks_per_run(["torchrun", "--nproc_per_node=auto"], 16) == 16  # one rank per CPU


def test_threads_per_run_divides_the_cpus_by_runs_and_ranks():
    assert threads_per_run(1, [], cpus=32) is None  # one single-process run: torch's default
    assert threads_per_run(4, [], cpus=32) == 8
    assert threads_per_run(1, ["torchrun", "--nproc_per_node=4"], cpus=32) == 8
    assert threads_per_run(2, ["torchrun", "--nproc_per_node=4"], cpus=32) == 4
    assert threads_per_run(3, ["torchrun", "--nproc_per_node=3"], cpus=2) == 1  # never below one
    assert threads_per_run(2, [], cpus=None) == max(1, cpus_here() // 2)  # the real allocation by default
