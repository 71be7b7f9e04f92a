"""`gpujob cancel JOB`: every node of the job stopped, through its target (the agents' cancel;
SLURM's scancel); `--dry-run` prints the literal commands and changes nothing. A job group's
id or name (jobs/group.py) stops every task of the group."""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.jobs.cancel import cancel_job
from launcher.jobs.records import job_and_target
from launcher.say import say
from launcher.state.db import StateDB
from launcher.state.readonly import JobsView


def cancel(reference: str, grace_s: float, dry_run: bool) -> int:
    """A dry run reads the db without creating or changing it and prints the commands."""
    try:
        job, target = job_and_target(JobsView() if dry_run else StateDB(), reference)
    except UsageError:
        from launcher.jobs.group import find_group

        group = find_group(reference)
        if group is None:
            raise
        return _cancel_group(group.id, grace_s, dry_run)
    if dry_run:
        for line in target.cancel_lines(job, grace_s):
            print(line)
        say(f"dry run: job {job.id} would then be recorded as cancelled; nothing was run")
        return 0
    cancel_job(job, grace_s)
    return 0


def _cancel_group(group_id: str, grace_s: float, dry_run: bool) -> int:
    from launcher.jobs.group import cancel_group, find_group

    group = find_group(group_id)
    assert group is not None
    if not dry_run:
        cancel_group(group, grace_s)
        return 0
    for member in group.members:
        job, target = job_and_target(JobsView(), member.job_id)
        if not job.terminal:
            for line in target.cancel_lines(job, grace_s):
                print(line)
    say(f"dry run: the tasks of group {group.id} still running would be stopped; nothing was run")
    return 0
