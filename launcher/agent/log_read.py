"""Reading a node's log for a client: its last line (`status`) and its bytes from an offset
(`read`, a long poll). Standard library only; shipped beside the agent."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

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


def read(node_dir: Path, offset: int, wait_s: float = 0.0, stream: bool = True) -> int:
    """Log bytes from `offset` to stdout, then the status (with the new offset) on stderr.
    With `wait_s`, the read stays for up to that long and streams each new byte as the job
    writes it (`tail -f` for a window), ending early when the node ends: one process on the
    host serves a follow for seconds, where a read per new line started one per line (each
    ~0.1 s of the host's CPU). `stream=False`: it ends at the first bytes instead (a
    start's first read). The status is taken before the last read to the log's end, so an
    ended node's read holds all of its log."""
    config = read_json(node_dir / "job.json")
    path = node_dir / config.get("log", "job.log")
    deadline = time.monotonic() + wait_s
    out = sys.stdout.buffer
    end, looked = offset, 0.0
    with _Log(path, offset) as log:
        while True:
            end += log.copy_to(out)
            now = time.monotonic()
            if now >= deadline or (end > offset and not stream):
                break
            if now - looked >= STATUS_EVERY_S:
                if status_of(node_dir).get("state") in TERMINAL:
                    break
                looked = now
            time.sleep(0.02)
        status = status_of(node_dir)
        end += log.copy_to(out)
    status["offset"] = end
    sys.stderr.write(json.dumps(status) + "\n")
    return 0


STATUS_EVERY_S = 0.1
"""How often a waiting read asks whether the node has ended (the log's size: every 20 ms)."""


class _Log:
    """The node's log, opened once it exists, read on from where the last copy stopped."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset, self.handle = path, offset, None

    def __enter__(self) -> _Log:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.close()

    def copy_to(self, out: Any) -> int:
        """What the log has past the last copy, to `out` (flushed): how many bytes."""
        if self.handle is None:
            try:
                self.handle = open(self.path, "rb")  # noqa: SIM115 (held across copies)
            except FileNotFoundError:
                return 0
            self.handle.seek(self.offset)
        copied = 0
        while chunk := self.handle.read(1 << 20):
            out.write(chunk)
            copied += len(chunk)
        if copied:
            out.flush()
        return copied


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
