"""`gpujob --version`: the installed package's version, and one line (not a traceback) from a
source tree run without installing, as on the GPU machines (`python -m launcher`)."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable

import pytest


def test_the_version_comes_from_the_package(gpujob: Callable) -> None:
    result = gpujob("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"gpujob, version {importlib.metadata.version('gpujob')}"


def test_a_source_tree_not_installed_says_so(
    gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    result = gpujob("--version")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "gpujob, version (not installed: run from a source tree)"
