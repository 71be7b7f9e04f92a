"""Recovery's entry points: the refusals at submit, the controller started detached, and
`gpujob recover JOB`, which starts it again when it is not running (after a reboot, or a
kill) and lets it adopt the job where it is.

The controller is a process of this machine in a session of its own (`setsid`), its output
in `<state>/recovery/JOB.log`: closing the terminal does not end it. One controller per job
at a time, by a lock file it holds while it lives (freed by the kernel however it dies), so
a second start only says which pid follows the job. While this machine sleeps nothing
polls: nothing is lost, the recovery waits until it wakes (or `gpujob recover JOB`).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.paths import state_dir
from launcher.plan.recovery import Policy
from launcher.say import say
from launcher.state.recovery import RECOVERING, STOPPED, RecoveryDB
from launcher.supervise.detached import spawn, try_lock

REQUEST_FIELDS = ("sets", "up", "provider", "runtime", "allow_cpu", "disk", "max_price",
                  "max_cost", "autostop_key_on_host")  # fmt: skip
"""What `submit --up` was asked that renting again asks once more (with the spec's path)."""
START_WAIT_S = 20.0
"""How long a start waits for the new controller to hold its lock (Python and imports)."""


def policy_for(options: Any, loaded: Any) -> Policy | None:
    """The job's recovery (`recovery:`, or `--recover` with its defaults), refused before
    anything is rented where it cannot work; None without recovery."""
    from launcher.spec.recovery import RecoverySpec

    spec = loaded.spec
    recovery = spec.recovery or (RecoverySpec() if options.recover else None)
    if recovery is None:
        return None
    where = loaded.where("recovery") if spec.recovery else "--recover"
    if not spec.checkpoints.sync_to:
        raise UsageError(f"{where}: recovery needs checkpoints.sync_to: a job restarted on a "
                         "fresh host resumes from the checkpoints in S3",
                         "add checkpoints: {sync_to: REMOTE:prefix}")  # fmt: skip
    if not options.up:
        raise UsageError(f"{where}: recovery restarts the job on hosts gpujob rents, and "
                         "these are not rented",
                         "submit it with --up GPU, or leave recovery out")  # fmt: skip
    unreachable = os.environ.get("GPUJOB_RECOVER_UNREACHABLE_S")
    return Policy(
        max_restarts=recovery.max_restarts, on=tuple(recovery.on_events),
        unreachable_after_s=float(unreachable) if unreachable else recovery.unreachable_after,
        rent_tries=int(os.environ.get("GPUJOB_RECOVER_RENT_TRIES", "3")),
    )  # fmt: skip


def watch_over(job_id: str, options: Any, policy: Policy) -> None:
    """The job has started: record what to rent again and start its controller."""
    request = {name: getattr(options, name) for name in REQUEST_FIELDS}
    request.update(spec_path=str(Path(options.spec_path).resolve()), sets=list(options.sets),
                   policy=asdict(policy))  # fmt: skip
    RecoveryDB().add(job_id, request, policy.max_restarts)
    pid = start_controller(job_id)
    say(f"recovery: controller pid {pid} follows job {job_id} (up to {policy.max_restarts} "
        f"restart(s) on {', '.join(policy.on)}); its log: {log_path(job_id)}")  # fmt: skip


def log_path(job_id: str) -> Path:
    return state_dir() / "recovery" / f"{job_id}.log"


def lock_path(job_id: str) -> Path:
    return state_dir() / "recovery" / f"{job_id}.lock"


def hold_lock(job_id: str) -> int | None:
    """The controller's lock, held until the process ends (the fd stays open), or None
    when another controller holds it."""
    return try_lock(lock_path(job_id))


def controller_pid(job_id: str) -> int | None:
    """The pid of the controller following the job now, or None when none does."""
    fd = hold_lock(job_id)
    if fd is not None:
        os.close(fd)
        return None
    record = RecoveryDB().get(job_id)
    return record.pid if record is not None else None


def start_controller(job_id: str) -> int:
    """`gpujob recover JOB --foreground`, detached: a session of its own, stdin closed, its
    output appended to its log (0600). It inherits this environment (the cloud keys, the
    remotes' keys, GPUJOB_*): renting again needs them."""
    child = spawn([sys.executable, "-m", "launcher", "recover", job_id, "--foreground"],
                  log_path(job_id))  # fmt: skip
    deadline = time.monotonic() + START_WAIT_S
    while child.poll() is None and time.monotonic() < deadline:
        if controller_pid(job_id) is not None:  # it holds the lock: it follows the job
            break
        time.sleep(0.05)
    return child.pid


def recover(reference: str, foreground: bool = False) -> int:
    """`gpujob recover JOB`: its controller, started unless one runs; it adopts the job as
    it finds it (a running job goes on running)."""
    from launcher.jobs.records import job_or_fail
    from launcher.state.db import StateDB

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


def ensure_controller(job_id: str) -> None:
    """`logs -f` of a job with recovery: its controller runs (started again after a reboot)."""
    record = RecoveryDB().get(job_id)
    if record is not None and not record.over and controller_pid(job_id) is None:
        pid = start_controller(job_id)
        say(f"job {job_id}: its recovery controller was not running; started it (pid {pid})")


def status_note(job_id: str) -> dict[str, Any] | None:
    """`status`'s view of a job's recovery: phase, restarts, the controller's pid (None
    when no controller runs), the last line."""
    record = RecoveryDB().get(job_id)
    if record is None:
        return None
    pid = None if record.over else controller_pid(job_id)
    return {"phase": record.phase, "restarts": record.restarts,
            "max_restarts": record.max_restarts, "controller_pid": pid,
            "line": record.line or ""}  # fmt: skip


def cancel_recovering(job_id: str) -> bool:
    """`gpujob cancel` of a job whose hosts are being replaced: there is no agent to ask, so
    the cancel is recorded, and the controller makes no restart (what it has rented for one
    is terminated). False when the job is not being recovered (the agents are asked)."""
    from launcher.state.db import StateDB

    rdb = RecoveryDB()
    record = rdb.get(job_id)
    if record is None or record.phase != RECOVERING:
        return False
    rdb.update(job_id, phase=STOPPED)
    rdb.say(job_id, record.restarts, f"job {job_id} cancelled while it was recovered; no restart")
    StateDB().update_job(job_id, "cancelled")
    say(f"job {job_id} cancelled: it was being recovered; its controller makes no restart")
    return True
