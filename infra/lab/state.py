"""Where the lab keeps what it started: one JSON file of records under a file lock.

Everything the lab tears down it finds here, by recorded pid (with the process start time,
so a recycled pid is never killed) or by recorded name; nothing is found by pattern. The
lock matters because provider fakes create and destroy hosts from their own processes while
a test or the CLI may be doing the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infra.lab.naming import lab_dir
from launcher.errors import GpujobError

_children: dict[int, subprocess.Popen] = {}


class LabError(GpujobError):
    """The lab could not do something; the message carries the command's or daemon's words."""


@contextlib.contextmanager
def locked_state() -> Iterator[dict[str, Any]]:
    """Read, let the caller change, and write back the state, holding the lab's lock."""
    root = lab_dir()
    with open(root / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state()
        try:
            yield state
        finally:  # a failed step still leaves the records of what it did start
            tmp = root / "state.json.tmp"
            tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
            tmp.replace(root / "state.json")


def read_state() -> dict[str, Any]:
    path = lab_dir() / "state.json"
    state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    state.setdefault("hosts", {})
    state.setdefault("daemons", {})
    return state


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None if it is gone.

    A zombie counts as gone: the lab's daemons are often children of the process that
    stops them, and a dead child that was not reaped yet still has a /proc entry.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def record(pid: int, argv: list[str], log: Path) -> dict[str, Any]:
    return {"pid": pid, "start": start_time(pid), "argv": argv, "log": str(log)}


def alive(rec: dict[str, Any] | None) -> bool:
    return bool(rec) and start_time(rec["pid"]) == rec["start"] is not None


def spawn(argv: list[str], log: Path) -> dict[str, Any]:
    """Start a daemon in its own session, detached from our terminal, its output in `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _children[proc.pid] = proc  # kept so that stop() can reap it and Popen does not warn
    return record(proc.pid, argv, log)


def stop(rec: dict[str, Any] | None, *, timeout: float = 10.0) -> None:
    """Stop a recorded daemon: SIGTERM, then SIGKILL after `timeout`. Gone already is fine."""
    if not alive(rec):
        reap(rec["pid"] if rec else None)
        return
    assert rec is not None
    pid = rec["pid"]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if start_time(pid) != rec["start"]:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while start_time(pid) == rec["start"]:
        reap(pid)
        time.sleep(0.05)


def reap(pid: int | None) -> None:
    if pid is None:
        return
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def wait_until(
    check: Any,
    what: str,
    *,
    timeout: float,
    log: Path | None = None,
    daemon: dict[str, Any] | None = None,
) -> None:
    """Poll `check()` until true; give up early if `daemon` died, and quote its log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if daemon is not None and not alive(daemon):
            reap(daemon["pid"])
            timeout = 0
            break
        time.sleep(0.1)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    why = "exited" if timeout == 0 else f"not ready after {timeout:.0f} s"
    raise LabError(f"lab: {what} {why}{tail}")


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """Run a short command; its stderr goes into the exception so failures explain themselves."""
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise LabError(f"lab: {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done
