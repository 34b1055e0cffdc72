"""Which seafl wrote a run's files, and which trained bits they hold.

``__version__`` is the package's version (pyproject.toml says the same; a test checks). ``NUMERICS``
is the version of the trained bits: one config trained by two seafl versions of the same
``NUMERICS`` gives the same ``events.jsonl``, ``metrics.csv`` and ``model.pt`` byte for byte (on
the CPU; on a GPU with ``runtime.deterministic``), and a change that alters rounding anywhere (a
CPU lever such as channels-last training, another reduction order, a new default) bumps it.
Both are recorded in ``summary.json`` and in every checkpoint (``seafl_version``, ``numerics``);
runtime/rundir.py's :func:`~seafl_dist.runtime.rundir.numerics_mismatch` refuses to resume, or to
count as completed, a run dir of another ``NUMERICS``, since its bits could not be continued or
reproduced by this code. A file without ``numerics`` was written before it was recorded: version 1.

History of ``NUMERICS`` (docs/failures.md has the same table):
  1  seafl 0.1.0: the bits of every run dir written before the versions were recorded.
  2  seafl 0.2.0: the built-in models (``channels_last``) train channels-last on a CPU too, as they
     evaluate (train/local.py's ``memory_format``; a job 1.07-1.26x less CPU, other rounding), but
     for ResNet-18 below width 0.25 (a strided 1x1 convolution of < 16 input channels: oneDNN#6035).
"""
from __future__ import annotations

__version__ = "0.2.0"
NUMERICS = 2
UNRECORDED = 1  # the numerics version of files written before it was recorded


def stamp() -> dict:
    """What summary.json and every checkpoint record about the code that wrote them."""
    return {"seafl_version": __version__, "numerics": NUMERICS}


def numerics_of(record: dict | None):
    """The numerics version a summary.json or checkpoint ``record`` holds (``UNRECORDED`` without one)."""
    return (record or {}).get("numerics", UNRECORDED)
