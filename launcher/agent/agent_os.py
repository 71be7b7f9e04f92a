"""What the gpujob agent asks of the OS: processes (alive, their tree, their memory, a signal)
and JSON files written atomically. Standard library only; shipped beside the agent.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a reader sees the old status or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


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
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    return True


class Proc(NamedTuple):
    """A process as /proc/PID/stat has it: enough to walk a job's tree and groups."""

    pid: int
    state: str
    ppid: int
    pgid: int
    start: int
    """Clock ticks since boot (start_ticks): with the pid, names the process for good."""


def processes() -> dict[int, Proc]:
    """Every process this user can see, from one walk of /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            pid = int(entry.name)
            found[pid] = Proc(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[19]))
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


def forward(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
