"""`gpujob cancel` of a SLURM job: `scancel` through the login host, the agents' grace
inside SLURM's KillWait, and what no agent deleted (secrets of nodes that never started, a
requeued job's kept copies) removed once SLURM says the job ended.
"""

from __future__ import annotations

import shlex
import time

from launcher.errors import GpujobError
from launcher.remote.base import Connection
from launcher.state.db import JobRecord, StateDB
from launcher.state.job_states import JobState
from launcher.targets.slurm.submit import last_said, slurm_view


def cancel_line(job: JobRecord, grace_s: float) -> str:
    """What `cancel` runs on the login host, as its dry run prints it."""
    from launcher.targets.slurm.cluster import scancel_argv

    job_dir = job.node_dirs[0].rsplit("/", 1)[0]
    return (f"on the login host: echo {max(0, int(grace_s))} > {shlex.quote(job_dir)}/"
            f"cancel-grace; {shlex.join(scancel_argv(job.scheduler_job or ''))}")  # fmt: skip


def slurm_cancel(job: JobRecord, grace_s: float, login: Connection) -> str:
    """`scancel`: SLURM sends every node's step SIGTERM, which the node step passes to its
    agent with the grace asked for (`cancel-grace` in the job folder), at most SLURM's
    KillWait less 2 s (SIGKILL follows it); waits, bounded, for the job to leave the queue
    and records how it really ended (it may have completed meanwhile). Secrets of nodes
    that never started are removed. Returns the line that says how it ended."""
    from launcher.targets.slurm.cluster import STATE_WORDS, scancel_argv

    argv = scancel_argv(job.scheduler_job or "")
    job_dir = job.node_dirs[0].rsplit("/", 1)[0]
    grace = f"{max(0, int(grace_s))}"
    login.run(["sh", "-c", 'echo "$2" > "$1/cancel-grace"', "sh", job_dir, grace])
    result = login.run(argv)
    view = slurm_view(job, login)
    deadline = time.monotonic() + 120
    while True:
        view.asked_at = -1e9
        view.refresh()
        if view.state not in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING", "SUSPENDED"):
            break
        if time.monotonic() > deadline:
            raise GpujobError(
                f"job {job.id}: SLURM job {job.scheduler_job} is still {view.state} 120 s "
                "after scancel",
                f"look at it with: gpujob status {job.id}; cancel again",
            )
        time.sleep(0.5)
    login.run(["sh", "-c", SECRETS_RM, "sh", job_dir])
    ended = STATE_WORDS.get(view.state, "cancelled" if not view.state else "")
    if not result.ok and not ended:
        raise GpujobError(f"scancel {job.scheduler_job} failed: {last_said(result)}")
    if ended and ended != "cancelled":  # it ended on its own before scancel reached it
        code = view.code if view.code is not None else (0 if ended == "succeeded" else 1)
        StateDB().update_job(job.id, ended, exit_code=code)
        return (f"job {job.id} had already ended: SLURM job {job.scheduler_job} {view.state} "
                f"(exit code {code}); nothing to cancel")  # fmt: skip
    StateDB().update_job(job.id, JobState.CANCELLED, exit_code=143)
    return (f"job {job.id} cancelled (SLURM job {job.scheduler_job}: {view.state or 'gone'}; "
            f"grace {grace} s, at most SLURM's KillWait)")  # fmt: skip


SECRETS_RM = (
    'rm -f -- "$1"/node-*/secrets.json "$1"/node-*/secrets.env '
    '"$1"/node-*/storage.json "$1"/node-*/notify.json; rm -rf -- "$1"/requeue'
)
"""What a node's agent deletes once its job started: left only by nodes that never did
(notify.json: the webhooks' URLs, node 0's), and a requeued job's copies of them
(agent/requeue.py)."""
