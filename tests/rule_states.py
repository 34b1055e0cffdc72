"""A rule's state as the tests of issue 62 look at it (algo/memory.py): a deep clone taken before an aggregation,
and the check that the state is bit for bit what the clone holds after it (the contract: never written in place);
the overrides that run the user's stateful rule of tests/user_extensions.py (``fair_momentum``)."""
from collections.abc import Mapping

import torch

STATEFUL = ["algorithm.name=user_extensions:fair_momentum", "algorithm.staleness_limit=null"]


def deep_clone(state: Mapping) -> dict:
    """Every tensor of ``state`` cloned, every mapping a new dict."""
    return {k: deep_clone(v) if isinstance(v, Mapping) else v.clone() if isinstance(v, torch.Tensor) else v
            for k, v in state.items()}


def assert_bitwise(old: Mapping, clone: Mapping, where: str = "state") -> None:
    """``old`` (a state as it is now) holds exactly what ``clone`` (taken before) held: keys, dtypes, bits."""
    assert isinstance(old, Mapping) and set(old) == set(clone), (where, set(old), set(clone))
    for k, v in clone.items():
        if isinstance(v, torch.Tensor):
            same = old[k].dtype == v.dtype and old[k].shape == v.shape and \
                torch.equal(old[k].reshape(-1).view(torch.uint8), v.reshape(-1).view(torch.uint8))
            assert same, f"{where}[{k!r}] was written in place"
        elif isinstance(v, dict):
            assert_bitwise(old[k], v, f"{where}[{k!r}]")
        else:
            assert old[k] == v, f"{where}[{k!r}]: {old[k]!r} != {v!r}"


def broken(flat, kind: str, at: int):
    """A Hypothesis buffer's update made bad as ``kind`` says: ``nan`` at entry ``at``, ``inf`` (−∞) at entry 0, ``size``
    one entry short; ``ok`` as it is. ``flat`` is a list or a 1-D tensor (changed in place but for ``size``)."""
    if kind == "nan":
        flat[at] = float("nan")
    elif kind == "inf":
        flat[0] = -float("inf")
    elif kind == "size":
        flat = flat[:-1]
    return flat
