"""Starting and stopping the fakes as daemons, by recorded pid and start time (a recycled
pid is never signalled); nothing is found by name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid`, or None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(info: dict[str, Any] | None) -> bool:
    return bool(info) and start_time(info["pid"]) == info.get("start") is not None


def read_info(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def spawn(api: str, info: Path, lab_dir: Path, timeout: float = 30) -> dict[str, Any]:
    """Start `python -m infra.fakes serve API` detached; return its info once it serves."""
    info.unlink(missing_ok=True)
    log = info.with_suffix(".log")
    env = {
        **os.environ,
        "GPUJOB_LAB_DIR": str(lab_dir),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "infra.fakes", "serve", api, "--info", str(info)],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = read_info(info)
        if found and found["pid"] == proc.pid:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise RuntimeError(f"the {api} fake did not start (log {log}):\n{tail}")


def stop(info: dict[str, Any] | None, timeout: float = 180) -> None:
    """SIGTERM (the fake then terminates its instances), SIGKILL after `timeout`."""
    if not alive(info):
        _reap(info)
        return
    assert info is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(info) and time.monotonic() < deadline:
        _reap(info)
        time.sleep(0.1)
    if alive(info):
        with contextlib.suppress(ProcessLookupError):
            os.kill(info["pid"], signal.SIGKILL)
    _reap(info)


def _reap(info: dict[str, Any] | None) -> None:
    """A fake started by this very process is its child: collect it once it exited."""
    if info:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(info["pid"], os.WNOHANG)
