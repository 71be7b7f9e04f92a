"""The lab's Ray image, `gpujob-lab/job:lab-ray`: the lab job image plus Ray from PyPI.

A second image rather than Ray in lab-cpu's definition: lab-cpu's pins and lock are the
product's (the quickstart and the golden dry runs read them), and only the Ray lab tests
need Ray. The Ray pin is the dev extras' (pyproject.toml), so the lab's cluster runs the
Ray the loopback e2e test runs. Its wheels come through this machine's pip (and its
mirror), downloaded here for the image's Python and platform with lab-cpu's pins as
constraints, so the packages lab-cpu already holds keep their versions; the build installs
them offline. Built only when a Ray test asks, and not again while the label's key (lab-cpu's
image id, the Ray pin, this file's Dockerfile) is the same; pushed to the lab registry.
"""

from __future__ import annotations

import hashlib
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from infra.lab import job_image, registry, state

REPO = Path(__file__).resolve().parents[2]
TAG = "gpujob-lab/job:lab-ray"
# The base's glibc is 2.36 (bookworm); pip matches `--platform` tags literally, so the ones
# Ray's closure is published under are named.
PLATFORMS = ("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64")
DOCKERFILE = f"""\
FROM {job_image.TAG}
COPY constraints.txt /opt/gpujob/ray-constraints.txt
COPY wheels /tmp/ray-wheels
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --only-binary=:all: \\
        --find-links /tmp/ray-wheels -c /opt/gpujob/ray-constraints.txt "$RAY_PIN" \\
    && rm -rf /tmp/ray-wheels
"""


def ray_pin() -> str:
    """`ray==X` from the dev extras: one Ray version for the e2e and the lab tests."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return next(pin for pin in project["optional-dependencies"]["dev"] if pin.startswith("ray=="))


def key(base_id: str) -> str:
    """The base image's id (a lab-cpu rebuilt from the same lock is another image), the Ray
    pin and the Dockerfile."""
    return hashlib.sha256(f"{base_id}\n{ray_pin()}\n{DOCKERFILE}".encode()).hexdigest()


def download(folder: Path, constraints: Path, report: Callable[[str], None]) -> None:
    """Ray and its closure as wheels for the image's Python 3.11 on Linux x86_64."""
    report(f"job image {TAG}: pip download {ray_pin()} ...")
    state.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
               "--python-version", "3.11", "--implementation", "cp",
               *[word for tag in PLATFORMS for word in ("--platform", tag)],
               "-c", str(constraints), "-d", str(folder), ray_pin()])  # fmt: skip


def build(report: Callable[[str], None] = print) -> str:
    """lab-cpu first (its own cache), then this image unless its key is built; push; return
    the hosts' ref."""
    job_image.build(report)

    def fill(context: Path) -> None:
        (context / "Dockerfile").write_text(DOCKERFILE.replace("$RAY_PIN", ray_pin()))
        (context / "constraints.txt").write_text("\n".join(job_image.pins()) + "\n")
        download(context / "wheels", context / "constraints.txt", report)

    job_image.build_once(TAG, key(job_image.image_id()), fill, report)
    report(f"pushing {TAG} to the lab registry ...")
    return registry.push(TAG, TAG)


if __name__ == "__main__":  # python -m infra.lab.ray_image (needs `gpujob lab up` first)
    print(build())
