"""The run configuration, in one package: typed sections with their help, YAML files, dotted
overrides, validation, packaged configs by name, and import-path plugins.

    from seafl_dist.settings import load_config
    cfg = load_config("configs/quickstart.yaml", ["algorithm.name=fedbuff", "run.seed=3"])

Modules, each importing only those above it (tests/unit/test_config_package.py checks it):
``errors`` (ConfigError and the wording of every check), ``keys`` (a field with its help:
``key(default, "help")``), ``plugins`` (import paths as names), ``sections`` (one dataclass per
section; ``execution``: runtime and logging), ``files`` (configs by path or name), ``core`` (the Config, YAML load and dump,
overrides), ``reference`` (docs/configuration.md and ``seafl configs --keys``, generated from the
help). Named ``settings`` so it is not confused with the YAML files in ``configs/``.

A new key is one line in its section's dataclass in ``sections.py``, e.g.
``dropout: float = key(0.0, "chance a device drops out of a job")`` (plus its check in
``__post_init__``); then ``python -m seafl_dist.settings.reference`` rewrites the page.
"""
from seafl_dist.settings.core import *  # noqa: F401,F403  (the public config API)
from seafl_dist.settings.core import __all__  # noqa: F401
