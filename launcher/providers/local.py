"""The local provider: every node runs on this machine, under the bare runtime, or in Docker
for an `image:` that names a container image; inside the job's folder either way.

No cloud account needed: this is what `make run` uses, and on a GPU machine with no Docker
or sshd it is how the same spec, plan and agent reach the GPUs.
"""

from __future__ import annotations

import sys

from launcher.errors import UsageError
from launcher.paths import cache_dir, envs_dir, state_dir
from launcher.plan.model import HostFacts, Target
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
    from launcher.remote.local_facts import host_python3, own_venv_bin

    ref = image_reference(spec.image, image)
    docker = _runs_in_docker(image, ref, runtime, where)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not docker and image is not None and image.python != here:
        raise UsageError(
            f"image {image.name} is for Python {image.python} but this machine runs {here}",
            "use `--set image=host` to run with this machine's own Python environment",
        )
    hidden = own_venv_bin()
    facts = _docker_facts(ref, where) if docker else None
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


def _runs_in_docker(
    image: ImageDefinition | None, ref: str | None, runtime: str, where: str
) -> bool:
    """A container image name always runs in Docker; a definition only with `--runtime
    docker` (its pinned venv otherwise, as `make run` does)."""
    if image is None and ref is not None:
        if runtime == "bare":
            raise UsageError(f"{where}: image: {ref} is a container image; --runtime bare would "
                             "run this machine's Python instead",
                             "leave --runtime out, or use `image: host`")  # fmt: skip
        return True
    if runtime == "docker" and ref is None:
        raise UsageError("--runtime docker needs an image: give `image:` a full image name, "
                         "or set GPUJOB_REGISTRY for an image definition")  # fmt: skip
    return runtime == "docker"


def _docker_facts(ref: str | None, where: str) -> HostFacts:
    from launcher.remote.facts import host_facts

    facts = host_facts(LocalConnection(), require_python=False)
    if not facts.docker:
        raise UsageError(
            f"{where}: image: {ref} is a container image and Docker does not answer on this "
            "machine (a job never falls back to this machine's Python)",
            "start Docker, run it on a host that has it (`--on HOST`, `--up GPU`), or use "
            "`image: host`",
        )
    return facts


def local_connections() -> dict[str, LocalConnection]:
    return {HOST: LocalConnection()}
