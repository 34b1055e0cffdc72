"""The shell functions the ``slurm/*.sbatch`` scripts share, shipped inside the package.

``sbatch`` runs a copy of its script from Slurm's spool directory, so a script cannot find a
file beside itself (``$(dirname "$0")`` is the spool dir), and a user who installed the wheel
has no checkout to point at. Every script already needs the project's python, so it asks it:

    common=$("$py" -m seafl_dist.slurm) && . "$common"     # prints the path of common.sh

:data:`COMMON` is that path (``common.sh`` beside this file; docs/slurm.md describes it).
"""
from pathlib import Path

COMMON = Path(__file__).resolve().with_name("common.sh")
