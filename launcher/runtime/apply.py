"""Execute a Plan through each node's Connection, and nothing else.

Each node is prepared in one batch, one exec on its host (remote/batch.py): the workdir,
its files, the image pull or the environment. All nodes or none: a job of several nodes
starts only once every node is prepared and every host reaches node 0's rendezvous port, and
if one node then fails to start, those already started are cancelled. A job of one node
starts at the end of its batch.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.errors import GpujobError
from launcher.plan.model import (
    CopyFile,
    NodePlan,
    Plan,
    ReachCheck,
    RunCommand,
    SyncDir,
    WriteFile,
)
from launcher.remote.base import Connection, Result
from launcher.remote.batch import File, Op, Outcome, Run, Sync
from launcher.runtime.agent import agent_argv

Report = Callable[[str], None]
REACH_TIMEOUT_S = 20
FIRST_READ_WAIT_S = 1  # how long the start's read waits for the job's first bytes
FirstRead = tuple[bytes, dict[str, Any]]

# Holds node 0's rendezvous port open while the others dial it: a bind failure means the
# port is taken (or the address is not this host's, which c10d needs to host the store).
LISTEN = """
import socket, sys, time
address, port = sys.argv[1], int(sys.argv[2])
expected, timeout = int(sys.argv[3]), float(sys.argv[4])
server = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind((address, port))
except OSError as err:
    sys.exit(f"cannot listen on {address}:{port}: {err.strerror}")
server.listen(16)
deadline, seen = time.monotonic() + timeout, 0
while seen < expected and time.monotonic() < deadline:
    server.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        server.accept()[0].close()
        seen += 1
    except OSError:
        pass
print(seen)
"""
# The job's own copy of the host's workdir copy: a later submit updating that one never
# changes a running job's files. ($1 is absent when the workdir had nothing to ship.)
COPY_WORKDIR = 'mkdir -p "$1" "$2" && cp -a "$1/." "$2/"'
DIAL = """
import socket, sys, time
address, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline, error = time.monotonic() + timeout, None
while time.monotonic() < deadline:
    try:
        socket.create_connection((address, port), timeout=3).close()
        sys.exit(0)
    except OSError as err:
        error = err
        time.sleep(0.2)
sys.exit(f"cannot reach {address}:{port}: {error}")
"""


def apply_plan(
    plan: Plan, connections: dict[str, Connection], report: Report, read_first: bool = False
) -> dict[int, FirstRead]:
    """Each node is prepared in one batch (one exec on its host). A job of one node starts in
    that same batch, which then (with `read_first`) reads the log's first bytes, returned by
    node rank for the log follow to start from; a job of several starts only once every node
    is prepared and reaches node 0's rendezvous port."""
    at_once = len(plan.nodes) == 1 and not plan.checks
    first: dict[int, FirstRead] = {}
    for node in plan.nodes:
        read = _prepare(node, connections[node.host], report, at_once, read_first)
        if read is not None:
            first[node.rank] = read
    if at_once:
        return first
    for check in plan.checks:
        check_reach(check, connections, report)
    started: list[NodePlan] = []
    try:
        for node in plan.nodes:
            for step in node.steps:
                if isinstance(step, RunCommand) and step.starts_job:
                    result = connections[node.host].run(step.argv)
                    _require(node, _Command(step.why, step.argv), result)
                    report(f"node {node.rank}: job started")
            started.append(node)
    except BaseException:
        for node in started:
            report(f"node {node.rank}: stopping it (another node failed to start)")
            connections[node.host].run(_cancel_argv(node))
        raise
    return first


@dataclass(frozen=True)
class _Command:
    """A batch command with what a failure of it means to the user."""

    why: str
    argv: tuple[str, ...]
    hint: str | None = None


def _prepare(
    node: NodePlan, conn: Connection, report: Report, with_start: bool, read_first: bool
) -> FirstRead | None:
    ops: list[Op] = []
    commands: list[_Command] = []
    syncs = 0
    for step in node.steps:
        if isinstance(step, WriteFile | CopyFile):
            ops.append(File(*_file_of(step)))
        elif isinstance(step, SyncDir):
            syncs += 1
            if step.via is None:
                ops.append(Sync(step.source, step.path, step.excludes))
                continue
            ops.append(Sync(step.source, step.via, step.excludes, mirror=True))
            copy = ("sh", "-c", COPY_WORKDIR, "sh", step.via, step.path)
            ops.append(Run(copy))
            hint = "check the free space on the host: `gpujob doctor HOST`"
            commands.append(_Command("copy the workdir into the job folder", copy, hint))
        elif isinstance(step, RunCommand) and (with_start or not step.starts_job):
            argv = step.argv
            if step.starts_job and read_first:  # the start then reads the log's first bytes
                argv = (*argv, str(FIRST_READ_WAIT_S))
            ops.append(Run(argv, stream=not step.starts_job))
            commands.append(_Command(step.why, argv))
    try:
        outcome = conn.batch(ops)
    except GpujobError as err:
        if not with_start:
            raise
        raise GpujobError(  # the start may have reached the host before the line went
            f"{err.message}; the job may have started there",
            f"`gpujob logs {PurePosixPath(node.job_dir).name} -f` finds out (and follows it)",
        ) from None
    if syncs:
        report(f"node {node.rank}: shipped the workdir ({outcome.sent} file(s) changed)")
    for command, result in zip(commands, outcome.runs, strict=False):
        _require(node, command, result)
    if not with_start:
        return None
    report(f"node {node.rank}: job started")
    return _first_read(outcome) if read_first else None


def _first_read(outcome: Outcome) -> FirstRead | None:
    """The bytes the start read and the status the agent gave with them (its last stderr
    line), when it answered as the agent does; else the follow reads from byte 0 itself."""
    if not outcome.runs or not outcome.runs[-1].ok:
        return None
    lines = outcome.runs[-1].stderr.strip().splitlines()
    try:
        status = json.loads(lines[-1])
    except (IndexError, ValueError):
        return None
    data = outcome.outputs[-1]
    if not isinstance(status, dict) or status.get("offset") != len(data):
        return None
    return data, status


def _require(node: NodePlan, command: _Command, result: Result) -> None:
    if not result.ok:
        raise GpujobError(
            f"node {node.rank} ({node.host}): could not {command.why} "
            f"(exit {result.exit_code}): {_last(result)}",
            command.hint or f"the command was: {shlex.join(command.argv)[:300]}",
        )


def _cancel_argv(node: NodePlan) -> list[str]:
    """The agent as the node's start step runs it (its Python), asked to cancel."""
    start = next(s for s in node.steps if isinstance(s, RunCommand) and s.starts_job)
    return agent_argv(start.argv[0], node.node_dir, "cancel", "5")


def check_reach(check: ReachCheck, connections: dict[str, Connection], report: Report) -> None:
    """Every other host dials node 0's rendezvous port while a listener holds it."""
    heard: dict[str, Result] = {}
    expected = len(check.from_hosts)
    listen = ["python3", "-c", LISTEN, check.address, str(check.port), str(expected),
              str(REACH_TIMEOUT_S)]  # fmt: skip
    listener = threading.Thread(
        target=lambda: heard.setdefault("r", connections[check.host].run(listen)), daemon=True
    )
    listener.start()
    failures = []
    for host in check.from_hosts:
        dial = ["python3", "-c", DIAL, check.address, str(check.port), str(REACH_TIMEOUT_S - 5)]
        result = connections[host].run(dial)
        if not result.ok:
            failures.append(f"{host}: {_last(result)}")
    listener.join(REACH_TIMEOUT_S + 10)
    result = heard.get("r")
    if result is not None and not result.ok:
        failures.insert(0, f"{check.host} (node 0): {_last(result)}")
    if failures:
        raise GpujobError(
            f"rendezvous check failed, nothing started: {'; '.join(failures)}",
            f"open TCP port {check.port} (and the ephemeral ports) between the hosts, or "
            "set run.rdzv_port to a free port",
        )
    report(f"every node reaches node 0 at {check.address}:{check.port}")


def _last(result: Result) -> str:
    """The last line said; for the agent's JSON status, its reason."""
    lines = (result.stderr or result.stdout).strip().splitlines()
    if not lines:
        return f"exit {result.exit_code}"
    try:
        status = json.loads(lines[-1])
    except ValueError:
        return lines[-1]
    return str(status.get("reason", lines[-1])) if isinstance(status, dict) else lines[-1]


def _file_of(step: WriteFile | CopyFile) -> tuple[str, bytes, int]:
    if isinstance(step, WriteFile):
        return step.path, step.content.encode(), step.mode
    return step.path, Path(step.source).read_bytes(), step.mode
