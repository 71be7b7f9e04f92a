"""Bucket `file_mounts` in a Plan: what the agent of the first node on each host does with
each (agent/bucket_mounts.py, from job.json's `checkpoints.buckets`), and the dry run's line
for each. The buckets were resolved at submit (storage/bucket_mounts.py); the remote's
variables travel with the checkpoint remote's, on the start's stdin (or SLURM's 0600 file),
never in job.json.

The destination is placed as a local file_mount's is (plan/file_mounts.py `on_host`): on
this machine inside the job's folder, so a local job writes nothing outside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.plan.file_mounts import on_host
from launcher.plan.model import NodeLayout


@dataclass(frozen=True)
class BucketSource:
    """One bucket mount as submit resolved it: the rclone path (bucket included) and the
    remote's RCLONE_CONFIG_* variables as this machine and as the job's hosts reach it."""

    dst: str
    source: str
    """As the spec wrote it, for messages."""
    mode: str
    rclone_path: str
    env_here: dict[str, str] = field(default_factory=dict)
    env_hosts: dict[str, str] = field(default_factory=dict)
    fuse_here: bool = False
    """This machine has /dev/fuse and fusermount (a MOUNT of a local job mounts)."""


WHAT = {
    "COPY": "fetched with `rclone copy` before setup (a snapshot: what the job writes there "
    "stays on the node)",
    "MOUNT_CACHED": "fetched with `rclone copy` before setup; what the job writes there is "
    "uploaded (`rclone copy`, nothing deleted) on each checkpoint and when the job ends",
}


def bucket_care(
    buckets: tuple[BucketSource, ...], job_dir: str, target: NodeLayout, where: Mapping[str, str]
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """job.json's entries (no secret in them) and the variables they need."""
    care, env = [], {}
    for bucket in buckets:
        placed = on_host(bucket.dst, job_dir, target, where.get(bucket.dst, "the job spec"))
        care.append({"dst": bucket.dst, "path": placed, "source": bucket.rclone_path,
                     "mode": bucket.mode, "written": bucket.source})  # fmt: skip
        env.update(bucket.env_here if target.on_this_machine else bucket.env_hosts)
    return care, env


def bucket_lines(buckets: tuple[BucketSource, ...], target: NodeLayout) -> tuple[str, ...]:
    """The dry run's line for each: where, from what, and what happens."""
    lines = []
    for bucket in buckets:
        then = WHAT.get(bucket.mode)
        mount = "`rclone mount` (a file reaches the bucket when closed; sequential writes)"
        if then is None and target.on_this_machine and bucket.fuse_here:
            then = f"{mount} with this machine's FUSE"
        elif then is None and target.on_this_machine:
            then = ("warning: this machine has no FUSE (/dev/fuse and fusermount), so it is "
                    f"{WHAT['MOUNT_CACHED']}")  # fmt: skip
        elif then is None:
            then = (f"{mount} where the host has FUSE (/dev/fuse and fusermount), else "
                    f"{WHAT['MOUNT_CACHED']}, with a warning in the job's log")  # fmt: skip
        lines.append(f"file_mounts {bucket.dst}: {bucket.source} ({bucket.rclone_path}), "
                     f"{bucket.mode}: {then}")  # fmt: skip
    return tuple(lines)
