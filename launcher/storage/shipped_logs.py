"""`gpujob logs` after the host is gone: the node logs the agents shipped beside the job's
checkpoints in S3 (`checkpoints.sync_to`), read with rclone and the remote's own settings."""

from __future__ import annotations

import subprocess
import sys

from launcher.errors import GpujobError
from launcher.state.db import JobRecord
from launcher.storage import rclone_config
from launcher.storage.remotes import Remote, all_remotes, credentials


def shipped_remote(job: JobRecord) -> Remote:
    """The remote that `job.logs_to` names: the job spec's own remotes (when the file still
    loads) and the user config's."""
    name = (job.logs_to or "").split(":", 1)[0]
    spec_remotes = None
    try:
        from launcher.spec.load import load_job_spec

        spec_remotes = load_job_spec(job.spec_path, ()).spec.storage
    except GpujobError:
        pass  # the spec moved or changed since the submit: the user config may still name it
    for remote in all_remotes(spec_remotes).values():
        if rclone_config.rclone_name(remote) == name:
            return remote
    raise GpujobError(
        f"job {job.id}: its logs are in {job.logs_to}, but no remote of that name is known now",
        "describe the remote again in the job spec's `storage:` or the user config",
    )


def read_shipped(job: JobRecord, rank: int, env: dict[str, str]) -> bytes:
    where = f"{job.logs_to}/node-{rank}.log"
    done = subprocess.run(["rclone", "cat", where], env=env, capture_output=True, check=False)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise GpujobError(
            f"job {job.id}: cannot read {where}: {said[-1] if said else done.returncode}",
            "the host may have gone before the agent shipped its log (`gpujob storage tree`)",
        )
    return done.stdout


def show_shipped_logs(job: JobRecord, *, node: int | None, tail: int | None) -> int:
    """Each node's shipped log (prefixed by node rank when there are several), then the exit
    code recorded for the job: 1 when its end was never seen."""
    from launcher.agent.ckpt_sync import rclone_env

    remote = shipped_remote(job)  # once for all nodes: the spec and config are read once
    env = rclone_env(rclone_config.env_vars(remote, credentials(remote)))
    ranks = [node] if node is not None else list(range(len(job.node_dirs)))
    out = sys.stdout.buffer
    for rank in ranks:
        data = read_shipped(job, rank, env)
        if tail is not None:
            data = b"\n".join(data.rstrip(b"\n").split(b"\n")[-tail:]) + b"\n" if tail else b""
        if len(job.node_dirs) > 1:
            tag = f"[node {rank}] ".encode()
            data = b"".join(tag + line for line in data.splitlines(keepends=True))
        out.write(data)
    out.flush()
    if not job.terminal:
        return 1
    return int(job.exit_code or 0)
