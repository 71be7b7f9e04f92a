"""A job whose start was interrupted, resolved by the next command that finds it.

`submit` records a job (`starting`, with who starts it: state/starter.py) before it ships the
nodes' files and starts their agents. A submit killed in between leaves a record no agent
will ever update. The next `status`, `cancel` or `logs` that finds such a record, its starter
gone, asks the nodes: where none has an agent status the job never started and ends `failed`
(`INTERRUPTED`); where every node started the job is adopted (`running`, state.py `refresh`);
where only some did, those wait for peers that never come, so they are stopped and the job
fails too. A command that finds a live starter waits for it a while instead (`settle`).
"""

from __future__ import annotations

import os
import time

from launcher.jobs.state import JobState, Seen
from launcher.runtime.agent import NodeStatus
from launcher.state.db import JobRecord, StateDB
from launcher.state.starter import starter_alive, starter_pid

INTERRUPTED = "failed to start: the submit was interrupted before the job started"
PARTLY = ("failed to start: the submit was interrupted before every node started; "
          "the nodes that had started were stopped")  # fmt: skip
STOP_GRACE_S = 10.0


def never_started(status: NodeStatus) -> bool:
    """The agent's own word that the job never started on the node (its `never_started`
    field: cancelled before its start, or its start window passed), for good: a start that
    comes later refuses. A node with no status yet is not: its start may still come."""
    return bool(status.get("never_started"))


def undecided(status: NodeStatus) -> bool:
    """No status yet: the agent's file may be there (its environment builds; a node of
    several waits for its start) or not yet; a start may still come."""
    return status.get("state") in (None, JobState.UNKNOWN) and not never_started(status)


def settle_unstarted(job: JobRecord, statuses: list[NodeStatus]) -> list[NodeStatus]:
    """Each node's status once no start can come any more: before a client records that a
    job never started, every node with no status yet is cancelled by its agent (it records
    `cancelled`, never started, under its node lock; a start that comes later refuses), and
    a node folder without an agent gets `cancel-requested` (the agent's start refuses it).
    A node whose start came first answers as the cancel stopped it."""
    from launcher.targets.base import NO_AGENT, close_all, target_for
    from launcher.targets.hosts import last_json

    if not any(undecided(status) for status in statuses):
        return statuses
    settled = list(statuses)
    nodes = target_for(job).nodes(job)
    try:
        for node in nodes:
            if not undecided(statuses[node.rank]):
                continue
            if statuses[node.rank].get("reason") == NO_AGENT:  # touch fails where no folder
                node.connection.run(["touch", f"{node.node_dir}/cancel-requested"])
                settled[node.rank] = NodeStatus(state=JobState.UNKNOWN, reason=NO_AGENT,
                                                never_started=True)  # fmt: skip
            else:
                answer = last_json(node.cancel(STOP_GRACE_S).stdout)
                settled[node.rank] = (
                    answer
                    if answer.get("state")
                    else NodeStatus(
                        state=JobState.UNKNOWN,
                        never_started=True,
                        reason="its agent printed no status",
                    )
                )  # the agent's files were not whole: no start can run it
    finally:
        close_all([node.connection for node in nodes])
    return settled


def abandoned(job: JobRecord) -> bool:
    """Recorded `starting` by a submit that is gone."""
    return job.state == JobState.STARTING and not starter_alive(job.starter, job.created_at)


def failed_to_start(job: JobRecord) -> bool:
    """A job recorded as never started (nothing of it runs, as far as the record knows)."""
    return job.state == JobState.FAILED and (job.last_line or "").startswith("failed to start")


def resolve_abandoned(db: StateDB, job: JobRecord, statuses: list[NodeStatus]) -> Seen | None:
    """The end of a job whose submit died before every node started; None when every node
    started (the job is adopted as its nodes say)."""
    from launcher.targets.base import close_all, target_for

    unstarted = {rank for rank, status in enumerate(statuses) if never_started(status)}
    if not unstarted:
        return None
    line = INTERRUPTED
    if len(unstarted) < len(statuses):  # the started ones wait for peers that never come
        nodes = target_for(job).nodes(job)
        try:
            for node in nodes:
                if node.rank not in unstarted:
                    node.cancel(STOP_GRACE_S)
        finally:
            close_all([node.connection for node in nodes])
        line = PARTLY
    db.update_job(job.id, JobState.FAILED, exit_code=1, last_line=line)
    return Seen(JobState.FAILED, 1, line, statuses)


def settle(db: StateDB, job: JobRecord, wait_s: float) -> JobRecord:
    """The job's record once nobody is starting it: a live submit is given up to `wait_s`
    to finish the start; then a record that may be stale (`starting`, an unconfirmed end) is
    refreshed from the nodes."""
    from launcher.jobs.state import refresh

    deadline = time.monotonic() + (0.0 if starter_pid(job.starter) == os.getpid() else wait_s)
    while job.state == JobState.STARTING and not abandoned(job) and time.monotonic() < deadline:
        time.sleep(0.25)
        job = db.job(job.id) or job
    if job.state == JobState.STARTING or job.unconfirmed:
        refresh(db, job)
        job = db.job(job.id) or job
    return job
