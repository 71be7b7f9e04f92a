"""`gpujob status` and `gpujob cancel`: what each job's nodes are doing, and stopping them.

The agents are the truth; the db is a cache. `status` asks the agent of every node of a job
that has not ended (one SSH command per node, one connection per host) and records what it
learns: a node whose supervisor is gone after a reboot reads `lost`, never `running`. A host
that does not answer shows `unreachable` without changing the record.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from typing import Any

from launcher.agent.states import TERMINAL, TIMED_OUT, WORST_FIRST
from launcher.errors import GpujobError
from launcher.ops import say
from launcher.ops.jobs import close_all, job_connections, job_or_fail
from launcher.runtime.agent import agent_argv, python_for
from launcher.state.db import JobRecord, StateDB
from launcher.state.readonly import JobsView


def status_rows(limit: int = 20) -> list[dict[str, Any]]:
    """Jobs, newest first, refreshed from their agents."""
    from launcher.ops.recover import status_note

    db = StateDB()
    rows = []
    for job in db.jobs(limit):
        state, code, last = job.state, job.exit_code, job.last_line
        nodes: list[dict[str, Any]] = [{"rank": rank, "state": state}
                                       for rank in range(len(job.node_dirs))]  # fmt: skip
        statuses = None
        recovery = status_note(job.id)
        if recovery is not None and recovery["phase"] == "recovering":
            state = "recovering"  # its hosts are being replaced: none to ask (the line: below)
        elif not job.terminal:
            statuses = node_statuses(job)
            if statuses is None:
                state = "unreachable"
            else:
                nodes = [_node_row(rank, s) for rank, s in enumerate(statuses)]
                state, code, last = record_job_state(db, job, statuses)
        refreshed = db.job(job.id) or job
        runtime_s = (refreshed.ended_at or time.time()) - job.created_at
        rows.append(
            {
                "id": job.id, "name": job.name, "state": state, "exit_code": code,
                "nodes": len(job.node_dirs), "provider": job.provider, "runtime": job.runtime,
                "runtime_s": round(runtime_s, 1), "last_line": last or "",
                "warning": _care_warning(job, statuses), "node_states": nodes,
                **({"recovery": recovery} if recovery is not None else {}),
            }
        )  # fmt: skip
    return rows


def _care_warning(job: JobRecord, statuses: list[dict[str, Any]] | None = None) -> str:
    """The agent's disk or GPU-idle warning, or the reason it stopped the job (checkpoint
    care, the idle policy), from the statuses just read, else (a local job) from its status
    files. A timed-out job says so in its last line."""
    if statuses is None:
        if job.provider != "local":
            return ""
        from pathlib import Path

        from launcher.agent.agent import status_of

        statuses = [status_of(Path(node_dir)) for node_dir in job.node_dirs]
    for status in statuses:
        text = (
            status.get("stopped_reason")
            or (status.get("disk") or {}).get("warning")
            or (status.get("gpu_idle") or {}).get("warning")
        )
        if text:
            return str(text)
    return ""


def for_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each node's state in the `nodes` column: `2: 0 running, 1 failed`."""
    shown = []
    for row in rows:
        nodes = row["node_states"]
        detail = ", ".join(f"{n['rank']} {n['state']}" for n in nodes)
        shown.append(dict(row, nodes=f"{len(nodes)}: {detail}" if len(nodes) > 1 else "1",
                          recovery=recovery_text(row.get("recovery"))))  # fmt: skip
    return shown


def recovery_text(recovery: dict[str, Any] | None) -> str:
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


def _node_row(rank: int, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "rank": rank,
        "state": status.get("state"),
        "exit_code": status.get("exit_code"),
        "last_line": status.get("last_line") or "",
        **({"slurm": status["slurm"]} if status.get("slurm") else {}),  # its state and reason
    }


def node_statuses(job: JobRecord, conns: list[Any] | None = None) -> list[dict[str, Any]] | None:
    """Each node's agent status in rank order, or None while a host does not answer;
    `conns` (kept open) for a caller that asks again and again."""
    if job.provider == "local":
        from pathlib import Path

        from launcher.agent.agent import last_line, status_of

        return [
            dict(status_of(Path(d)), last_line=last_line(Path(d))) for d in job.node_dirs
        ]  # fmt: skip
    if job.provider == "slurm":
        from launcher.ops.slurm import slurm_statuses

        return slurm_statuses(job)
    opened = conns is None
    try:
        conns = conns or job_connections(job)
    except GpujobError:
        return None
    try:
        python = python_for(job.provider)
        results = [conn.run(agent_argv(python, node_dir, "status")) for conn, node_dir
                   in zip(conns, job.node_dirs, strict=True)]  # fmt: skip
        return [json.loads(r.stdout) for r in results] if all(r.ok for r in results) else None
    except (GpujobError, ValueError, OSError):
        return None
    finally:
        if opened:
            close_all(conns)


def record_job_state(
    db: StateDB, job: JobRecord, statuses: list[dict[str, Any]]
) -> tuple[str, int | None, str | None]:
    """The job's state from its nodes' (the worst wins) and the line to show: the last line
    of the node that decided it."""
    states = [s.get("state") for s in statuses]
    for state in WORST_FIRST:
        if state in states:
            node = next(s for s in statuses if s.get("state") == state)
            code = node.get("exit_code")
            why = state in (TIMED_OUT, "lost") and node.get("reason")  # lost: runs on?
            last = node.get("reason") if why else node.get("last_line")
            if state in ("lost", TIMED_OUT, "failed", "cancelled") or set(states) == {"succeeded"}:
                code = code if code is not None else (0 if state == "succeeded" else 1)
                db.update_job(job.id, state, exit_code=code, last_line=last)
            return state, code, last
    if "pending" in states:  # queued on a cluster: why SLURM holds it (providers/slurm.py)
        return "pending", None, next(s for s in statuses if s.get("state") == "pending")["reason"]
    return job.state, job.exit_code, job.last_line


def node_hosts(job: JobRecord) -> list[str]:
    """Each node's host by name, in rank order (a record for SSH hosts, a name locally)."""
    if job.provider == "local":
        return list(job.hosts)
    from launcher.providers.ssh import HostEntry

    return [HostEntry.from_record(record).name for record in job.hosts]


def cancel_commands(job: JobRecord, grace_s: float) -> list[list[str]]:
    """Each node's agent asked to cancel: what `cancel` runs, and what its dry run prints."""
    python = python_for(job.provider)
    return [agent_argv(python, node_dir, "cancel", f"{grace_s:g}") for node_dir in job.node_dirs]


def cancel_lines(job: JobRecord, grace_s: float) -> list[str]:
    pairs = zip(node_hosts(job), cancel_commands(job, grace_s), strict=True)
    return [f"node {rank} on {host}: {shlex.join(argv)}" for rank, (host, argv) in enumerate(pairs)]


def cancel(reference: str, grace_s: float, dry_run: bool) -> int:
    """A dry run reads the db without creating or changing it and prints the commands."""
    db = JobsView() if dry_run else StateDB()
    job = job_or_fail(db, reference)
    if job.provider == "slurm":
        from launcher.ops.slurm import slurm_cancel

        return slurm_cancel(job, grace_s, dry_run)
    from launcher.ops.recover import cancel_recovering

    if not dry_run and cancel_recovering(job.id):  # its hosts are being replaced: none to ask
        return 0
    commands = cancel_commands(job, grace_s)
    if dry_run:
        for line in cancel_lines(job, grace_s):
            print(line)
        say(f"dry run: job {job.id} would then be recorded as cancelled; nothing was run")
        return 0
    conns = job_connections(job)
    failures, answers = [], []
    try:
        for rank, argv in enumerate(commands):
            result = conns[rank].run(argv)
            if not result.ok:
                said = result.stderr.strip() or result.stdout.strip()
                failures.append(f"node {rank}: {said[-200:]}")
            answers.append(_last_json(result.stdout))
    finally:
        close_all(conns)
    if failures:
        raise GpujobError(f"cancel failed on {'; '.join(failures)}")
    if all(a.get("state") for a in answers):  # each agent's end, as it recorded it
        state = record_job_state(db, job, answers)[0]
        if all(a.get("had_ended") for a in answers):
            say(f"job {job.id} had already ended ({state}); nothing to cancel")
            return 0
    else:  # an agent that printed no status
        db.update_job(job.id, "cancelled")
    say(f"job {job.id} cancelled on {len(commands)} node(s)")
    return 0


def _last_json(stdout: str) -> dict[str, Any]:
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {}
    return answer if isinstance(answer, dict) else {}


@dataclass(frozen=True)
class CancelFirst:
    """`down`'s first step: the jobs the db says still run on the hosts it takes. Each is
    cancelled if its agents say it still runs, so they end it cleanly and ship its last
    checkpoints and its log to S3 before the host goes."""

    jobs: list[tuple[JobRecord, list[str]]]
    grace_s: float = 30.0

    def lines(self) -> list[str]:
        """The dry run's account: which jobs, and the literal commands."""
        out = []
        for job, on in self.jobs:
            out.append(f"would ask job {job.id}'s agents (on {', '.join(on)}) for its state "
                       "and, if it still runs, cancel it first:")  # fmt: skip
            out += [f"  {line}" for line in cancel_lines(job, self.grace_s)]
        return out

    def run(self) -> None:
        db = StateDB()
        for job, on in self.jobs:
            statuses = node_statuses(job)
            if statuses is None or all(s.get("state") in TERMINAL for s in statuses):
                if statuses is not None:
                    record_job_state(db, job, statuses)
                continue
            say(f"job {job.id} still runs on {', '.join(on)}: cancelling it first"
                + (" (its log and last checkpoints go to S3)" if job.logs_to else ""))  # fmt: skip
            try:
                cancel(job.id, self.grace_s, dry_run=False)
            except GpujobError as err:
                say(f"could not cancel job {job.id}: {err.one_line()}; the host goes anyway")


def cancel_first(hosts: set[str], dry_run: bool, grace_s: float = 30.0) -> CancelFirst:
    """The jobs not ended per the db (a dry run's db is read-only) on any of `hosts`."""
    db = JobsView() if dry_run else StateDB()
    found = []
    for job in db.jobs(limit=200):
        if job.terminal or job.provider == "local":
            continue
        on = sorted(set(node_hosts(job)) & hosts)
        if on:
            found.append((job, on))
    return CancelFirst(found, grace_s)


def stop_jobs_on(hosts: set[str], grace_s: float = 30.0) -> None:
    """Before `down` takes hosts away: each job still running on one of them is cancelled."""
    cancel_first(hosts, dry_run=False, grace_s=grace_s).run()
