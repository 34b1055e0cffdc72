"""Ship the repository's top-level ``configs/`` inside the wheel, as ``seafl_dist/configs/``.

Everything else is in pyproject.toml. The configs stay at the top of the repository, where the
README, the tests and sweep files refer to them; a build copies the tree into the package so an
installed ``seafl run quickstart`` finds them (seafl_dist/settings/files.py). An editable install
needs no copy: the package finds the checkout's ``configs/`` itself.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithConfigs(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "seafl_dist" / "configs"
        for src in sorted((HERE / "configs").rglob("*.yaml")):
            dst = target / src.relative_to(HERE / "configs")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


setup(cmdclass={"build_py": BuildWithConfigs})
