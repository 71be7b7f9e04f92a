"""`gpujob ssh HOST [-- CMD]`: `ssh HOST CMD` with gpujob's hosts, pins and master connection.

Both a command and a login hand over to the `ssh` client itself, with the same options as
every command gpujob runs (its pins, strict checking, the host's master connection): stdin,
stdout, stderr, a terminal and signals then behave exactly as OpenSSH's, which a pipe
through Python would not (a command reading stdin, output shown as it comes). The command
is OpenSSH's too: the words after `--` joined with single spaces, unquoted, for the remote
login shell to interpret (`'echo a; echo b'`, `$HOME`, pipes). It is the one shell string
gpujob does not quote, because it is the user's own shell command.

The connection is made first, here, so that a host that cannot be reached, or whose key is
not the pinned one, is gpujob's one-line error; ssh's exit code for its own failures (255)
is kept, so a script tells them from the command's own codes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from launcher.errors import GpujobError
from launcher.remote.openssh import SSH_FAILED


class SSHFailed(GpujobError):
    """ssh itself failed: exit 255, as `ssh` does, not gpujob's 1 (a command may exit 1)."""

    exit_code = SSH_FAILED  # type: ignore[assignment]  # ssh's code, not one of gpujob's own


def ssh_command(on: str, command: list[str]) -> int:
    """Run `command` on `on` as `ssh HOST CMD` would (its exit code), or log in without one."""
    from launcher.remote import hosts as ssh_hosts

    entry = ssh_hosts.resolve_host(on)
    conn = ssh_hosts.connect(entry)
    remote = " ".join(command)  # OpenSSH's own join: no quoting, the remote shell reads it
    try:
        conn.connect()
    except GpujobError as err:
        raise SSHFailed(err.message, err.hint) from None
    finally:
        conn.close()
    if not remote:  # `ssh host ''` is a login too
        argv = [*conn.client.options(), "--", conn.endpoint.address]
        os.execv(argv[0], argv)  # a login on the host's master connection, checked as any command
    code = _run_attached(conn.client.command(remote))
    if code == SSH_FAILED and not conn.client.master_alive():
        raise SSHFailed(
            f"{entry.name}: the connection dropped during `{remote[:80]}`",
            "the command may have run in part; run it again when the host answers",
        )
    return code  # the command's own, 255 included (its master is alive: not ssh's failure)


def _run_attached(argv: list[str]) -> int:
    """`argv` on this process's own stdin, stdout and stderr, as a shell runs a command in
    the foreground: a Ctrl-C reaches ssh from the terminal and ssh decides what it means, a
    SIGTERM or SIGHUP sent to gpujob alone is passed on. Returns the shell's exit code."""
    proc = subprocess.Popen(argv)
    with _foreground(proc):
        code = proc.wait()
    return 128 - code if code < 0 else code  # killed by a signal: 128 + its number


@contextmanager
def _foreground(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers are the main thread's to set; the default ones then apply
        return

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(signum)

    handlers: dict[signal.Signals, signal.Handlers | Callable[[int, FrameType | None], None]] = {
        signal.SIGINT: signal.SIG_IGN,  # the terminal sends it to ssh too
        signal.SIGQUIT: signal.SIG_IGN,
        signal.SIGTERM: pass_on,
        signal.SIGHUP: pass_on,
    }
    before = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
