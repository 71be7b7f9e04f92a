"""The lab's job image, `gpujob-lab/job:lab-cpu`: the pins of images/lab-cpu.yaml on the base.

Wheels come from a wheelhouse assembled on the machine with `pip download` (torch 2.13.0 CPU
from pip's configured find-links) and are installed in the build with `--no-index`, so the
build is offline and repeatable. The image carries a label with the hash of its pins; a tag
whose label matches is not built again. Pushed to the lab registry for the hosts to pull.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from infra.lab import base_image, registry, state

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "images" / "lab-cpu.yaml"
DOCKERFILE = REPO / "infra" / "images" / "lab-cpu" / "Dockerfile"
TAG = "gpujob-lab/job:lab-cpu"
PINS_LABEL = "gpujob.lab.pins"


def pins(spec: Path = SPEC) -> list[str]:
    """`requirements` plus `torch==<torch>`: the image's whole closure, exact."""
    import yaml

    data = yaml.safe_load(spec.read_text())
    return [*data["requirements"], f"torch=={data['torch']}"]


def pins_hash(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]


def built_hash(tag: str = TAG) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{PINS_LABEL}"}}}}',
         tag],
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip() or None if done.returncode == 0 else None


def wheelhouse(lines: list[str], folder: Path) -> Path:
    """`pip download` of the pins (binary wheels only) into `folder`; cached between builds."""
    folder.mkdir(parents=True, exist_ok=True)
    requirements = folder / "requirements.txt"
    requirements.write_text("\n".join(lines) + "\n")
    state.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "-r",
            str(requirements),
            "-d",
            str(folder / "wheels"),
        ]
    )
    return folder  # fmt: skip


def build(report: Callable[[str], None] = print) -> str:
    """Build the image unless a tag with the same pins exists; push it; return the hosts' ref."""
    lines = pins()
    digest = pins_hash(lines)
    if built_hash() == digest:
        report(f"job image {TAG} is cached")
    else:
        base_image.build(report)
        report(f"job image {TAG}: pip download of {len(lines)} pins ...")
        house = wheelhouse(lines, state.lab_dir() / "wheelhouse" / "lab-cpu")
        context = Path(tempfile.mkdtemp(prefix="gjlab-job-", dir=state.lab_dir()))
        try:
            shutil.copy(DOCKERFILE, context / "Dockerfile")
            shutil.copy(house / "requirements.txt", context / "requirements.txt")
            (context / "wheels").mkdir()
            for wheel in (house / "wheels").iterdir():
                os.link(wheel, context / "wheels" / wheel.name)
            report(f"job image {TAG}: docker build (offline install) ...")
            state.run(["docker", "build", "-q", "--label", f"{PINS_LABEL}={digest}",
                       "--label", "gpujob.lab=job", "-t", TAG, str(context)])  # fmt: skip
        finally:
            shutil.rmtree(context, ignore_errors=True)
    report(f"pushing {TAG} to the lab registry ...")
    return registry.push(TAG, TAG)


if __name__ == "__main__":  # python -m infra.lab.job_image (needs `gpujob lab up` first)
    print(build())
