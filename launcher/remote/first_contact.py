"""First contact with a host: its key pinned in gpujob's known_hosts, over paramiko.

OpenSSH carries every command (openssh.py) and checks the host key strictly against the
pins, so it never writes the file. The pin is taken here, once per host (per instance for
a rented one: `Endpoint.pin_name`, which `ssh` is given as HostKeyAlias), under the lock
that `up --count N` needs when N threads pin N hosts at once; and when OpenSSH refuses a
key, the same check says which key was pinned and which is offered now (two fingerprints
and the line to remove), which OpenSSH's multi-line warning does not say in one line.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from launcher.errors import GpujobError
from launcher.remote.openssh import CONNECT_TIMEOUT_S, REFUSED_PATIENCE_S
from launcher.remote.paramiko_loader import load_paramiko

if TYPE_CHECKING:
    from launcher.remote.hostkeys import KnownHosts
    from launcher.remote.openssh import Endpoint


def check_host_key(endpoint: Endpoint, known_hosts: KnownHosts) -> bool:
    """Pin the host's key if none is pinned, or raise the changed-key error; True when it was
    pinned already. A refused connection (a host still booting) is retried with backoff."""
    paramiko = load_paramiko()
    from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

    from launcher.progress import waiting

    @retry(
        retry=retry_if_exception_type(ConnectionRefusedError),
        wait=wait_exponential(multiplier=0.2, max=3),
        stop=stop_after_delay(REFUSED_PATIENCE_S),
        reraise=True,
        before_sleep=lambda state: wait.note(f"attempt {state.attempt_number} refused, "
                                             f"retrying for up to {REFUSED_PATIENCE_S} s"),
    )  # fmt: skip
    def dial() -> socket.socket:
        return socket.create_connection(
            (endpoint.address, endpoint.port), timeout=CONNECT_TIMEOUT_S
        )

    where = f"{endpoint.user}@{endpoint.host_id}"
    try:
        with waiting(f"connecting to {where}") as wait:  # said after 2 s: a booting host
            sock = dial()
    except OSError as err:
        raise unreachable(where, err.strerror or str(err)) from None
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=CONNECT_TIMEOUT_S)
        key = transport.get_remote_server_key()
        return known_hosts.check(endpoint.pin_name, key.get_name(), key.get_base64())
    except paramiko.SSHException as err:
        raise not_sshd(where, str(err)) from None
    except (EOFError, OSError) as err:
        # A host going away mid-handshake (a terminated instance, a container destroyed):
        # paramiko's transport thread hands back a bare EOFError or a socket error, which
        # click would otherwise report as `aborted`.
        raise unreachable(where, _why(err)) from None
    finally:
        transport.close()


def _why(err: BaseException) -> str:
    if isinstance(err, EOFError):
        return "the connection closed during the SSH handshake"
    return (err.strerror if isinstance(err, OSError) else None) or str(err) or type(err).__name__


def unreachable(where: str, why: str) -> GpujobError:
    return GpujobError(
        f"cannot reach {where}: {why}",
        "check the address and port, and that sshd runs on the host",
    )


def not_sshd(where: str, why: str) -> GpujobError:
    return GpujobError(
        f"SSH handshake with {where} failed: {why}",
        "the port answers but not as sshd does; check the address and port",
    )
