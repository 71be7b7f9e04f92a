"""The lab SLURM cluster for tests: one per test session, shared by every test that asks.

`slurm_cluster` (session scope, imported into tests/lab/conftest.py so that every module
gets the same one) starts the cluster unless it is up already, and stops it at the end
of the session only if it started it, as the `lab` fixture does for the whole lab. It needs
only the lab bridge and sshd, not Docker, the registry or S3.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from infra.lab.slurm import SlurmCluster

SEARCH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
TOOLS = ["ip", "sshd", "ssh", "nsenter", "unshare", "iptables"]


def slurm_missing() -> str | None:
    """Why the SLURM lab cannot run here, or None."""
    from infra.lab import slurm

    if os.geteuid() != 0:
        return "the SLURM lab needs root (network namespaces, sshd, slurmd)"
    absent = [tool for tool in TOOLS if shutil.which(tool, path=SEARCH) is None]
    absent += slurm.missing_tools()
    if absent:
        return f"missing {', '.join(absent)}: run `bash infra/install-deps.sh`"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(one_lab_session_at_a_time: None) -> Iterator[SlurmCluster]:
    """The running cluster (see infra/lab/slurm.py)."""
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    from infra.lab import slurm

    started = slurm.cluster() is None
    cluster = slurm.up()
    try:
        yield cluster
    finally:
        if started:
            slurm.down()


def login_ssh(
    cluster: SlurmCluster, command: str, *, timeout: float = 60
) -> subprocess.CompletedProcess:
    """`command` on the login host over the real OpenSSH client, as a user runs it."""
    from infra.lab import known_hosts_path, user_key

    argv = [
        "ssh", "-i", str(user_key()), "-p", str(cluster.login.ssh_port),
        "-o", f"UserKnownHostsFile={known_hosts_path()}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
        f"{cluster.login.ssh_user}@{cluster.login.address}", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def read_when_done(path: Path, lines: int, *, timeout: float = 60) -> str:
    """A job's output file once it holds `lines` lines (polled; the deadline guards a hang)."""
    from labtools import wait_until

    def enough() -> bool:
        return path.exists() and len(path.read_text().splitlines()) >= lines

    wait_until(enough, f"{path} with {lines} lines", timeout=timeout)
    return path.read_text()
