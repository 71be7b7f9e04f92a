#!/usr/bin/env python3
"""gpujob agent: supervises one node of a job on its host. Standard library only.

Copied to every host as `gpujob-agent.py`, so it must run on whatever Python the host has.
The job never depends on the client: `start` forks a supervisor into its own session
(supervisor.py), which runs `run.sh` in a new process group with its output going straight
to `job.log` (a file descriptor, not a pipe through this process), records the exit code,
and samples the job's peak memory. Clients read `status.json` and stream `job.log` by byte
offset; their `status` and `read` load only what those need (a follow asks every 2 s).

    gpujob-agent.py start NODE_DIR        start detached, print the status
    gpujob-agent.py status NODE_DIR       print the status (state `lost` if the host forgot it)
    gpujob-agent.py cancel NODE_DIR [S] [--agent-gone]  SIGTERM the job, SIGKILL what is
                                          left after S seconds, whatever its supervisor's
                                          state (stopping.py)
    gpujob-agent.py hooks NODE_DIR EVENT  the job's lifecycle hooks of EVENT (lifecycle_hooks.py)
    gpujob-agent.py read NODE_DIR OFFSET [WAIT]  the log from OFFSET to stdout, then for up
                                          to WAIT s as it grows; status to stderr
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.dont_write_bytecode = True  # no __pycache__ among the files shipped to the host
sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from agent_os import alive, node_lock, read_json, write_json
from hung import cancel_args
from log_read import last_line, log_size, read
from states import TERMINAL
from stopping import (
    STATUS,
    cancel,
    log_line,
    record_cancelled_unstarted,
    record_never_started,
    start_missed,
    status_of,
)

__all__ = ["STATUS", "TERMINAL", "cancel", "last_line", "log_line", "log_size", "main", "status_of"]


def start(node_dir: Path, read_wait_s: float | None = None) -> int:
    """Fork the supervisor and say how the start went (a JSON line on stdout). With
    `read_wait_s`, then `read` the log from byte 0 (its bytes on stdout; the start's line
    goes to stderr, before read's): one Python start fewer for a client about to follow."""
    say = sys.stdout if read_wait_s is None else sys.stderr

    def started(status: dict[str, Any], code: int) -> int:
        say.write(json.dumps(status) + "\n")
        say.flush()
        if code == 0 and read_wait_s is not None:
            return read(node_dir, 0, read_wait_s, stream=False)
        return code

    given = _given(node_dir)  # read first: the client's write never waits on us
    with node_lock(node_dir):  # a cancel of a node not yet started decides under it too
        status = read_json(node_dir / STATUS)
        if not status and start_missed(node_dir, read_json(node_dir / "job.json")):
            status = record_never_started(node_dir)  # status said so already, or may have
        if not status and (node_dir / "cancel-requested").exists():  # a client gave it up
            status = record_cancelled_unstarted(node_dir)
        answer = _no_start(status, given)
        if answer is None:
            write_json(node_dir / STATUS, {"state": "starting", "requested_at": time.time()})
    if answer is not None:
        return started(*answer)
    if os.fork() == 0:  # the supervisor: this interpreter, forked (no second Python start)
        code = 1
        try:
            os.setsid()
            os.chdir(node_dir)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # the caller's pipes: its exec must end when `start` does
                os.dup2(null, fd)
            os.closerange(3, 256)
            from supervisor import supervise  # the supervisor's modules: loaded here only

            code = supervise(node_dir, given)
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = read_json(node_dir / STATUS)
        if status.get("state") != "starting":
            return started(status, 0 if status.get("state") in ("running", "succeeded") else 1)
        if status.get("fetching") and alive(status.get("supervisor_pid")):
            deadline = time.monotonic() + 30  # bucket file_mounts, as long as they take
        time.sleep(0.005)
    return started({"state": "failed", "reason": "the supervisor did not start in 30 s"}, 1)


def _no_start(
    status: dict[str, Any], given: dict[str, dict[str, str]] | None
) -> tuple[dict[str, Any], int] | None:
    """What a start answers without starting (its status and code), None when it starts."""
    if status.get("state") in ("starting", "running") and alive(status.get("supervisor_pid")):
        return status, 0
    if status.get("never_started"):  # a cancel came first, or its window passed: it stands
        return status, 1
    if given is None:
        return {"state": "failed", "reason": "the job's secrets were to come on the start's "
                "stdin and did not: start it with gpujob"}, 1  # fmt: skip
    return None


def _given(node_dir: Path) -> dict[str, dict[str, str]] | None:
    """The secrets and the S3 remote's keys the start brings on its stdin (job.json's
    `secrets_on_stdin`): kept in memory, where the forked supervisor has them too, so none
    is in a file on the host. {} when none are to come; None when they did not come whole."""
    if not read_json(node_dir / "job.json").get("secrets_on_stdin"):
        return {}
    try:
        given = json.loads(sys.stdin.buffer.read() or b"null")
    except ValueError:
        return None
    return given if isinstance(given, dict) else None


def _hooks(node_dir: Path, event: str) -> int:
    """The job's lifecycle hooks of `event`; how many failed. Their module is shipped only
    with a job that has some (lifecycle_hooks.py)."""
    if not read_json(node_dir / "job.json").get("lifecycle_hooks"):
        return 0
    from lifecycle_hooks import run_hooks

    return run_hooks(node_dir, event)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("start", "status", "cancel", "read", "hooks"):
        sys.stderr.write(__doc__ or "")
        return 2
    node_dir = Path(argv[1]).resolve()
    if argv[0] == "start":
        return start(node_dir, float(argv[2]) if len(argv) > 2 else None)
    if argv[0] == "status":
        print(json.dumps(dict(status_of(node_dir), last_line=last_line(node_dir))))
        return 0
    if argv[0] == "cancel":  # [GRACE] [--agent-gone] [--dump-first]
        grace_s, gone = cancel_args(node_dir, argv[2:])
        _hooks(node_dir, "stop")  # before the SIGTERM, while the job's files are there
        return cancel(node_dir, grace_s, agent_gone=gone)
    if argv[0] == "hooks":  # EVENT: `preemption` or `down` (lifecycle_hooks.py)
        return min(_hooks(node_dir, argv[2]), 1) if argv[2:] else 2
    wait_s = float(argv[3]) if len(argv) > 3 else 0.0
    return read(node_dir, int(argv[2]) if len(argv) > 2 else 0, wait_s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
