"""The Connection to a host over SSH: OpenSSH's client on one master connection per host.

Commands are literal argv joined with `shlex.join`; the remote shell sees them quoted. A
host is contacted first over paramiko to pin its key (first_contact.py); from then on every
command runs through `ssh` with strict checking against the pins, as a channel on the
host's master connection (openssh.py), which outlives the gpujob command that opened it.
Files go through one exec of the batch program (batch.py): no SFTP.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

from launcher.agent import agent_argv
from launcher.errors import GpujobError
from launcher.remote.base import Result, Sink
from launcher.remote.batch import HOST_PROGRAM, File, Op, Outcome, ProcessPipe, run_batch
from launcher.remote.hostkeys import KnownHosts
from launcher.remote.openssh import (
    Client,
    ConnectionLost,
    Endpoint,
    StderrTee,
    resolve_endpoint,
    socket_path,
    ssh_failure,
    widen_pipe,
)

__all__ = ["ConnectionLost", "Endpoint", "SSHConnection", "resolve_endpoint"]

READ_ATTEMPTS = 6
READ_CHUNK = 1 << 20


class SSHConnection:
    """A host over SSH; makes sure of its master on first use, and again in `read_log`."""

    def __init__(self, host: str, endpoint: Endpoint, known_hosts: Path) -> None:
        self.host = host
        self.endpoint = endpoint
        self.known_hosts = KnownHosts(known_hosts)
        self.client = Client(endpoint, known_hosts, socket_path(endpoint))
        self._ready = False

    # -- connecting -------------------------------------------------------------------------

    def connect(self) -> None:
        """Pin the host key on first contact, then have a master connection running (started
        here, or left by an earlier command). Errors say what to do, in one line."""
        if self._ready:
            return
        if not self.known_hosts.pins_for(self.endpoint.pin_name):
            from launcher.remote.first_contact import check_host_key

            check_host_key(self.endpoint, self.known_hosts)
        elif self.client.control.is_socket():
            self._ready = True  # an earlier command's master (a dead one's socket is replaced
            return  # by the next command's own: ControlMaster=auto)
        said = self.client.start_master()
        if said is not None:
            raise self._explain(said)
        self._ready = True

    def _explain(self, said: str) -> GpujobError:
        from launcher.remote.first_contact import check_host_key, not_sshd, unreachable

        where, line = self.endpoint.where, said.strip().splitlines()[-1]
        if "Host key verification failed" in said or "IDENTIFICATION HAS CHANGED" in said:
            check_host_key(self.endpoint, self.known_hosts)  # raises with both fingerprints
        if "Permission denied" in said:
            keys = [k for k in self.endpoint.keys if os.path.isfile(k)]
            return GpujobError(
                f"{where} accepted none of the keys tried "
                f"({', '.join(keys) or 'ssh-agent; no key file found'})",
                "give the host's key as `key:` in hosts.yaml or IdentityFile in ~/.ssh/config",
            )
        if any(s in said for s in ("refused", "timed out", "No route", "resolve", "unreachable")):
            return unreachable(where, line.rsplit(": ", 1)[-1])
        if "kex_exchange_identification" in said or "banner" in said:
            return not_sshd(where, line)
        return GpujobError(f"ssh to {where} failed: {line}", "check it with `gpujob doctor`")

    def _drop(self) -> None:
        """The next command makes sure of the master again (the last one may have died)."""
        self._ready = False

    def close(self) -> None:
        """The master stays, for the next command (`gpujob down` ends it with the host)."""
        self._drop()

    # -- commands ---------------------------------------------------------------------------

    def run(
        self, argv: tuple[str, ...] | list[str], *, stream: bool = False, input: bytes | None = None
    ) -> Result:
        try:
            code, out, err = self._exec(shlex.join(argv), stream=stream, input=input)
        except ConnectionLost as lost:
            raise GpujobError(
                f"{self.host}: the connection dropped during `{shlex.join(argv)[:80]}`: {lost}",
                "run the command again",
            ) from None
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"))

    def _exec(
        self, command: str, *, stream: bool = False, input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run `command`; with `stream` its stderr is shown as it comes; `input` on its stdin
        (through the channel: nothing of it on the host's disk or command line). Raises
        ConnectionLost when ssh itself failed (exit 255 with its own complaint)."""
        self.connect()
        proc = subprocess.Popen(
            self.client.command(command),
            stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            if stream:
                assert proc.stdout is not None and proc.stderr is not None
                tee = StderrTee(proc.stderr)
                if input is not None:
                    _feed(proc, input)
                out = proc.stdout.read()
                code = proc.wait()
                err = tee.text()
            else:
                out, err = proc.communicate(input)
                code = proc.returncode
        except BaseException:  # Ctrl-C: the command's channel closes with us
            proc.kill()
            proc.wait()
            raise
        said = ssh_failure(code, err)
        if said is not None:
            self._drop()
            raise ConnectionLost(said)
        return code, out, err

    def _exec_bulk(self, command: str, sink: Sink | None = None) -> tuple[int, bytes, bytes]:
        """`_exec` for a command whose stdout is large and whose stderr is a line (the agent's
        read): read in 1 MiB steps from a widened pipe, by an `ssh` in a session of its own
        (a Ctrl-C is the follow's to handle between reads). With `sink`, stdout goes to it as it
        comes, and what it was given stands even if the connection then drops (the caller
        asks again from there)."""
        self.connect()
        chunks: list[bytes] = []
        take = sink or chunks.append
        proc = subprocess.Popen(
            self.client.command(command),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
            start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        widen_pipe(proc.stdout)
        fd = proc.stdout.fileno()
        try:
            while chunk := os.read(fd, READ_CHUNK):
                take(chunk)
        except BaseException:  # the reader went away, or a second Ctrl-C: no waiting
            proc.kill()
            raise
        finally:
            proc.stdout.close()
            err = proc.stderr.read()
            proc.stderr.close()
            code = proc.wait()
        said = ssh_failure(code, err)
        if said is not None:
            raise ConnectionLost(said)
        return code, b"".join(chunks), err

    # -- files ------------------------------------------------------------------------------

    def batch(self, ops: list[Op]) -> Outcome:
        """Run the batch program on the host in one exec (see batch.py)."""
        self.connect()
        pipe = SSHPipe(self.client.command(shlex.join(["python3", "-c", HOST_PROGRAM])))
        try:
            return run_batch(ops, pipe, self.host)
        except ConnectionLost as error:
            self._drop()
            raise GpujobError(
                f"{self.host}: the connection dropped while preparing the job: {error}",
                "run the command again: files already there are not sent twice",
            ) from None
        finally:
            pipe.close()

    def put(self, path: str, content: bytes, mode: int) -> None:
        """Atomically, with `mode` from the first byte (secrets are never 0644)."""
        self.batch([File(path, content, mode)])

    def put_file(self, source: str, path: str, mode: int) -> None:
        with open(source, "rb") as handle:
            self.put(path, handle.read(), mode)

    # -- logs -------------------------------------------------------------------------------

    def read_log(
        self, node_dir: str, offset: int, wait_s: float = 0.0, sink: Sink | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        """The agent's `read` on the host; the offset is ours, so after a dropped connection
        the read is simply asked again on a new one, from the last byte received: nothing
        lost, nothing twice."""

        delivered = 0

        def take(chunk: bytes) -> None:
            nonlocal delivered
            delivered += len(chunk)
            sink(chunk)  # type: ignore[misc]

        for attempt in range(READ_ATTEMPTS):
            at = offset + delivered
            command = shlex.join(agent_argv("python3", node_dir, "read", str(at), f"{wait_s:g}"))
            try:
                code, data, err = self._exec_bulk(command, take if sink else None)
            except ConnectionLost:
                self._drop()
                continue
            lines = err.decode(errors="replace").strip().splitlines()
            try:
                status = json.loads(lines[-1])
            except (IndexError, ValueError):
                status = None
            end = offset + delivered + len(data)
            if code == 0 and status is not None and status.get("offset") == end:
                return data, status
            if attempt == READ_ATTEMPTS - 1:
                raise GpujobError(
                    f"{self.host}: the agent could not read {node_dir}/job.log "
                    f"(exit {code}): {' '.join(lines[-1:])}"
                )
            self._drop()  # a torn read: ask again from the last byte taken
        raise GpujobError(f"lost the connection to {self.host} {READ_ATTEMPTS} times in a row")


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    """`data` to the process's stdin from a thread, closed after it: the command may write
    more than a pipe holds before it reads its input."""
    import threading

    def write() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(data)
            proc.stdin.close()

    threading.Thread(target=write, daemon=True).start()


class SSHPipe(ProcessPipe):
    """The batch program's stdin and stdout through `ssh`; its stderr (a streamed command's
    progress) is shown as it comes. A stream that ends early is a dropped connection when
    ssh says so."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv, stderr=subprocess.PIPE)
        assert self.proc.stderr is not None
        self.tee = StderrTee(self.proc.stderr)

    def readline(self) -> bytes:
        line = super().readline()
        if not line.endswith(b"\n"):
            self._check_lost()
        return line

    def read(self, size: int) -> bytes:
        data = super().read(size)
        if len(data) < size:
            self._check_lost()
        return data

    def _check_lost(self) -> None:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return
        said = ssh_failure(code, self.tee.text())
        if said is not None:
            raise ConnectionLost(said)
