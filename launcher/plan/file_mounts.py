"""`file_mounts` in a Plan: each local source shipped once per host the way the workdir is
(locally into the job's folder; on a remote host into a lasting copy per local path, only
what changed moving), then copied into place on the host by a command the dry run shows.

SkyPilot's order (skypilot-task.md §5.2): after the workdir, so a mount inside the workdir
overwrites what the workdir put there. A relative destination is inside the job's workdir
(SkyPilot's `~/sky_workdir`); `~/...` is the home of the host's user, expanded there. In a
container each destination outside the workdir is mounted at the same path. On this machine
every destination lies inside the job's folder (plan/sandbox.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from launcher.errors import UsageError
from launcher.plan.model import CopyFile, NodeLayout, RunCommand, Step, SyncDir
from launcher.plan.sandbox import placed_at, sandbox_volumes
from launcher.spec.bucket_mounts import local_mounts
from launcher.spec.job import JobSpec

# $1 the shipped copy, $2 the destination (`~` expanded by the host's shell): a folder's
# contents go into the destination, a file becomes it (an empty folder ships nothing).
PLACE = """\
set -eu
src=$1 dst=$2
case $dst in "~/"*) dst=$HOME/${dst#"~/"} ;; esac
if [ -f "$src" ]; then
  mkdir -p "$(dirname "$dst")" && cp -a "$src" "$dst"
else
  mkdir -p "$src" "$dst" && cp -a "$src/." "$dst/"
fi"""
HOME_SUFFIX = "/.gpujob/jobs"


def on_host(dst: str, job_dir: str, target: NodeLayout, where: str) -> str:
    """The destination as the host names it (`~/...` left for its shell); on this machine,
    inside the job's folder (plan/sandbox.py), `where` naming the line of a refused one."""
    if target.sandbox:
        return placed_at(dst, job_dir, target.runtime == "docker", where)
    if dst.startswith(("/", "~/")):
        return dst
    return f"{job_dir}/workdir/{dst}"


def mount_steps(
    job_dir: str,
    spec: JobSpec,
    target: NodeLayout,
    lasting: dict[str, str],
    where: Mapping[str, str],
) -> tuple[list[Step], list[Step]]:
    """What ships each source, and the commands that put each in place: apart, because a
    node's batch takes every folder's listing before its first command runs (remote/batch.py).
    `lasting`: the host's lasting copy of each local folder (remote hosts only); `where`: the
    file:line of each destination."""
    ships: list[Step] = []
    places: list[Step] = []
    for index, (dst, src) in enumerate(sorted(local_mounts(spec.file_mounts).items())):
        placed = on_host(dst, job_dir, target, where.get(dst, "the job spec"))
        shipped = lasting.get(src) or f"{job_dir}/mounts/{index}"
        if not src.endswith("/"):
            ships.append(CopyFile(source=src, path=shipped, mode=spec.file_mount_mode(dst)))
        else:
            ships.append(SyncDir(source=src.rstrip("/"), path=shipped, mirror=src in lasting))
        places.append(
            RunCommand(
                argv=("sh", "-c", PLACE, "sh", shipped, placed),
                why=f"put file_mounts {dst} in place",
                hint="the host's user must be able to write there: use a path under `~/` or "
                "one relative to the workdir",
            )
        )
    return ships, places


def container_volumes(spec: JobSpec, target: NodeLayout, job_dir: str) -> list[str]:
    """`--volume` values: each destination outside the workdir, at the same path inside (on
    this machine from inside the job's folder, its home included)."""
    if target.sandbox:
        return sandbox_volumes(sorted(spec.file_mounts), job_dir, target.shared_cache)
    volumes = []
    for dst in sorted(spec.file_mounts):
        if dst.startswith("~/"):
            home = target.job_root.removesuffix(HOME_SUFFIX)
            if home == target.job_root:
                raise UsageError(
                    f"file_mounts: {dst}: this host's home is not known to the plan for a "
                    "container on this machine",
                    "give the destination as an absolute path, or one relative to the workdir",
                )
            dst = f"{home}/{dst[2:]}"
        if dst.startswith("/"):
            volumes.append(f"{dst}:{dst}")
    return volumes


def lasting_copies(
    spec: JobSpec, target: NodeLayout, copy_of: Callable[[NodeLayout, str], str]
) -> dict[str, str]:
    """Remote hosts keep one copy per local folder (`copy_of(target, folder)`), so a second
    submit ships only what changed; files, and jobs on this machine, go through the job's
    own folder."""
    if target.on_this_machine:
        return {}
    folders = [src for src in local_mounts(spec.file_mounts).values() if src.endswith("/")]
    return {src: copy_of(target, src.rstrip("/")) for src in folders}
