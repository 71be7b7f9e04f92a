"""`gpujob recover JOB`: the job's recovery controller, started unless one runs (after a
reboot, or a kill); `--foreground` is the controller itself (how the detached start runs it)."""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.jobs.records import job_or_fail
from launcher.say import say
from launcher.state.db import StateDB
from launcher.state.recovery import RecoveryDB
from launcher.supervise.recover import controller_pid, log_path, start_controller


def recover(reference: str, foreground: bool = False) -> int:
    """It adopts the job as it finds it (a running job goes on running)."""
    job = job_or_fail(StateDB(), reference)
    record = RecoveryDB().get(job.id)
    if record is None:
        raise UsageError(f"job {job.id} has no recovery",
                         "submit it with --up and --recover, or a `recovery:` block")  # fmt: skip
    if foreground:
        from launcher.supervise.recover_loop import run_controller

        return run_controller(job.id)
    if record.over:
        say(f"job {job.id}: recovery is over ({record.phase}): {record.line or ''}".rstrip(": "))
        return 0
    pid = controller_pid(job.id)
    if pid is not None:
        say(f"job {job.id}: controller pid {pid} follows it already; its log: {log_path(job.id)}")
        return 0
    pid = start_controller(job.id)
    say(f"job {job.id}: controller pid {pid} started; it adopts the job where it is; "
        f"its log: {log_path(job.id)}")  # fmt: skip
    return 0
