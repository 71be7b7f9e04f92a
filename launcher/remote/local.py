"""The Connection to this machine: the local provider's only host."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from launcher.agent import agent
from launcher.remote.base import Result, Sink
from launcher.remote.batch import Op, Outcome, run_local

READ_CHUNK = 4 << 20


class LocalConnection:
    host = "local"

    def run(
        self, argv: tuple[str, ...] | list[str], *, stream: bool = False, input: bytes | None = None
    ) -> Result:
        proc = subprocess.run(
            list(argv),
            input=input or b"",
            stdout=subprocess.PIPE,
            stderr=None if stream else subprocess.PIPE,
            check=False,
        )
        err = proc.stderr.decode(errors="replace") if proc.stderr else ""
        return Result(proc.returncode, proc.stdout.decode(errors="replace"), err)

    def put(self, path: str, content: bytes, mode: int) -> None:
        atomic_write(Path(path), content, mode)

    def put_file(self, source: str, path: str, mode: int) -> None:
        atomic_write(Path(path), Path(source).read_bytes(), mode)

    def batch(self, ops: list[Op]) -> Outcome:
        return run_local(ops)

    def read_log(
        self, node_dir: str, offset: int, wait_s: float = 0.0, sink: Sink | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        log, deadline = Path(node_dir) / "job.log", time.monotonic() + wait_s
        while time.monotonic() < deadline and agent.log_size(log) <= offset:
            if agent.status_of(Path(node_dir)).get("state") in agent.TERMINAL:
                break
            time.sleep(0.02)
        status = agent.status_of(Path(node_dir))
        try:
            with open(log, "rb") as handle:
                handle.seek(offset)
                if sink is None:
                    return handle.read(READ_CHUNK), status
                while chunk := handle.read(READ_CHUNK):
                    sink(chunk)
        except FileNotFoundError:
            pass
        return b"", status

    def close(self) -> None:
        return None


def atomic_write(path: Path, content: bytes, mode: int) -> None:
    """Write to a temp file of the final mode in the same folder, then rename over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
