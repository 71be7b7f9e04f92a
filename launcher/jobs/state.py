"""A job's state from its nodes' states: one set of rules, read by `status`, the follow, the
keeper and `down`."""

from __future__ import annotations

from launcher.agent.states import TIMED_OUT, WORST_FIRST
from launcher.runtime.agent import NodeStatus
from launcher.state.db import JobRecord, StateDB


def record_job_state(
    db: StateDB, job: JobRecord, statuses: list[NodeStatus]
) -> tuple[str, int | None, str | None]:
    """The job's state from its nodes' (the worst wins) and the line to show: the last line
    of the node that decided it."""
    states = [s.get("state") for s in statuses]
    for state in WORST_FIRST:
        if state in states:
            node = next(s for s in statuses if s.get("state") == state)
            code = node.get("exit_code")
            last = node.get("reason") if state == TIMED_OUT else node.get("last_line")
            if state in ("lost", TIMED_OUT, "failed", "cancelled") or set(states) == {"succeeded"}:
                code = code if code is not None else (0 if state == "succeeded" else 1)
                db.update_job(job.id, state, exit_code=code, last_line=last)
            return state, code, last
    if "pending" in states:  # queued on a cluster: why SLURM holds it (targets/slurm/cluster.py)
        pending = next(s for s in statuses if s.get("state") == "pending")
        return "pending", None, pending.get("reason")
    return job.state, job.exit_code, job.last_line
