"""What outlives `submit` for a job group: its watcher, which applies SkyPilot's end rule
(jobs/group.py: auxiliary tasks stopped once the primary ones have ended), and the group's
follow, each task's log line prefixed by its task's name (`[trainer] step 10 ...`).

The follow runs one `gpujob logs JOB -f` per task, so each task's log is followed exactly as
a one-job follow is (offsets, recovery attempts, its keeper when the follow stops); the
watcher, started only for a group with auxiliary tasks (without, each task runs to its own
end), is detached, one per group (its lock), so the rule holds with `--detach` too and after
the terminal closes.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from launcher.jobs.group import (
    GroupRecord,
    cancel_group,
    decide,
    find_group,
    groups_dir,
    member_jobs,
)
from launcher.state.db import StateDB
from launcher.supervise.detached import spawn, try_lock

POLL_S = 2.0
"""Each poll asks every task's nodes (one SSH command per remote host)."""
STOP_GRACE_S = 10.0


def log_path(group_id: str) -> Path:
    return groups_dir() / f"{group_id}.watch.log"


def start_watcher(record: GroupRecord) -> int | None:
    """The group's watcher, detached; its pid (None: one watches already)."""
    held = try_lock(groups_dir() / f"{record.id}.lock")
    if held is None:
        return None
    import os

    os.close(held)
    argv = [sys.executable, "-m", "launcher.supervise.group_watch", record.id]
    return spawn(argv, log_path(record.id)).pid


def watch(group_id: str) -> int:
    """Until the group has ended: the members asked, and the auxiliary tasks stopped when
    the rule says so (each after its delay). The group's exit code."""
    held = try_lock(groups_dir() / f"{group_id}.lock")
    if held is None:
        return 0  # another watcher holds the group
    record = find_group(group_id)
    if record is None:
        return 2
    db = StateDB()
    due: dict[str, float] = {}
    while True:
        decision = decide(record, member_jobs(db, record, refresh=True))
        if decision.ended:
            print(f"group {group_id} ended, exit code {decision.exit_code}", flush=True)
            return int(decision.exit_code or 0)
        now = time.monotonic()
        for job_id, delay in decision.stop:
            due.setdefault(job_id, now + delay)
        ripe = {job_id for job_id, at in due.items() if at <= now}
        if ripe:
            cancel_group(record, STOP_GRACE_S, only=ripe)
            for job_id in ripe:
                due[job_id] = float("inf")  # asked once
        time.sleep(POLL_S)


def follow_group(record: GroupRecord, *, follow: bool, tail: int | None = None) -> int:
    """Every task's log at once, each line prefixed by its task; with `follow`, until every
    task has ended. The group's exit code (SkyPilot's: its primary tasks')."""
    args = ["-f"] if follow else []
    if tail is not None:
        args += ["--tail", str(tail)]
    lock = threading.Lock()
    children = []
    pumps = []
    for member in record.members:
        child = subprocess.Popen(
            [sys.executable, "-m", "launcher", "logs", member.job_id, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        children.append(child)
        prefix = f"[{member.task}] ".encode()
        assert child.stdout is not None and child.stderr is not None
        for source, sink in ((child.stdout, sys.stdout.buffer), (child.stderr, sys.stderr.buffer)):
            pump = threading.Thread(target=_prefix, args=(source, sink, prefix, lock), daemon=True)
            pump.start()
            pumps.append(pump)
    try:
        for child in children:
            child.wait()
    except KeyboardInterrupt:
        for child in children:
            child.terminate()
        raise
    for pump in pumps:
        pump.join(timeout=5)
    decision = decide(record, member_jobs(StateDB(), record, refresh=True))
    return int(decision.exit_code or 0) if decision.ended else 0


def _prefix(source: BinaryIO, sink: BinaryIO, prefix: bytes, lock: threading.Lock) -> None:
    for line in iter(source.readline, b""):
        with lock:
            sink.write(prefix + line)
            sink.flush()


if __name__ == "__main__":
    sys.exit(watch(sys.argv[1]))
