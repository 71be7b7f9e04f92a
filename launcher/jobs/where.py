"""Where a job's node lives, for `gpujob ssh JOB [--node K]`: the host to reach (None: this
machine) and the node's folder there, whatever the target. Kind names are not compared:
the target's traits and the job's record say it.

A SLURM job's nodes are allocated for its length only; its folders are on the cluster's
shared filesystem, so the shell is on the login host, in the node's folder, with a line
saying how to reach the node itself while the job runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.errors import UsageError
from launcher.state.db import JobRecord
from launcher.targets.base import target_for

if TYPE_CHECKING:
    from launcher.remote.hosts import HostEntry


@dataclass(frozen=True)
class NodePlace:
    """One node of a job: its host (None on this machine), its folder, what to say first."""

    host: HostEntry | None
    folder: str
    note: str | None = None


def node_place(job: JobRecord, node: int | None) -> NodePlace:
    """Node `node` (0 when None) of `job`; a node it does not have is refused in one line."""
    from launcher.remote.hosts import HostEntry

    rank = 0 if node is None else node
    if not 0 <= rank < len(job.node_dirs):
        raise UsageError(f"--node {rank}: job {job.id} has {len(job.node_dirs)} node(s), "
                         f"0 to {len(job.node_dirs) - 1}", "pick one of those")  # fmt: skip
    folder = job.node_dirs[rank]
    if target_for(job).traits.on_this_machine:
        return NodePlace(None, folder)
    if job.scheduler_job is not None:  # a cluster's: its login host shares the folders
        note = (f"job {job.id} ran on a cluster: this is its login host, in node {rank}'s "
                "folder (a shared filesystem); while the job runs, `srun --jobid "
                f"{job.scheduler_job} --overlap --pty bash` there reaches its nodes")  # fmt: skip
        return NodePlace(HostEntry.from_record(job.hosts[0]), folder, note)
    return NodePlace(HostEntry.from_record(job.hosts[min(rank, len(job.hosts) - 1)]), folder)
