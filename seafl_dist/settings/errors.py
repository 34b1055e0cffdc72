"""The exceptions of a user's mistakes, and the wording every check uses (a key's domain is worded
by :mod:`.domains`)."""
from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A user mistake in the configuration; the CLI prints it without a traceback."""


class ModuleContractError(ValueError):
    """A user's LightningModule that asks for what a job cannot do as Lightning does it (one line; raised
    by train/). Found before the run it becomes a ConfigError naming ``model.name``; found mid-run the
    CLI prints it in one line, without a traceback."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config key '{key}' has value {value!r}; allowed: {allowed}")
