"""What a job serves, on this machine: a SkyPilot task's `resources.ports` recorded with the
job, said by `submit` and `status`, given by `port-forward` as the URL it already is, and
`tb` in an environment without TensorBoard said in one line."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def gpujob(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GPUJOB, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str, timeout_s: float = 30) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return bytes(answer.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_local_tasks_ports_are_recorded_and_said(tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    port = free_port()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("served by the job\n")
    task = tmp_path / "task.yaml"
    task.write_text(f"name: web\nworkdir: site\nresources:\n  ports: {port}\n"
                    f"run: |\n  exec python3 -m http.server {port} --bind 127.0.0.1\n")  # fmt: skip
    started = gpujob(env, "submit", "task.yaml", "--detach", "--job-id", "web-1", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}/"
    assert f"job web-1 serves on this machine: {url}" in started.stderr
    try:
        assert get(url) == b"served by the job\n"
        shown = gpujob(env, "status")
        assert f"job web-1 serves on this machine: {url}" in shown.stdout
        forwarded = gpujob(env, "port-forward", "web-1")
        assert forwarded.returncode == 0, forwarded.stderr
        assert forwarded.stdout.startswith(f"{url}  (job web-1 runs on this machine")
        tb = gpujob(env, "tb", "web-1", "--logdir", "runs")
        assert tb.returncode == 1
        assert tb.stderr.splitlines() == [
            "gpujob: error: tensorboard is not installed in job web-1's environment. add "
            "`tensorboard` to its image's requirements (or `pip install tensorboard` in its "
            "setup:) and submit it again"
        ]
    finally:
        assert gpujob(env, "cancel", "web-1", "--grace", "2").returncode == 0
    assert "serves" not in gpujob(env, "status").stdout  # an ended job's ports are not shown


def test_tb_says_which_folder_the_running_tensorboard_serves(tmp_path: Path) -> None:
    """A second `tb` with another --logdir finds the first one's TensorBoard running: it says
    the folder that one serves, not the one asked for; the job's end stops it. A stand-in
    `tensorboard` (an http.server over --logdir) is on the job's PATH."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    bin_dir, work = tmp_path / "bin", tmp_path / "w"
    bin_dir.mkdir()
    stand_in = bin_dir / "tensorboard"
    stand_in.write_text('#!/bin/sh\nexec python3 -m http.server "$6" --bind 127.0.0.1 '
                        '--directory "$2"\n')  # fmt: skip
    stand_in.chmod(0o755)
    for name in ("a", "b"):
        (work / name).mkdir(parents=True)
        (work / name / "index.html").write_text(f"run {name}\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: tb\nimage: host\nworkdir: w\nenvs: {{PATH: '{bin_dir}:/usr/bin:/bin'}}"
                    "\nrun: {shell: 'sleep 300'}\n")  # fmt: skip
    started = gpujob(env, "submit", str(spec), "--detach", "--job-id", "tb-1", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    try:
        first = gpujob(env, "tb", "tb-1", "--logdir", "a")
        assert first.returncode == 0, first.stderr
        port = re.search(r"over a \(port (\d+)\)", first.stderr)
        assert port, first.stderr
        assert get(f"http://127.0.0.1:{port[1]}/") == b"run a\n"
        second = gpujob(env, "tb", "tb-1", "--logdir", "b")
        assert second.returncode == 0, second.stderr
        assert (f"TensorBoard already running on job tb-1's node 0 over a (port {port[1]}), "
                "not b: one per job, until the job ends") in second.stderr  # fmt: skip
    finally:
        assert gpujob(env, "cancel", "tb-1", "--grace", "2").returncode == 0
    deadline = time.monotonic() + 30
    while get_or_none(f"http://127.0.0.1:{port[1]}/") is not None:
        assert time.monotonic() < deadline, "TensorBoard still answers after the job's end"
        time.sleep(0.5)


def get_or_none(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bytes(answer.read())
    except OSError:
        return None
