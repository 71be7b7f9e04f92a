"""The lab's job image, `gpujob-lab/job:lab-cpu`: the product's lab-cpu image, as root.

The product's image is built first, by the code `gpujob image build lab-cpu` runs
(`launcher.images`: the lock's wheelhouse fetched into its sha256-addressed cache, every
file verified, installed offline with --require-hashes on the lab's base), and this image
adds only `USER root`, which the Vast fake's emulated entrypoint (sshd, /root/.ssh) needs.
So the machine installs torch into an image once (about two minutes on two cores): the
image tests' `gpujob image build lab-cpu` finds the product's image built, and its push
finds the layers in the registry. A tag whose label holds the same key (the product image's
tag, which names its lock, and both Dockerfiles) is not built again. Pushed to the lab
registry for the hosts to pull.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from infra.lab import base_image, naming, registry, state

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml"
DOCKERFILE = REPO / "infra" / "images" / "lab-cpu" / "Dockerfile"
TAG = "gpujob-lab/job:lab-cpu"
PINS_LABEL = "gpujob.lab.pins"


def pins(spec: Path = SPEC) -> list[str]:
    """`requirements` plus `torch==<torch>`: the image's whole closure, exact."""
    from launcher.spec.image import load_definition_file

    definition, _ = load_definition_file(spec)
    return [*definition.requirements, f"torch=={definition.torch}"]


def wheelhouse(lines: list[str], folder: Path, report: Callable[[str], None] = print) -> Path:
    """The lock's verified wheels in `folder/wheels` (hard links into the product's cache) and
    `lines` in `folder/requirements.txt`: a find-links folder for hosts without Docker."""
    from launcher.images.commands import read_lock
    from launcher.images.wheelhouse import fetch, link_into
    from launcher.paths import images_cache_dir

    _, lock = read_lock("lab-cpu")
    wheels = fetch(lock, images_cache_dir(), report, extra_dirs=[folder / "wheels"])
    link_into(wheels, folder / "wheels")
    (folder / "requirements.txt").write_text("\n".join(lines) + "\n")
    return folder


def built_hash(tag: str = TAG) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{PINS_LABEL}"}}}}',
         tag],
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip() or None if done.returncode == 0 else None


def image_id(tag: str = TAG) -> str:
    """The local image's id: what an image built FROM `tag` keys its cache on, as a rebuild
    of `tag` with the same label is another image."""
    return state.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag]).stdout.strip()


def build_once(
    tag: str,
    key: str,
    fill: Callable[[Path], None],
    report: Callable[[str], None],
    build_args: dict[str, str] | None = None,
) -> None:
    """The lab images' one cache rule: unless `tag` already carries `key` in its label,
    `fill` a fresh context folder (it may download: only on a miss) and build it, labelled."""
    if built_hash(tag) == key:
        report(f"job image {tag} is cached")
        return
    with naming.image_build_lock():  # a second lab waits, then finds it built
        if built_hash(tag) == key:
            report(f"job image {tag} is cached (built by another lab meanwhile)")
            return
        context = Path(tempfile.mkdtemp(prefix="gjlab-job-", dir=state.lab_dir()))
        try:
            fill(context)
            report(f"job image {tag}: docker build (offline install) ...")
            args = [word for name, value in (build_args or {}).items()
                    for word in ("--build-arg", f"{name}={value}")]  # fmt: skip
            state.run(["docker", "build", "-q", "--label", f"{PINS_LABEL}={key}",
                       "--label", "gpujob.lab=job", *args, "-t", tag, str(context)])  # fmt: skip
        finally:
            shutil.rmtree(context, ignore_errors=True)


def build(report: Callable[[str], None] = print) -> str:
    """Build the image unless a tag with the same key exists; push it; return the hosts' ref."""
    from launcher.images.commands import build_image

    product = build_image("lab-cpu", push=None, dry_run=True, report=lambda _: None)
    dockerfile = DOCKERFILE.read_text()
    text = f"{product.tag}\n{product.dockerfile}\n{dockerfile}"
    key = hashlib.sha256(text.encode()).hexdigest()

    def fill(context: Path) -> None:
        shutil.copy(DOCKERFILE, context / "Dockerfile")

    if built_hash(TAG) != key:  # else the product's image is not even looked at
        build_once(TAG, key, fill, report, build_args={"PRODUCT": product_image(report)})
    report(f"pushing {TAG} to the lab registry ...")
    return registry.push(TAG, TAG)


def product_image(report: Callable[[str], None]) -> str:
    """The product's lab-cpu image, built (or found built) as `gpujob image build lab-cpu`
    builds it, on the lab's base image; returns its local tag."""
    from launcher.images.commands import build_image

    base_image.build(report)
    report(f"job image {TAG}: gpujob image build lab-cpu ...")
    return build_image("lab-cpu", push=None, dry_run=False, report=lambda _: None).tag


if __name__ == "__main__":  # python -m infra.lab.job_image (needs `gpujob lab up` first)
    print(build())
