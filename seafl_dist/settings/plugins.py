"""Your own model, dataset, partition or aggregation rule, named by import path in the config.

``model.name``, ``data.name``, ``data.partition`` and ``algorithm.name`` accept, beside the
built-in names, ``package.module:callable`` (the callable may be ``Class.attr``):

==================  ==================================================  ==========================================
key                 called as                                           returns
==================  ==================================================  ==========================================
model.name          f(num_classes, in_channels, image_size, width)      a LightningModule, or an nn.Module (wrapped)
data.name           f(root, train)                                      a map-style Dataset of (image, label), or
                                                                        an (images, labels) tensor pair
data.name           a LightningDataModule class, or f() / f(data_dir)   a LightningDataModule (data/datamodule.py)
data.partition      f(labels, num_devices, seed)                        one index array per device
algorithm.name      f(cfg, version, global_flat, updates, base_model)   an AggregationResult (as the built-ins)
==================  ==================================================  ==========================================

``algorithm.params`` and ``model.params`` (a mapping) are passed to the rule and to the model builder as
keyword arguments after those (``f(..., beta=2)``: hyperparameters of your own, which sweeps can vary as
``algorithm.params.beta``); :func:`check_params` binds them to the callable's signature when the config loads.

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

import difflib
import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable, Optional

from seafl_dist.settings.errors import ConfigError

# key -> the parameters the callable is called with (positionally), and what it must return
SIGNATURES = {
    "model.name": (("num_classes", "in_channels", "image_size", "width"),
                   "a LightningModule or torch.nn.Module"),
    "data.name": (("root", "train"), "a map-style Dataset of (image tensor, int label) or an (images, labels) pair; or "
                  "a LightningDataModule class, or a factory f() or f(data_dir) returning one"),
    "data.partition": (("labels", "num_devices", "seed"), "a list of num_devices index arrays"),
    "algorithm.name": (("cfg", "version", "global_flat", "updates", "base_model"), "an AggregationResult"),
}
_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_RESOLVED: dict[str, Callable] = {}


HF, FLWR = "hf:", "flwr:"  # data.name's and data.partition's prefixes: Hugging Face datasets, Flower's partitioners


def is_import_path(name: Any) -> bool:
    """Whether a config value names a callable by import path (``pkg.mod:fn``) rather than a built-in (or a
    Hugging Face dataset ``hf:<path>``, or a Flower partitioner ``flwr:<Name>``)."""
    return isinstance(name, str) and ":" in name and not name.startswith((HF, FLWR))


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
    if key == "data.name" and makes_datamodule(obj):  # a LightningDataModule (data/datamodule.py)
        _RESOLVED[value] = obj
        return obj
    try:
        inspect.signature(obj).bind(*params)
    except TypeError as err:
        if key in PARAMS_KEYS and _binds_partly(obj, params):  # its own parameters left: <section>.params gives
            _RESOLVED[value] = obj                              # them (check_params says which are missing)
            return obj
        raise plugin_error(key, value, f"{attr} cannot be called with the {len(params)} arguments "
                                       f"({', '.join(params)}): {err}") from None
    except ValueError:  # no signature (some builtins): trust it, the call will tell
        pass
    _RESOLVED[value] = obj
    return obj


ROOT_PARAMS = ("data_dir", "root")  # a DataModule's (or its factory's) parameters that are given data.root


def is_datamodule_class(obj) -> bool:
    """Whether ``obj`` is a LightningDataModule subclass (by its bases' names: Lightning is not imported)."""
    return isinstance(obj, type) and any(
        c.__name__ == "LightningDataModule" and c.__module__.split(".")[0] in ("lightning", "pytorch_lightning")
        for c in obj.__mro__)


def root_kwargs(fn, root: str) -> dict:
    """``{"data_dir": root}`` (or ``{"root": root}``) when ``fn`` takes such a parameter, else {}."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return next(({p: root} for p in ROOT_PARAMS if p in params), {})


def makes_datamodule(fn) -> bool:
    """Whether ``data.name``'s callable makes a LightningDataModule: the class itself, or a factory that cannot
    be called as ``f(root, train)`` (the dataset form) but can with no argument, or with ``data_dir`` / ``root``."""
    if is_datamodule_class(fn):
        return True
    try:
        sig = inspect.signature(fn)
        sig.bind("root", "train")
        return False  # the dataset form f(root, train)
    except TypeError:
        pass
    except ValueError:
        return False
    try:
        sig.bind(**root_kwargs(fn, ""))
    except TypeError:
        return False
    return True


PARAMS_KEYS = ("algorithm.name", "model.name")  # the callables a section's ``params`` is passed to
FIXED_KEYWORDS = {"algorithm.name": ("parts", "state")}  # passed by name when the callable takes it (algo/dispatch.py)


def _binds_partly(fn, params: tuple) -> bool:
    try:
        inspect.signature(fn).bind_partial(*params)
        return True
    except TypeError:
        return False


def own_parameters(fn, key: str) -> list[str] | None:
    """The names of ``fn``'s parameters beyond those the run passes it as ``key`` (its own hyperparameters);
    None when it takes ``**kwargs`` (any name) or has no signature."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    taken = SIGNATURES[key][0] + FIXED_KEYWORDS.get(key, ())
    return [n for n, p in sig.parameters.items() if n not in taken and p.kind is not p.VAR_POSITIONAL]


def check_params(key: str, value: str, params: dict | None) -> None:
    """``params`` (``<section>.params``) bind to the callable ``value`` names (``key``: ``algorithm.name`` or
    ``model.name``) as keyword arguments after the run's own: an unknown name, a name the run passes itself or
    a parameter of its own left without a default is one line naming the callable's parameters."""
    field = key.split(".")[0] + ".params"
    fn = resolve(key, value)
    own = own_parameters(fn, key)
    shown = "null" if params is None else repr(params)
    params = params or {}
    theirs = f"{value} takes " + ("any name (**kwargs)" if own is None else ", ".join(own) if own else
                                  "no parameters of its own") + \
        f" (after {', '.join(SIGNATURES[key][0])})"
    for name in params:
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"config key '{field}' has value {shown}: {name!r} is not a parameter name; {theirs}")
        if name in SIGNATURES[key][0] + FIXED_KEYWORDS.get(key, ()) or (own is not None and name not in own):
            raise ConfigError(f"config key '{field}' has value {shown}: {value} has no parameter {name!r} of its "
                              f"own; {theirs}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind_partial(*SIGNATURES[key][0], **params)
        missing = [n for n, p in sig.parameters.items() if n in (own or ()) and n not in params
                   and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except TypeError as err:
        raise ConfigError(f"config key '{field}' has value {shown}: {err}; {theirs}") from None
    if missing:
        raise ConfigError(f"config key '{field}' has value {shown}: {value} needs {', '.join(missing)} (no "
                          f"default); give {', '.join(f'{field}.{n}' for n in missing)}")


def refuse_params_of_built_in(key: str, value: str, params: dict | None) -> None:
    """A built-in rule or model takes its settings from its section's keys: a non-empty ``params`` is refused."""
    if params:
        section = key.split(".")[0]
        what = "model builder" if section == "model" else "rule"
        raise ConfigError(f"config key '{section}.params' has value {params!r}: null for {key}={value} (params are "
                          f"the keyword arguments of a {what} of your own, {key}: package.module:callable; a "
                          f"built-in one takes its section's keys)")


def check(key: str, value: str, allowed: tuple) -> None:
    """A config check: ``value`` is one of ``allowed`` or an import path that resolves."""
    if is_import_path(value):
        resolve(key, value)
    elif value not in allowed:
        near = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)  # a typo's fix, as for keys
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ConfigError(f"config key '{key}' has value {value!r}; allowed: {hint}one of {', '.join(allowed)}, "
                          f"or {expected(key)}")


def own_params(key: str, name: str, params: Optional[dict]) -> Optional[dict]:
    """``<section>.params`` checked against the callable ``name`` names (settings/plugins.py ``check_params``);
    refused when non-empty for a built-in; an empty mapping is null (config.yaml leaves it out)."""
    if is_import_path(name):
        check_params(key, name, params)
    else:
        refuse_params_of_built_in(key, name, params)
    return params or None
