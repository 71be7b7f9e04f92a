"""Execute a Plan through each node's Connection, and nothing else: every command run on a
host is a step of the Plan (`--dry-run` prints the same object), and so are the checks
before start and what a failed start undoes.

Each node is prepared in one batch, one exec on its host (remote/batch.py), all hosts at
once (remote/fanout.py): the workdir, its files, the image pull or the environment. All
nodes or none: a job of several nodes starts only once every node is prepared and every host
reaches node 0's rendezvous port, and if one node then fails to start, those already started
are cancelled. A job of one node starts at the end of its batch.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
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
from launcher.remote.batch import File, Op, Outcome, Run
from launcher.remote.fanout import per_host
from launcher.runtime.trace import traced

Report = Callable[[str], None]
FirstRead = tuple[bytes, dict[str, Any]]
TAIL_LINES = 10
"""How many of a failed preparation command's last stdout lines are shown (its stderr was
streamed to the terminal as it came): venv's complaint, for one, may be there."""
CAUSE = re.compile(r"error|not available|no such|denied|not found|refused|unreachable|no space",
                   re.IGNORECASE)  # fmt: skip
"""A line that says why (pip's `ERROR: ...`), picked over a closing `Failing command: ...`."""


@dataclass
class NodeStart:
    """One node's start as apply saw it, for a caller whose apply broke off: a start that
    went out and was not answered may have run on the host (the channel was cut), so its
    job is `starting` until its agent says, never `failed`."""

    rank: int
    sent: bool = False
    """The start command went out (all of it or part): from then on it may run there."""
    answer: Result | None = None
    """What it answered, if it did."""
    stopped: bool = False
    """Stopped again because another node failed to start (its cancel answered)."""

    @property
    def may_run(self) -> bool:
        return self.sent and not self.stopped and (self.answer is None or self.answer.ok)


@dataclass
class Starts:
    """Every node's start, filled in as apply goes (read it after apply raised)."""

    nodes: dict[int, NodeStart] = field(default_factory=dict)

    def of(self, rank: int) -> NodeStart:
        return self.nodes.setdefault(rank, NodeStart(rank))

    @property
    def may_run(self) -> list[int]:
        """The ranks whose job may run on their host."""
        return sorted(rank for rank, node in self.nodes.items() if node.may_run)


def apply_plan(
    plan: Plan, connections: dict[str, Connection], report: Report, starts: Starts | None = None
) -> dict[int, FirstRead]:
    """Each node is prepared in one batch (one exec on its host), the hosts at once
    (remote/fanout.py: a host's nodes in turn, what they say in rank order). A job of one
    node starts in that same batch, whose start may read the log's first bytes
    (`reads_log`): returned by node rank for the log follow to start from. A job of several
    starts only once every node is prepared and reaches node 0's rendezvous port, all its
    nodes at once. `starts` says, if apply raises, which starts went out and what they
    answered."""
    starts = Starts() if starts is None else starts
    at_once = plan.starts_in_batch
    for node in plan.nodes:
        starts.of(node.rank)  # made here: the hosts' threads only fill them in
    said: dict[int, list[str]] = {node.rank: [] for node in plan.nodes}

    def prepare(node: NodePlan) -> FirstRead | None:
        conn, seen = connections[node.host], starts.of(node.rank)
        return _prepare(node, conn, said[node.rank].append, at_once, seen)

    try:
        reads = per_host(plan.nodes, _host_of, prepare)
    finally:
        _say_in_order(said, report)
    first = {node.rank: read for node, read in zip(plan.nodes, reads, strict=True) if read}
    if at_once:
        return first
    for check in plan.checks:
        traced(check.host, None, check)
        check_reach(check, connections, report)

    def start(node: NodePlan) -> None:
        step, seen = node.start, starts.of(node.rank)
        traced(node.host, node.rank, step)
        seen.sent = True
        seen.answer = connections[node.host].run(step.argv, input=_input(step))
        _require(node, step, seen.answer)
        said[node.rank].append(f"node {node.rank}: job started")

    try:
        try:
            per_host(plan.nodes, _host_of, start)
        finally:
            _say_in_order(said, report)
    except BaseException:
        _undo(plan, connections, report, starts)
        raise
    return first


def _host_of(node: NodePlan) -> str:
    return node.host


def _say_in_order(said: dict[int, list[str]], report: Report) -> None:
    """What the nodes' threads had to say, node 0's first, as a serial run said it."""
    for rank in sorted(said):
        for line in said[rank]:
            report(line)
        said[rank].clear()


def _undo(plan: Plan, connections: dict[str, Connection], report: Report, starts: Starts) -> None:
    """All or none: the nodes whose start may have run are stopped with their printed
    cancel, the one whose start was cut off unanswered too (the last node's included: a
    cancel that comes before its start makes that start refuse); one whose host does not
    answer stays as it is (`starts` says it may run)."""
    for node in plan.nodes:
        if node.on_failure is None or not starts.of(node.rank).may_run:
            continue
        report(f"node {node.rank}: stopping it (another node failed to start)")
        traced(node.host, node.rank, node.on_failure)
        try:
            stopped = connections[node.host].run(node.on_failure.argv)
        except GpujobError as err:
            report(f"node {node.rank}: could not stop it: {err.one_line()}")
            continue
        starts.of(node.rank).stopped = stopped.ok


def _prepare(
    node: NodePlan, conn: Connection, report: Report, with_start: bool, seen: NodeStart
) -> FirstRead | None:
    ops: list[Op] = []
    commands: list[RunCommand] = []
    syncs = 0

    def sent() -> None:
        seen.sent = True

    for step in node.steps if with_start else node.preparation:
        traced(node.host, node.rank, step)
        if isinstance(step, WriteFile | CopyFile):
            ops.append(File(*_file_of(step)))
        elif isinstance(step, SyncDir):
            syncs += 1
            ops.append(step)
        elif isinstance(step, RunCommand):
            ops.append(Run(step.argv, stream=not step.starts_job, input=_input(step),
                           on_sent=sent if step.starts_job else None))  # fmt: skip
            commands.append(step)
    try:
        outcome = conn.batch(ops)
    except GpujobError as err:
        if not seen.sent:
            raise
        raise GpujobError(  # the start went out: it may have reached the host
            f"{err.message}; the job may have started there",
            f"`gpujob logs {PurePosixPath(node.job_dir).name} -f` finds out (and follows it)",
        ) from None
    if len(outcome.runs) < len(commands):
        seen.sent = False  # a command before it failed: the host stopped there, never started
    if syncs:
        report(f"node {node.rank}: shipped the workdir ({outcome.sent} file(s) changed)")
    for command, result in zip(commands, outcome.runs, strict=False):
        if command.starts_job:
            seen.answer = result
            _require(node, command, result)
        else:
            require_prepared(node, command, result, report)
    if not with_start:
        return None
    report(f"node {node.rank}: job started")
    return _first_read(outcome) if node.start.reads_log else None


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


def _require(node: NodePlan, command: RunCommand, result: Result) -> None:
    if not result.ok:
        raise GpujobError(
            f"node {node.rank} ({node.host}): could not {command.why} "
            f"(exit {result.exit_code}): {_last(result)}",
            command.hint or f"the command was: {shlex.join(command.argv)[:300]}",
        )


def require_prepared(node: NodePlan, command: RunCommand, result: Result, report: Report) -> None:
    """A preparation command that failed (the job environment, the workdir copy, the image
    pull): what failed, the line of its output that says why (pip's `ERROR: ...`), and
    what to check; exit 1. Its stderr is on the terminal already (streamed as it came);
    its stdout never was, so its last lines are shown here."""
    if result.ok:
        return
    failed = f"node {node.rank} ({node.host}): {command.why} failed (exit {result.exit_code})"
    unseen = _last_lines(result.stdout)
    if unseen:
        report(f"{failed}; the last lines of its stdout:")
        for line in unseen:
            report(f"  {line}")
    said = _last_lines(result.stderr) + unseen
    cause = next((line for line in reversed(said) if CAUSE.search(line)), None)
    raise GpujobError(
        f"{failed}: {cause or (said[-1] if said else 'it said nothing')}",
        command.hint or f"the command was: {shlex.join(command.argv)[:300]}",
    )


def _last_lines(text: str | None) -> list[str]:
    """The last lines of an output, as a terminal shows them (a progress bar's last state),
    blank ones left out."""
    lines = [ln.rstrip("\r").rsplit("\r", 1)[-1].rstrip() for ln in (text or "").split("\n")]
    return [line[-300:] for line in lines if line.strip()][-TAIL_LINES:]


def check_reach(check: ReachCheck, connections: dict[str, Connection], report: Report) -> None:
    """Every other host dials node 0's rendezvous port while a listener holds it."""
    heard: dict[str, Result] = {}
    listener = threading.Thread(
        target=lambda: heard.setdefault("r", connections[check.host].run(check.listen)),
        daemon=True,
    )
    listener.start()
    dialled = per_host(check.from_hosts, str, lambda host: connections[host].run(check.dial))
    pairs = zip(check.from_hosts, dialled, strict=True)
    failures = [f"{host}: {_last(result)}" for host, result in pairs if not result.ok]
    listener.join(check.timeout_s + 10)
    result = heard.get("r")
    if result is not None and not result.ok:
        failures.insert(0, f"{check.host} (node 0): {_last(result)}")
    if failures:
        raise GpujobError(
            f"rendezvous check failed, nothing started: {'; '.join(failures)}",
            f"open TCP port {check.port} (and the ephemeral ports) between the hosts, or "
            f"set {check.port_field} to a free port",
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


def _input(step: RunCommand) -> bytes | None:
    """What the command reads on its stdin (the start's secrets), as bytes."""
    return None if step.input is None else step.input.content.encode()


def _file_of(step: WriteFile | CopyFile) -> tuple[str, bytes, int]:
    if isinstance(step, WriteFile):
        return step.path, step.content.encode(), step.mode
    return step.path, Path(step.source).read_bytes(), step.mode
