"""`gpujob logs JOB [-f]`: the job's log by byte offset from its nodes, through each attempt
of its recovery, and the job's exit code once it ends. A job group's id or name: every task's
log, each line prefixed by its task (supervise/group_watch.py)."""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.jobs.records import job_or_fail
from launcher.state.db import StateDB
from launcher.supervise.watch import follow_job


def logs(reference: str, *, follow: bool, node: int | None = None, tail: int | None = None) -> int:
    try:
        job = job_or_fail(StateDB(), reference)
    except UsageError:
        from launcher.jobs.group import find_group

        group = find_group(reference)
        if group is None:
            raise
        if node is not None:
            raise UsageError("--node is for one job; give a task's job id "
                             "(`gpujob status` shows them)") from None  # fmt: skip
        from launcher.supervise.group_watch import follow_group

        return follow_group(group, follow=follow, tail=tail)
    return follow_job(job, follow=follow, node=node, tail=tail)
