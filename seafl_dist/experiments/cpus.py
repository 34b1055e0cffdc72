"""How a sweep shares this node's CPUs: the ranks a run starts (its launcher's ``--nproc_per_node``)
and the torch threads each rank gets, so parallel runs do not oversubscribe the cores."""
from __future__ import annotations


def ranks_per_run(launcher: list[str], cpus: int) -> int:
    """The ranks one run starts on this node: torchrun's ``--nproc_per_node`` (or ``--nproc-per-node``);
    1 without it. A non-numeric value (``auto``, ``cpu``, ``gpu``) counts as one rank per CPU."""
    for i, arg in enumerate(launcher):
        for flag in ("--nproc_per_node", "--nproc-per-node"):
            if arg == flag and i + 1 < len(launcher):
                value = launcher[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            else:
                continue
            return int(value) if value.isdigit() and int(value) > 0 else cpus
    return 1


def threads_per_run(jobs: int, launcher: list[str], cpus: int | None = None) -> int | None:
    """torch threads for each rank of each run: the CPUs here shared by ``jobs`` runs of
    :func:`ranks_per_run` ranks; ``None`` (torch's default) for one single-process run at a time."""
    from seafl_dist.runtime.cpus import cpus_here
    cpus = cpus_here() if cpus is None else cpus
    ranks = ranks_per_run(launcher, cpus)
    if jobs <= 1 and ranks <= 1:
        return None
    return max(1, cpus // (jobs * ranks))
