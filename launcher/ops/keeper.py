"""The failure rule of a multi-node job, kept while nobody follows it: one node failing ends
the job on every node.

`submit` and `logs -f` keep the rule while they follow. A job submitted with `--detach`, or
whose follow was stopped (Ctrl-C, SIGTERM, a closed terminal), has a keeper instead: a
process of this machine in a session of its own (ops/detached.py) that asks each node's agent
for its state every few seconds, cancels the nodes still running once one has failed, records
the job's end and exits. Without it, node 1 of a shell `run:` or `launcher: none` job would
run on, rented, after node 0 failed. Its log: `<state>/keeper/JOB.log`.

Like the recovery controller it watches only while this machine is awake (monotonic time:
a sleep does not count towards giving up). A job with `recovery:` has its controller instead;
a SLURM job has `srun --kill-on-bad-exit`.

    python -m launcher.ops.keeper JOB   (started by submit and logs; one per job, by a lock)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from launcher.agent.states import TERMINAL
from launcher.errors import GpujobError
from launcher.ops import say
from launcher.ops.detached import spawn, try_lock
from launcher.paths import state_dir
from launcher.state.db import JobRecord, StateDB

FAILED = ("failed", "lost")
"""A node's end that fails the job (a cancel or a time limit is everyone's, not one node's)."""
POLL_S = float(os.environ.get("GPUJOB_KEEPER_POLL_S", "5"))
GIVE_UP_S = 600.0
"""Hosts that answer no status this long (awake time): the keeper can do nothing for them
and ends, saying so (`gpujob logs JOB -f` keeps the rule while it follows)."""
CANCEL_GRACE_S = 10.0


def needs_keeper(job: JobRecord) -> bool:
    return len(job.node_dirs) > 1 and job.provider != "slurm"


def others_to_stop(states: list[str | None]) -> list[int]:
    """The ranks to cancel: those not yet ended once another node has failed or been lost."""
    if not any(state in FAILED for state in states):
        return []
    return [rank for rank, state in enumerate(states) if state not in TERMINAL]


def log_path(job_id: str) -> Path:
    return state_dir() / "keeper" / f"{job_id}.log"


def lock_path(job_id: str) -> Path:
    return state_dir() / "keeper" / f"{job_id}.lock"


def hand_to_keeper(job: JobRecord | None) -> None:
    """Start the job's keeper when it needs one, and say so; a second start for the same
    job ends at once (the lock)."""
    if job is None or not needs_keeper(job):
        return
    held = try_lock(lock_path(job.id))
    if held is None:
        say(f"job {job.id}: its keeper watches it already (its log: {log_path(job.id)})")
        return
    os.close(held)
    child = spawn([sys.executable, "-m", "launcher.ops.keeper", job.id], log_path(job.id))
    say(f"keeper pid {child.pid}: if a node fails, it stops the others (its log: "
        f"{log_path(job.id)})")  # fmt: skip


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
    conns: list[Any] | None = None
    lost_since: float | None = None
    stopped = False
    try:
        while True:
            conns = conns or _connect(job)
            statuses = _statuses(job, conns)
            if statuses is None:
                _close(conns)
                conns = None
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > GIVE_UP_S:
                    note(f"job {job_id}: its hosts answered no status for {GIVE_UP_S:.0f} "
                         f"s; giving up (gpujob logs {job_id} -f keeps the rule while it "
                         "follows)")  # fmt: skip
                    return 1
                time.sleep(POLL_S)
                continue
            lost_since = None
            states = [status.get("state") for status in statuses]
            ranks = others_to_stop(states)
            if ranks and not stopped and conns is not None:
                _stop(job, conns, statuses, ranks)
                stopped = True
            if all(state in TERMINAL for state in states):
                from launcher.ops.status import record_job_state

                state, code, _ = record_job_state(db, job, statuses)
                note(f"job {job_id} {state} (exit code {code})")
                return 0
            time.sleep(POLL_S)
    finally:
        _close(conns)
        os.close(lock)


def _stop(job: JobRecord, conns: list[Any], statuses: list[dict[str, Any]],
          ranks: list[int]) -> None:  # fmt: skip
    from launcher.runtime.agent import agent_argv, python_for

    failed = next(rank for rank, s in enumerate(statuses) if s.get("state") in FAILED)
    status = statuses[failed]
    named = ", ".join(map(str, ranks))
    note(f"node {failed} {status.get('state')} (exit code {status.get('exit_code')}); "
         f"stopping node(s) {named}")  # fmt: skip
    for rank in ranks:
        argv = agent_argv(python_for(job.provider), job.node_dirs[rank], "cancel",
                          f"{CANCEL_GRACE_S:g}")  # fmt: skip
        try:
            result = conns[rank].run(argv)
        except (GpujobError, OSError) as err:
            note(f"node {rank}: cancel failed: {err}")
            continue
        if not result.ok:
            note(f"node {rank}: cancel failed: {(result.stderr or result.stdout).strip()}")


def _connect(job: JobRecord) -> list[Any] | None:
    from launcher.ops.jobs import job_connections

    try:
        return job_connections(job)
    except (GpujobError, OSError):
        return None


def _statuses(job: JobRecord, conns: list[Any] | None) -> list[dict[str, Any]] | None:
    if conns is None:
        return None
    from launcher.ops.status import node_statuses

    return node_statuses(job, conns)


def _close(conns: list[Any] | None) -> None:
    if conns:
        from launcher.ops.jobs import close_all

        close_all(conns)


def note(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", flush=True)


if __name__ == "__main__":
    sys.exit(keep(sys.argv[1]))
