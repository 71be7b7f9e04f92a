"""What the gpujob agent asks of the OS: processes (alive, their tree, their memory, a signal)
and JSON files written atomically. Standard library only; shipped beside the agent.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a reader sees the old status or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def node_lock(node_dir: Path) -> Iterator[None]:
    """The node folder's lock (flock on `.lock`): a start and a cancel of a node not yet
    started each read status.json and write it under it, so one of them comes first."""
    fd = os.open(node_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot): a pid alone may be reused after a reboot."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive; a process that ended between the two reads is not either
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True  # no /proc to read (not Linux): os.kill's word stands


class Proc(NamedTuple):
    """A process as /proc/PID/stat has it: enough to walk a job's tree and groups."""

    pid: int
    state: str
    ppid: int
    pgid: int
    start: int
    """Clock ticks since boot (start_ticks): with the pid, names the process for good."""
    uid: int = -1
    """Its owner: a cancel signals only its own user's processes."""


def processes() -> dict[int, Proc]:
    """Every process this user can see, from one walk of /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            pid, uid = int(entry.name), entry.stat().st_uid
            found[pid] = Proc(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[19]), uid)
        except (OSError, IndexError, ValueError):
            continue
    return found


def descendants(root: int, table: dict[int, Proc] | None = None) -> list[int]:
    """All processes under `root`: torchrun's workers have their own process groups."""
    children: dict[int, list[int]] = {}
    for proc in (processes() if table is None else table).values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        for child in children.get(pid, []):
            found.append(child)
            queue.append(child)
    return found


def rss_bytes(pids: list[int]) -> int:
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def marked(marker: str, since: int | None, table: dict[int, Proc]) -> list[int]:
    """This user's live processes whose environment holds `marker` (NAME=VALUE) and that
    started at `since` (clock ticks) or later: a job's processes carry the variable the
    supervisor set for its tree wherever they sit, in a session of their own, reparented to
    init once their torchrun is gone. Another user's environ is unreadable and skipped."""
    want, uid = marker.encode(), os.geteuid()
    own, pid = set(), os.getpid()  # this process and its callers: a cancel run from the job
    while pid in table and pid not in own:
        own.add(pid)
        pid = table[pid].ppid
    own.add(os.getpid())
    found = []
    for proc in table.values():
        if proc.state == "Z" or proc.pid in own or (uid and proc.uid != uid):
            continue
        if since is not None and proc.start < since:
            continue
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        except OSError:
            continue
        if want in environ.split(b"\0"):
            found.append(proc.pid)
    return found


def forward(pid: int, sig: int) -> None:
    """`sig` to `pid`; one gone, or another user's (a cancel signals only its own), is
    passed over."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_if_same(pid: int, start: int | None, sig: int) -> bool:
    """`sig` to `pid` only while it is the process that started at `start` (clock ticks):
    a pid given out again after the job's process ended is never signalled, nor is one
    whose start was not recorded. Through a pidfd where the host has one (the check and the
    signal then name the same process for certain). Whether it was sent."""
    if start is None:
        return False
    try:
        fd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except OSError:
        return False  # gone already
    try:
        if start_ticks(pid) != start:
            return False
        if fd is None:
            forward(pid, sig)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(fd, sig)
        return True
    finally:
        if fd is not None:
            os.close(fd)
