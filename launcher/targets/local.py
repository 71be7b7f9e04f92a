"""This machine: every node runs here, under the bare runtime, or in Docker for an `image:`
that names a container image; inside the job's folder either way.

No cloud account needed: this is what `make run` uses, and on a GPU machine with no Docker
or sshd it is how the same spec, plan and agent reach the GPUs. The agents' status files
are read directly (no process started to ask them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import UsageError
from launcher.paths import cache_dir, envs_dir, state_dir
from launcher.remote.base import Connection
from launcher.runtime.agent import NodeStatus
from launcher.state.db import JobRecord
from launcher.targets.base import JobInput, LaunchRequest, Node, Traits
from launcher.targets.hosts import HostsTarget

if TYPE_CHECKING:
    from launcher.plan.model import NodeLayout
    from launcher.spec.image import ImageDefinition
    from launcher.spec.job import JobSpec
    from launcher.targets.placement import Placement

HOST = "local"
LOOPBACK = "127.0.0.1"


def local_target(
    spec: JobSpec, image: ImageDefinition | None, runtime: str = "auto", where: str = "image"
) -> NodeLayout:
    """The job stays inside its folder (`sandbox`, plan/sandbox.py); an `image:` naming a
    container image runs in Docker, or is refused (`where`: its file:line), never on this
    machine's Python instead."""
    from launcher.plan.model import NodeLayout  # not for `status`'s read of ended jobs
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
    return NodeLayout(
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
        on_this_machine=True,
        sandbox=True,
        hidden_path=hidden,
        shared_cache=str(cache_dir() / "job-cache"),
    )


SYSTEM_FOLDERS = frozenset(
    ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc",
     "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var")
)  # fmt: skip


def checkpoints_dir_allowed(folder: str, where: str) -> None:
    """An absolute `checkpoints.dir` on the user's own machine is the job's to write, to
    prune (`keep_last` deletes `checkpoint-N` folders there) and, in a container, to mount
    read-write: a system folder, the home itself, a folder above it, or one holding
    gpujob's own state is refused in one line."""
    if not folder.startswith("/"):
        return
    path = Path(folder).resolve()
    home = Path.home().resolve()
    ours = [state_dir().resolve(), cache_dir().resolve()]
    if (
        str(path) in SYSTEM_FOLDERS
        or path == home
        or path in home.parents
        or any(path == mine or path in mine.parents for mine in ours)
    ):
        raise UsageError(
            f"{where}: checkpoints.dir: {folder} is not the job's own folder (a system folder, "
            "your home, or one holding gpujob's state): the job prunes checkpoint-N folders "
            "there and a container mounts it read-write",
            "give a folder for this job's checkpoints, e.g. /data/ckpt/NAME or ~/ckpt/NAME",
        )


def local_connections() -> dict[str, Connection]:
    from launcher.remote.local import LocalConnection  # looked up now: tests stand in for it

    return {HOST: LocalConnection()}


def node_files(node_dir: str) -> NodeStatus:
    """A node's status as its agent's files on this machine say. Only the two agent modules
    that read them are imported, not the supervisor (`status` over many ended jobs pays
    for every import; issue 32)."""
    from launcher.agent import AGENT_SOURCE

    siblings = str(AGENT_SOURCE.resolve().parent)  # as agent.py finds them
    if siblings not in sys.path:
        sys.path.insert(0, siblings)
    from log_read import last_line
    from stopping import status_of

    folder = Path(node_dir)
    return dict(status_of(folder), last_line=last_line(folder))  # type: ignore[return-value]


class LocalNode(Node):
    """A node of this machine: its agent's files read directly."""

    def status(self) -> NodeStatus | None:
        return node_files(self.node_dir)


class LocalTarget(HostsTarget):
    kind = "local"
    traits = Traits(on_this_machine=True, rents_hosts=False, runs_in_image=False,
                    stops_others_on_failure=True, recoverable=False,
                    agent_python=sys.executable)  # fmt: skip

    def place(
        self, job: JobInput, request: LaunchRequest
    ) -> tuple[Placement, ImageDefinition | None]:
        from launcher.targets.placement import Placement

        spec, loaded = job.loaded.spec, job.loaded
        checkpoints_dir_allowed(spec.checkpoints.dir, loaded.where("checkpoints", "dir"))
        layout = local_target(spec, job.image, request.runtime, loaded.where("image"))
        return Placement(layout, dict(local_connections()), list(layout.hosts)), job.image

    def connection(self, host_record: str, opened: dict[str, Connection]) -> tuple[str, Connection]:
        if HOST not in opened:
            opened.update(local_connections())
        return HOST, opened[HOST]

    def node(self, rank: int, node_dir: str, conn: Connection) -> Node:
        return LocalNode(rank, node_dir, conn, self.traits.agent_python)

    def statuses(self, job: JobRecord) -> list[NodeStatus] | None:
        return [node_files(node_dir) for node_dir in job.node_dirs]  # no connection needed

    def host_names(self, job: JobRecord) -> list[str]:
        return list(job.hosts)
