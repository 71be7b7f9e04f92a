"""Stream a job's logs by byte offset until every node has ended and its log is drained.

The agent on each host owns the log file; the client only ever asks for bytes from an offset,
so a dropped connection or a restarted client loses nothing and repeats nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from launcher.remote.base import Connection

TERMINAL = ("succeeded", "failed", "cancelled", "lost")
POLL_MIN_S = 0.05
POLL_MAX_S = 0.5


@dataclass
class NodeStream:
    rank: int
    node_dir: str
    connection: Connection
    offset: int = 0
    status: dict[str, Any] = field(default_factory=dict)
    partial: bytes = b""
    done: bool = False


def follow_logs(
    streams: list[NodeStream],
    out: BinaryIO,
    *,
    follow: bool,
    prefix: bool,
    on_progress: Callable[[NodeStream], None] | None = None,
) -> list[NodeStream]:
    """Copy log bytes to `out`; with `prefix`, lines are marked with their node rank."""
    delay = POLL_MIN_S
    while True:
        moved = False
        for stream in streams:
            if stream.done:
                continue
            data, status = stream.connection.read_log(stream.node_dir, stream.offset)
            stream.status = status
            if data:
                moved = True
                stream.offset += len(data)
                _write(out, stream, data, prefix)
                if on_progress:
                    on_progress(stream)
            elif status.get("state") in TERMINAL or not follow:
                stream.done = True
                if stream.partial:
                    out.write(_prefixed(stream.rank, stream.partial + b"\n"))
                    stream.partial = b""
        out.flush()
        if all(stream.done for stream in streams):
            return streams
        if moved:
            delay = POLL_MIN_S
            continue
        time.sleep(delay)
        delay = min(delay * 2, POLL_MAX_S)


def _write(out: BinaryIO, stream: NodeStream, data: bytes, prefix: bool) -> None:
    if not prefix:
        out.write(data)
        return
    data = stream.partial + data
    whole, _, stream.partial = data.rpartition(b"\n")
    if whole or data.endswith(b"\n"):
        out.write(_prefixed(stream.rank, whole + b"\n"))


def _prefixed(rank: int, data: bytes) -> bytes:
    tag = f"[node {rank}] ".encode()
    return b"".join(tag + line for line in data.splitlines(keepends=True))


def job_exit_code(streams: list[NodeStream]) -> int:
    """The job's exit code: the first failing node's, else 0."""
    for stream in streams:
        state = stream.status.get("state")
        if state == "lost":
            return 1
        code = stream.status.get("exit_code")
        if state in TERMINAL and code:
            return int(code)
    return 0


def last_line(data: bytes) -> str | None:
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][-200:] if lines else None
