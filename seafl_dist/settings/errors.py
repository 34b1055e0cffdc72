"""The one exception of the settings package, and the wording every check uses (a key's domain is worded
by :mod:`.domains`)."""
from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A user mistake in the configuration; the CLI prints it without a traceback."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config key '{key}' has value {value!r}; allowed: {allowed}")
