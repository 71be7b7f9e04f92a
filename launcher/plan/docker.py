"""The docker runtime's part of a Plan: the image pull and the `docker run` line.

The container runs the same `run.sh` as the bare runtime. Paths are mounted at the same
place inside as outside, so the script, the log and the checkpoints have one name
everywhere. The container's command appends its output to the node's `job.log` on the
host's disk (a bind mount), so the log never depends on Docker's log driver or on the agent
process staying up; `--init` plus the script's `exec` put torchrun right under tini, so
`docker stop`'s SIGTERM reaches it (runtime.md 4.3).
"""

from __future__ import annotations

import shlex

from launcher.errors import UsageError
from launcher.plan.launch import NODE_IPS_FILE, PYLIB
from launcher.plan.model import NodeLayout, RunCommand

LABEL = "gpujob.job"
STACK_BYTES = 64 << 20  # NGC's recommended stack limit for PyTorch containers
# `bash -c SCRIPT run.sh job.log`: $0 and $1 are the two paths, so nothing is re-quoted.
CONTAINER_SCRIPT = 'exec bash "$0" >>"$1" 2>&1'


def container_name(job_id: str, rank: int) -> str:
    return f"gpujob-{job_id}-node{rank}"


def pull_step(target: NodeLayout) -> RunCommand:
    """Once per host: pull the image unless the host has it, with the pull's progress shown
    (on stderr, which `apply` streams)."""
    image = _image(target)
    script = "\n".join(
        [
            "set -euo pipefail",
            f"image={shlex.quote(image)}",
            'if docker image inspect "$image" >/dev/null 2>&1; then exit 0; fi',
            'echo "[gpujob] pulling $image" >&2',
            'docker pull "$image" >&2',
        ]
    )
    return RunCommand(
        argv=("bash", "-c", script),
        why=f"pull the job image {image} if missing",
        hint="check the image's name, that the host reaches its registry, and for a private "
        "one a `docker login` there",
    )


def run_argv(
    target: NodeLayout,
    *,
    job_id: str,
    rank: int,
    job_dir: str,
    node_dir: str,
    checkpoint_dir: str,
    shm_gb: int,
    grace_s: int,
    secret_names: list[str] | None = None,
    volumes: list[str] | None = None,
) -> list[str]:
    """The literal `docker run` the agent executes on the host (detached). Secrets by name
    only (`--env NAME`): Docker takes each value from the environment the agent runs it
    with, so no value is on the command line or in a file."""
    workdir = f"{job_dir}/workdir"
    argv = [
        "docker", "run", "--detach",
        "--name", container_name(job_id, rank),
        "--label", f"{LABEL}={job_id}", "--label", f"gpujob.node={rank}",
        # docker's init (tini) passes `docker stop`'s SIGTERM to its child's whole process
        # group, so a program under a shell block hears it too, not only bash
        "--init", "--env", "TINI_KILL_PROCESS_GROUP=1",
    ]  # fmt: skip
    if target.host_gpus > 0:
        argv += ["--gpus", "all"]
    argv += ["--ipc=host", "--shm-size", f"{shm_gb}g", "--network", "host"]
    if target.raise_memlock:  # pinned memory for NCCL/IB; refused where the host lacks the cap
        argv += ["--ulimit", "memlock=-1"]
    argv += [
        "--ulimit", f"stack={STACK_BYTES}",
        "--stop-timeout", str(grace_s),
        "--volume", f"{workdir}:{workdir}",
        "--volume", f"{checkpoint_dir}:{checkpoint_dir}",
        "--volume", f"{node_dir}:{node_dir}",
        "--volume", f"{job_dir}/{PYLIB}:{job_dir}/{PYLIB}:ro",
        "--volume", f"{job_dir}/{NODE_IPS_FILE}:{job_dir}/{NODE_IPS_FILE}:ro",
        "--workdir", workdir,
    ]  # fmt: skip
    for volume in volumes or ():  # file_mounts outside the workdir, at the same path
        argv += ["--volume", volume]
    for name in secret_names or ():
        argv += ["--env", name]
    argv += ["--entrypoint", "bash", _image(target), "-c", CONTAINER_SCRIPT]
    argv += [f"{node_dir}/run.sh", f"{node_dir}/job.log"]
    return argv


def _image(target: NodeLayout) -> str:
    if not target.image_ref:
        raise UsageError(
            "the docker runtime needs an image reference",
            "give `image:` a full image name, or set GPUJOB_REGISTRY for image definitions",
        )
    return target.image_ref
