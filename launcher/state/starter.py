"""Who is starting a job: the submit (or recovery controller) that wrote its record, as this
machine's host name, its pid, the pid's start ticks and a time. A job's record says
`starting` from the moment it is written until its nodes run; a command that finds it so can
tell a submit still working on it from one that died (Ctrl-C, `kill -9`, a closed laptop)
and resolve the job instead of waiting for ever. The start ticks tell a reused pid apart.
Standard library only: `status` reads it.
"""

from __future__ import annotations

import json
import os
import socket
import time

ORPHAN_AFTER_S = 600.0
"""A `starting` record with no starter (written by an older gpujob) or a starter on another
machine is taken as abandoned after this long: no start takes ten minutes."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22 of proc(5); fields[0] is field 3
    except (OSError, IndexError, ValueError):
        return None


def this_starter() -> str:
    """This process as a job's starter, for the job's record."""
    pid = os.getpid()
    return json.dumps({"host": socket.gethostname(), "pid": pid, "ticks": _start_ticks(pid),
                       "at": time.time()})  # fmt: skip


def starter_alive(starter: str | None, created_at: float) -> bool:
    """True while the process that wrote the record may still be starting the job."""
    try:
        who = json.loads(starter) if starter else None
    except ValueError:
        who = None
    if not isinstance(who, dict) or who.get("host") != socket.gethostname():
        return time.time() - created_at < ORPHAN_AFTER_S
    pid = int(who.get("pid") or 0)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    ticks = _start_ticks(pid)
    return ticks is None or who.get("ticks") in (None, ticks)


def starter_pid(starter: str | None) -> int | None:
    try:
        who = json.loads(starter) if starter else None
    except ValueError:
        return None
    return int(who["pid"]) if isinstance(who, dict) and who.get("pid") else None
