"""What keeps a host busy, for the autostop watcher (autostop.py, shipped beside it): the
hold of the command that rented it, a gpujob job, a command or login in an SSH session.
Standard library only; each check reads this host's files and /proc, nothing else.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from agent_os import alive, read_json, start_ticks

HOLD = "hold"
START_GRACE_S = 30.0  # a node asked to start this recently is busy before its supervisor runs
SESSION = re.compile(r"^sshd(?:-session)?: \S+@(?:notty|pts/\d+)")


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it: what the session check needs."""

    pid: int
    ppid: int
    comm: str
    cmdline: str
    net: str | None  # its network namespace; None when it cannot be read


def hold_busy(folder: Path, now: float | None = None) -> str | None:
    """The hold of the command that rented the host, while it lasts. Its expiry is the
    file's mtime (this host's clock, as the watcher's) plus its seconds, so a skewed clock
    on the user's machine cannot shorten or stretch it. An unreadable hold is no hold: the
    window runs, which never leaves a host without an end."""
    path = folder / HOLD
    try:
        hold = json.loads(path.read_text())
        until = path.stat().st_mtime + float(hold["seconds"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    now = time.time() if now is None else now
    if now >= until:
        return None
    by = hold.get("by") or "gpujob"
    return f"held by {by} until {time.strftime('%H:%M:%S', time.localtime(until))}"


def _supervised(status: dict[str, Any]) -> bool:
    pid = status.get("supervisor_pid")
    return bool(pid and alive(pid) and status.get("supervisor_start") in (None, start_ticks(pid)))


def job_busy(jobs_root: Path, now: float | None = None) -> str | None:
    """The first job node that keeps the host busy, in words, or None."""
    now = time.time() if now is None else now
    for status_path in sorted(jobs_root.glob("*/node-*/status.json")):
        status = read_json(status_path)
        node = f"job {status_path.parent.parent.name} {status_path.parent.name}"
        if _supervised(status):
            return f"{node} {status.get('state', 'running')}"
        asked = status.get("requested_at") or 0
        if status.get("state") == "starting" and now - asked < START_GRACE_S:
            return f"{node} starting"
    return None


def job_since(jobs_root: Path, since: float) -> bool:
    """A job node started at or after `since` still runs: a kept host reused for a new job
    (agent/keep.py), which the failed job's hard end does not end."""
    for status_path in jobs_root.glob("*/node-*/status.json"):
        status = read_json(status_path)
        if (status.get("started_at") or 0) >= since and _supervised(status):
            return True
    return False


def session_busy(procs: list[Proc], own_net: str | None, ignore: str) -> str | None:
    """The first command or login running in an SSH session of this host, or None.
    `ignore`: commands naming it are not activity (reads of this folder)."""
    sessions = {p.pid: p for p in procs if p.comm.startswith("sshd") and SESSION.match(p.cmdline)}
    for p in procs:
        parent = sessions.get(p.ppid)
        if parent is None or p.comm.startswith("sshd") or ignore in p.cmdline:
            continue
        if own_net is not None and p.net is not None and p.net != own_net:
            continue  # another host's session (lab hosts share one PID namespace)
        return f"SSH session {parent.cmdline.split(':', 1)[1].strip()}: {p.cmdline[:60]}"
    return None


def snapshot() -> list[Proc]:
    """Every process this host's /proc shows. Only sessions' children need their namespace
    read, so that is read for those alone."""
    table: list[tuple[int, int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        head, _, rest = stat.rpartition(")")
        fields = rest.split()
        if len(fields) < 2:
            continue
        table.append((int(entry), int(fields[1]), head.partition("(")[2]))
    sshd = {pid for pid, _, comm in table if comm.startswith("sshd")}
    procs = []
    for pid, ppid, comm in table:
        if pid not in sshd and ppid not in sshd:
            continue
        procs.append(Proc(pid, ppid, comm, _cmdline(pid), None if pid in sshd else _net(pid)))
    return procs


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _net(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def busy(folder: Path) -> str | None:
    """Why the host is busy now, or None when it is idle."""
    ours = f"{folder.parent.name}/{folder.name}/"  # `.gpujob/autostop/`, however it is named
    return (hold_busy(folder) or job_busy(folder.parent / "jobs")
            or session_busy(snapshot(), _net("self"), ours))  # fmt: skip
