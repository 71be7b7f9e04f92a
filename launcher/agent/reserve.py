"""Room kept on a node's disk for its end, so a job that fills the disk still ends recorded.

Standard library only; shipped beside the agent, which imports it as a sibling module.

Seen: a job filled the state disk, the agent's next write of status.json failed with
ENOSPC, the supervisor died of it and the node read `running` for ever. So the supervisor
writes RESERVE_BYTES of real bytes (spaces: JSON may end in blanks) beside status.json as
its start (`make_reserve`). A status write that meets a full disk is then settled by what
it records (`write_status`): progress (the memory peak, a checkpoint's sync) is skipped and
the last status stands; an end is written in place over the reserve's own bytes, which
needs no new block, cut to its length and renamed over status.json, the one atomic step a
full disk still allows. With no reserve left, the end is written over status.json itself
(not atomic, but recorded). An end on a full disk names it in its reason.

A copy-on-write filesystem (btrfs, ZFS) allocates even to overwrite, so there the reserve
helps only in that freeing it (the rename drops status.json's old blocks) makes room.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agent_os import write_json
from states import TERMINAL

STATUS = "status.json"
RESERVE = ".status.json.reserve"
RESERVE_BYTES = 64 * 1024
"""Some 40 times a node's status; one tmpfs page or ext4 block more would do for most."""
FULL = (errno.ENOSPC, errno.EDQUOT)
FULL_BELOW = 1 << 20
"""Free bytes under which an end counts the disk as full (the job's writes fail there)."""


def make_reserve(node_dir: Path) -> bool:
    """Keep RESERVE_BYTES of the node's disk. False where even that is not free: the job
    runs anyway, and its end is then written over status.json itself."""
    path = node_dir / RESERVE
    try:
        with open(path, "wb") as reserve:
            reserve.write(b" " * RESERVE_BYTES)
            reserve.flush()
            os.fsync(reserve.fileno())  # allocated now, not at a delayed write-back
    except OSError as err:
        if err.errno not in FULL:
            raise
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    return True


def write_status(node_dir: Path, status: dict[str, Any]) -> bool:
    """status.json, atomically. On a full disk: an end through the reserve (and named in
    its reason), progress skipped. True when this status is what the file now holds."""
    ending = status.get("state") in TERMINAL
    if ending:
        _name_a_full_disk(node_dir, status)
    path = node_dir / STATUS
    try:
        write_json(path, status)
        if ending:  # nothing is written after the end: the room goes back to the disk
            (node_dir / RESERVE).unlink(missing_ok=True)
        return True
    except OSError as err:
        if err.errno not in FULL:
            raise
        with contextlib.suppress(OSError):  # write_json's half-written copy takes room
            path.with_name(f".{path.name}.{os.getpid()}.tmp").unlink()
    if not ending:
        return False
    _name_a_full_disk(node_dir, status, met=True)
    data = (json.dumps(status, indent=2, sort_keys=True) + "\n").encode()
    reserve = node_dir / RESERVE
    if reserve.exists() and _overwrite(reserve, data):
        os.replace(reserve, path)
        return True
    return _overwrite(path, data)


def _overwrite(path: Path, data: bytes) -> bool:
    """`data` over the file's own bytes, then cut to its length: no block is allocated
    while `data` is no longer than the file (or the last block it ends in)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
        return True
    except OSError as err:
        if err.errno not in FULL:
            raise
        return False
    finally:
        os.close(fd)


def _name_a_full_disk(node_dir: Path, status: dict[str, Any], met: bool = False) -> None:
    """A failed (or stopped) end on a full disk says so, in its reason and as its disk
    warning (`gpujob status` shows it): most likely why the job failed, and nothing else on
    the host would tell."""
    disk = dict(status.get("disk") or {})
    if status.get("state") == "succeeded" or disk.get("full"):
        return
    try:
        found = os.statvfs(node_dir)
    except OSError:
        return
    free, size = found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize
    if not met and free >= FULL_BELOW:
        return
    said = (
        f"the disk of {node_dir} is full ({free // 1024} KiB free of {size // (1 << 20)} MiB): "
        "free space there, or give the job a bigger disk"
    )
    status["disk"] = {**disk, "full": True, "warning": said}
    status["reason"] = f"{status['reason']}; {said}" if status.get("reason") else said


@contextlib.contextmanager
def skipped_if_full() -> Iterator[None]:
    """A write that may be lost on a full disk (a line of the agent's in the job log):
    skipped there, so that the agent goes on to record the end."""
    try:
        yield
    except OSError as err:
        if err.errno not in FULL:
            raise


LOG_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND
"""How the agent opens a job log for its own lines (say_in_log): read too, for its last byte."""


def say_in_log(log_fd: int, lines: Iterable[str], prefix: str = "[gpujob-agent]") -> None:
    """The agent's own lines in the job log (`log_fd` opened with LOG_FLAGS), skipped on a
    full disk. Each starts a line: after output of the job's that ends without a newline (a
    progress bar's carriage return, a `print(end="")`) a newline comes first, so no line of
    the agent's is glued to the job's and read as its."""
    with skipped_if_full():
        size = os.fstat(log_fd).st_size
        lead = b"\n" if size and os.pread(log_fd, 1, size - 1) != b"\n" else b""
        os.write(log_fd, lead + "".join(f"{prefix} {line}\n" for line in lines).encode())


def say_in_log_file(path: Path, lines: Iterable[str]) -> None:
    """say_in_log for a writer that holds no open log: opened for these lines only (the open
    is skipped on a full disk too, which may not take a new log)."""
    with skipped_if_full():
        log_fd = os.open(path, LOG_FLAGS, 0o644)
        try:
            say_in_log(log_fd, lines)
        finally:
            os.close(log_fd)
