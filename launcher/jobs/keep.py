"""Whether a job's end keeps its rented hosts up for a look (`--keep-on-failure`), written
once: the follow of `submit --up` and the recovery controller both ask here.

Only a failure keeps: a job that failed (a nonzero exit) or lost a node leaves something to
look at. A cancel is the user's own word that the job is done with, a success has nothing
to debug, and a time limit (`max_duration`) is a budget reached, not a fault: each of them
ends as it would without the flag.
"""

from __future__ import annotations

from launcher.errors import GpujobError
from launcher.state.db import JobRecord
from launcher.state.job_states import NODE_FAILURES

KEPT_FOLDER = "kept"
"""In each node's folder on its host: what the keep found there (README, py-spy dumps)."""


def keeps_hosts(state: str | None, window_s: float | None) -> bool:
    """True when a job that ended in `state` keeps its hosts for `window_s` seconds."""
    return bool(window_s) and state in NODE_FAILURES


def failed_node(job: JobRecord) -> int:
    """The node that failed first, as its agents recorded it (the one to look at first);
    node 0 when none answers."""
    if len(job.node_dirs) < 2:
        return 0
    from launcher.jobs.state import first_failed
    from launcher.targets.base import target_for

    try:
        statuses = target_for(job).statuses(job)
    except (GpujobError, OSError):
        return 0
    found = first_failed(statuses) if statuses else None
    return found or 0
