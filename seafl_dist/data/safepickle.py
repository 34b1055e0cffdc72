"""Read a pickle from outside as plain data: it cannot run code.

    from seafl_dist.data.safepickle import NUMPY_ARRAYS, load_pickle

    batch = load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1")  # a CIFAR-10 python batch
    trace = load_pickle(path)                                         # dicts, lists, strings, numbers

A pickle is a small program: its GLOBAL opcodes name any importable callable (``os.system``)
and REDUCE calls it. Dicts, lists, tuples, strings, bytes, ints, floats, bools and None need no
global, so :func:`load_pickle` refuses every global that is not in ``allow`` (a mapping from
``"module.name"`` to the object to hand back), and nothing outside it is ever imported.
:data:`NUMPY_ARRAYS` is exactly what numpy arrays need: in the protocol-2 pickles CIFAR-10 ships,
``numpy.core.multiarray._reconstruct``, ``numpy.ndarray`` and ``numpy.dtype`` (numpy 2 spells
the first ``numpy._core.multiarray._reconstruct``); in protocol 5, Python's default since 3.8
(a re-packed copy, the benchmarks' synthetic sets), ``numpy._core.numeric._frombuffer``, which
only views bytes as an array of a dtype (numpy refuses object dtypes there). An array's contents
come from the same unpickler, so an object array can hold only what it admits. Sets in
protocol < 4 (``builtins.set``) and bytes pickled by Python 3 at protocol 2 (``_codecs.encode``)
name other globals and are refused.

Errors (both :class:`~seafl_dist.data.missing.DataError`, one line naming the file):
:class:`UnsafePickleError` for a refused global, ``DataError`` for a truncated or corrupt file.
"""
from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np

from .missing import DataError, read_bytes


class UnsafePickleError(DataError):
    """A pickle asked for a global (a class or function) that is not admitted as plain data."""


def _numpy_arrays() -> Mapping[str, object]:
    try:  # numpy >= 2; importing numpy.core there warns
        from numpy._core.multiarray import _reconstruct
        from numpy._core.numeric import _frombuffer
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct
        from numpy.core.numeric import _frombuffer
    return MappingProxyType({**{f"{core}.multiarray._reconstruct": _reconstruct for core in ("numpy.core", "numpy._core")},
                             **{f"{core}.numeric._frombuffer": _frombuffer for core in ("numpy.core", "numpy._core")},
                             "numpy.ndarray": np.ndarray, "numpy.dtype": np.dtype})


NUMPY_ARRAYS = _numpy_arrays()
PLAIN: Mapping[str, object] = MappingProxyType({})


class _PlainUnpickler(pickle.Unpickler):
    def __init__(self, file, *, allow: Mapping[str, object], what: str, encoding: str):
        super().__init__(file, encoding=encoding)
        self.allow, self.what = allow, what

    def find_class(self, module: str, name: str):  # every global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) comes here
        key = f"{module}.{name}"
        if key not in self.allow:
            kinds = "dicts, lists, strings, bytes, numbers" + (", numpy arrays" if self.allow else "")
            raise UnsafePickleError(f"{self.what} is refused: the pickle asks for {key}, and only plain data "
                                    f"({kinds}) is admitted; a genuine file never needs it, so replace this copy")
        return self.allow[key]

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"persistent id {pid!r}")


def load_pickle(path: str | Path, *, allow: Mapping[str, object] = PLAIN, encoding: str = "ASCII"):
    """The object pickled in ``path``, built from plain data and the globals in ``allow`` only.

    ``encoding`` decodes Python 2 ``str`` (``"latin1"`` for CIFAR-10, whose arrays are stored as
    such strings). Raises :class:`UnsafePickleError` for any other global, :class:`DataError` for a
    file that cannot be read or is not a whole pickle."""
    data = read_bytes(Path(path))
    try:
        obj = _PlainUnpickler(io.BytesIO(data), allow=allow, what=str(path), encoding=encoding).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            UnicodeDecodeError, MemoryError, OverflowError) as err:  # what a cut or damaged byte stream raises
        raise DataError(f"{path} is truncated or corrupt: not a readable pickle "
                        f"({type(err).__name__}: {err}; {len(data)} bytes)") from None
    return obj
