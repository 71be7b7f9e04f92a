"""GPU tests run only where NVIDIA GPUs are (the device machine); CI has none and skips them."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return result.stdout.count("GPU ") if result.returncode == 0 else 0


GPUS = gpu_count()


def gpu_name() -> str:
    """`H100` from `GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)`: the spec names what is here."""
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    found = re.search(r"GPU 0: NVIDIA (\w+)", listed.stdout)
    assert found, listed.stdout
    return found.group(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("gpu") and GPUS == 0:
            item.add_marker(pytest.mark.skip(reason="needs NVIDIA GPUs: run on the device machine"))
        needed = item.get_closest_marker("gpus")
        if needed and 0 < GPUS < needed.args[0]:
            item.add_marker(pytest.mark.skip(reason=f"needs {needed.args[0]} GPUs, has {GPUS}"))
