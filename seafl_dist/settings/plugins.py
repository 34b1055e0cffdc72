"""Your own model, dataset, partition or aggregation rule, named by import path in the config.

``model.name``, ``data.name``, ``data.partition`` and ``algorithm.name`` accept, beside the
built-in names, ``package.module:callable`` (the callable may be ``Class.attr``):

==================  ==================================================  ==========================================
key                 called as                                           returns
==================  ==================================================  ==========================================
model.name          f(num_classes, in_channels, image_size, width)      a LightningModule, or an nn.Module (wrapped)
data.name           f(root, train)                                      a map-style Dataset of (image, label), or
                                                                        an (images, labels) tensor pair
data.partition      f(labels, num_devices, seed)                        one index array per device
algorithm.name      f(cfg, version, global_flat, updates, base_model)   an AggregationResult (as the built-ins)
==================  ==================================================  ==========================================

When the config loads, each path is imported and checked: the module exists, has the attribute,
the attribute is callable and accepts those arguments. What it returns is checked before any
training starts (model, dataset, partition: when the run is prepared) or, for a rule, on every
call, before the result touches the global model. Every failure is one :class:`ConfigError`
line naming the key, the value and what was expected.

The module is imported from ``sys.path`` as usual, with the current directory appended (as
``python -m`` does), so a ``mymodels.py`` beside the config works without setting PYTHONPATH;
torchrun's ranks and sweep runs start in the same directory.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable

from seafl_dist.settings.errors import ConfigError

# key -> the parameters the callable is called with (positionally), and what it must return
SIGNATURES = {
    "model.name": (("num_classes", "in_channels", "image_size", "width"),
                   "a LightningModule or torch.nn.Module"),
    "data.name": (("root", "train"), "a map-style Dataset of (image tensor, int label) or an (images, labels) pair"),
    "data.partition": (("labels", "num_devices", "seed"), "a list of num_devices index arrays"),
    "algorithm.name": (("cfg", "version", "global_flat", "updates", "base_model"), "an AggregationResult"),
}
_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_RESOLVED: dict[str, Callable] = {}


def is_import_path(name: Any) -> bool:
    """Whether a config value names a callable by import path (``pkg.mod:fn``) rather than a built-in."""
    return isinstance(name, str) and ":" in name


def expected(key: str) -> str:
    params, returns = SIGNATURES[key]
    return f"package.module:callable, called as f({', '.join(params)}) -> {returns}"


def plugin_error(key: str, value: str, problem: str):
    """A ConfigError of one line: the key, the value, what is wrong and what was expected."""
    return ConfigError(f"config key '{key}' has value {value!r}: {problem}; expected {expected(key)}")


def resolve(key: str, value: str) -> Callable:
    """Import ``value`` (``pkg.mod:attr``) and check it can be called as ``key`` requires; cached."""
    if value in _RESOLVED:
        return _RESOLVED[value]
    if not _PATH.match(value):
        raise plugin_error(key, value, "not of the form package.module:callable")
    module_name, attr = value.split(":")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):  # the module itself (or a parent) is missing
            raise plugin_error(key, value, f"module '{err.name}' not found (is it on PYTHONPATH or in the current "
                                           f"directory, {os.getcwd()}?)") from None
        raise plugin_error(key, value, f"importing {module_name} failed: {type(err).__name__}: {err}") from None
    except Exception as err:  # the user's module raised while importing
        raise plugin_error(key, value, f"importing {module_name} failed: {type(err).__name__}: {err}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise plugin_error(key, value, f"module {module_name} has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise plugin_error(key, value, f"{attr} is a {type(obj).__name__}, not callable")
    params = SIGNATURES[key][0]
    try:
        inspect.signature(obj).bind(*params)
    except TypeError as err:
        raise plugin_error(key, value, f"{attr} cannot be called with the {len(params)} arguments "
                                       f"({', '.join(params)}): {err}") from None
    except ValueError:  # no signature (some builtins): trust it, the call will tell
        pass
    _RESOLVED[value] = obj
    return obj


def check(key: str, value: str, allowed: tuple) -> None:
    """A config check: ``value`` is one of ``allowed`` or an import path that resolves."""
    if is_import_path(value):
        resolve(key, value)
    elif value not in allowed:
        raise ConfigError(f"config key '{key}' has value {value!r}; allowed: one of {', '.join(allowed)}, "
                          f"or {expected(key)}")
