"""The run configuration, in one package: typed sections with their help, YAML files, dotted
overrides, validation, packaged configs by name, and import-path plugins.

    from seafl_dist.settings import load_config
    cfg = load_config("configs/quickstart.yaml", ["algorithm.name=fedbuff", "run.seed=3"])

Modules, each importing only those above it (tests/unit/test_config_package.py checks it):
``errors`` (ConfigError and the wording of every check), ``plugins`` (import paths as names),
``domains`` (the values a key takes, checked and worded), ``keys`` (a field with its help and domain:
``key(default, "help", "(0, 1]")``), ``server_opt`` and ``asyncsgd`` (the ``algorithm.server_opt`` and
``algorithm.asyncsgd`` sections), ``compression`` and
``privacy`` (the ``compression`` and ``privacy`` sections), ``sections`` (one
dataclass per section; ``execution``: runtime and logging), ``files`` (configs by path or name), ``core`` (the Config, YAML load and dump,
overrides), ``reference`` (docs/configuration.md and ``seafl configs --keys``, generated from the
help). Named ``settings`` so it is not confused with the YAML files in ``configs/``.

A new key is one line in its section's dataclass in ``sections.py``, its domain included, e.g.
``grad_clip_val: Optional[float] = key(None, "clip gradients at this norm; null: off", "(0, inf)")`` or
``grad_clip_algorithm: str = key("norm", "clip by `norm` or `value`", ("norm", "value"))``: the section's
``check_fields`` then refuses any value outside it (NaN, ±inf, out of range, a wrong type, ''), and
tests/unit/test_config_domains.py tries it; only a rule between keys needs code in ``__post_init__``.
Then ``python -m seafl_dist.settings.reference`` rewrites the page.
"""
from seafl_dist.settings.core import *  # noqa: F401,F403  (the public config API)
from seafl_dist.settings.core import __all__  # noqa: F401
