"""The CPUs this process may use, and whether the torch threads of the ranks on this machine oversubscribe them.

    cpus = cpus_here()                                   # the affinity mask, capped by Slurm's allocation
    warning = oversubscription(threads, ranks, cpus)     # a one-line warning, or None

The launcher (runtime/launch.py), the ranks (runtime/distributed.py) and the sweep runner (experiments/) ask it
before any rank trains: threads that outnumber the cores make training many times slower, not faster.
"""
from __future__ import annotations

import os


def oversubscription(threads: int, training_ranks: int, cpus: int) -> str | None:
    """A warning when the ranks that train on this machine ask for more torch threads than it has CPUs.

    Intra-op threads that outnumber the cores spin against each other: on 2 CPUs, 3 ranks of
    2 threads each took 536 s for the quickstart's server loop instead of 10 s."""
    if threads * training_ranks <= cpus:
        return None
    ranks = f"{training_ranks} training ranks x " if training_ranks > 1 else ""
    return (f"seafl: warning: {ranks}{threads} torch threads = {threads * training_ranks} threads on {cpus} CPUs "
            f"here; threads that outnumber the cores fight for them and can make training many times slower. "
            f"Set runtime.threads={max(1, cpus // training_ranks)}" + (" or start fewer ranks" if ranks else ""))


def cpus_here(environ=None) -> int:
    """The CPUs this process may run on, not the machine's total: its affinity mask (cgroups,
    taskset, Slurm's CPU binding), capped by the Slurm allocation (``SLURM_CPUS_PER_TASK``, else
    ``SLURM_CPUS_ON_NODE``), which a Slurm without CPU binding (``task/none``) does not put in the mask."""
    environ = os.environ if environ is None else environ
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    for key in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        value = str(environ.get(key, "")).strip()
        if value.isdigit() and int(value) > 0:
            return min(n, int(value))
    return n
