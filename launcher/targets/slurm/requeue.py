"""A requeued SLURM job as gpujob reads it (`recovery:`; the script's side is
agent/requeue.py, the plan's plan/slurm_requeue.py).

When SLURM requeues a job (a node failure, a preemption, `scontrol requeue`) each node's
agent is stopped by SIGTERM like a cancel and records `cancelled`; the next attempt sets that
record aside once it starts. Until then the record is the last attempt's, not the job's end:
`status` and `logs` read SLURM's word instead (pending, then starting), and an agent's end
counts once SLURM says the job ended.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from launcher.plan.slurm import STATE_WORDS

if TYPE_CHECKING:
    from launcher.targets.slurm.cluster import SlurmJobView


def parse_requeue(text: str) -> tuple[int, bool]:
    """(restarts so far, whether the job may be requeued) from `scontrol -o show job`;
    (0, False) from sacct's rows (a job SLURM has forgotten is not requeued any more)."""
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobState" in fields:
            restarts = fields.get("Restarts", "0")
            return (int(restarts) if restarts.isdigit() else 0), fields.get("Requeue") == "1"
    return 0, False


def superseded(agent: dict[str, Any], view: SlurmJobView) -> bool:
    """The agent's recorded end is not (yet) the job's: an older attempt's (its
    `slurm_restart` below SLURM's count), or any end while SLURM has not ended the job (the
    TERM of a requeue reads as a cancel; a failure may be requeued by the script). SLURM's
    end decides; a job SLURM has forgotten (no state) is the agent's word."""
    if not view.requeue:
        return False
    if int(agent.get("slurm_restart") or 0) < view.restarts:
        return True
    return view.state not in ("", *STATE_WORDS)


def attempt_note(view: SlurmJobView) -> str:
    """`status`'s words for a job SLURM has requeued: which attempt runs now."""
    if not view.restarts:
        return ""
    return f", requeued {view.restarts} time(s): attempt {view.restarts + 1}"
