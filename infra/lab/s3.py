"""The lab's S3: `moto_server` on loopback, plus a forward on the bridge for the hosts.

The machine talks to http://127.0.0.1:PORT; lab hosts, whose loopback is their own, reach
the same server at the bridge's address (http://10.77.0.1:PORT for the default lab) through
a `socat` forward. Both are plain http, so
rclone must run without `AWS_CA_BUNDLE` (rclone 1.60 fails every S3 call while it is set,
even for http): `rclone_env()` gives the remote's variables and `without_ca_bundle()` the
environment to run it in.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from infra.lab import naming, state

ACCESS_KEY = "gjlab-access-key"
SECRET_KEY = "gjlab-secret-key"
REGION = "us-east-1"


def server_argv(port: int | str) -> list[str]:
    tool = Path(sys.executable).with_name("moto_server")
    head = [str(tool)] if tool.exists() else [sys.executable, "-m", "moto.server"]
    return [*head, "-H", "127.0.0.1", "-p", str(port)]


def forward_argv(port: int | str) -> list[str]:
    return [
        "socat", f"TCP-LISTEN:{port},bind={naming.bridge_address()},reuseaddr,fork",
        f"TCP:127.0.0.1:{port}",
    ]  # fmt: skip


def start(daemons: dict[str, Any], *, bridge: bool = True) -> None:
    """Start moto (and the bridge forward when `bridge`) unless already running."""
    folder = state.lab_dir() / "s3"
    rec = daemons.get("s3")
    if not state.alive(rec):
        port = _free_port()
        log = folder / "moto.log"
        rec = daemons["s3"] = state.spawn(server_argv(port), log) | {"port": port}
        state.wait_until(lambda: _answers(port), "moto S3", timeout=30, log=log, daemon=rec)
        state.stop(daemons.pop("s3-forward", None))
    if bridge and not state.alive(daemons.get("s3-forward")):
        log = folder / "forward.log"
        daemons["s3-forward"] = state.spawn(forward_argv(rec["port"]), log)
        state.wait_until(lambda: _answers(rec["port"], naming.bridge_address()), "S3 forward",
                         timeout=10, log=log)  # fmt: skip


def stop(daemons: dict[str, Any]) -> None:
    for key in ("s3-forward", "s3"):
        state.stop(daemons.pop(key, None))


def endpoint(*, for_hosts: bool = False) -> str:
    """The running server's URL, as the machine (loopback) or a lab host (bridge) reaches it."""
    rec = state.read_state()["daemons"].get("s3")
    if not state.alive(rec):
        raise state.LabError("lab: S3 is not running; start it with `gpujob lab up`")
    host = naming.bridge_address() if for_hosts else "127.0.0.1"
    return f"http://{host}:{rec['port']}"


def credentials() -> dict[str, str]:
    """Dummy keys moto accepts; real variable names, so boto3 and gpujob pick them up as is."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
    }


def client(url: str | None = None) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=url or endpoint(), region_name=REGION,
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
    )  # fmt: skip


def create_bucket(prefix: str = "gjlab") -> str:
    """A fresh bucket with a unique name, so tests never see each other's objects."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    client().create_bucket(Bucket=name)
    return name


def rclone_env(remote: str = "lab", url: str | None = None) -> dict[str, str]:
    """An rclone remote named `remote` held in environment variables only (no config file)."""
    key = f"RCLONE_CONFIG_{remote.upper()}_"
    return {
        f"{key}TYPE": "s3",
        f"{key}PROVIDER": "Other",
        f"{key}ENDPOINT": url or endpoint(),
        f"{key}ACCESS_KEY_ID": ACCESS_KEY,
        f"{key}SECRET_ACCESS_KEY": SECRET_KEY,
        f"{key}REGION": REGION,
        f"{key}FORCE_PATH_STYLE": "true",
    }


def without_ca_bundle(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: ours) minus AWS_CA_BUNDLE, which breaks rclone 1.60 on any S3 endpoint."""
    base = dict(os.environ if env is None else env)
    base.pop("AWS_CA_BUNDLE", None)
    return base


def _free_port() -> int:
    """A port free on loopback and on the bridge address, since both will listen on it."""
    bridge = naming.bridge_address() if naming.subnet() else "127.0.0.1"  # no bridge yet
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            with socket.socket() as probe:
                probe.bind((bridge, port))
        except OSError as err:
            if (
                err.errno == errno.EADDRNOTAVAIL
            ):  # EADDRNOTAVAIL: no bridge (S3 alone); loopback is enough
                return port
            continue
        return port
    raise state.LabError("lab: no free port for S3")


def _answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False
