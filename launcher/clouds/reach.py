"""Is the host there? A TCP connect that reads the `SSH-` banner, nothing more.

`up` ends when a host answers on its SSH port; logging in and bootstrapping belong to
`launcher/remote`. An open port is not enough (a cloud's proxy accepts before the host's
sshd is up), so the banner line is read.
"""

from __future__ import annotations

import socket
import time

from launcher.clouds.base import ProviderError, pause


def ssh_banner(host: str, port: int, timeout: float = 5.0) -> str | None:
    """The server's identification line, or None if it did not send one in time."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            data = b""
            while b"\n" not in data and len(data) < 512:
                chunk = conn.recv(256)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    line = data.split(b"\n", 1)[0].strip().decode(errors="replace")
    return line if line.startswith("SSH-") else None


def wait_for_ssh(host: str, port: int, deadline: float, interval: float = 1.0) -> str:
    """Poll until the banner answers or `deadline` (a time.monotonic() value) passes."""
    while True:
        left = deadline - time.monotonic()
        banner = ssh_banner(host, port, timeout=max(0.5, min(5.0, left)))
        if banner:
            return banner
        if time.monotonic() + interval >= deadline:
            raise ProviderError(
                f"no SSH banner from {host}:{port} before the timeout",
                "the host runs but sshd does not answer; raise --timeout",
            )
        pause(interval)
