"""`gpujob sync-ckpt`: run the agent's own sync (ckpt_sync.py) where the checkpoints are.

For a job, that is the job's host, through its Connection: the file is already there beside
the agent, the remote's variables go on ckpt_sync's stdin (never a file on the host, which a
client killed mid-way would leave behind), and rclone runs on the host, so checkpoints never
travel through this machine. A pull with no
job runs here. Both print rclone's progress and end with a verified list.

What runs there is one `SyncCommand`, built the same way for a dry run, which prints it and
then asks ckpt_sync itself (`--dry-run`, in a scratch folder it removes) which rclone
commands it would run: it lists S3 and the checkpoints, and changes nothing.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
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
    remote_host: bool = False
    ships: tuple[tuple[str, str], ...] = ()
    """(file here, path there): the sync modules, put there before the sync runs."""


def _local() -> Where:
    from launcher.agent import CHECKPOINT_SOURCES
    from launcher.remote.local import LocalConnection

    module = next(s for s in CHECKPOINT_SOURCES if s.endswith("ckpt_sync.py"))
    return Where(LocalConnection(), sys.executable, module)


def _on_host(name: str) -> Where:
    """`--on HOST`: the sync modules shipped to ~/.gpujob/bin there (they are small)."""
    from launcher.agent import CHECKPOINT_SOURCES
    from launcher.remote import hosts as ssh_hosts
    from launcher.remote.facts import host_facts

    conn = ssh_hosts.connect(ssh_hosts.resolve_host(name))
    folder = f"{host_facts(conn).home}/.gpujob/bin"
    ships = tuple((s, f"{folder}/{PurePosixPath(s).name}") for s in CHECKPOINT_SOURCES)
    return Where(conn, "python3", f"{folder}/ckpt_sync.py", True, ships)


@dataclass(frozen=True)
class JobSide:
    """How to reach the host holding a job's node 0 folder, as its target says."""

    conn: Connection
    python: str
    remote_host: bool


def _job_side(job: Any, reach: Callable[[Any], JobSide]) -> tuple[Where, dict[str, Any]]:
    """The job's first node: it holds the checkpoints on its host, and ckpt_sync.py is
    already there beside the agent."""
    from launcher.storage.on_host import read_json

    node_dir = PurePosixPath(job.node_dirs[0])
    module = str(node_dir.parent / "ckpt_sync.py")
    side = reach(job)
    where = Where(side.conn, side.python, module, remote_host=side.remote_host)
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


def sync_ckpt(request: SyncRequest, reach: Callable[[Any], JobSide] | None = None) -> int:
    """`reach`: a recorded job's side, for a push (`commands.sync_ckpt` asks the job's
    target); a pull needs none."""
    if request.source and request.to:
        raise UsageError("give --to (push) or --from (pull), not both")
    if request.source:
        if not request.dest:
            raise UsageError("--from needs --dest DIR (where the checkpoint goes)")
        path = _remote_path(request.source, None, "--from")
        where = _on_host(request.on) if request.on else _local()
        dest = request.dest if request.on else str(Path(request.dest).resolve())
        remote = rclone_config.rclone_path(path.remote, path.prefix)
        return _run(where, _command(where, "pull", path, remote, dest, request), request)
    if not request.job:
        raise UsageError("name a JOB to push its checkpoints, or pull with --from REMOTE:prefix")
    from launcher.state.readonly import JobsView

    job = JobsView().job(request.job)  # a lookup: creates no db
    if job is None:
        raise UsageError(f"no job `{request.job}`", "`gpujob status` lists the jobs")
    assert reach is not None, "a push reaches the job's side"
    where, care = _job_side(job, reach)
    target = request.to or care.get("sync_remote")
    if not target:
        where.conn.close()
        raise UsageError(f"job {job.id} has no checkpoints.sync_to", "give --to REMOTE:prefix")
    path = _remote_path(target, job.spec_path, "--to")
    remote = rclone_config.rclone_path(path.remote, path.prefix)
    return _run(where, _command(where, "push", path, care["dir"], remote, request), request)


@dataclass(frozen=True)
class SyncCommand:
    """One sync-ckpt on the side holding the checkpoints, in the order it runs: the modules
    shipped (`--on`), then ckpt_sync run with the remote's variables on its stdin."""

    host: str
    direction: str
    remote: str
    ships: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    env: dict[str, str] = field(repr=False)

    def lines(self) -> list[str]:
        """The literal steps; the variables by name, their values never."""
        at = f"on {self.host}:"
        out = [f"{at} copy  {here} -> {there} (mode 0644)" for here, there in self.ships]
        out.append(f"{at} run   {shlex.join(self.argv)}")
        out.append(f"{at}       its stdin, never a file on the host: "
                   + ", ".join(f"{name}=***" for name in sorted(self.env)))  # fmt: skip
        return out


def _argv(python: str, module: str, direction: str, source: str, dest: str,
          request: SyncRequest) -> tuple[str, ...]:  # fmt: skip
    argv = [python, module, direction, source, dest, "--env-file", "-"]
    argv += ["--latest"] if request.latest else []
    argv += ["--step", str(request.step)] if request.step is not None else []
    return (*argv, *["--json"] * request.as_json)


def _command(
    where: Where, direction: str, path: RemotePath, source: str, dest: str, request: SyncRequest
) -> SyncCommand:
    from launcher.storage.remotes import credentials

    env = rclone_config.env_vars(path.remote, credentials(path.remote), where.remote_host)
    argv = _argv(where.python, where.module, direction, source, dest, request)
    return SyncCommand(where.conn.host, direction, str(path), where.ships, argv, env)


def _run(where: Where, command: SyncCommand, request: SyncRequest) -> int:
    try:
        if request.dry_run:
            return _preview(where, command, request)
        result = _execute(where.conn, command, stream=True)
    finally:
        where.conn.close()
    if not result.ok:
        said = [line[7:] for line in result.stdout.splitlines() if line.startswith("error: ")]
        raise GpujobError(
            f"sync-ckpt {command.direction} {command.remote}: {said[-1] if said else 'failed'}",
            "re-run it: copies resume, and only complete checkpoints ever move",
        )
    sys.stdout.write(result.stdout)
    return 0


def _execute(conn: Connection, command: SyncCommand, stream: bool) -> Any:
    """The command's steps, in order, through the connection."""
    for here, there in command.ships:
        conn.put_file(here, there, 0o644)
    return conn.run(command.argv, stream=stream, input=json.dumps(command.env).encode())


def _preview(where: Where, command: SyncCommand, request: SyncRequest) -> int:
    """The dry run: the command printed, then the rclone commands ckpt_sync would run, asked
    of ckpt_sync itself (`--dry-run`) from a scratch folder made for it and removed after,
    so nothing stays behind there (the modules of `--on` go into it, not ~/.gpujob/bin)."""
    made = where.conn.run(["mktemp", "-d"])
    scratch = made.stdout.strip()
    if not made.ok or not scratch.startswith("/"):
        raise GpujobError(f"{command.host}: cannot make a scratch folder: {made.stderr[-200:]}")
    try:
        ships = tuple((here, f"{scratch}/{PurePosixPath(there).name}")
                      for here, there in command.ships)  # fmt: skip
        module = f"{scratch}/{PurePosixPath(where.module).name}" if ships else where.module
        _, _, direction, source, dest = command.argv[:5]
        argv = _argv(where.python, module, direction, source, dest, request)
        probe = replace(command, ships=ships, argv=(*argv, "--dry-run"))
        result = _execute(where.conn, probe, stream=False)
    finally:
        where.conn.run(["rm", "-rf", scratch])
    if not result.ok:
        said = [line[7:] for line in result.stdout.splitlines() if line.startswith("error: ")]
        raise GpujobError(
            f"sync-ckpt {command.direction} {command.remote} (dry run): "
            f"{said[-1] if said else result.stderr.strip()[-300:] or 'failed'}"
        )
    if request.as_json:
        report = json.loads(result.stdout)
        report["commands"] = command.lines()
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return 0
    sys.stdout.write("".join(f"{line}\n" for line in command.lines()))
    sys.stdout.write("# ckpt_sync would run (it listed S3 and the checkpoints to know):\n")
    sys.stdout.write(result.stdout)
    return 0
