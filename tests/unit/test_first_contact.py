"""First contact with a host that goes away mid-handshake (a terminated instance, a destroyed
container): one line naming the host, never click's `aborted` or a traceback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import GpujobError
from launcher.remote.first_contact import check_host_key
from launcher.remote.hostkeys import KnownHosts
from launcher.remote.openssh import Endpoint


@pytest.fixture
def half_sshd() -> Iterator[int]:
    """A real listener that answers with an SSH banner and then closes the connection, as a
    host torn down between the banner and the key exchange does."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:  # the one connection the check makes
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    thread.join(timeout=5)
    server.close()


def test_a_host_gone_mid_handshake_is_one_unreachable_line(half_sshd: int, tmp_path: Path) -> None:
    endpoint = Endpoint(alias="gone", address="127.0.0.1", port=half_sshd, user="root", keys=())
    with pytest.raises(GpujobError) as raised:
        check_host_key(endpoint, KnownHosts(tmp_path / "known_hosts"))
    line = raised.value.one_line()
    assert line.startswith(f"cannot reach root@[127.0.0.1]:{half_sshd}:"), line
    assert "\n" not in line
    assert not (tmp_path / "known_hosts").exists() or not (tmp_path / "known_hosts").read_text()
