"""Ports of a host forwarded to this machine's loopback: `ssh -N -L`, with the same pins,
key and options as every command gpujob runs on the host.

The forward is an ssh of its own, not a channel of the host's master connection: a forward
added to a master (`ssh -O forward`) outlives the command that added it for as long as the
master persists, so a killed `gpujob port-forward` would leave the port open. This one ends
with the command (Ctrl-C, SIGTERM, SIGHUP, a closed terminal), and the listening port with it.
"""

from __future__ import annotations

import errno
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from launcher.errors import GpujobError, UsageError
from launcher.remote.openssh import Client, StderrTee

READY_S = 30.0
PR_SET_PDEATHSIG = 1


class Stopped(KeyboardInterrupt):
    """A signal ended the forward (click would take a bare KeyboardInterrupt for Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def forward_argv(client: Client, pairs: list[tuple[int, int]]) -> list[str]:
    """`ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:PORT ...` for each (PORT, LOCAL). ssh keeps the
    first value given for an option, so the two that keep it off the master come first."""
    ssh, *options = client.options()
    argv = [ssh, "-o", "ControlMaster=no", "-o", "ControlPath=none", *options,
            "-N", "-o", "ExitOnForwardFailure=yes"]  # fmt: skip
    for remote, local in pairs:
        argv += ["-L", f"127.0.0.1:{local}:127.0.0.1:{remote}"]
    return [*argv, "--", client.endpoint.address]


def port_taken(port: int) -> bool:
    """Something here listens on 127.0.0.1:`port` (a bind is refused). SO_REUSEADDR, as ssh
    binds its forwards: the closed connections of a forward just ended (TIME_WAIT, a
    minute) do not count, only a listener."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            return err.errno == errno.EADDRINUSE
    return False


def free_local_port(wanted: int) -> int:
    """`wanted` if nothing here listens on it, else one the kernel picks."""
    if not port_taken(wanted):
        return wanted
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def forward(client: Client, pairs: list[tuple[int, int]], ready: Callable[[], None]) -> int:
    """Forward until a signal ends the command: its exit code, 128 + the signal's number.
    `ready` is called once every local port listens. A forward that cannot start, or whose
    connection drops, is a GpujobError naming what ssh said."""
    with _stop_on_signals():
        proc, said = _start(client, pairs, show=True)  # "open failed": nothing listens there
        try:
            ready()
            proc.wait()
        except Stopped as stop:
            return 128 + stop.signum  # as a shell reports a command a signal ended
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    raise GpujobError(f"{client.endpoint.where}: the forward ended: {_last(said) or 'no reason'}",
                      "run it again when the host answers")  # fmt: skip


@contextmanager
def forwarding(client: Client, pairs: list[tuple[int, int]]) -> Iterator[None]:
    """The forward in the background while the block runs (`submit` following its job):
    every local port listens when the block starts, and the forward ends with it (or with
    this command, however it dies). ssh's complaints while the job's server is not up yet
    stay out of the job's log."""
    proc, _ = _start(client, pairs, show=False)
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()


def _start(
    client: Client, pairs: list[tuple[int, int]], show: bool
) -> tuple[subprocess.Popen[bytes], StderrTee]:
    """The forward's ssh, once every local port listens."""
    for remote, local in pairs:
        if port_taken(local):
            raise UsageError(f"port {local} is taken on this machine",
                             f"forward to another: {remote}:LOCAL")  # fmt: skip
    proc = subprocess.Popen(forward_argv(client, pairs), stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=_ends_with_this())  # fmt: skip
    assert proc.stderr is not None
    said = StderrTee(proc.stderr, show=show)
    try:
        _wait_listening(proc, said, [local for _, local in pairs])
    except BaseException:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        raise
    return proc, said


def _ends_with_this() -> Callable[[], None] | None:
    """What the forward's ssh runs before it starts (Linux): the kernel sends it SIGTERM
    when this command dies, SIGKILL included, when no handler of ours runs. An ssh left
    behind kept the port open, and the host's, for as long as it ran."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: not after the fork

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return ask


def _last(said: StderrTee) -> str:
    return said.text().decode(errors="replace").strip()[-300:]


def _wait_listening(proc: subprocess.Popen[bytes], said: StderrTee, ports: list[int]) -> None:
    deadline = time.monotonic() + READY_S
    while not all(port_taken(port) for port in ports):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
            raise GpujobError(f"the forward did not start: {_last(said) or 'ssh said nothing'}",
                              "check the host answers: gpujob ssh HOST true")  # fmt: skip
        time.sleep(0.05)


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP end the forward cleanly (ssh runs in a session of its own,
    so it is this command that stops it)."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise Stopped(signum)

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, stop) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
