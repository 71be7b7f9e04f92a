"""Reading a node's log for a client: its last line (`status`) and its bytes from an offset
(`read`, a long poll). Standard library only; shipped beside the agent."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from agent_os import read_json
from states import TERMINAL
from stopping import status_of


def last_line(node_dir: Path) -> str | None:
    """The log's last non-blank line (from its last 4 KiB), as a terminal shows it."""
    path = node_dir / read_json(node_dir / "job.json").get("log", "job.log")
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
            tail = log.read().decode(errors="replace")
    except FileNotFoundError:
        return None
    lines = [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in tail.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    return lines[-1][-200:] if lines else None


def read(node_dir: Path, offset: int, wait_s: float = 0.0) -> int:
    """Log bytes from `offset` to stdout, then the status (with the new offset) on stderr.
    With `wait_s`, a read that finds nothing new waits up to that long for the log to grow
    (a long poll: the client sees a new line within ~20 ms, without asking 20 times)."""
    config = read_json(node_dir / "job.json")
    path = node_dir / config.get("log", "job.log")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and log_size(path) <= offset:
        if status_of(node_dir).get("state") in TERMINAL:
            break
        time.sleep(0.02)
    status = status_of(node_dir)
    out = sys.stdout.buffer
    end = offset
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            while chunk := log.read(1 << 20):
                out.write(chunk)
                end += len(chunk)
    except FileNotFoundError:
        pass
    out.flush()
    status["offset"] = end
    sys.stderr.write(json.dumps(status) + "\n")
    return 0


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
