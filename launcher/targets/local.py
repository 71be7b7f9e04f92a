"""The local provider: every node runs on this machine, under the bare runtime.

No cloud account needed: this is what `make run` uses, and on a GPU machine with no Docker
or sshd it is how the same spec, plan and agent reach the GPUs.
"""

from __future__ import annotations

import sys

from launcher.errors import UsageError
from launcher.paths import envs_dir, state_dir
from launcher.plan.model import Target
from launcher.remote.local import LocalConnection
from launcher.spec.image import ImageDefinition
from launcher.spec.job import JobSpec

HOST = "local"
LOOPBACK = "127.0.0.1"


def local_target(spec: JobSpec, image: ImageDefinition | None) -> Target:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if image is not None and image.python != here:
        raise UsageError(
            f"image {image.name} is for Python {image.python} but this machine runs {here}",
            "use `--set image=host` to run with this machine's own Python environment",
        )
    return Target(
        provider="local",
        runtime="bare",
        hosts=(HOST,) * spec.nodes,
        addresses=(LOOPBACK,) * spec.nodes,
        job_root=str(state_dir() / "jobs"),
        python=sys.executable if image is not None else "python3",
        agent_python=sys.executable,
        env_root=str(envs_dir()),
        gpus_per_node=spec.resources.gpus_per_node,
    )


def local_connections() -> dict[str, LocalConnection]:
    return {HOST: LocalConnection()}
