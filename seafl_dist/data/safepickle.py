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

:func:`walk_pickle` (the dry run's reader) goes further: it follows the opcodes with
:mod:`pickletools` and builds only the plain data; each call of an admitted global is recorded
as a :class:`Call` (its name, arguments and BUILD state), never imported nor made, so a numpy
array is a description (:func:`array_info` reads its dtype and shape from either form). The same
globals are refused with the same message.
"""
from __future__ import annotations

import io
import pickle
import pickletools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from .missing import DataError, read_bytes, reading


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


def _admitted(key: str, allow: Mapping[str, object], what: str) -> str:
    """``key`` ("module.name") if ``allow`` admits it, else the UnsafePickleError naming it."""
    if key not in allow:
        kinds = "dicts, lists, strings, bytes, numbers" + (", numpy arrays" if allow else "")
        raise UnsafePickleError(f"{what} is refused: the pickle asks for {key}, and only plain data "
                                f"({kinds}) is admitted; a genuine file never needs it, so replace this copy")
    return key


NUMPY_ARRAYS = _numpy_arrays()
PLAIN: Mapping[str, object] = MappingProxyType({})


class _PlainUnpickler(pickle.Unpickler):
    def __init__(self, file, *, allow: Mapping[str, object], what: str, encoding: str):
        super().__init__(file, encoding=encoding)
        self.allow, self.what = allow, what

    def find_class(self, module: str, name: str):  # every global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) comes here
        return self.allow[_admitted(f"{module}.{name}", self.allow, self.what)]

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"persistent id {pid!r}")


def load_pickle(path: str | Path, *, allow: Mapping[str, object] = PLAIN, encoding: str = "ASCII"):
    """The object pickled in ``path``, built from plain data and the globals in ``allow`` only.

    ``encoding`` decodes Python 2 ``str`` (``"latin1"`` for CIFAR-10, whose arrays are stored as
    such strings). Raises :class:`UnsafePickleError` for any other global, :class:`DataError` for a
    file that cannot be read or is not a whole pickle."""
    data = read_bytes(Path(path))
    try:
        return _PlainUnpickler(io.BytesIO(data), allow=allow, what=str(path), encoding=encoding).load()
    except UnsafePickleError:
        raise
    except _BROKEN as err:
        raise _unreadable(path, err, len(data)) from None


# what a cut or damaged byte stream raises, to the unpickler or to the walk
_BROKEN = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
           UnicodeDecodeError, MemoryError, OverflowError)


def _unreadable(path, err: Exception, size: int) -> DataError:
    return DataError(f"{path} is truncated or corrupt: not a readable pickle ({type(err).__name__}: "
                     f"{str(err).splitlines()[0] if str(err) else ''}; {size} bytes)")


@dataclass(eq=False)
class Call:
    """``name(*args)``, then given ``state`` by BUILD: a global's call as :func:`walk_pickle` records it."""
    name: str
    args: tuple = ()
    state: object = None


def array_info(obj) -> tuple[str, tuple] | None:
    """(dtype name, shape) of a numpy array, built (:func:`load_pickle`) or recorded (:func:`walk_pickle`);
    ``None`` for anything else. The recorded forms are numpy's own reductions: ``_reconstruct`` with
    the state ``(version, shape, dtype, fortran, bytes)`` (protocols < 5) and ``_frombuffer(bytes,
    dtype, shape, order)`` (protocol 5)."""
    if isinstance(obj, np.ndarray):
        return str(obj.dtype), tuple(obj.shape)
    if not isinstance(obj, Call):
        return None
    try:
        if obj.name.endswith("multiarray._reconstruct"):
            dtype, shape = obj.state[2], obj.state[1]
        elif obj.name.endswith("numeric._frombuffer"):
            dtype, shape = obj.args[1], obj.args[2]
        else:
            return None
        return str(np.dtype(dtype.args[0])), tuple(shape)
    except (TypeError, IndexError, AttributeError):  # not numpy's own form: not an array we can describe
        return None


def walk_pickle(path: str | Path, *, allow: Mapping[str, object] = PLAIN):
    """What :func:`load_pickle` would build, from the opcodes alone (see the module doc): nothing is
    imported or called. The same errors, worded the same (a truncated file's cause may read differently)."""
    path = Path(path)
    with reading(path):
        size = path.stat().st_size
        with open(path, "rb") as f:
            try:
                return _evaluate(pickletools.genops(f), allow, str(path))
            except UnsafePickleError:
                raise
            except _BROKEN as err:
                raise _unreadable(path, err, size) from None


_CONSTANT = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_LIST": list, "EMPTY_DICT": dict,
             "EMPTY_TUPLE": tuple, "EMPTY_SET": set}
_REFUSED = ("PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER")


def _evaluate(ops, allow: Mapping[str, object], what: str):
    """The pickle machine on plain data: a stack, marks and a memo; a global's call becomes a Call."""
    stack, marks, memo = [], [], {}

    def since_mark() -> list:
        items = stack[marks[-1]:]
        del stack[marks.pop():]
        return items

    def glob(module: str, name: str) -> str:
        return _admitted(f"{module}.{name}", allow, what)

    for op, arg, _ in ops:
        name = op.name
        if name in _CONSTANT:
            value = _CONSTANT[name]
            stack.append(value() if callable(value) else value)
        elif name == "MARK":
            marks.append(len(stack))
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            stack[-n:] = [tuple(stack[-n:])]
        elif name in ("TUPLE", "LIST", "FROZENSET"):
            stack.append({"TUPLE": tuple, "LIST": list, "FROZENSET": frozenset}[name](since_mark()))
        elif name == "DICT":
            items = since_mark()
            stack.append(dict(zip(items[::2], items[1::2])))
        elif name == "APPEND":
            item = stack.pop()
            stack[-1].append(item)
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            stack[-1][key] = value
        elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
            items = since_mark()
            if name == "SETITEMS":
                stack[-1].update(zip(items[::2], items[1::2]))
            else:
                (stack[-1].extend if name == "APPENDS" else stack[-1].update)(items)
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            since_mark()
        elif name == "DUP":
            stack.append(stack[-1])
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            module, attr = arg.split(" ", 1) if name == "GLOBAL" else (stack.pop(-2), stack.pop())
            stack.append(Call(glob(module, attr)))
        elif name in ("REDUCE", "NEWOBJ"):
            args = stack.pop()
            stack[-1] = Call(stack[-1].name, tuple(args))
        elif name in ("INST", "OBJ"):
            args = since_mark()
            callee = glob(*arg.split(" ", 1)) if name == "INST" else args.pop(0).name
            stack.append(Call(callee, tuple(args)))
        elif name == "BUILD":
            state = stack.pop()
            if not isinstance(stack[-1], Call):
                raise pickle.UnpicklingError(f"BUILD on a {type(stack[-1]).__name__}")
            stack[-1].state = state
        elif name in _REFUSED or name == "NEWOBJ_EX":
            raise pickle.UnpicklingError(f"opcode {name} is not plain data")
        elif name == "STOP":
            return stack.pop()
        elif name not in ("PROTO", "FRAME"):
            stack.append(arg)  # a number, a string or bytes: pickletools has read it
    raise EOFError("no STOP opcode: the pickle ends early")
