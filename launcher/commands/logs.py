"""`gpujob logs JOB [-f]`: the job's log by byte offset from its nodes, through each attempt
of its recovery, and the job's exit code once it ends."""

from __future__ import annotations

from launcher.jobs.records import job_or_fail
from launcher.state.db import StateDB
from launcher.supervise.watch import follow_job


def logs(reference: str, *, follow: bool, node: int | None = None, tail: int | None = None) -> int:
    job = job_or_fail(StateDB(), reference)
    return follow_job(job, follow=follow, node=node, tail=tail)
