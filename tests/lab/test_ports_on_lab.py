"""What a job serves on a lab host, reached from here through the real CLI and the host's
sshd: a SkyPilot task's `resources.ports` (an HTTP server in its run block) forwarded by
`gpujob port-forward`, and `gpujob tb`'s TensorBoard, started in the job's environment (a venv
with tensorboard on the task's PATH) and gone from the host once the job is cancelled.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import (
    free_port,
    get,
    lab_processes,
    listening,
    page_or_empty,
    read_some,
    sshd_host,
    start_forward,
    stop,
    wait_until,
)

from launcher.agent.agent_os import alive

pytestmark = pytest.mark.lab

GPUJOB = str(Path(sys.executable).with_name("gpujob"))
HOST = "ports"  # with the lab's prefix: gjlab-ports in the default lab


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with sshd_host(HOST, tmp_path_factory.mktemp("ports")) as environ:
        yield environ


def gpujob(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GPUJOB, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def submit(env: dict[str, str], folder: Path, task: str, job_id: str) -> None:
    (folder / "task.yaml").write_text(task)
    started = gpujob(env, "submit", "task.yaml", "--on", "lab", "--detach", "--job-id", job_id,
                     cwd=folder)  # fmt: skip
    assert started.returncode == 0, started.stderr


def test_a_tasks_port_is_forwarded_here_and_closed_with_the_command(
    tmp_path: Path, env: dict[str, str]
) -> None:
    port, local = 18080, free_port()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("served from the lab host\n")
    submit(env, tmp_path, f"name: web\nworkdir: site\nresources:\n  ports: {port}\nrun: |\n"
           f"  exec python3 -m http.server {port} --bind 127.0.0.1\n", "web-lab")  # fmt: skip
    try:
        shown = gpujob(env, "status", cwd=tmp_path).stdout
        assert (
            f"job web-lab serves port(s) {port} on its head node: `gpujob port-forward "
            "web-lab` forwards them here"
        ) in shown
        proc, said = start_forward(env, tmp_path, "port-forward", "web-lab", f"{port}:{local}")
        assert said.startswith(f"http://127.0.0.1:{local}/  <- port {port} of job web-lab's node 0")
        wait_until(lambda: b"served from" in page_or_empty(f"http://127.0.0.1:{local}/"), "page")
        assert get(f"http://127.0.0.1:{local}/") == b"served from the lab host\n"
        assert stop(proc, signal.SIGINT) == 130
        assert not listening(local)  # the forward ended with the command

        # no PORT: the task's recorded port, here on the same number; SIGTERM ends it with 143
        if listening(port):
            pytest.fail(f"port {port} is taken on this machine: the test needs it free")
        proc, said = start_forward(env, tmp_path, "port-forward", "web-lab")
        assert get(f"http://127.0.0.1:{port}/") == b"served from the lab host\n"
        assert stop(proc, signal.SIGTERM) == 143
        assert not listening(port)

        # SIGKILL runs no handler: the forward's ssh ends with the command all the same (an
        # ssh left behind kept the port open)
        proc, said = start_forward(env, tmp_path, "port-forward", "web-lab", f"{port}:{local}")
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
        wait_until(lambda: not listening(local), "the forward's end after a SIGKILL", timeout=10)
    finally:
        assert gpujob(env, "cancel", "web-lab", "--grace", "2", cwd=tmp_path).returncode == 0


def test_submit_forwards_the_tasks_port_while_it_follows(
    tmp_path: Path, env: dict[str, str]
) -> None:
    port = free_port()  # the host's loopback is its own; here it is free, so the URL keeps it
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("followed and served\n")
    (tmp_path / "task.yaml").write_text(
        f"name: web\nworkdir: site\nresources:\n  ports: {port}\nrun: |\n"
        f"  exec python3 -m http.server {port} --bind 127.0.0.1\n"
    )
    argv = [GPUJOB, "submit", "task.yaml", "--on", "lab", "--job-id", "web-follow"]
    proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    said = b""
    try:
        while b"forwarded while submit follows it" not in said:
            if proc.poll() is not None:
                raise AssertionError(f"submit ended {proc.returncode}: {said!r}")
            said += read_some(proc.stderr, "submit's forward line")
        url = f"http://127.0.0.1:{port}/"
        assert f"{url}  <- port {port} of job web-follow's node 0".encode() in said
        wait_until(lambda: b"followed" in page_or_empty(url), "the page through submit's forward")
        assert get(url) == b"followed and served\n"
    finally:
        assert gpujob(env, "cancel", "web-follow", "--grace", "2", cwd=tmp_path).returncode == 0
        proc.wait(timeout=60)
    assert not listening(port)  # the forward ended with the submit


@pytest.fixture(scope="module")
def tensorboard_venv() -> Path:
    """A venv with tensorboard from the configured index, kept in the lab's folder (the
    host's filesystem is this machine's): the environment a task puts on its PATH."""
    from infra.lab.naming import lab_dir

    venv = lab_dir() / "tensorboard-venv"
    if not (venv / "bin" / "tensorboard").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "tensorboard"],
                       check=True, timeout=600)  # fmt: skip
    return venv


def test_tb_serves_tensorboard_here_and_it_ends_with_the_job(
    tmp_path: Path, env: dict[str, str], tensorboard_venv: Path
) -> None:
    submit(env, tmp_path, "name: tb\nenvs:\n"
           f"  PATH: {tensorboard_venv}/bin:/usr/local/bin:/usr/bin:/bin\n"
           "tensorboard:\n  logdir: runs\nrun: |\n  mkdir -p runs && exec sleep 600\n",
           "tb-lab")  # fmt: skip
    local = free_port()
    try:
        proc, said = start_forward(env, tmp_path, "tb", "tb-lab", "--port", str(local))
        assert said.startswith(f"http://127.0.0.1:{local}/  <- port ")
        assert json.loads(get(f"http://127.0.0.1:{local}/data/logdir")) == {"logdir": "runs"}
        assert b"<html" in get(f"http://127.0.0.1:{local}/").lower()
        assert stop(proc, signal.SIGINT) == 130
        again, _ = start_forward(env, tmp_path, "tb", "tb-lab", "--port", str(local))
        assert json.loads(get(f"http://127.0.0.1:{local}/data/logdir")) == {"logdir": "runs"}
        assert stop(again, signal.SIGINT) == 130
        assert b"TensorBoard already running on job tb-lab's node 0" in again.stderr.read()
        record = _record()
        server = [pid for pid in _pids() if f"--port\0{record['port']}".encode() in _cmd(pid)]
        assert server and alive(record["watcher"])  # still there for the next `gpujob tb`
    finally:
        assert gpujob(env, "cancel", "tb-lab", "--grace", "2", cwd=tmp_path).returncode == 0
    wait_until(lambda: not any(alive(pid) for pid in [*server, record["watcher"]]), "tb's end", 30)
    assert not _record_path().exists()


def _record_path() -> Path:
    from infra.lab import boot, naming

    root = boot.host_dir(f"{naming.host_prefix()}{HOST}") / "root"
    return root / ".gpujob" / "jobs" / "tb-lab" / "node-0" / "tensorboard.json"


def _record() -> dict:
    return json.loads(_record_path().read_text())


def _pids() -> list[int]:
    return lab_processes()  # a run beside this one has a TensorBoard on the same port


def _cmd(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
