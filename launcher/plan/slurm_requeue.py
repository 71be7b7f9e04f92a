"""A SLURM job's `recovery:`, planned: SLURM requeues the job itself (`--requeue`) and the
batch script starts again from the top, so recovery there is a section of the script and a
module beside the agent (agent/requeue.py), not a controller on this machine. No I/O.

What the cloud recovery decides (supervise/, plan/recovery.py) holds here too: restarts
counted against `max_restarts` (SLURM_RESTART_COUNT), the restart from the newest complete
checkpoint of this job's own checkpoint folder (GPUJOB_RESUME_FROM). Nothing is rented and
nothing pulled: the checkpoints are on the cluster's shared filesystem already.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.agent import REQUEUE_SOURCE
from launcher.plan.model import CopyFile, Step
from launcher.plan.recovery import Policy

REQUEUE_FILE = "requeue.py"


@dataclass(frozen=True)
class Requeue:
    """What the script's requeue section needs: the bound and where the checkpoints are."""

    max_restarts: int
    checkpoint_dir: str
    on_failure: bool = False
    """`node_failure` listed: a nonzero exit of the job's own is requeued too, by the script
    (`scontrol requeue`, as TorchX's script does), while restarts are left."""


def requeue_of(policy: Policy | None, checkpoint_dir: str) -> Requeue | None:
    if policy is None:
        return None
    return Requeue(policy.max_restarts, checkpoint_dir, "node_failure" in policy.on)


def requeue_option(requeue: Requeue | None) -> str:
    """sbatch's word: a job without `recovery:` is never run twice by SLURM behind gpujob."""
    return "--requeue" if requeue is not None else "--no-requeue"


def requeue_steps(requeue: Requeue | None, job_dir: str) -> list[Step]:
    """Node 0's extra file: the module the script runs at each attempt's start and end."""
    if requeue is None:
        return []
    return [CopyFile(source=str(REQUEUE_SOURCE), path=f"{job_dir}/{REQUEUE_FILE}")]
