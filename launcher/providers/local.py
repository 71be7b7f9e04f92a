"""The local provider: every node runs on this machine, under the bare runtime, or in Docker
for an `image:` that names a container image; inside the job's folder either way.

No cloud account needed: this is what `make run` uses, and on a GPU machine with no Docker
or sshd it is how the same spec, plan and agent reach the GPUs.
"""

from __future__ import annotations

import sys

from launcher.errors import UsageError
from launcher.paths import cache_dir, envs_dir, state_dir
from launcher.plan.model import Target
from launcher.remote.local import LocalConnection
from launcher.spec.image import ImageDefinition
from launcher.spec.job import JobSpec

HOST = "local"
LOOPBACK = "127.0.0.1"


def local_target(
    spec: JobSpec, image: ImageDefinition | None, runtime: str = "auto", where: str = "image"
) -> Target:
    """The job stays inside its folder (`sandbox`, plan/sandbox.py); an `image:` naming a
    container image runs in Docker, or is refused (`where`: its file:line), never on this
    machine's Python instead."""
    from launcher.plan.placement import image_reference
    from launcher.plan.sandbox import runs_in_docker
    from launcher.remote.local_facts import docker_facts, host_python3, own_venv_bin

    ref = image_reference(spec.image, image)
    docker = runs_in_docker(image is not None, ref, runtime, where)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not docker and image is not None and image.python != here:
        raise UsageError(
            f"image {image.name} is for Python {image.python} but this machine runs {here}",
            "use `--set image=host` to run with this machine's own Python environment",
        )
    hidden = own_venv_bin()
    facts = docker_facts(str(ref), where) if docker else None
    return Target(
        provider="local",
        runtime="docker" if docker else "bare",
        hosts=(HOST,) * spec.nodes,
        addresses=(LOOPBACK,) * spec.nodes,
        job_root=str(state_dir() / "jobs"),
        python="python3" if docker else sys.executable if image else host_python3(),
        agent_python=sys.executable,
        env_root=str(envs_dir()),
        gpus_per_node=spec.resources.gpus_per_node,
        image_ref=ref if docker else None,
        image_present=bool(facts and ref in facts.images),
        host_gpus=facts.gpus if facts else 0,
        raise_memlock=facts.memlock_unlimited if facts else True,
        sandbox=True,
        hidden_path=hidden,
        shared_cache=str(cache_dir() / "job-cache"),
    )


def local_connections() -> dict[str, LocalConnection]:
    return {HOST: LocalConnection()}
