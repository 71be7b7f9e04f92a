"""Helpers for the lab tests: the real ssh and docker clients, why the lab cannot run, and
cutting a host's SSH connections under a client (by pid, as a flaky network would)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from infra.fakes.lab_backend import children, comm
from launcher.agent.agent_os import descendants

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
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


def base_image_ref() -> str:
    """The lab base image as hosts pull it (`10.77.0.1:5000/gpujob-lab/base:bookworm` in the
    default lab): the session lab's registry, so known only once the session chose its lab."""
    from infra.lab import base_image, registry

    return f"{registry.address()}/{base_image.TAG}"


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
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, timeout=timeout)


def job_row(env: dict[str, str], job_id: str) -> dict:
    """`gpujob status --json`'s row for one job."""
    import json

    done = gpujob(env, "status", "--json")
    assert done.returncode == 0, done.stderr
    return next(row for row in json.loads(done.stdout)["jobs"] if row["id"] == job_id)


LONG_JOB = (
    "import time\nfor i in range(100_000):\n    print(f'line {i:06d} ' + 'x' * 40)\n"
    "    if i % 2000 == 0:\n        time.sleep(0.3)\nprint('end', flush=True)\n"
)
"""A 100,000-line job that takes a while: long enough for 10 cut connections."""


def lab_processes() -> list[int]:
    """The pids of processes in this session's lab hosts (their network namespaces): a test
    run beside this one runs jobs of the same ids, and servers on the same ports, on its own
    lab, and a scan of /proc must not take those for this session's."""
    from infra.lab import network

    ours = {(network.NETNS_DIR / name).stat().st_ino for name in network.lab_namespaces()}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}/ns/net").st_ino in ours:
                found.append(int(pid))
    return found


def wait_until(
    condition: Callable[[], bool], what: str, timeout: float = 120, every: float = 0.05
) -> None:
    """Poll until an observable state holds. The deadline only guards against a hang and fails
    naming what never happened: what a test asserts is the state, never how long it took.
    `every`: a condition that starts a process or asks S3 passes 0.5 (20 such asks a second,
    for minutes, took a core from the test run beside it); one that reads memory or a file
    keeps 50 ms, which catches a job between two of its steps."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not so after {timeout:.0f} s")
        time.sleep(every)


def read_some(pipe: IO[bytes], what: str, timeout: float = 120) -> bytes:
    """The next bytes a child writes to a pipe (one read of the fd, so nothing is left in a
    Python buffer for a later `communicate`). A bare read blocks for ever on a hung child and
    spins on an ended one; this fails naming what never came."""
    ready, _, _ = select.select([pipe], [], [], timeout)
    if not ready:
        raise AssertionError(f"{what}: nothing written in {timeout:.0f} s")
    chunk = os.read(pipe.fileno(), 65536)
    if not chunk:
        raise AssertionError(f"{what}: the stream ended")
    return chunk


def _drain(pipe: IO[bytes], into: bytearray) -> None:
    """Everything a child writes to a pipe, appended as it comes (so another thread can see
    the stream grow)."""
    while chunk := os.read(pipe.fileno(), 65536):
        into += chunk


def follow_through_cuts(env: dict[str, str], job_id: str, host_name: str) -> bytes:
    """`gpujob logs JOB -f` while the host's sshd processes for it are killed 10 times: what
    the client printed (it must end well, after 10 cuts)."""
    follow = subprocess.Popen([GPUJOB, "logs", job_id, "-f"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    out, err = bytearray(), bytearray()
    drains = [
        threading.Thread(target=_drain, args=(follow.stdout, out)),
        threading.Thread(target=_drain, args=(follow.stderr, err)),
    ]
    for drain in drains:
        drain.start()
    killed: list[int] = []
    cutter = threading.Thread(target=cut_connections, args=(host_name, killed, 10, follow, out))
    cutter.start()
    try:
        follow.wait(timeout=300)
    finally:
        if follow.poll() is None:
            follow.kill()
        for drain in drains:
            drain.join()
        cutter.join()
    assert follow.returncode == 0, err.decode()[-2000:]
    assert len(set(killed)) >= 10, killed
    return bytes(out)


def cut_connections(
    host_name: str, killed: list[int], times: int, client: subprocess.Popen, streamed: bytearray
) -> None:
    """SIGKILL, by pid, the sshd processes serving the client's connection (the children of
    the host's listening sshd), each time a new connection has come up and the client has
    printed more (`streamed`, its stdout so far) over it: every cut lands mid-stream."""
    from infra.lab import state

    listener = state.read_state()["hosts"][host_name]["sshd"]["pid"]
    deadline = time.monotonic() + 180
    while len(killed) < times and time.monotonic() < deadline and client.poll() is None:
        sessions = [p for p in children(listener) if p not in killed]
        if not sessions:
            time.sleep(0.05)
            continue
        mark = len(streamed)
        while len(streamed) == mark and client.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in sessions:
            tree = [pid, *[p for p in descendants(pid) if comm(p).startswith("sshd")]]
            for target in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target, signal.SIGKILL)
            killed.append(pid)


@dataclass(frozen=True)
class SSHHost:
    """A lab host as a hosts.yaml entry: its folder of this machine, and its job logs."""

    lab: object  # infra.lab.LabHost
    hosts_file: Path

    @property
    def root(self) -> Path:
        """The host's /root as a folder of this machine (its "disk")."""
        from infra.lab import boot

        return boot.host_dir(self.lab.name) / "root"

    def job_log(self, job_id: str) -> bytes:
        return (self.root / ".gpujob" / "jobs" / job_id / "node-0" / "job.log").read_bytes()


def point_pip_at(root: Path, wheels: Path) -> None:
    """The host's pip (its /root as `root`) pointed at the lab's wheelhouse only, as a host
    is pointed at a mirror, and told not to byte-compile what it installs (`compile = false`,
    what `--no-compile` sets; uv's default; `no-compile = true` in a pip.conf would compile):
    compiling torch's thousands of modules on the lab's two shared cores made the job
    environment take 87 s instead of 14 s. What the job does with the environment is the
    same; Python compiles a module when it is first imported."""
    conf = root / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"[global]\nno-index = true\nfind-links = {wheels}\n"
                    "[install]\ncompile = false\n")  # fmt: skip


def with_lab_s3(env: dict[str, str], folder: Path) -> dict[str, str]:
    """`env` with the lab's S3 as remote `lab` (a fresh bucket; the hosts reach it over the
    bridge) and its keys in the variables the remote names."""
    from infra.lab import s3

    bucket = s3.create_bucket()
    config = folder / "config"
    config.mkdir()
    (config / "config.yaml").write_text(
        f"remotes:\n  lab:\n    provider: Other\n    endpoint: {s3.endpoint()}\n"
        f"    host_endpoint: {s3.endpoint(for_hosts=True)}\n    bucket: {bucket}\n"
        "    access_key_env: GJ_LAB_KEY\n    secret_key_env: GJ_LAB_SECRET\n"
    )
    return dict(env, GPUJOB_CONFIG_DIR=str(config), GJ_LAB_KEY=s3.ACCESS_KEY,
                GJ_LAB_SECRET=s3.SECRET_KEY)  # fmt: skip


SSHD_TOOLS = ("ip", "sshd", "ssh", "nsenter", "unshare")


@contextlib.contextmanager
def sshd_host(name: str, folder: Path) -> Iterator[dict[str, str]]:
    """A lab host with sshd only, named `lab` in a hosts.yaml under `folder`, and the
    environment of a private state dir (so the first command pins its key); removed at the
    end with the bridge if this made it. Skips the test where the lab cannot run."""
    import pytest

    absent = [tool for tool in SSHD_TOOLS if shutil.which(tool, path=SEARCH) is None]
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, sshd)")
    if absent:
        pytest.skip(f"missing {', '.join(absent)}: run `bash infra/install-deps.sh`")
    import infra.lab
    from infra.lab import naming, network, state
    from launcher.remote.openssh import close_state

    bridge_was_up = network.link_exists(naming.bridge())
    try:
        host = infra.lab.create_host(name)
        hosts_file = folder / "hosts.yaml"
        hosts_file.write_text(f"hosts:\n  - {{name: lab, address: {host.address}, user: root,"
                              f" key: {infra.lab.user_key()}}}\n")  # fmt: skip
        yield dict(os.environ, GPUJOB_STATE_DIR=str(folder / "state"),
                   GPUJOB_HOSTS_FILE=str(hosts_file))  # fmt: skip
    finally:
        close_state(folder / "state")
        infra.lab.destroy_host(name)
        if not bridge_was_up and not state.read_state()["hosts"]:
            network.remove_bridge()


# -- ports forwarded here (gpujob port-forward, gpujob tb) ----------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return bytes(answer.read())


def start_forward(
    env: dict[str, str], cwd: Path | None, *args: str
) -> tuple[subprocess.Popen, str]:
    """A forwarding command started, and what it printed once it forwards."""
    proc = subprocess.Popen([GPUJOB, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    shown = b""
    while b"forwarding until Ctrl-C" not in shown:
        if proc.poll() is not None:
            raise AssertionError(f"{args}: ended {proc.returncode}: {proc.stderr.read()!r}")
        shown += read_some(proc.stdout, f"gpujob {' '.join(args)}")
    return proc, shown.decode()


def stop(proc: subprocess.Popen, sig: signal.Signals) -> int:
    proc.send_signal(sig)
    return proc.wait(timeout=30)


def page_or_empty(url: str) -> bytes:
    """The page, or nothing while no server answers there yet."""
    try:
        return get(url)
    except OSError:
        return b""
