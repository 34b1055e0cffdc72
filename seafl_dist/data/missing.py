"""The errors of data that is missing or bad, worded the same for every loader.

- :class:`DatasetNotFoundError` (a ``FileNotFoundError``): a dataset is not on disk; the message
  names the dataset, the path searched, the files expected and how to get them.
- :class:`DataError` (a :class:`~seafl_dist.settings.ConfigError`): a dataset file is there but
  truncated, corrupt, unreadable or refused (a pickle that asks for code); the message is one
  line naming the file and what is wrong with it. The CLI prints both as ``seafl: error: ...``
  and exits 2, without a traceback.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from seafl_dist.settings.errors import ConfigError


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is not on disk (or could not be fetched); the message says where and how to get it."""


class DataError(ConfigError):
    """A dataset file that cannot be used as it is: the message names the file and what is wrong."""


def not_found(name: str, where: Path, expected: list[str], how: str, cause: str = "") -> DatasetNotFoundError:
    missing = [f for f in expected if not (where / f).exists()]
    text = (f"dataset '{name}' not found: searched {where}; expected "
            f"{', '.join(expected)}" + (f" (missing: {', '.join(missing)})" if missing and missing != expected else "")
            + f". To get it: set data.download=true on a machine with internet access, or {how}.")
    return DatasetNotFoundError(text + (f" Download/load failed with: {cause}" if cause else ""))


@contextmanager
def reading(path: Path):
    """Around the reads of dataset file ``path``: an OSError (permissions, a folder, I/O) becomes one DataError line."""
    try:
        yield
    except OSError as err:
        raise DataError(f"cannot read dataset file {path}: {err.strerror or err}") from None


def read_bytes(path: Path) -> bytes:
    """The bytes of a dataset file; a file that cannot be read is a DataError (see :func:`reading`)."""
    with reading(path):
        return Path(path).read_bytes()
