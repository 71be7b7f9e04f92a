"""`gpujob cancel JOB`: every node of the job stopped, through its target (the agents' cancel;
SLURM's scancel); `--dry-run` prints the literal commands and changes nothing."""

from __future__ import annotations

from launcher.jobs.cancel import cancel_job
from launcher.jobs.records import job_and_target
from launcher.say import say
from launcher.state.db import StateDB
from launcher.state.readonly import JobsView


def cancel(reference: str, grace_s: float, dry_run: bool) -> int:
    """A dry run reads the db without creating or changing it and prints the commands."""
    job, target = job_and_target(JobsView() if dry_run else StateDB(), reference)
    if dry_run:
        for line in target.cancel_lines(job, grace_s):
            print(line)
        say(f"dry run: job {job.id} would then be recorded as cancelled; nothing was run")
        return 0
    cancel_job(job, grace_s)
    return 0
