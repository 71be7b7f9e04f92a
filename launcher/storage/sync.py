"""`gpujob sync-ckpt`: run the agent's own sync (ckpt_sync.py) where the checkpoints are.

For a job, that is the job's host, through its Connection: the file is already there beside
the agent, the remote's variables go as a 0600 env file that ckpt_sync deletes once read, and
rclone runs on the host, so checkpoints never travel through this machine. A pull with no
job runs here. Both print rclone's progress and end with a verified list.
"""

from __future__ import annotations

import json
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.errors import GpujobError, UsageError
from launcher.remote.base import Connection
from launcher.storage import rclone_config
from launcher.storage.remotes import RemotePath, all_remotes, parse_remote_path


@dataclass(frozen=True)
class SyncRequest:
    job: str | None = None
    to: str | None = None
    source: str | None = None
    dest: str | None = None
    latest: bool = False
    step: int | None = None
    dry_run: bool = False
    as_json: bool = False


@dataclass(frozen=True)
class Where:
    """The host side of a sync: how to reach it and where things are there."""

    conn: Connection
    python: str
    module: str
    scratch: str


def _local() -> Where:
    from launcher.agent import CHECKPOINT_SOURCES
    from launcher.remote.local import LocalConnection
    from launcher.storage.remotes import config_dir

    module = next(s for s in CHECKPOINT_SOURCES if s.endswith("ckpt_sync.py"))
    return Where(LocalConnection(), sys.executable, module, str(config_dir() / "tmp"))


def _job_side(job: Any) -> tuple[Where, dict[str, Any]]:
    """The job's first node (the one that holds the checkpoints on its host)."""
    if job.provider != "local":
        raise UsageError(
            f"job {job.id} runs on {job.provider}; sync-ckpt reaches only local jobs until SSH "
            "hosts land",
            "run `gpujob sync-ckpt --from REMOTE:prefix --dest DIR` meanwhile",
        )
    node_dir = Path(job.node_dirs[0])
    care = json.loads((node_dir / "job.json").read_text()).get("checkpoints") or {}
    if not care:
        raise UsageError(f"job {job.id} was submitted before checkpoint care existed")
    where = _local()
    module = str(node_dir.parent / "ckpt_sync.py")
    return Where(
        where.conn, where.python, module if Path(module).exists() else where.module, str(node_dir)
    ), care


def _remote_path(text: str, job_spec: str | None, flag: str) -> RemotePath:
    spec_remotes = {}
    if job_spec and Path(job_spec).exists():
        from launcher.spec.load import load_job_spec

        spec_remotes = load_job_spec(job_spec).spec.storage
    return parse_remote_path(text, all_remotes(spec_remotes), flag)


def sync_ckpt(request: SyncRequest) -> int:
    if request.source and request.to:
        raise UsageError("give --to (push) or --from (pull), not both")
    if request.source:
        if not request.dest:
            raise UsageError("--from needs --dest DIR (where the checkpoint goes)")
        path = _remote_path(request.source, None, "--from")
        return _run(
            _local(),
            "pull",
            path,
            rclone_config.rclone_path(path.remote, path.prefix),
            str(Path(request.dest).resolve()),
            request,
        )
    if not request.job:
        raise UsageError("name a JOB to push its checkpoints, or pull with --from REMOTE:prefix")
    from launcher.state.db import StateDB

    job = StateDB().job(request.job)
    if job is None:
        raise UsageError(f"no job `{request.job}`", "`gpujob status` lists the jobs")
    where, care = _job_side(job)
    target = request.to or care.get("sync_remote")
    if not target:
        raise UsageError(f"job {job.id} has no checkpoints.sync_to", "give --to REMOTE:prefix")
    path = _remote_path(target, job.spec_path, "--to")
    return _run(
        where,
        "push",
        path,
        care["dir"],
        rclone_config.rclone_path(path.remote, path.prefix),
        request,
    )


def _run(
    where: Where, direction: str, path: RemotePath, source: str, dest: str, request: SyncRequest
) -> int:
    from launcher.storage.remotes import credentials

    env = rclone_config.env_vars(path.remote, credentials(path.remote))
    env_file = str(PurePosixPath(where.scratch) / f".gpujob-sync-{secrets.token_hex(4)}.json")
    argv = [where.python, where.module, direction, source, dest, "--env-file", env_file]
    argv += ["--latest"] if request.latest else []
    argv += ["--step", str(request.step)] if request.step is not None else []
    argv += ["--dry-run"] * request.dry_run + ["--json"] * request.as_json
    where.conn.put(env_file, json.dumps(env).encode(), 0o600)
    try:
        result = where.conn.run(argv, stream=True)
    finally:
        where.conn.run(["rm", "-f", env_file])
    if not result.ok:
        said = [line[7:] for line in result.stdout.splitlines() if line.startswith("error: ")]
        raise GpujobError(
            f"sync-ckpt {direction} {path}: {said[-1] if said else 'failed'}",
            "re-run it: copies resume, and only complete checkpoints ever move",
        )
    sys.stdout.write(result.stdout)
    return 0
