"""A recorded job by the user's reference (id, id prefix, or name for the newest of that
name), and its target: how every command reaches a job's nodes."""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.state.db import JobRecord, StateDB
from launcher.targets.base import Target, target_for


def job_or_fail(db: StateDB, reference: str) -> JobRecord:
    job = db.job(reference)
    if job is None:
        raise UsageError(f"no job `{reference}`", "`gpujob status` lists the jobs")
    return job


def job_and_target(db: StateDB, reference: str) -> tuple[JobRecord, Target]:
    job = job_or_fail(db, reference)
    return job, target_for(job)
