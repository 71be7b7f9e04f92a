"""Recovery's entry points: the controller started detached once the job runs, started
again when it is not running (`gpujob recover JOB`, `logs -f`: after a reboot, or a kill)
to adopt the job where it is, and `status`'s view of it. The refusals at submit are
`jobs.launch.policy_for`; a cancel while recovering is `jobs.cancel.cancel_recovering`.

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
from typing import TYPE_CHECKING, TypedDict

from launcher.paths import state_dir
from launcher.say import say
from launcher.state.recovery import RecoveryDB

if TYPE_CHECKING:
    from launcher.plan.recovery import Policy
    from launcher.targets.base import LaunchRequest

REQUEST_FIELDS = ("sets", "up", "provider", "runtime", "allow_cpu", "disk", "max_price",
                  "max_cost", "autostop_key_on_host", "envs", "secrets",
                  "keep_on_failure")  # fmt: skip
"""What `submit --up` was asked that renting again asks once more (with the spec's path)."""
START_WAIT_S = 20.0
"""How long a start waits for the new controller to hold its lock (Python and imports)."""


def watch_over(job_id: str, launched: LaunchRequest, policy: Policy) -> None:
    """The job has started: record what to rent again and start its controller."""
    request = {name: getattr(launched, name) for name in REQUEST_FIELDS}
    request.update(spec_path=str(Path(launched.spec_path).resolve()), sets=list(launched.sets),
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
    from launcher.supervise.detached import try_lock  # `status` imports this module for its notes

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
    from launcher.spec.env_flags import child_environ
    from launcher.supervise.detached import spawn

    child = spawn([sys.executable, "-m", "launcher", "recover", job_id, "--foreground"],
                  log_path(job_id), child_environ())  # fmt: skip
    deadline = time.monotonic() + START_WAIT_S
    while child.poll() is None and time.monotonic() < deadline:
        if controller_pid(job_id) is not None:  # it holds the lock: it follows the job
            break
        time.sleep(0.05)
    return child.pid


def ensure_controller(job_id: str) -> None:
    """`logs -f` of a job with recovery: its controller runs (started again after a reboot)."""
    record = RecoveryDB().get(job_id)
    if record is not None and not record.over and controller_pid(job_id) is None:
        pid = start_controller(job_id)
        say(f"job {job_id}: its recovery controller was not running; started it (pid {pid})")


class RecoveryNote(TypedDict):
    phase: str
    restarts: int
    max_restarts: int
    controller_pid: int | None
    line: str


def status_note(job_id: str) -> RecoveryNote | None:
    """`status`'s view of a job's recovery: phase, restarts, the controller's pid (None
    when no controller runs), the last line."""
    record = RecoveryDB().get(job_id)
    if record is None:
        return None
    pid = None if record.over else controller_pid(job_id)
    return {"phase": record.phase, "restarts": record.restarts,
            "max_restarts": record.max_restarts, "controller_pid": pid,
            "line": record.line or ""}  # fmt: skip
