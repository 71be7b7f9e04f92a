"""OpenSSH's `ssh`, with one master connection per host kept between gpujob's commands.

paramiko handled every 32 KiB packet in Python (a big log streamed at half the rate of
`ssh host cat`) and each gpujob command paid a full handshake, most of a quick submit.
OpenSSH's ControlMaster keeps one authenticated connection per host for PERSIST_S after its
last use, and each command is a new channel on it: a few milliseconds (SkyPilot's command
runner does the same). The sockets live in the state dir's private folder (paths.run_dir).

Every option is given on the command line with `-F /dev/null`: the user's ~/.ssh/config is
read once, by `ssh -G`, for where to connect and as whom (resolve_endpoint), and nothing in
it can loosen the host key check, which is strict against gpujob's own pins.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from launcher.errors import GpujobError, UsageError
from launcher.paths import existing_run_dir, run_dir, ssh_config_file
from launcher.remote.hostkeys import host_id, pin_name

PERSIST_S = 600
SSH_FAILED = 255  # the exit code of ssh's own failures (a remote command's is passed through)
CONNECT_TIMEOUT_S = 10
ALIVE_S, ALIVE_COUNT = 15, 4  # a silent link is dropped after a minute, not at TCP's hours
REFUSED_PATIENCE_S = 60
FAST_CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,"
FAST_CIPHERS += "aes128-ctr,aes192-ctr,aes256-ctr"  # AES-GCM first: AES-NI makes it the fastest
TAIL_BYTES = 16384

SSH_SAYS = re.compile(
    r"^(ssh: |kex_exchange_identification|Connection (closed|reset|refused|timed out|to )"
    r"|Host key verification failed|Permission denied|client_loop: |mux_client|muxclient"
    r"|Received disconnect|Bad owner|Control socket|banner exchange|Timeout, server"
    r"|@@@@|Could not resolve|No route to host|Network is unreachable|Broken pipe)"
)


class ConnectionLost(Exception):
    """The connection died under a command: its output is incomplete and must not be used."""


@dataclass(frozen=True)
class Endpoint:
    """Where to connect and as whom, after `~/.ssh/config` has had its say."""

    alias: str
    address: str
    port: int
    user: str
    keys: tuple[str, ...]
    explicit_key: bool = False
    """The key was named (hosts.yaml `key:`, the key `up` registered): only it is offered,
    not also every key an ssh-agent holds."""
    instance: str | None = None
    """A rented host's `<provider>:<id>`: its key is pinned for the instance, not the
    address (hostkeys.pin_name), and its master connection is its own."""

    @property
    def host_id(self) -> str:
        return host_id(self.address, self.port)

    @property
    def pin_name(self) -> str:
        return pin_name(self.address, self.port, self.instance)

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host_id}"


def ssh_client() -> str:
    found = shutil.which("ssh")
    if found is None:
        raise GpujobError(
            "gpujob reaches hosts with OpenSSH's `ssh`, and none is on PATH",
            "install the OpenSSH client (Debian/Ubuntu: apt-get install openssh-client)",
        )
    return found


def resolve_endpoint(
    alias: str,
    *,
    user: str | None = None,
    port: int | None = None,
    key: str | None = None,
    config_path: Path | None = None,
) -> Endpoint:
    """Explicit values win over `~/.ssh/config` (HostName, User, Port, IdentityFile, with its
    Include and Match lines), which wins over OpenSSH's defaults: `ssh -G` says which."""
    path = config_path or ssh_config_file()
    config = str(path) if path.is_file() else os.devnull
    done = subprocess.run(
        [ssh_client(), "-G", "-F", config, "--", alias],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        said = done.stderr.strip()[-300:]
        if config == os.devnull or "hostname" in said:
            raise UsageError(f"host {alias!r}: {said}", "give a host name or user@address")
        raise UsageError(
            f"{config}: ssh cannot read it for {alias}: {said}",
            "fix that line, or point GPUJOB_SSH_CONFIG at another file",
        )
    found: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition(" ")
        found.setdefault(name.lower(), []).append(value)
    keys = [key] if key else found.get("identityfile", [])
    return Endpoint(
        alias=alias,
        address=found.get("hostname", [alias])[0],
        port=int(port or found.get("port", ["22"])[0]),
        user=user or found.get("user", [""])[0] or _local_user(),
        keys=tuple(os.path.expanduser(k) for k in keys),
        explicit_key=bool(key),
    )


def _local_user() -> str:
    import getpass

    return getpass.getuser()


# -- where the masters live ------------------------------------------------------------------


def socket_path(endpoint: Endpoint, state: Path | None = None) -> Path:
    name = f"{endpoint.user}@{endpoint.address}:{endpoint.port}"
    if endpoint.instance:  # an address's next instance never reuses the last one's master
        name += f"/{endpoint.instance}"
    return run_dir(state) / hashlib.sha1(name.encode()).hexdigest()[:16]


def _option_path(path: Path) -> str:
    """A path as an `-o` value: OpenSSH splits those on blanks unless quoted."""
    return f'"{path}"' if any(c.isspace() for c in str(path)) else str(path)


# -- the client ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    """The argv of every `ssh` gpujob runs for one host."""

    endpoint: Endpoint
    known_hosts: Path
    control: Path

    def options(self) -> list[str]:
        e = self.endpoint
        settings = {
            "BatchMode": "yes",  # never a password or passphrase prompt: gpujob has no tty
            "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": _option_path(self.known_hosts),
            "GlobalKnownHostsFile": os.devnull,
            "ControlMaster": "auto",
            "ControlPath": _option_path(self.control),
            "ControlPersist": str(PERSIST_S),
            "ConnectTimeout": str(CONNECT_TIMEOUT_S),
            "ServerAliveInterval": str(ALIVE_S),
            "ServerAliveCountMax": str(ALIVE_COUNT),
            "Ciphers": FAST_CIPHERS,
            "LogLevel": "ERROR",
        }
        if e.instance:  # a rented host's key is pinned under its instance's name
            settings["HostKeyAlias"] = e.pin_name
        argv = [ssh_client(), "-F", os.devnull, "-p", str(e.port), "-l", e.user]
        for name, value in settings.items():
            argv += ["-o", f"{name}={value}"]
        keys = [k for k in e.keys if os.path.isfile(k)]
        if keys and e.explicit_key:
            argv += ["-o", "IdentitiesOnly=yes"]
        for key in keys:
            argv += ["-i", key]
        return argv

    def command(self, remote: str, *flags: str) -> list[str]:
        """`remote` is one string, already quoted (`shlex.join`): sshd hands it to a shell."""
        return [*self.options(), *flags, "--", self.endpoint.address, remote]

    def control_argv(self, operation: str) -> list[str]:
        return [*self.options(), "-O", operation, "--", self.endpoint.address]

    # -- the master --------------------------------------------------------------------------

    def master_alive(self) -> bool:
        quiet = subprocess.DEVNULL
        checked = subprocess.run(
            self.control_argv("check"), stdin=quiet, stdout=quiet, stderr=quiet, check=False
        )
        return checked.returncode == 0

    def start_master(self) -> str | None:
        """A master for this host if none runs: None when one runs, else what ssh said. One
        starter at a time (a lock file beside the socket): two would leave the loser running
        as a plain connection forever. A refused connection (a booting host) is retried."""
        from launcher.progress import waiting

        lock_path = self.control.with_name(f"{self.control.name}.lock")
        connecting = waiting(f"connecting to {self.endpoint.where}")
        with open(lock_path, "a") as lock, connecting as wait:
            fcntl.flock(lock, fcntl.LOCK_EX)
            deadline = time.monotonic() + REFUSED_PATIENCE_S
            pause, attempt = 0.2, 0
            while not self.master_alive():
                # `-M` does not replace a dead master's socket: it would run on as a plain
                # connection nobody can use, and never end
                self.control.unlink(missing_ok=True)
                said = self._spawn_master()
                if said is None:
                    return None
                if "Connection refused" not in said or time.monotonic() > deadline:
                    return said
                attempt += 1
                wait.note(f"attempt {attempt} refused, retrying for up to {REFUSED_PATIENCE_S} s")
                time.sleep(pause)
                pause = min(pause * 2, 3.0)
            return None

    def _spawn_master(self) -> str | None:
        # stderr to a file, not a pipe: the master goes on in the background after `-f`
        with tempfile.TemporaryFile() as said:
            code = subprocess.run(
                [*self.options(), "-M", "-N", "-f", "--", self.endpoint.address],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=said, check=False,
            ).returncode  # fmt: skip
            said.seek(0)
            text = said.read().decode(errors="replace").strip()
        return None if code == 0 else (text or f"ssh exited with code {code}")


def ssh_failure(code: int, stderr: bytes | str) -> str | None:
    """What ssh itself said when it failed (exit 255 and a line of its own), else None: a
    remote command may exit 255 too, and then its stderr is its own."""
    if code != SSH_FAILED:
        return None
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    for line in reversed(text.strip().splitlines()):
        if SSH_SAYS.match(line.strip()):
            return line.strip()
    return None


def stop_masters(state: Path | None = None, endpoints: Iterable[Endpoint] | None = None) -> int:
    """End the master connections of a state dir (all, or those of `endpoints`): a host that
    is gone, or a test that is over (close_state). Returns how many were running."""
    folder = existing_run_dir(state)
    if folder is None:
        return 0
    if endpoints is None:
        sockets = [p for p in folder.iterdir() if p.suffix not in (".lock", ".sock", ".pid")]
    else:
        sockets = [socket_path(e, state) for e in endpoints]
    stopped = 0
    for sock in sockets:
        if not sock.exists():
            continue
        checked = _control(sock, "check")
        done = _control(sock, "exit")
        stopped += done.returncode == 0
        with contextlib.suppress(FileNotFoundError):
            sock.with_name(f"{sock.name}.lock").unlink()
        if done.returncode == 0 and (pid := re.search(r"\(pid=(\d+)\)", checked.stderr)):
            _gone(int(pid.group(1)))
    return stopped


def _control(sock: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`ssh -O COMMAND` to the master on `sock` (`check` says `Master running (pid=N)`)."""
    return subprocess.run(
        [ssh_client(), "-F", os.devnull, "-o", f"ControlPath={_option_path(sock)}",
         "-O", command, "gpujob-host"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip


def _gone(pid: int, within_s: float = 5.0) -> None:
    """A master told to exit closes its channels first: it is waited for (bounded), so that
    what comes next (a check that nothing of a state dir runs, a host's removal) finds it
    gone."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat.rpartition(")")[2].split()[:1] == ["Z"]:
            return  # ended, not reaped yet
        time.sleep(0.02)


# -- a command's stderr, shown as it comes -----------------------------------------------------


class StderrTee(threading.Thread):
    """Copies a process's stderr to ours as it comes (a pull's progress) and keeps its tail
    for the error message; ssh's own complaints are kept but not shown (the error says it)."""

    def __init__(self, source: IO[bytes], *, show: bool = True) -> None:
        super().__init__(daemon=True)
        self.source, self.show = source, show
        self.tail = bytearray()
        self.start()

    def run(self) -> None:
        for line in iter(self.source.readline, b""):
            self.tail += line
            del self.tail[:-TAIL_BYTES]
            if self.show and not SSH_SAYS.match(line.decode(errors="replace").strip()):
                sys.stderr.buffer.write(line)
                sys.stderr.flush()

    def text(self) -> bytes:
        self.join(5)
        return bytes(self.tail)


def widen_pipe(stream: IO[bytes]) -> None:
    """A 1 MiB pipe instead of 64 KiB: a big log crosses in fewer, larger reads (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)


def close_state(state: Path | None = None) -> int:
    """End what a state dir left running (its SSH masters) and remove its socket folder: the
    end of a test or a bench. Returns how many masters were ended."""
    ended = stop_masters(state)
    folder = existing_run_dir(state)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return ended
