"""One Connection interface for every host: run, put, sync, read a log. Nobody else runs
`ssh` or touches subprocess for host work (fabric's `Connection` shape)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from launcher.remote.batch import Op, Outcome

Sink = Callable[[bytes], None]


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Connection(Protocol):
    host: str

    def run(
        self, argv: tuple[str, ...] | list[str], *, stream: bool = False, input: bytes | None = None
    ) -> Result:
        """Run a literal argv; with `stream`, show its stderr as it comes (long steps). `input`
        goes to its standard input (secrets: never a file or a command line on the host);
        without it, the command reads an empty input."""
        ...

    def put(self, path: str, content: bytes, mode: int) -> None:
        """Write a file atomically with `mode` from the first byte (secrets are never 0644)."""
        ...

    def put_file(self, source: str, path: str, mode: int) -> None: ...

    def batch(self, ops: list[Op]) -> Outcome:
        """Sync folders, write files and run commands in order, in one round trip to a host;
        the commands stop at the first that fails (batch.py)."""
        ...

    def read_log(
        self, node_dir: str, offset: int, wait_s: float = 0.0, sink: Sink | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        """Log bytes from `offset` and the node's agent status, taken before the bytes were
        read (so a finished node's read holds the rest of its log); with `wait_s`, a read
        that finds nothing new waits that long for more on the host (a long poll). With
        `sink`, the bytes to the end of the log go to it as they arrive and none are
        returned: a big log is shown as it comes, never held whole."""
        ...

    def close(self) -> None: ...
