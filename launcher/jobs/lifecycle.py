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
    """A node with no agent status: no agent file, no status.json, or its agent's own word
    that the start never reached it (`never started`)."""
    state = status.get("state")
    if state in (None, JobState.UNKNOWN):
        return True
    return state == JobState.FAILED and "never started" in str(status.get("reason") or "")


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
