"""`gpujob status`: what each job's nodes are doing.

The agents are the truth; the db is a cache. `status` asks the agent of every node of a job
that has not ended (one SSH command per node, one connection per host) and records what it
learns: a node whose supervisor is gone after a reboot reads `lost`, never `running`. A host
that does not answer shows `unreachable` without changing the record.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypedDict

from launcher.jobs.state import JobState, is_terminal, refresh
from launcher.state import figures
from launcher.state.db import JobRecord, StateDB

if TYPE_CHECKING:
    from launcher.runtime.agent import NodeStatus
    from launcher.supervise.recover import RecoveryNote


class NodeRow(TypedDict, total=False):
    rank: int
    state: str | None
    exit_code: int | None
    last_line: str
    slurm: str


class JobRow(TypedDict, total=False):
    """A job as `status --json` shows it."""

    id: str
    name: str
    state: str
    exit_code: int | None
    nodes: int
    provider: str
    runtime: str
    runtime_s: float
    last_line: str
    warning: str
    metrics: str
    node_states: list[NodeRow]
    recovery: RecoveryNote
    group: str
    """A job group's task: `GROUP_ID/task` (jobs/group.py)."""


def status_rows(limit: int = 20) -> list[JobRow]:
    """Jobs, newest first, refreshed from their agents."""
    from launcher.jobs.group import all_groups, group_column

    db = StateDB()
    rows: list[JobRow] = []
    groups = group_column(all_groups())
    jobs = db.jobs(limit)
    followed: set[str] = set()
    if jobs:  # which of them recovery follows, in one query
        from launcher.state.recovery import RecoveryDB

        followed = RecoveryDB().followed([job.id for job in jobs])
    for job in jobs:
        state, code, last = job.state, job.exit_code, job.last_line
        nodes: list[NodeRow] = [{"rank": rank, "state": state}
                                for rank in range(len(job.node_dirs))]  # fmt: skip
        statuses = None
        recovery = _recovery_note(job.id) if job.id in followed else None
        if recovery is not None and recovery["phase"] == "recovering":
            state = JobState.RECOVERING  # its hosts are being replaced: none to ask
        else:
            seen = refresh(db, job)
            state, code, last, statuses = seen.state, seen.exit_code, seen.last_line, seen.nodes
            if statuses is not None:
                nodes = [_node_row(rank, s) for rank, s in enumerate(statuses)]
        here = statuses if statuses is not None else _statuses_here(job)
        settled = job.terminal and not job.unconfirmed  # refresh wrote nothing: no re-read
        refreshed = job if settled else (db.job(job.id) or job)
        runtime_s = (refreshed.ended_at or time.time()) - job.created_at
        row: JobRow = {
            "id": job.id, "name": job.name, "state": state, "exit_code": code,
            "nodes": len(job.node_dirs), "provider": job.provider, "runtime": job.runtime,
            "runtime_s": round(runtime_s, 1), "last_line": last or "",
            "warning": _care_warning(here), "node_states": nodes,
        }  # fmt: skip
        shown = metrics_text(here)
        if not shown and is_terminal(state):  # its agents not asked: the figures kept here
            shown = metrics_text([{"metrics": figures.load(job.id) or {}}])
        if shown:
            row["metrics"] = shown
        if recovery is not None:
            row["recovery"] = recovery
        if job.id in groups:
            row["group"] = groups[job.id]
        rows.append(row)
    return rows


def _recovery_note(job_id: str) -> RecoveryNote | None:
    from launcher.supervise.recover import status_note  # only for a job recovery follows

    return status_note(job_id)


def metrics_text(statuses: list[NodeStatus] | None) -> str:
    """Node 0's headline figure as its agent summarised it (agent/metrics.py): `loss 0.8597 ↓
    @60, 29.5k tok/s, GPU 87%`; empty where nothing was recorded or the agent was not asked."""
    summary = dict((statuses or [{}])[0].get("metrics") or {})
    parts = []
    if summary.get("name") is not None and summary.get("value") is not None:
        arrow = {"down": "↓", "up": "↑"}.get(str(summary.get("trend")), "→")
        parts.append(f"{summary['name']} {float(summary['value']):.4g} {arrow}")  # type: ignore[arg-type]
        if summary.get("step") is not None:
            parts[-1] += f" @{summary['step']}"
    if isinstance(summary.get("tokens_per_s"), int | float):
        rate = float(summary["tokens_per_s"])  # type: ignore[arg-type]
        parts.append(f"{rate / 1000:.1f}k tok/s" if rate >= 1000 else f"{rate:.0f} tok/s")
    if summary.get("gpu_util") is not None:
        parts.append(f"GPU {summary['gpu_util']}%")
    return ", ".join(parts)


def _statuses_here(job: JobRecord) -> list[NodeStatus]:
    """A job's status files where they are on this machine (a local job that ended: its
    agents were not asked), else none."""
    from launcher.targets.base import target_for

    target = target_for(job)
    return (target.statuses(job) or []) if target.traits.on_this_machine else []


def _care_warning(statuses: list[NodeStatus]) -> str:
    """The agent's disk or GPU-idle warning, or the reason it stopped the job (checkpoint
    care, the idle policy), from the statuses just read, else (a local job) from its status
    files. A timed-out job says so in its last line."""
    for status in statuses:
        text = (
            status.get("stopped_reason")
            or (status.get("disk") or {}).get("warning")
            or (status.get("gpu_idle") or {}).get("warning")
        )
        if text:
            return str(text)
    return ""


def for_table(rows: list[JobRow]) -> list[dict[str, object]]:
    """Each node's state in the `nodes` column: `2: 0 running, 1 failed`."""
    shown: list[dict[str, object]] = []
    for row in rows:
        nodes = row["node_states"]
        detail = ", ".join(f"{n['rank']} {n['state']}" for n in nodes)
        shown.append({**row, "nodes": f"{len(nodes)}: {detail}" if len(nodes) > 1 else "1",
                      "recovery": recovery_text(row.get("recovery"))})  # fmt: skip
    return shown


def recovery_text(recovery: RecoveryNote | None) -> str:
    """The recovery column: who follows the job and how many restarts it has made."""
    if not recovery:
        return ""
    restarts = f"{recovery['restarts']}/{recovery['max_restarts']} restarts"
    if recovery["phase"] in ("stopped", "finished"):
        return f"{recovery['phase']} after {restarts}"
    pid = recovery["controller_pid"]
    who = f"controller pid {pid}" if pid else "no controller (`gpujob recover JOB`)"
    if recovery["phase"] == "recovering":  # recovering (attempt 2, ..., from step 40)
        return f"{recovery['line']}; {who}"
    return f"{who}, {restarts}"


def _node_row(rank: int, status: NodeStatus) -> NodeRow:
    row: NodeRow = {"rank": rank, "state": status.get("state"),
                    "exit_code": status.get("exit_code"),
                    "last_line": status.get("last_line") or ""}  # fmt: skip
    if status.get("slurm"):
        row["slurm"] = status["slurm"]  # its state and reason
    return row
