"""This machine: every node runs here, under the bare runtime.

No cloud account needed: this is what `make run` uses, and on a GPU machine with no Docker
or sshd it is how the same spec, plan and agent reach the GPUs. The agents' status files
are read directly (no process started to ask them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import UsageError
from launcher.paths import envs_dir, state_dir
from launcher.plan.model import NodeLayout
from launcher.remote.base import Connection
from launcher.runtime.agent import NodeStatus
from launcher.spec.image import ImageDefinition
from launcher.spec.job import JobSpec
from launcher.state.db import JobRecord
from launcher.targets.base import JobInput, LaunchRequest, Node, Traits
from launcher.targets.hosts import HostsTarget

if TYPE_CHECKING:
    from launcher.targets.placement import Placement

HOST = "local"
LOOPBACK = "127.0.0.1"


def local_target(spec: JobSpec, image: ImageDefinition | None) -> NodeLayout:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if image is not None and image.python != here:
        raise UsageError(
            f"image {image.name} is for Python {image.python} but this machine runs {here}",
            "use `--set image=host` to run with this machine's own Python environment",
        )
    return NodeLayout(
        provider="local",
        runtime="bare",
        hosts=(HOST,) * spec.nodes,
        addresses=(LOOPBACK,) * spec.nodes,
        job_root=str(state_dir() / "jobs"),
        python=sys.executable if image is not None else "python3",
        agent_python=sys.executable,
        env_root=str(envs_dir()),
        gpus_per_node=spec.resources.gpus_per_node,
        on_this_machine=True,
    )


def local_connections() -> dict[str, Connection]:
    from launcher.remote.local import LocalConnection  # looked up now: tests stand in for it

    return {HOST: LocalConnection()}


class LocalNode(Node):
    """A node of this machine: its agent's files read directly."""

    def status(self) -> NodeStatus | None:
        from launcher.agent.agent import last_line, status_of

        folder = Path(self.node_dir)
        return dict(status_of(folder), last_line=last_line(folder))  # type: ignore[return-value]


class LocalTarget(HostsTarget):
    kind = "local"
    traits = Traits(on_this_machine=True, rents_hosts=False, runs_in_image=False,
                    stops_others_on_failure=True, recoverable=False,
                    agent_python=sys.executable)  # fmt: skip

    def place(
        self, job: JobInput, request: LaunchRequest
    ) -> tuple[Placement, ImageDefinition | None]:
        from launcher.targets.placement import Placement

        layout = local_target(job.loaded.spec, job.image)
        return Placement(layout, dict(local_connections()), list(layout.hosts)), job.image

    def connection(self, host_record: str, opened: dict[str, Connection]) -> tuple[str, Connection]:
        if HOST not in opened:
            opened.update(local_connections())
        return HOST, opened[HOST]

    def node(self, rank: int, node_dir: str, conn: Connection) -> Node:
        return LocalNode(rank, node_dir, conn, self.traits.agent_python)

    def statuses(self, job: JobRecord) -> list[NodeStatus] | None:
        return [status for node in self.nodes(job) if (status := node.status()) is not None]

    def host_names(self, job: JobRecord) -> list[str]:
        return list(job.hosts)
