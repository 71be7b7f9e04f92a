"""The Connection to this machine: the local provider's only host."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from launcher.agent import agent
from launcher.remote.base import Result, Sink
from launcher.remote.ignore import shipped_files

READ_CHUNK = 4 << 20


class LocalConnection:
    host = "local"

    def run(self, argv: tuple[str, ...] | list[str], *, stream: bool = False) -> Result:
        proc = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None if stream else subprocess.PIPE,
            text=True,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr or "")

    def put(self, path: str, content: bytes, mode: int) -> None:
        atomic_write(Path(path), content, mode)

    def put_file(self, source: str, path: str, mode: int) -> None:
        atomic_write(Path(path), Path(source).read_bytes(), mode)

    def put_files(self, files: list[tuple[str, bytes, int]]) -> None:
        for path, content, mode in files:
            atomic_write(Path(path), content, mode)

    def sync_dir(
        self, source: str, path: str, excludes: tuple[str, ...], mirror: bool = False
    ) -> int:
        src, dest = Path(source), Path(path)
        sent, wanted = 0, set()
        for rel in shipped_files(src, excludes):
            wanted.add(rel)
            origin, target = src / rel, dest / rel
            stat = origin.stat()
            try:
                have = target.stat()
                if have.st_size == stat.st_size and int(have.st_mtime) == int(stat.st_mtime):
                    continue
            except FileNotFoundError:
                pass
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
            sent += 1
        if mirror and dest.is_dir():
            for extra in [p for p in dest.rglob("*") if p.is_file()]:
                if extra.relative_to(dest).as_posix() not in wanted:
                    extra.unlink()
        return sent

    def read_log(
        self, node_dir: str, offset: int, wait_s: float = 0.0, sink: Sink | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        log, deadline = Path(node_dir) / "job.log", time.monotonic() + wait_s
        while time.monotonic() < deadline and agent._size(log) <= offset:
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
