"""The run configuration, in one package: typed sections with their help, YAML files, dotted
overrides, validation, packaged configs by name, and import-path plugins.

    from seafl_dist.settings import load_config
    cfg = load_config("configs/quickstart.yaml", ["algorithm.name=fedbuff", "run.seed=3"])

Modules, each importing only those above it: ``errors`` (ConfigError), ``plugins`` (import paths
as names), ``sections`` (one dataclass per section), ``files`` (configs by path or name), ``core``
(the Config, YAML load and dump, overrides). Named ``settings`` so it is not confused with the
YAML files in ``configs/``.
"""
from seafl_dist.settings.core import *  # noqa: F401,F403  (the public config API)
from seafl_dist.settings.core import __all__  # noqa: F401
