"""Helpers for the provider tests: a backend whose hosts answer with an SSH banner, and the
environment that points gpujob at an in-process fake.

The null backend's hosts are addresses nobody listens on; `BannerBackend` makes every host
one real loopback listener that sends an `SSH-2.0` line, so `up` can finish exactly as it
does against a cloud (TCP connect, banner read) without root or sshd.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake
from infra.fakes.null_backend import NullBackend

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpujobTestKeyOnlyForTheFakes0000000000 test"


class BannerServer:
    """A loopback TCP listener that greets every connection like sshd, then closes it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.2 gpujob-test\r\n")

    def close(self) -> None:
        self.sock.close()


class BannerBackend(NullBackend):
    """Every host is the banner server (Lambda's fake reports the ip; the port is 22 there,
    so the tests set GPUJOB_LAMBDA_SSH_PORT to the banner's)."""

    def __init__(self, banner: BannerServer) -> None:
        super().__init__()
        self.banner = banner

    def launch_vm(self, instance_id: str, ssh_public_key: str) -> tuple[str, int]:
        super().launch_vm(instance_id, ssh_public_key)
        return "127.0.0.1", self.banner.port

    def launch_container(self, instance_id: str, *args: Any, **kwargs: Any) -> tuple[str, int]:
        super().launch_container(instance_id, *args, **kwargs)
        return "127.0.0.1", self.banner.port


def point_at(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    lam: RunningFake | None = None,
    vast: RunningFake | None = None,
    banner: BannerServer | None = None,
) -> None:
    """Environment for `gpujob up/down` against the fakes, with fast retries and polling."""
    key = tmp_path / "id_ed25519"
    Path(f"{key}.pub").write_text(PUBLIC_KEY + "\n")
    monkeypatch.setenv("GPUJOB_SSH_KEY", str(key))
    monkeypatch.setenv("GPUJOB_RETRY_BASE_S", "0.01")
    monkeypatch.setenv("GPUJOB_POLL_S", "0.01")
    for name in ("LAMBDA_API_KEY", "VAST_API_KEY", "GPUJOB_LAMBDA_API_URL", "GPUJOB_VAST_API_URL"):
        monkeypatch.delenv(name, raising=False)
    if lam is not None:
        monkeypatch.setenv("LAMBDA_API_KEY", LAMBDA_API_KEY)
        monkeypatch.setenv("GPUJOB_LAMBDA_API_URL", lam.url)
    if vast is not None:
        monkeypatch.setenv("VAST_API_KEY", VAST_API_KEY)
        monkeypatch.setenv("GPUJOB_VAST_API_URL", vast.url)
    if banner is not None:
        monkeypatch.setenv("GPUJOB_LAMBDA_SSH_PORT", str(banner.port))


def lambda_instances(fake: RunningFake) -> list[dict[str, Any]]:
    """What the Lambda fake itself lists (as any client would see it)."""
    reply = requests.get(
        f"{fake.url}/instances", headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"}, timeout=10
    )
    reply.raise_for_status()
    return reply.json()["data"]


def vast_instances(fake: RunningFake) -> list[dict[str, Any]]:
    root = fake.url.rsplit("/api/v0", 1)[0]
    reply = requests.get(
        f"{root}/api/v1/instances/", headers={"Authorization": f"Bearer {VAST_API_KEY}"}, timeout=10
    )
    reply.raise_for_status()
    return reply.json()["instances"]


def calls(fake: RunningFake, op: str) -> list[dict[str, Any]]:
    return [r for r in fake.control.requests() if r["op"] == op]
