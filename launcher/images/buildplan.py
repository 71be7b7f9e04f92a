"""`gpujob image build` as a value: the Dockerfile, the build context's files, the tag, the
labels and the push target, all derived from a lock with no I/O. `--dry-run` prints this
object; `docker_build.apply` carries it out and nothing else."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from launcher.images.catalog import Catalog
from launcher.images.lock import Lock

REPOSITORY = "gpujob/{name}"
LOCK_LABEL = "gpujob.image.lock"
DOCKERFILE_LABEL = "gpujob.image.dockerfile"


@dataclass(frozen=True)
class BuildPlan:
    name: str
    lock_hash: str
    dockerfile: str
    requirements: str
    wheels: list[str]
    tag: str
    labels: dict[str, str]
    push: str | None = None
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lock_hash": self.lock_hash,
            "tag": self.tag,
            "push": self.push,
            "labels": self.labels,
            "wheels": self.wheels,
            "steps": self.steps,
            "files": {"Dockerfile": self.dockerfile, "requirements.txt": self.requirements},
        }


def image_tag(name: str, lock_hash: str) -> str:
    """The lock hash is the tag: a tag names exactly one set of wheels, forever."""
    return f"{REPOSITORY.format(name=name)}:{lock_hash[:16]}"


def plan_build(lock: Lock, catalog: Catalog, push: str | None = None) -> BuildPlan:
    base = catalog.base_image(lock.base) or {}
    runtime_env = []
    if lock.deepspeed_ops:
        runtime_env.append(("GPUJOB_DEEPSPEED_OPS", ",".join(lock.deepspeed_ops)))
    dockerfile = render_dockerfile(
        name=lock.name,
        lock_hash=lock.lock_hash,
        base=lock.base,
        python=lock.python,
        torch=lock.torch,
        install_python=not base.get("has_python", True),
        runtime_env=runtime_env,
    )
    tag = image_tag(lock.name, lock.lock_hash)
    remote = f"{push.rstrip('/')}/{tag}" if push else None
    steps = [
        f"fetch {len(lock.packages)} wheels into the cache, each checked against its sha256",
        "write the build context: Dockerfile, requirements.txt (hashes), wheels/",
        f"docker build -t {tag} (Docker SDK; skipped when {tag} exists with this lock label)",
    ]
    if remote:
        steps.append(f"docker push {remote}")
    return BuildPlan(
        name=lock.name,
        lock_hash=lock.lock_hash,
        dockerfile=dockerfile,
        requirements=lock.requirements_txt() if not lock.unknown_hashes else "",
        wheels=[p.filename for p in lock.packages],
        tag=tag,
        labels={
            LOCK_LABEL: lock.lock_hash,
            DOCKERFILE_LABEL: hashlib.sha256(dockerfile.encode()).hexdigest(),
            "gpujob.image.name": lock.name,
        },
        push=remote,
        steps=steps,
    )


@cache
def template_environment() -> Any:
    from launcher.resources import template_environment as environment

    return environment()


def render_dockerfile(**context: Any) -> str:
    return template_environment().get_template("Dockerfile.j2").render(**context)
