"""Build hook: the wheel's example jobs (`gpujob init`) are copied from `jobs/` at build time,
so `jobs/` stays their only source. Everything else is declared in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithExamples(build_py):
    """build_py, plus `jobs/` copied to `launcher/examples/` inside the build (not the tree)."""

    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "jobs"
        if self.editable_mode or not source.is_dir():
            return  # an editable install reads jobs/ of the checkout itself
        target = Path(self.build_lib) / "launcher" / "examples"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithExamples})
