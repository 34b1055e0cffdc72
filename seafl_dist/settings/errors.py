"""The exceptions of a user's mistakes, and the wording every check uses."""
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


def _choice(key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        _fail(key, value, "one of " + ", ".join(map(str, choices)))


def _at_least(key: str, value: Any, low: float, *, strict: bool = False) -> None:
    if value is None:
        return
    if (value <= low) if strict else (value < low):
        _fail(key, value, f"a number {'>' if strict else '>='} {low}")
