"""A ladder rung with no `--ladder-steps` ends at its first complete checkpoint.

Whether a save is complete is the agent's word (agent/ckpt_store.py: the `.gpujob-complete`
marker, `trainer_state.json`, a DCP `.metadata`, verl's tracker or `checkpoints.complete_when`),
published in each node's status as `checkpoints.complete`. The ladder reads those statuses
while it follows the rung and cancels the rung there, counted as a pass: it works for any job
that saves checkpoints gpujob recognises, with nothing for the job to honour (a step bound,
GPUJOB_MAX_STEPS, needs the job's own code).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from launcher.errors import GpujobError
from launcher.jobs.state import NODE_FAILURES, is_terminal
from launcher.say import say

POLL_S = 1.0
"""How often the rung's node statuses are read (the agent's own look is every second): a
job that saves every few milliseconds is stopped a checkpoint or two later than its first."""


def first_checkpoint(statuses: Sequence[Mapping[str, Any] | None]) -> tuple[int, str] | None:
    """(node rank, name) of the first complete checkpoint a node reports while the rung still
    runs; None while there is none, or once a node failed or every node ended: a failing rung
    is left to fail (its cause is its row's), and an ended one has nothing to stop."""
    known = [status or {} for status in statuses]
    if any(status.get("state") in NODE_FAILURES for status in known):
        return None
    if known and all(is_terminal(status.get("state")) for status in known):
        return None
    for rank, status in enumerate(known):
        checkpoints = status.get("checkpoints") or {}
        first = (checkpoints.get("complete") or [checkpoints.get("latest")])[0]
        if first:
            return rank, str(first)
    return None


class CheckpointStop:
    """Watches a running rung's nodes in a thread; at the first complete checkpoint it says so,
    cancels the rung (its follow then ends) and keeps what it found in `reached`."""

    def __init__(self, job_id: str, grace_s: float) -> None:
        self.job_id, self.grace_s = job_id, grace_s
        self.reached: tuple[int, str] | None = None
        self._done = threading.Event()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        thread = threading.Thread(target=self._watch, name="gpujob-ladder-ckpt", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._done.set()
            thread.join(timeout=self.grace_s + 30)

    def _watch(self) -> None:
        from launcher.jobs.cancel import cancel_job
        from launcher.state.db import StateDB
        from launcher.targets.base import close_all, target_for

        job = StateDB().job(self.job_id)
        if job is None:
            return
        nodes = []
        try:
            nodes = target_for(job).nodes(job)  # its own connections: the follow keeps its own
            while not self._done.wait(POLL_S):
                found = first_checkpoint([node.status() for node in nodes])
                if found is not None:
                    self.reached = found
                    say(f"rung {self.job_id}: complete checkpoint {found[1]} on node "
                        f"{found[0]}: the rung passed; stopping it")  # fmt: skip
                    cancel_job(job, self.grace_s)
                    return
        except (GpujobError, OSError) as err:  # the rung runs on to its own end
            say(f"rung {self.job_id}: its checkpoints cannot be watched ({err}); it runs on")
        finally:
            close_all([node.connection for node in nodes])
