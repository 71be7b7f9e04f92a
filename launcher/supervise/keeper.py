"""The failure rule of a multi-node job, kept while nobody follows it: one node failing ends
the job on every node.

`submit` and `logs -f` keep the rule while they follow. A job submitted with `--detach`, or
whose follow was stopped (Ctrl-C, SIGTERM, a closed terminal), has a keeper instead: a
process of this machine in a session of its own (supervise/detached.py) that asks each node's agent
for its state every few seconds, cancels the nodes still running once one has failed (asking
again while they run on), records the job's end with the cause's exit code, and exits.
Without it, node 1 of a shell `run:` or `launcher: none` job would run on, rented, after node
0 failed. Its log: `<state>/keeper/JOB.log`. A user's cancel wins: once the job is recorded
cancelled the keeper leaves it.

Each node is read on its own: a node whose host has answered nothing for GIVE_UP_S counts as
lost (the others are stopped); when every host is silent that long the keeper gives up. Like
the recovery controller it watches only while this machine is awake (monotonic time: a sleep
does not count). A job with `recovery:` has its controller instead; a SLURM job has `srun
--kill-on-bad-exit`.

    python -m launcher.supervise.keeper JOB   (started by submit and logs; one per job, by a lock)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from launcher.errors import GpujobError
from launcher.jobs.state import (
    NODE_FAILURES,
    JobState,
    exit_code_of,
    first_failed,
    is_terminal,
    record_job_state,
)
from launcher.paths import state_dir
from launcher.runtime.agent import NodeStatus
from launcher.say import say
from launcher.state.db import JobRecord, StateDB
from launcher.supervise.detached import spawn, try_lock
from launcher.targets.base import Node, close_all, target_for

ENDED_WELL = (JobState.CANCELLED, JobState.SUCCEEDED, JobState.TIMED_OUT)
"""A job recorded so has nothing left to keep."""
POLL_S = float(os.environ.get("GPUJOB_KEEPER_POLL_S", "5"))
GIVE_UP_S = 600.0
"""A host silent this long (awake time): its nodes count as lost; every host so, the keeper
ends, saying so (`gpujob logs JOB -f` keeps the rule while it follows)."""
CANCEL_GRACE_S = 10.0
ASK_AGAIN_S = CANCEL_GRACE_S + 20.0
"""A node asked to cancel and still running this long after is asked again."""
MAX_BAD_POLLS = 20
"""Polls that raised something unforeseen, in a row, before the keeper ends."""


def needs_keeper(job: JobRecord) -> bool:
    from launcher.targets.base import target_for

    return (len(job.node_dirs) > 1 and target_for(job).traits.stops_others_on_failure
            and job.state not in ENDED_WELL)  # fmt: skip


def others_to_stop(states: list[str | None]) -> list[int]:
    """The ranks to cancel once a node has failed or been lost: those not yet ended, and the
    lost ones (a node whose supervisor died may keep its processes; the agent's cancel
    stops them, and does nothing on a node truly ended)."""
    if not any(state in NODE_FAILURES for state in states):
        return []
    return [rank for rank, state in enumerate(states)
            if not is_terminal(state) or state == JobState.LOST]  # fmt: skip


def log_path(job_id: str) -> Path:
    return state_dir() / "keeper" / f"{job_id}.log"


def lock_path(job_id: str) -> Path:
    return state_dir() / "keeper" / f"{job_id}.lock"


def hand_to_keeper(job: JobRecord | None) -> None:
    """Start the job's keeper when it needs one, and say so; a second start for the same
    job ends at once (the lock). Never raises: it runs on the way out of a follow."""
    if job is None or not needs_keeper(job):
        return
    try:
        held = try_lock(lock_path(job.id))
        if held is None:
            _say(f"job {job.id}: its keeper watches it already (its log: {log_path(job.id)})")
            return
        os.close(held)
        child = spawn([sys.executable, "-m", "launcher.supervise.keeper", job.id], log_path(job.id))
    except OSError as err:
        _say(f"warning: no keeper for job {job.id} ({err}): if a node fails, stop the others "
             f"with `gpujob cancel {job.id}`")  # fmt: skip
        return
    _say(f"keeper pid {child.pid}: if a node fails, it stops the others (its log: "
         f"{log_path(job.id)})")  # fmt: skip


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # a terminal hung up: the keeper starts all the same
        say(line)


class Nodes:
    """Each node's agent read on its own, and how long each has been silent."""

    def __init__(self, job: JobRecord) -> None:
        self.job = job
        self.nodes: list[Node] | None = None
        self.silent_since: list[float | None] = [None] * len(job.node_dirs)

    def read(self) -> list[NodeStatus | None]:
        if self.nodes is None:
            self.nodes = target_for(self.job).nodes(self.job)
        now = time.monotonic()
        statuses = [node.status() for node in self.nodes]
        for rank, status in enumerate(statuses):
            self.silent_since[rank] = None if status is not None else (
                self.silent_since[rank] or now)  # fmt: skip
        return statuses

    def gone(self, rank: int) -> bool:
        since = self.silent_since[rank]
        return since is not None and time.monotonic() - since > GIVE_UP_S

    def cancel(self, rank: int) -> None:
        assert self.nodes is not None
        try:
            result = self.nodes[rank].cancel(CANCEL_GRACE_S)
        except (GpujobError, OSError) as err:
            note(f"node {rank}: cancel failed ({err}); asking again later")
            return
        if not result.ok:
            said = (result.stderr or result.stdout).strip()[-300:]
            note(f"node {rank}: cancel failed ({said}); asking again later")

    def close(self) -> None:
        if self.nodes:
            close_all([node.connection for node in self.nodes])


def keep(job_id: str) -> int:
    lock = try_lock(lock_path(job_id))
    if lock is None:
        return 0  # another keeper watches this job
    db = StateDB()
    job = db.job(job_id)
    if job is None:
        note(f"job {job_id}: not in {state_dir()}")
        return 1
    note(f"job {job_id}: keeping the failure rule on its {len(job.node_dirs)} nodes")
    nodes, asked, bad = Nodes(job), dict[int, float](), 0
    try:
        while True:
            try:
                ended = _poll(db, job, nodes, asked)
                bad = 0
            except Exception as err:  # one bad poll must not end the keeping
                bad += 1
                note(f"a poll failed ({type(err).__name__}: {err}); trying again")
                ended = 1 if bad >= MAX_BAD_POLLS else None
            if ended is not None:
                return ended
            time.sleep(POLL_S)
    finally:
        nodes.close()
        os.close(lock)


def _poll(db: StateDB, job: JobRecord, nodes: Nodes, asked: dict[int, float]) -> int | None:
    """One look at every node, and what follows from it: None to look again, else the
    keeper's exit code."""
    recorded = db.job(job.id)
    if recorded is not None and recorded.state == JobState.CANCELLED:
        note(f"job {job.id} was cancelled; nothing left to keep")
        return 0
    read = nodes.read()
    if all(nodes.gone(rank) for rank in range(len(read))):
        note(f"job {job.id}: its hosts answered no status for {GIVE_UP_S:.0f} s; giving up "
             f"(gpujob logs {job.id} -f keeps the rule while it follows)")  # fmt: skip
        return 1
    statuses = [status if status is not None else _silent(nodes.gone(rank))
                for rank, status in enumerate(read)]  # fmt: skip
    states = [status.get("state") for status in statuses]
    now = time.monotonic()
    due = [r for r in others_to_stop(states) if now - asked.get(r, -ASK_AGAIN_S) >= ASK_AGAIN_S]
    if due:
        cause = first_failed(statuses)
        assert cause is not None
        again = " again" if any(r in asked for r in due) else ""
        note(f"node {cause} {states[cause]} (exit code {statuses[cause].get('exit_code')}); "
             f"stopping node(s) {', '.join(map(str, due))}{again}")  # fmt: skip
        for rank in due:
            nodes.cancel(rank)
            asked[rank] = now
    if not all(is_terminal(state) for state in states):
        return None
    _record_end(db, job, statuses)
    return 0


def _silent(gone: bool) -> NodeStatus:
    if gone:
        return {"state": JobState.LOST, "exit_code": None,
                "last_line": f"its host answered no status for {GIVE_UP_S:.0f} s"}  # fmt: skip
    return {"state": None}


def _record_end(db: StateDB, job: JobRecord, statuses: list[NodeStatus]) -> None:
    """The job's end: the first failed node's state, exit code and last line, as a follower
    records it; with no failure, the nodes' worst (jobs/state.py)."""
    cause = first_failed(statuses)
    if cause is None:
        state, code, _ = record_job_state(db, job, statuses)
    else:
        status = statuses[cause]
        state, code = str(status.get("state")), exit_code_of(status)
        db.update_job(job.id, state, exit_code=code, last_line=status.get("last_line"))
    note(f"job {job.id} {state} (exit code {code})")


def note(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", flush=True)


if __name__ == "__main__":
    sys.exit(keep(sys.argv[1]))
