"""Whether a job's end keeps its rented hosts up for a look (`--keep-on-failure`), written
once: the follow of `submit --up` and the recovery controller both ask here.

Only a failure keeps: a job that failed (a nonzero exit) or lost a node leaves something to
look at. A cancel is the user's own word that the job is done with (also where a node
failed because another was cancelled first), a success has nothing to debug, and a time
limit (`max_duration`) is a budget reached, not a fault: each of them ends as it would
without the flag.
"""

from __future__ import annotations

from math import inf
from typing import TYPE_CHECKING

from launcher.errors import GpujobError
from launcher.state.db import JobRecord
from launcher.state.job_states import NODE_FAILURES

if TYPE_CHECKING:
    from launcher.runtime.agent import NodeStatus

KEPT_FOLDER = "kept"
"""In each node's folder on its host: what the keep found there (README, py-spy dumps)."""


def keeps_hosts(state: str | None, window_s: float | None) -> bool:
    """True when a job that ended in `state` keeps its hosts for `window_s` seconds."""
    return bool(window_s) and state in NODE_FAILURES


def failed_node(job: JobRecord) -> int | None:
    """The node that failed first, as its agents recorded it (the one to look at first);
    node 0 when none answers. None when a cancel came first (`cancelled_first`): the job's
    failures followed from the user's word, which keeps nothing."""
    if len(job.node_dirs) < 2:
        return 0
    from launcher.jobs.state import first_failed
    from launcher.targets.base import target_for

    try:
        statuses = target_for(job).statuses(job)
    except (GpujobError, OSError):
        return 0
    if statuses and cancelled_first(statuses):
        return None
    found = first_failed(statuses) if statuses else None
    return found or 0


def cancelled_first(statuses: list[NodeStatus]) -> bool:
    """A cancel asked a node to stop before any node's failure was recorded: `gpujob
    cancel` asks the nodes in turn, and the ranks of a node not yet asked fail for want of
    their peers. The follow's own stop of the others after a failure asks later."""
    asked = [s["cancel_asked_at"] for s in statuses if "cancel_asked_at" in s]
    failed = [s.get("ended_at") or inf for s in statuses if s.get("state") in NODE_FAILURES]
    return bool(asked) and min(asked) < min(failed, default=inf)
