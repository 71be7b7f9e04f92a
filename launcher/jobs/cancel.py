"""Stopping a job on any target: `cancel`, and `down`'s first step (the jobs still running on
the hosts it takes, cancelled so their agents ship the last checkpoints and log first).

The lifecycle rules of a cancel (a job that had already ended, a job whose agent is gone, a
job recorded but never started) belong in `cancel_job`: every way a job is cancelled goes
through it.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import GpujobError
from launcher.jobs.down_hooks import run_down_hooks
from launcher.jobs.lifecycle import failed_to_start, never_started, settle, settle_unstarted
from launcher.jobs.state import JobState, is_terminal, record_job_state
from launcher.say import say
from launcher.state.db import JobRecord, StateDB
from launcher.state.readonly import JobsView
from launcher.targets.base import target_for

START_WAIT_S = 60.0
"""How long a cancel waits for a live submit to finish starting the job it cancels."""


def cancel_job(job: JobRecord, grace_s: float) -> None:
    """Stop every node of the job (its target records how it ended) and say so."""
    if cancel_recovering(job.id):  # its hosts are being replaced: none to ask
        return
    job = settle(StateDB(), job, START_WAIT_S)  # a start in progress or interrupted, resolved
    if failed_to_start(job) and _never_started_on_nodes(job):
        say(f"job {job.id} never started ({job.last_line}); nothing to cancel")
        return
    cancelled = target_for(job).cancel(job, grace_s)
    if _under_recovery(job):  # the user's word: no restart, whatever the agents answered
        StateDB().update_job(job.id, JobState.CANCELLED)
        say(f"{cancelled.line}; its recovery controller makes no restart and ends its hosts")
        return
    answers = cancelled.answers
    if answers and all(a.get("state") for a in answers):  # each agent's end, as it recorded it
        state = record_job_state(StateDB(), job, answers)[0]
        if all(a.get("had_ended") for a in answers):
            say(f"job {job.id} had already ended ({state}); nothing to cancel")
            return
    elif answers:  # an agent that printed no status
        StateDB().update_job(job.id, JobState.CANCELLED)
    say(cancelled.line)


def _never_started_on_nodes(job: JobRecord) -> bool:
    """The agents' own word, asked whatever the record says: every node never started (a
    node with no status yet is cancelled first, so a start that comes later refuses)."""
    statuses = target_for(job).statuses(job)
    if statuses is None:  # a host did not answer: the target's cancel says so
        return False
    return all(never_started(s) for s in settle_unstarted(job, statuses))


def _under_recovery(job: JobRecord) -> bool:
    """A job whose recovery controller has not finished: its cancel is recorded `cancelled`
    whatever the agents answered (a node reading `lost` or `failed` would otherwise be
    rented again and restarted after the user cancelled it); the controller sees that
    word, lets the agents ship what is left and terminates the job's hosts."""
    from launcher.state.recovery import RecoveryDB

    record = RecoveryDB().get(job.id)
    return record is not None and not record.over


def cancel_recovering(job_id: str) -> bool:
    """`gpujob cancel` of a job whose hosts are being replaced: there is no agent to ask, so
    the cancel is recorded, and the controller makes no restart (what it has rented for one
    is terminated). False when the job is not being recovered (the agents are asked)."""
    from launcher.state.recovery import RECOVERING, STOPPED, RecoveryDB

    rdb = RecoveryDB()
    record = rdb.get(job_id)
    if record is None or record.phase != RECOVERING:
        return False
    rdb.update(job_id, phase=STOPPED)
    rdb.say(job_id, record.restarts, f"job {job_id} cancelled while it was recovered; no restart")
    StateDB().update_job(job_id, JobState.CANCELLED)
    say(f"job {job_id} cancelled: it was being recovered; its controller makes no restart")
    return True


@dataclass(frozen=True)
class CancelFirst:
    """`down`'s first step: the jobs the db says still run on the hosts it takes. Each is
    cancelled if its agents say it still runs, so they end it cleanly and ship its last
    checkpoints and its log to S3 before the host goes."""

    jobs: list[tuple[JobRecord, list[str]]]
    grace_s: float = 30.0

    def lines(self) -> list[str]:
        """The dry run's account: which jobs, and the literal commands."""
        out = []
        for job, on in self.jobs:
            out.append(f"would ask job {job.id}'s agents (on {', '.join(on)}) for its state "
                       "and, if it still runs, cancel it first:")  # fmt: skip
            out.append("  its down hooks, if any, on node 0 first (jobs/down_hooks.py)")
            out += [f"  {line}" for line in target_for(job).cancel_lines(job, self.grace_s)]
        return out

    def run(self) -> None:
        db = StateDB()
        for job, on in self.jobs:
            statuses = target_for(job).statuses(job)
            if statuses is None or all(is_terminal(s.get("state")) for s in statuses):
                if statuses is not None:
                    record_job_state(db, job, statuses)
                continue
            say(f"job {job.id} still runs on {', '.join(on)}: cancelling it first"
                + (" (its log and last checkpoints go to S3)" if job.logs_to else ""))  # fmt: skip
            run_down_hooks(job)
            try:
                cancel_job(job, self.grace_s)
            except GpujobError as err:
                say(f"could not cancel job {job.id}: {err.one_line()}; the host goes anyway")


def cancel_first(hosts: set[str], dry_run: bool, grace_s: float = 30.0) -> CancelFirst:
    """The jobs not ended per the db (a dry run's db is read-only) on any of `hosts`."""
    db = JobsView() if dry_run else StateDB()
    found = []
    for job in db.jobs(limit=200):
        target = target_for(job)
        if job.terminal or target.traits.on_this_machine:
            continue
        on = sorted(set(target.host_names(job)) & hosts)
        if on:
            found.append((job, on))
    return CancelFirst(found, grace_s)


def stop_jobs_on(hosts: set[str], grace_s: float = 30.0) -> None:
    """Before `down` takes hosts away: each job still running on one of them is cancelled."""
    cancel_first(hosts, dry_run=False, grace_s=grace_s).run()
