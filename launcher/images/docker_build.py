"""Carry out a BuildPlan with the Docker SDK: verified wheelhouse, context, build (progress
streamed), push. Registry credentials come from GPUJOB_REGISTRY_USER/_PASSWORD in the
environment (CI secrets), never from a flag, and never enter the image."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from launcher.errors import GpujobError
from launcher.images import wheelhouse
from launcher.images.buildplan import BuildPlan
from launcher.images.lock import Lock


def apply(
    plan: BuildPlan,
    lock: Lock,
    cache: Path,
    report: Callable[[str], None],
    no_cache: bool = False,
) -> str:
    """Build (unless an image with this lock exists) and push; returns the pushed or local ref.
    One build of a tag at a time on this machine: a second `image build` of it (another
    terminal, a second CI job on the runner) waits, then finds it cached."""
    client = docker_client()
    with _one_build_of(plan.tag, cache, report):
        labels = built_labels(client, plan.tag)
        if not no_cache and all(labels.get(key) == value for key, value in plan.labels.items()):
            report(f"{plan.tag}: cached (image with lock {plan.lock_hash[:12]} and this "
                   "Dockerfile)")  # fmt: skip
        else:
            _build(client, plan, lock, cache, report, no_cache)
    if plan.push is None:
        return plan.tag
    repository, tag = plan.push.rsplit(":", 1)
    client.api.tag(plan.tag, repository, tag)
    report(f"{plan.push}: docker push ...")
    _stream(
        client.api.push(repository, tag, stream=True, decode=True, auth_config=_auth()),
        report,
        "push",
    )
    return plan.push


def _build(
    client: Any,
    plan: BuildPlan,
    lock: Lock,
    cache: Path,
    report: Callable[[str], None],
    no_cache: bool,
) -> None:
    wheels = wheelhouse.fetch(lock, cache, report)
    context = Path(tempfile.mkdtemp(prefix="context-", dir=_mkdir(cache / "contexts")))
    try:
        _write_context(context, plan, wheels)
        report(f"{plan.tag}: docker build ...")
        _stream(
            client.api.build(path=str(context), tag=plan.tag, labels=plan.labels, rm=True,
                             forcerm=True, decode=True, nocache=no_cache, pull=False),
            report,
            "build",
        )  # fmt: skip
    finally:
        shutil.rmtree(context, ignore_errors=True)


@contextlib.contextmanager
def _one_build_of(tag: str, cache: Path, report: Callable[[str], None]) -> Iterator[None]:
    """An flock per tag in the image cache, held while the tag is looked up and built."""
    name = hashlib.sha256(tag.encode()).hexdigest()[:16]
    fd = os.open(_mkdir(cache / "locks") / f"build-{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"{tag}: another gpujob is building it on this machine; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def built_labels(client: Any, tag: str) -> dict[str, str]:
    """A local image's labels (empty when there is no such image)."""
    import docker.errors

    try:
        return dict(client.images.get(tag).labels or {})
    except docker.errors.ImageNotFound:
        return {}


def docker_client() -> Any:
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as err:
        raise GpujobError(
            f"no Docker engine answers ({err})", "start dockerd or set DOCKER_HOST"
        ) from None
    return client


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_context(context: Path, plan: BuildPlan, wheels: list[Path]) -> None:
    (context / "Dockerfile").write_text(plan.dockerfile)
    (context / "requirements.txt").write_text(plan.requirements)
    wheelhouse.link_into(wheels, context / "wheels")


def _stream(chunks: Iterator[dict[str, Any]], report: Callable[[str], None], what: str) -> None:
    last = ""
    for chunk in chunks:
        if "error" in chunk or "errorDetail" in chunk:
            detail = chunk.get("error") or chunk["errorDetail"].get("message", "")
            raise GpujobError(f"docker {what} failed: {detail.strip()}")
        line = (chunk.get("stream") or chunk.get("status") or "").strip()
        if line and line != last and not chunk.get("progressDetail"):
            report(line)
            last = line


def _auth() -> dict[str, str] | None:
    user = os.environ.get("GPUJOB_REGISTRY_USER")
    password = os.environ.get("GPUJOB_REGISTRY_PASSWORD")
    return {"username": user, "password": password} if user and password else None
