"""A job's states and the rules of its life, written once: a job's state from its nodes', the
node that failed first, the job's exit code, what is terminal. `status`, the follow, the
keeper, `down` and the recovery controller all read these.

The states themselves are `JobState` (state/job_states.py: beside the record they type, so
the targets, which record a job's start, can name them too).

The client-side lifecycle rules of a job belong here too, beside these: a job recorded but
never started (`starting` with no agent), a cancel of an ended job, a record that may be
stale (`refresh`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.state import figures
from launcher.state.db import JobRecord, StateDB
from launcher.state.job_states import (
    NODE_FAILURES,
    TERMINAL,
    WORST_FIRST,
    JobState,
    is_terminal,
)

if TYPE_CHECKING:
    from launcher.runtime.agent import NodeStatus

__all__ = ["NODE_FAILURES", "TERMINAL", "JobState", "is_terminal", "job_state"]


def job_state(states: Iterable[str | None]) -> JobState | None:
    """The job's state from its nodes' states: the worst (WORST_FIRST), else `pending` while
    a cluster holds it; None when the nodes say nothing yet (the record stands)."""
    present = set(states)
    for state in WORST_FIRST:
        if state in present:
            return state
    return JobState.PENDING if JobState.PENDING in present else None


def is_final(states: list[str | None], state: JobState) -> bool:
    """The nodes decide the job's end: one failed, was lost, timed out or was cancelled, or
    every node succeeded."""
    return state in TERMINAL and (state != JobState.SUCCEEDED or set(states) == {state})


def exit_code_of(status: NodeStatus) -> int:
    """One ended node's exit code: a lost node's is 1 (its code died with it), a failed
    node's its own or 1, a timed-out node's 124 (as GNU `timeout`)."""
    from launcher.agent.limits import TIMED_OUT_CODE  # here: it brings subprocess along

    state, code = status.get("state"), status.get("exit_code")
    if state == JobState.LOST:
        return 1
    if state == JobState.FAILED:
        return int(code or 1)
    if code is None and state == JobState.TIMED_OUT:
        return TIMED_OUT_CODE
    return int(code) if code is not None else (0 if state == JobState.SUCCEEDED else 1)


def first_failed(statuses: list[NodeStatus]) -> int | None:
    """The rank that failed first, by the time its agent recorded the end: the cause, when
    the others failed because of it."""
    failed = [r for r, s in enumerate(statuses) if s.get("state") in NODE_FAILURES]
    return min(failed, key=lambda r: (statuses[r].get("ended_at") or float("inf"), r), default=None)


def job_exit_code(statuses: list[NodeStatus]) -> int:
    """The job's exit code: the first failing node's, else the first nonzero, else 0."""
    cause = first_failed(statuses)
    if cause is not None:
        return exit_code_of(statuses[cause])
    for status in statuses:
        code = status.get("exit_code")
        if is_terminal(status.get("state")) and code:
            return int(code)
    return 0


def recorded_exit_code(job: JobRecord) -> int:
    """The exit code a command ends with for a job recorded as ended."""
    from launcher.agent.limits import TIMED_OUT_CODE

    if job.state == JobState.TIMED_OUT:
        return TIMED_OUT_CODE
    if job.exit_code is not None:
        return job.exit_code
    return 0 if job.state == JobState.SUCCEEDED else 1


def record_job_state(
    db: StateDB, job: JobRecord, statuses: list[NodeStatus]
) -> tuple[str, int | None, str | None]:
    """The job's state from its nodes' and the line to show: the last line of the node that
    decided it (a time limit's reason). An end is recorded; a job still running is not."""
    states = [s.get("state") for s in statuses]
    state = job_state(states)
    if state is None:
        return job.state, job.exit_code, job.last_line
    node = next(s for s in statuses if s.get("state") == state)
    if state == JobState.PENDING:  # queued on a cluster: why SLURM holds it
        return state, None, node.get("reason")
    why = state in (JobState.TIMED_OUT, JobState.LOST) and node.get("reason")  # lost: runs on?
    last = node.get("reason") if why else node.get("last_line")
    code = node.get("exit_code")
    if is_final(states, state):
        code = exit_code_of(node) if code is None or state == JobState.LOST else code
        db.update_job(job.id, state, exit_code=code, last_line=last)
        figures.save(job.id, statuses[0].get("metrics"))  # status shows them once it has ended
    return state, code, last


@dataclass(frozen=True)
class Seen:
    """A job as its nodes say it is now (`nodes` None: not asked, or a host did not answer)."""

    state: str
    exit_code: int | None
    last_line: str | None
    nodes: list[NodeStatus] | None = None


def refresh(db: StateDB, job: JobRecord) -> Seen:
    """A job's state for `status`: a job not ended, or recorded as ended by a client that
    could not ask its agents (`unconfirmed`), is asked through its target and what its nodes
    say is recorded; a host that does not answer shows `unreachable`, the record kept. A job
    whose submit died before its nodes started is resolved (lifecycle.py)."""
    recorded = Seen(job.state, job.exit_code, job.last_line)
    if job.terminal and not job.unconfirmed:
        return recorded  # before the imports: `status` shows many such jobs
    from launcher.jobs.lifecycle import (
        abandoned,
        never_started,
        resolve_abandoned,
        settle_unstarted,
    )
    from launcher.targets.base import target_for

    statuses = target_for(job).statuses(job)
    if statuses is None:  # a host did not answer
        unreachable = Seen(JobState.UNREACHABLE, job.exit_code, job.last_line)
        return recorded if job.terminal else unreachable
    if job.terminal or abandoned(job):  # a start that may still come is refused first
        statuses = settle_unstarted(job, statuses)
    if job.terminal:  # an end the agents never confirmed: do they say otherwise?
        if all(never_started(s) for s in statuses):
            db.update_job(job.id, job.state)  # confirmed: nothing ever ran
            return Seen(job.state, job.exit_code, job.last_line, statuses)
        db.reopen_job(job.id, JobState.RUNNING)
    elif abandoned(job):
        resolved = resolve_abandoned(db, job, statuses)
        if resolved is not None:
            return resolved
    state, code, last = record_job_state(db, job, statuses)
    if state == JobState.RUNNING and job.state != JobState.RUNNING:
        db.update_job(job.id, JobState.RUNNING)  # adopted: its nodes run
    return Seen(state, code, last, statuses)
