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
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from launcher.errors import GpujobError, UsageError
from launcher.remote.openssh import SSH_FAILED
from launcher.say import say

if TYPE_CHECKING:
    from launcher.remote.hosts import HostEntry
    from launcher.state.db import JobRecord


class SSHFailed(GpujobError):
    """ssh itself failed: exit 255, as `ssh` does, not gpujob's 1 (a command may exit 1)."""

    exit_code = SSH_FAILED  # type: ignore[assignment]  # ssh's code, not one of gpujob's own


def ssh_command(on: str, command: list[str], node: int | None = None) -> int:
    """Run `command` on `on` as `ssh HOST CMD` would (its exit code), or log in without one.
    `on` may name a job (`--node K` says it must): then its node's host, in its folder."""
    from launcher.remote import hosts as ssh_hosts

    job = _job(on, node)
    if job is not None:
        return _in_job(job, node, command)
    entry = ssh_hosts.resolve_host(on)
    return _on_host(entry, " ".join(command))  # OpenSSH's own join: the remote shell reads it


def _job(on: str, node: int | None) -> JobRecord | None:
    """The job `on` names, unless it names a host (hosts.yaml, user@addr, a rented host):
    a host's name wins, as before jobs could be named here; with --node only a job will do."""
    from launcher.remote.hosts import hosts_file, parse_hosts, rented_host
    from launcher.state.readonly import JobsView

    if node is None:
        path = hosts_file()
        if "@" in on or (path.is_file() and on in parse_hosts(path.read_text(), str(path))):
            return None
        if ":" not in on and rented_host(on) is not None:
            return None
    job = JobsView().job(on)  # a look: no state db made for an address
    if job is None and node is not None:
        raise UsageError(f"no job `{on}`", "`gpujob status` lists the jobs; --node goes with one")
    return job


def _in_job(job: JobRecord, node: int | None, command: list[str]) -> int:
    """A shell (or `command`) in the node's folder, on its host or on this machine."""
    import shlex

    from launcher.jobs.where import node_place

    place = node_place(job, node)
    if place.note:
        say(place.note)
    if place.host is None:  # this machine: the node's folder is here
        if not Path(place.folder).is_dir():
            raise GpujobError(f"job {job.id}: its folder {place.folder} is gone",
                              "`gpujob logs JOB` may still have its log")  # fmt: skip
        if not command:
            shell = os.environ.get("SHELL") or "/bin/sh"
            os.chdir(place.folder)
            os.execv(shell, [shell])
        return _run_attached(["/bin/sh", "-c", " ".join(command)], cwd=place.folder)
    cd = f"cd {shlex.quote(place.folder)}"
    remote = f"{cd} && {' '.join(command)}" if command else f'{cd} && exec "${{SHELL:-/bin/sh}}" -l'
    return _on_host(place.host, remote, terminal=not command)


def _on_host(entry: HostEntry, remote: str, terminal: bool = False) -> int:
    """`remote` on `entry` through its master connection; a login when empty (`terminal`:
    a command that is an interactive shell, given a terminal as a login would be)."""
    from launcher.remote import hosts as ssh_hosts

    conn = ssh_hosts.connect(entry)
    try:
        conn.connect()
    except GpujobError as err:
        raise SSHFailed(err.message, err.hint) from None
    finally:
        conn.close()
    if not remote or terminal:  # `ssh host ''` is a login too
        login = (
            ["-t", "--", conn.endpoint.address, remote]
            if terminal
            else ["--", conn.endpoint.address]
        )
        argv = [*conn.client.options(), *login]
        os.execv(argv[0], argv)  # a login on the host's master connection, checked as any command
    code = _run_attached(conn.client.command(remote))
    if code == SSH_FAILED and not conn.client.master_alive():
        raise SSHFailed(
            f"{entry.name}: the connection dropped during `{remote[:80]}`",
            "the command may have run in part; run it again when the host answers",
        )
    return code  # the command's own, 255 included (its master is alive: not ssh's failure)


def _run_attached(argv: list[str], cwd: str | None = None) -> int:
    """`argv` on this process's own stdin, stdout and stderr, as a shell runs a command in
    the foreground: a Ctrl-C reaches ssh from the terminal and ssh decides what it means, a
    SIGTERM or SIGHUP sent to gpujob alone is passed on. Returns the shell's exit code."""
    proc = subprocess.Popen(argv, cwd=cwd)
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
