"""The plain-data unpickler: what it builds, what it refuses (without running it), how it reports."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from seafl_dist.data import DataError
from seafl_dist.data.safepickle import NUMPY_ARRAYS, UnsafePickleError, load_pickle

from fake_datasets import RunsCommand, cifar_batch, py2_pickle, random_images


def write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_code_in_a_pickle_is_refused_and_never_runs(tmp_path, protocol):
    marker = tmp_path / "pwned"
    path = write(tmp_path / "data_batch_1",
                 pickle.dumps({"data": RunsCommand(f"touch {marker}"), "labels": [1]}, protocol=protocol))
    with pytest.raises(UnsafePickleError) as err:
        load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1")
    msg = str(err.value)
    assert str(path) in msg and f"{os.system.__module__}.system" in msg and "\n" not in msg
    assert not marker.exists()
    with open(path, "rb") as f:  # the same file through plain pickle.load really runs the command
        pickle.load(f)
    assert marker.exists()


def test_old_style_instance_opcodes_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    # protocol 0's INST opcode: "i" module \n name \n, called with the marked arguments
    path = write(tmp_path / "evil", b"(S'touch " + str(marker).encode() + b"'\nios\nsystem\n.")
    with pytest.raises(UnsafePickleError, match="os.system"):
        load_pickle(path)
    assert not marker.exists()


def test_plain_data_needs_no_global(tmp_path):
    trace = {"1": {"duration": 120.5, "active": [0, 3600], "inactive": [3600]}, "n": 2, "name": "trace",
             "raw": b"\x00\x01", "t": (1, 2.5, None, True)}
    for protocol in (3, 4, 5):  # (Python 3 writes bytes at protocol 2 through the global _codecs.encode)
        path = write(tmp_path / f"trace{protocol}", pickle.dumps(trace, protocol=protocol))
        assert load_pickle(path) == trace


def test_numpy_arrays_only_where_allowed(tmp_path):
    path = write(tmp_path / "b", py2_pickle(cifar_batch("data_batch_1", random_images(3, 3, 32, 32), [1, 2, 3])))
    with pytest.raises(UnsafePickleError, match=r"numpy\.core\.multiarray\._reconstruct.*dicts, lists, strings, "
                                                r"bytes, numbers\)"):
        load_pickle(path, encoding="latin1")  # the default admits no global at all
    batch = load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1")
    assert batch["data"].dtype == np.uint8 and batch["data"].shape == (3, 3072) and batch["labels"] == [1, 2, 3]


@pytest.mark.parametrize("protocol", [3, 4, 5])  # 5: numpy._core.numeric._frombuffer, Python's default
def test_numpy_arrays_pickled_by_python_3(tmp_path, protocol):
    arr = np.arange(24, dtype=np.uint8).reshape(4, 6)
    path = write(tmp_path / "p", pickle.dumps({"data": arr, "t": arr.T, "f": arr.astype(np.float32)}, protocol=protocol))
    got = load_pickle(path, allow=NUMPY_ARRAYS)
    assert np.array_equal(got["data"], arr) and np.array_equal(got["t"], arr.T) and got["f"].dtype == np.float32
    with pytest.raises(UnsafePickleError, match="numpy._core"):
        load_pickle(path)


def test_object_arrays_hold_only_admitted_objects(tmp_path):
    marker = tmp_path / "pwned"
    arr = np.array([RunsCommand(f"touch {marker}"), 1], dtype=object)
    path = write(tmp_path / "obj", pickle.dumps(arr, protocol=5))
    with pytest.raises(UnsafePickleError, match="system"):
        load_pickle(path, allow=NUMPY_ARRAYS)
    assert not marker.exists()


def test_an_allow_list_of_ones_own(tmp_path):
    from collections import OrderedDict
    path = write(tmp_path / "od", pickle.dumps(OrderedDict(a=1), protocol=2))
    with pytest.raises(UnsafePickleError, match="collections.OrderedDict"):
        load_pickle(path)
    assert load_pickle(path, allow={"collections.OrderedDict": OrderedDict}) == {"a": 1}


@pytest.mark.parametrize("cut", [0, 1, 20, -1])
def test_truncated_or_garbage_is_one_line(tmp_path, cut):
    whole = py2_pickle(cifar_batch("data_batch_1", random_images(2, 3, 32, 32), [1, 2]))
    path = write(tmp_path / "data_batch_1", whole[:cut] if cut else b"<html>404 Not Found</html>")
    with pytest.raises(DataError) as err:
        load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1")
    msg = str(err.value)
    assert not isinstance(err.value, UnsafePickleError)
    assert msg.startswith(f"{path} is truncated or corrupt: not a readable pickle") and "\n" not in msg


def test_unreadable_file(tmp_path):
    with pytest.raises(DataError, match=f"cannot read dataset file {tmp_path}"):
        load_pickle(tmp_path)  # a folder


# ---- walk_pickle: the same data and the same refusals, nothing built ------------------------------

@pytest.mark.parametrize("protocol", ["py2", 3, 4, 5])  # py2: as CIFAR-10's batches were written
def test_walk_gives_the_plain_data_and_describes_arrays(tmp_path, protocol):
    from seafl_dist.data.safepickle import Call, array_info, walk_pickle
    arr, shared = np.arange(24, dtype=np.uint8).reshape(4, 6), [1]
    obj = {"n": 2, "name": "trace", "raw": b"\x00\x01", "t": (1, 2.5, None, True), "l": [shared, shared, [1]],
           "s": frozenset({3}), "data": arr, "f": arr[:2].astype(np.float32)}
    if protocol in ("py2", 3):
        del obj["s"]  # pickled through the global builtins.frozenset before protocol 4: refused by both
    data = py2_pickle(obj) if protocol == "py2" else pickle.dumps(obj, protocol=protocol)
    path = write(tmp_path / "p", data)
    walked, loaded = walk_pickle(path, allow=NUMPY_ARRAYS), load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1")
    assert isinstance(walked["data"], Call) and not isinstance(walked["data"], np.ndarray)  # described, not built
    assert array_info(walked["data"]) == array_info(loaded["data"]) == ("uint8", (4, 6))
    assert array_info(walked["f"]) == ("float32", (2, 6))
    plain = {k: v for k, v in walked.items() if k not in ("data", "f")}
    assert plain == {k: v for k, v in loaded.items() if k not in ("data", "f")}
    assert walked["l"][0] is walked["l"][1] and walked["l"][0] is not walked["l"][2]  # the memo's sharing kept


def test_walk_refuses_what_the_unpickler_refuses(tmp_path):
    from seafl_dist.data.safepickle import walk_pickle
    marker = tmp_path / "pwned"
    for protocol in (0, 2, 5):
        path = write(tmp_path / f"evil{protocol}", pickle.dumps({"data": RunsCommand(f"touch {marker}")}, protocol=protocol))
        with pytest.raises(UnsafePickleError) as walked:
            walk_pickle(path, allow=NUMPY_ARRAYS)
        with pytest.raises(UnsafePickleError) as loaded:
            load_pickle(path, allow=NUMPY_ARRAYS)
        assert str(walked.value) == str(loaded.value)
    assert not marker.exists()


@pytest.mark.parametrize("cut", [0, 1, 20, -1])
def test_walk_of_a_truncated_file_is_one_line(tmp_path, cut):
    from seafl_dist.data.safepickle import walk_pickle
    whole = py2_pickle(cifar_batch("data_batch_1", random_images(2, 3, 32, 32), [1, 2]))
    path = write(tmp_path / "data_batch_1", whole[:cut] if cut else b"<html>404 Not Found</html>")
    with pytest.raises(DataError) as err:
        walk_pickle(path, allow=NUMPY_ARRAYS)
    assert str(err.value).startswith(f"{path} is truncated or corrupt: not a readable pickle (")
    assert "\n" not in str(err.value) and not isinstance(err.value, UnsafePickleError)
