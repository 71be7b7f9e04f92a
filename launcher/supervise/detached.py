"""Processes of this machine that outlive the command that starts them (the recovery
controller, the failure-rule keeper): a session of their own, stdin closed, output appended
to a 0600 log; one per job by a lock file held while they live (freed by the kernel however
they die)."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in a session of its own (`setsid`): closing the terminal does not end it.
    It inherits this environment (cloud and remote keys, GPUJOB_*)."""
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                start_new_session=True, close_fds=True, env=env)  # fmt: skip
    finally:
        os.close(fd)


def try_lock(path: Path) -> int | None:
    """An exclusive lock on `path`, held until the fd is closed or the process ends, or None
    when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
