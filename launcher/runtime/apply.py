"""Execute a Plan step by step through each node's Connection, and nothing else.

Every node is prepared before any node starts, so a failure while preparing starts nothing
("all nodes or none").
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.errors import GpujobError
from launcher.plan.model import CopyFile, NodePlan, Plan, RunCommand, Step, SyncDir, WriteFile
from launcher.remote.base import Connection

Report = Callable[[str], None]


def apply_plan(plan: Plan, connections: dict[str, Connection], report: Report) -> None:
    for node in plan.nodes:
        for step in node.steps:
            if not (isinstance(step, RunCommand) and step.starts_job):
                _apply_step(node, step, connections[node.host], report)
    for node in plan.nodes:
        for step in node.steps:
            if isinstance(step, RunCommand) and step.starts_job:
                _apply_step(node, step, connections[node.host], report)


def _apply_step(node: NodePlan, step: Step, conn: Connection, report: Report) -> None:
    if isinstance(step, WriteFile):
        conn.put(step.path, step.content.encode(), step.mode)
    elif isinstance(step, CopyFile):
        conn.put_file(step.source, step.path, step.mode)
    elif isinstance(step, SyncDir):
        sent = conn.sync_dir(step.source, step.path, step.excludes)
        report(f"node {node.rank}: shipped the workdir ({sent} file(s) changed)")
    elif isinstance(step, RunCommand):
        result = conn.run(step.argv, stream=not step.starts_job)
        if not result.ok:
            detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
            raise GpujobError(
                f"node {node.rank} ({node.host}): could not {step.why} "
                f"(exit {result.exit_code}): {detail[0]}",
                "run the same command with --dry-run to see it in full",
            )
        if step.starts_job:
            report(f"node {node.rank}: job started")
    else:
        raise TypeError(f"unknown plan step {step!r}")
