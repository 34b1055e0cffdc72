"""Config files by path or by name: ``seafl run quickstart`` finds the configs shipped with the package.

The repository keeps its configs in ``configs/`` at the top level (the README's
``seafl run configs/quickstart.yaml``); a built wheel carries the same tree as
``seafl_dist/configs/`` (``setup.py`` copies it at build time). :func:`find_config` takes a path
that exists as it is, else looks the name up among the packaged configs, so ``quickstart``,
``quickstart.yaml``, ``digits/buffer_size`` and even ``configs/quickstart.yaml`` work from any
directory once the package is installed.
"""
from __future__ import annotations

from pathlib import Path

from seafl_dist.settings.errors import ConfigError

SUFFIXES = (".yaml", ".yml")


def packaged_dir() -> Path | None:
    """Where the shipped configs are: inside the installed package, or a source checkout's ``configs/``."""
    here = Path(__file__).resolve().parent.parent  # seafl_dist/
    if (here / "configs").is_dir():
        return here / "configs"
    checkout = here.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "configs").is_dir():
        return checkout / "configs"
    return None


def packaged() -> dict[str, Path]:
    """Every packaged config by name (``quickstart``, ``digits/buffer_size``, ...), sorted."""
    root = packaged_dir()
    if root is None:
        return {}
    files = [p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return {p.relative_to(root).with_suffix("").as_posix(): p for p in sorted(files)}


def describe(path: Path) -> str:
    """The first comment line of a config file (what it is), without the ``#``."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                return line.lstrip("#").strip()
            if line.strip():
                break
    except OSError:
        pass
    return ""


def packaged_config(path: str | Path) -> Path | None:
    """The packaged config that ``path`` names (``quickstart``, ``configs/quickstart.yaml``), or None."""
    name = Path(path).as_posix()
    if name.startswith("configs/"):
        name = name[len("configs/"):]
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return packaged().get(name)


def packaged_names() -> str:
    return ", ".join(packaged()) or "none found"


def find_config(path: str | Path) -> Path:
    """``path`` if it is a file, else the packaged config it names; ConfigError listing them if neither."""
    p = Path(path)
    if p.is_file():
        return p
    shipped = packaged_config(p)
    if shipped is not None:
        return shipped
    raise ConfigError(f"config file '{path}' does not exist and is not the name of a packaged config; pass the path "
                      f"of a YAML file, or one of: {packaged_names()} (`seafl configs` lists them)")


def is_sweep_file(data: dict) -> bool:
    """A sweep file has ``base:`` or ``grid:`` (seafl_dist/experiments/sweep.py); a run config has neither."""
    return "grid" in data or "base" in data
