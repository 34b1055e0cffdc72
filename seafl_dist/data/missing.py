"""The one error a missing dataset raises, worded the same for every loader."""
from __future__ import annotations

from pathlib import Path


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is not on disk (or could not be fetched); the message says where and how to get it."""


def not_found(name: str, where: Path, expected: list[str], how: str, cause: str = "") -> DatasetNotFoundError:
    missing = [f for f in expected if not (where / f).exists()]
    text = (f"dataset '{name}' not found: searched {where}; expected "
            f"{', '.join(expected)}" + (f" (missing: {', '.join(missing)})" if missing and missing != expected else "")
            + f". To get it: set data.download=true on a machine with internet access, or {how}.")
    return DatasetNotFoundError(text + (f" Download/load failed with: {cause}" if cause else ""))
