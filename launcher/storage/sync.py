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
    on: str | None = None


@dataclass(frozen=True)
class Where:
    """The side of a sync that holds the checkpoints: how to reach it and where things are."""

    conn: Connection
    python: str
    module: str
    scratch: str
    remote_host: bool = False


def _local() -> Where:
    from launcher.agent import CHECKPOINT_SOURCES
    from launcher.paths import config_dir
    from launcher.remote.local import LocalConnection

    module = next(s for s in CHECKPOINT_SOURCES if s.endswith("ckpt_sync.py"))
    return Where(LocalConnection(), sys.executable, module, str(config_dir() / "tmp"))


def _on_host(name: str) -> Where:
    """`--on HOST`: the sync modules shipped to ~/.gpujob/bin there (they are small)."""
    from launcher.agent import CHECKPOINT_SOURCES
    from launcher.providers import ssh as ssh_hosts
    from launcher.remote.facts import host_facts

    conn = ssh_hosts.connect(ssh_hosts.resolve_host(name))
    home = host_facts(conn).home
    folder = f"{home}/.gpujob/bin"
    for source in CHECKPOINT_SOURCES:
        conn.put_file(source, f"{folder}/{PurePosixPath(source).name}", 0o644)
    return Where(conn, "python3", f"{folder}/ckpt_sync.py", folder, remote_host=True)


def _job_side(job: Any) -> tuple[Where, dict[str, Any]]:
    """The job's first node: it holds the checkpoints on its host, and ckpt_sync.py is
    already there beside the agent."""
    from launcher.storage.on_host import read_json

    node_dir = PurePosixPath(job.node_dirs[0])
    module = str(node_dir.parent / "ckpt_sync.py")
    if job.provider == "local":
        local = _local()
        where = Where(local.conn, local.python, module, str(node_dir))
    elif job.provider == "ssh":
        from launcher.providers import ssh as ssh_hosts

        conn = ssh_hosts.connect(ssh_hosts.HostEntry.from_record(job.hosts[0]))
        where = Where(conn, "python3", module, str(node_dir), remote_host=True)
    else:
        raise UsageError(f"job {job.id} runs on {job.provider}, which sync-ckpt cannot reach yet")
    care = read_json(where.conn, str(node_dir / "job.json")).get("checkpoints") or {}
    if not care:
        raise UsageError(f"job {job.id} was submitted before checkpoint care existed")
    return where, care


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
        where = _on_host(request.on) if request.on else _local()
        dest = request.dest if request.on else str(Path(request.dest).resolve())
        return _run(
            where,
            "pull",
            path,
            rclone_config.rclone_path(path.remote, path.prefix),
            dest,
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

    env = rclone_config.env_vars(path.remote, credentials(path.remote), where.remote_host)
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
        where.conn.close()
    if not result.ok:
        said = [line[7:] for line in result.stdout.splitlines() if line.startswith("error: ")]
        raise GpujobError(
            f"sync-ckpt {direction} {path}: {said[-1] if said else 'failed'}",
            "re-run it: copies resume, and only complete checkpoints ever move",
        )
    sys.stdout.write(result.stdout)
    return 0
