"""Real parts for the checkpoint and storage tests: a moto S3 server on a loopback port, a
TCP forward in front of it that a test can cut and restore, a size-limited tmpfs, and the
real agent supervising a stand-in training program. Everything is removed by its id."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.agent import AGENT_MODULES

REPO = Path(__file__).resolve().parents[2]
SAVER = Path(__file__).with_name("saver.py")
AGENT = REPO / "launcher" / "agent" / "agent.py"
KEY_ID, SECRET = "gj-test-access", "gj-test-secret-value-3f9a"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    tool = Path(sys.executable).with_name("moto_server")
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(tool), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(url), "moto_server", 30)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


class Forward:
    """A TCP forward to moto that a test can cut (connections reset, port closed) and restore
    on the same port: S3 dropping in the middle of a transfer."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self.listener: socket.socket | None = None
        self.start()

    def start(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.accepted += 1
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(1 << 16):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        assert self.listener is not None
        # shutdown first: close() alone leaves the kernel's listening socket alive under the
        # accept() blocked in `_accept`, so the port stays taken and `start` cannot bind it
        # again (EADDRINUSE: the endpoint never came back, and rclone waited on its backlog).
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.conns:
            try:
                conn.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                conn.close()
            except OSError:
                pass
        self.conns = []

    def close(self) -> None:
        self.cut()


@pytest.fixture
def remote(moto: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh bucket, and a user config (GPUJOB_CONFIG_DIR) naming it as remote `t`."""
    import boto3

    bucket = f"gj-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=moto,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    ).create_bucket(Bucket=bucket)
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.yaml").write_text(
        "remotes:\n  t:\n    provider: Other\n"
        f"    endpoint: {moto}\n    region: us-east-1\n    bucket: {bucket}\n"
        "    access_key_env: GJ_TEST_KEY_ID\n    secret_key_env: GJ_TEST_SECRET\n"
    )
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(config))
    monkeypatch.setenv("GJ_TEST_KEY_ID", KEY_ID)
    monkeypatch.setenv("GJ_TEST_SECRET", SECRET)
    return {"bucket": bucket, "url": moto, "config": str(config)}


def s3_keys(url: str, bucket: str, prefix: str = "") -> dict[str, int]:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return found


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """`small_fs("1G")`: a tmpfs of that size, unmounted at teardown (needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"fs-{len(mounted)}"
        point.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], check=True
        )
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


class AgentJob:
    """The real agent (agent.py + its shipped modules) running the stand-in program."""

    def __init__(self, base: Path, ckpt_dir: Path, args: list[str], care: dict) -> None:
        self.node_dir = base / "job" / "node-0"
        self.node_dir.mkdir(parents=True)
        job_dir = self.node_dir.parent
        (job_dir / "gpujob-agent.py").write_bytes(AGENT.read_bytes())
        for module in AGENT_MODULES:  # shipped beside the agent, as a plan does
            (job_dir / Path(module).name).write_bytes(Path(module).read_bytes())
        self.ckpt_dir = ckpt_dir
        config = {
            "job_id": "t",
            "node_rank": 0,
            "nnodes": 1,
            "log": "job.log",
            "grace_s": 10,
            "argv": [sys.executable, str(SAVER), "--dir", str(ckpt_dir), *args],
            "checkpoints": {"dir": str(ckpt_dir), "interval_s": 0.3, **care},
        }
        (self.node_dir / "job.json").write_text(json.dumps(config))

    def start(self) -> AgentJob:
        done = subprocess.run(
            [
                sys.executable,
                str(self.node_dir.parent / "gpujob-agent.py"),
                "start",
                str(self.node_dir),
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return self

    @property
    def status(self) -> dict:
        try:
            return json.loads((self.node_dir / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    @property
    def log(self) -> str:
        return (self.node_dir / "job.log").read_text()

    def wait(self, timeout: float = 240) -> dict:
        terminal = ("succeeded", "failed", "cancelled", "lost")
        wait_until(lambda: self.status.get("state") in terminal, "the job to end", timeout)
        return self.status

    def kill(self) -> None:
        status = self.status
        for pid in (status.get("supervisor_pid"), status.get("pid")):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)


@pytest.fixture
def agent_job(tmp_path: Path) -> Iterator[Callable[..., AgentJob]]:
    jobs: list[AgentJob] = []

    def make(ckpt_dir: Path, args: list[str], **care: object) -> AgentJob:
        job = AgentJob(tmp_path, ckpt_dir, args, dict(care))
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        if job.status.get("state") in ("starting", "running"):
            job.kill()
