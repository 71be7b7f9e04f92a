"""Helpers for the lab tests: the real ssh and docker clients, and why the lab cannot run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEARCH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
TOOLS = ["ip", "sshd", "ssh", "nsenter", "unshare", "dockerd", "docker-registry", "socat",
         "debootstrap", "rclone", "iptables"]  # fmt: skip


def lab_missing() -> str | None:
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, sshd, dockerd)"
    absent = [tool for tool in TOOLS if shutil.which(tool, path=SEARCH) is None]
    if absent:
        return f"missing {', '.join(absent)}: run `bash infra/install-deps.sh --docker`"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "no Docker engine answers: run `bash infra/install-deps.sh --docker`"
    return None


def lab_is_up() -> bool:
    from infra.lab import state

    return state.alive(state.read_state()["daemons"].get("registry"))


def pin_line(host) -> str:
    key_type, key = Path(host.host_key_path).read_text().split()[:2]
    return f"{host.address} {key_type} {key}\n"


def ssh(
    host, command: str, known_hosts: Path, *, timeout: float = 60
) -> subprocess.CompletedProcess:
    """The real OpenSSH client with the lab key and strict host key checking."""
    from infra.lab import user_key

    argv = [
        "ssh", "-i", str(user_key()), "-p", str(host.ssh_port),
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
        f"{host.ssh_user}@{host.address}", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def docker(host, *args: str) -> subprocess.CompletedProcess:
    """The docker CLI against a host's own engine, from the machine (as its tests' setup)."""
    return subprocess.run(
        ["docker", "-H", host.docker_host, *args], capture_output=True, text=True, timeout=300
    )


def gpujob(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The installed CLI in a subprocess, as a user runs it."""
    import sys

    cli = str(Path(sys.executable).with_name("gpujob"))
    return subprocess.run([cli, *args], env=env, capture_output=True, timeout=timeout)


def job_row(env: dict[str, str], job_id: str) -> dict:
    """`gpujob status --json`'s row for one job."""
    import json

    done = gpujob(env, "status", "--json")
    assert done.returncode == 0, done.stderr
    return next(row for row in json.loads(done.stdout)["jobs"] if row["id"] == job_id)
