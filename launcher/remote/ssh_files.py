"""Files to a host over SSH, all through one exec of the batch program (`batch.py`): single
files, a node's files and commands, the workdir mirrored by size and mtime. A mixin of
SSHConnection, which owns the transport. No SFTP: its session and its five round trips a
file cost more than the whole batch.
"""

from __future__ import annotations

import shlex
import sys
import threading
from collections.abc import Callable
from typing import Any

from launcher.errors import GpujobError
from launcher.remote.batch import HOST_PROGRAM, File, HostStopped, Op, Outcome, run_batch
from launcher.remote.paramiko_loader import load_paramiko

CONNECT_TIMEOUT_S = 10
BULK_SILENCE_S = 30  # a read of the agent's that sends nothing this long is a dead link
POLL_S = 1.0


class ConnectionLost(Exception):
    """The transport died under a command: its output is incomplete and must not be used."""


class ChannelPipe:
    """The batch program's stdin and stdout over an SSH channel. Its stderr (a streamed
    command's progress) is copied to ours by a thread as it comes. A host that answers
    nothing is waited for as long as the transport lives: a first pull or environment can
    take minutes of silence."""

    def __init__(self, channel: Any, transport: Any) -> None:
        self.channel, self.transport = channel, transport
        self.buffer = bytearray()
        self.echo = threading.Thread(target=self._copy_stderr, daemon=True)
        self.echo.start()

    def send(self, data: bytes) -> None:
        try:
            self.channel.sendall(data)
        except OSError:
            raise HostStopped from None

    def end(self) -> None:
        try:
            self.channel.shutdown_write()
        except OSError:
            raise HostStopped from None

    def readline(self) -> bytes:
        self._fill(lambda: b"\n" in self.buffer)
        line, sep, rest = self.buffer.partition(b"\n")
        self.buffer = rest
        return bytes(line + sep)

    def read(self, size: int) -> bytes:
        self._fill(lambda: len(self.buffer) >= size)
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def _fill(self, enough: Callable[[], bool]) -> None:
        """Receive until `enough()` or the end of the stream."""
        self.channel.settimeout(POLL_S)
        try:
            while not enough():
                try:
                    chunk = self.channel.recv(1 << 16)
                except TimeoutError:
                    if self.transport.is_active():
                        continue
                    raise ConnectionLost("the connection dropped") from None
                if not chunk:
                    if not self.transport.is_active():
                        raise ConnectionLost("the connection dropped")
                    return
                self.buffer += chunk
        finally:
            self.channel.settimeout(None)

    def _copy_stderr(self) -> None:
        while True:
            try:
                chunk = self.channel.recv_stderr(1 << 16)
            except TimeoutError:  # the timeout is the channel's, set while reading stdout
                continue
            if not chunk:
                return
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()


class SSHFiles:
    host: str
    _transport: Any

    def connect(self) -> None: ...

    def batch(self, ops: list[Op]) -> Outcome:
        """Run the batch program on the host over one channel (see batch.py)."""
        paramiko = load_paramiko()

        self.connect()
        try:
            channel = self._transport.open_session(timeout=CONNECT_TIMEOUT_S)
            channel.exec_command(shlex.join(["python3", "-c", HOST_PROGRAM]))
            with channel:
                pipe = ChannelPipe(channel, self._transport)
                outcome = run_batch(ops, pipe, self.host)
                channel.recv_exit_status()
                pipe.echo.join(5)
                return outcome
        except (paramiko.SSHException, EOFError, OSError, ConnectionLost) as error:
            raise GpujobError(
                f"{self.host}: the connection dropped while preparing the job: {error}",
                "run the command again: files already there are not sent twice",
            ) from None

    def put(self, path: str, content: bytes, mode: int) -> None:
        """Atomically, with `mode` from the first byte (secrets are never 0644)."""
        self.batch([File(path, content, mode)])

    def put_file(self, source: str, path: str, mode: int) -> None:
        with open(source, "rb") as handle:
            self.put(path, handle.read(), mode)
