"""Workloads other than gpujob's own torchrun line, through the real CLI on this machine: a
SkyPilot-style shell `run:` block that builds its own torchrun line from SKYPILOT_* variables,
on two nodes (two agents on loopback), the plain-python launcher, and a cancel that the
program itself hears under each."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def gpujob(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO, check=False)  # fmt: skip


def test_a_skypilot_style_run_block_trains_on_two_nodes(tmp_path: Path) -> None:
    """Its rendezvous port is a free one: the task's 8008 is this machine's, which another
    test run beside this one may hold."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = gpujob(tmp_path, "submit", "jobs/sky-torchrun.yaml", "--job-id", "sky-e2e",
                  "--set", f"envs.RDZV_PORT={port}")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    out = done.stdout
    assert "[node 0] node 0 of 2, master 127.0.0.1" in out
    assert "[node 1] node 1 of 2, master 127.0.0.1" in out
    ranks = set(re.findall(r"rank (\d)/4: done", out))
    assert ranks == {"0", "1", "2", "3"}, out[-2000:]
    assert "final loss" in out
    assert "job sky-e2e succeeded (exit code 0)" in done.stderr


def test_launcher_none_runs_the_program_once_per_node_with_the_node_variables(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text(
        "import os\n"
        "print('hello from', os.environ['GPUJOB_NODE_RANK'], 'of', os.environ['GPUJOB_NUM_NODES'],"
        " 'head', os.environ['GPUJOB_HEAD_IP'], flush=True)\n"
    )
    spec = tmp_path / "job.yaml"
    spec.write_text("name: hello\nimage: host\nworkdir: work\nnodes: 2\n"
                    "run: {entrypoint: hello.py, launcher: none}\n")  # fmt: skip
    done = gpujob(tmp_path, "submit", str(spec), "--job-id", "none-e2e")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for rank in (0, 1):
        assert f"[node {rank}] hello from {rank} of 2 head 127.0.0.1" in done.stdout


def test_a_skypilot_task_file_runs_as_it_is_on_two_nodes(tmp_path: Path) -> None:
    (tmp_path / "task").mkdir()  # a task without workdir: nothing of its folder is shipped
    task = tmp_path / "task" / "task.yaml"
    task.write_text(
        "name: hello-sky\nnum_nodes: 2\nresources:\n  cpus: 1+\nenvs:\n  GREETING: hi\n"
        "setup: |\n  echo setup $SKYPILOT_SETUP_NODE_RANK\n"
        'run: |\n  echo "$GREETING from $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES, '
        '$(echo "$SKYPILOT_NODE_IPS" | wc -l) ips"\n'
    )
    done = gpujob(tmp_path, "submit", str(task), "--job-id", "sky-task")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "a SkyPilot task, read as gpujob's spec" in done.stderr
    for rank in (0, 1):
        assert f"[node {rank}] setup {rank}" in done.stdout
        assert f"[node {rank}] hi from {rank} of 2, 2 ips" in done.stdout


TRAPS_TERM = """\
import os, signal, sys, time
def bye(*_):
    with open(os.environ["HEARD"], "w") as out:
        out.write(f"handler ran in {os.getpid()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(
    "run",
    ["|\n  echo starting\n  python prog.py\n", "{entrypoint: prog.py, launcher: none}"],
    ids=["shell-block", "launcher-none"],
)
def test_cancel_reaches_the_program_under_a_shell_block_and_launcher_none(
    tmp_path: Path, run: str
) -> None:
    """The program traps SIGTERM: `gpujob cancel` must make its handler run, however many
    shells sit between the agent and it (a shell block's bash dies of a TERM unheard)."""
    work, heard = tmp_path / "work", tmp_path / "heard.txt"
    work.mkdir()
    (work / "prog.py").write_text(TRAPS_TERM)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: traps\nimage: host\nworkdir: work\nenvs:\n  HEARD: {heard}\n"
                    f"run: {run}\n")  # fmt: skip
    started = gpujob(tmp_path, "submit", str(spec), "--detach", "--job-id", "traps")
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    node_dir = tmp_path / "state" / "jobs" / "traps" / "node-0"
    deadline = time.monotonic() + 120
    while not (node_dir / "job.log").is_file() or "ready" not in (node_dir / "job.log").read_text():
        assert time.monotonic() < deadline, "the program never said ready"
        time.sleep(0.2)
    cancelled = gpujob(tmp_path, "cancel", "traps", "--grace", "20")
    assert cancelled.returncode == 0, cancelled.stderr
    assert heard.is_file(), "the program never heard SIGTERM"
    assert heard.read_text().startswith("handler ran in ")
    shown = gpujob(tmp_path, "status", "--json")
    job = next(row for row in json.loads(shown.stdout)["jobs"] if row["id"] == "traps")
    assert job["state"] == "cancelled"


def test_a_ray_job_runs_its_driver_on_a_cluster_of_both_nodes_and_leaves_no_ray_behind(
    tmp_path: Path, one_ray_on_the_machine: Path
) -> None:
    """A real Ray cluster (Ray from the dev extras; `image: host` runs this venv's python3):
    node 0 starts the head, node 1 joins, the driver pins a task to each node; afterwards no
    Ray process of this session is left on the machine (`ray stop` on every node). Its own
    temp dir and a free port keep it apart from any other Ray on the machine."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               RAY_TMPDIR=str(one_ray_on_the_machine),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # fmt: skip
    argv = [GPUJOB, "submit", "jobs/ray.yaml", "--job-id", "ray-e2e",
            "--set", f"run.ray_port={free_port()}"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "[node 0] [gpujob] ray: 2 node(s) in the cluster" in done.stdout
    assert "[node 1] [gpujob] ray: node 1 (127.0.0.1) joined" in done.stdout
    assert "[node 0] driver: 2 node(s) in the cluster" in done.stdout
    assert "[node 0] task on node 1: ran at" in done.stdout
    left = _ray_left(mark=str(one_ray_on_the_machine))
    assert left == [], f"Ray processes left: {left}"


def _ray_left(port: int | None = None, settle_s: float = 20.0, mark: str = "") -> list[str]:
    """This test's Ray processes (their command line names `mark`, its Ray temp dir, or
    `port`) still alive once those already exiting have had `settle_s` to go: a raylet seen
    in its last moments is not left behind; one alive after that is."""
    deadline = time.monotonic() + settle_s
    while True:
        left = [
            f"{p.name}: {_comm(p)} {_cmdline(p)}".strip()
            for p in Path("/proc").iterdir()
            if p.name.isdigit()
            and (
                (_comm(p) in ("raylet", "gcs_server") and mark and mark in _cmdline(p))
                or (port is not None and f":{port}" in _cmdline(p))
            )
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _comm(proc: Path) -> str:
    try:
        return (proc / "comm").read_text().strip()
    except OSError:
        return ""


# Node 1's `ray start` never returns, as it does not for a head it cannot reach (a firewall
# on the Ray port): a hook in the job's PYTHONPATH holds that one process, and notes node 1's
# `ray stop` in a file (its output goes nowhere); it leaves every other python alone.
HOLD_RAY_JOIN = """\
import os, sys, time
if os.environ.get("GPUJOB_NODE_RANK") == "1" and "stop" in sys.argv:
    with open(os.environ["STOP_SEEN"], "a") as seen:
        seen.write("ray stop ran on node 1\\n")
if os.environ.get("GPUJOB_NODE_RANK") == "1" and "start" in sys.argv and any(
        arg.startswith("--address=") for arg in sys.argv):
    print("held: joining a head that never answers", flush=True)
    time.sleep(600)
"""


def test_a_cancel_while_a_ray_worker_is_joining_leaves_no_ray_process(
    tmp_path: Path, one_ray_on_the_machine: Path
) -> None:
    """The worker's try runs under `timeout`, in a process group of its own that the cancel's
    TERM to the job's group misses: the run script must stop it and run `ray stop` at once.
    Left waiting for the try, bash would take the grace's SIGKILL and never run `ray stop`,
    and a Ray process started during the grace would outlive the job."""
    hook, work, stop_seen = tmp_path / "hook", tmp_path / "work", tmp_path / "stop-seen.txt"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOLD_RAY_JOIN)
    work.mkdir()
    (work / "driver.py").write_text((REPO / "jobs" / "ray" / "driver.py").read_text())
    port = free_port()
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: ray-join\nimage: host\nworkdir: work\nnodes: 2\n"
                    f"envs:\n  PYTHONPATH: {hook}\n  STOP_SEEN: {stop_seen}\n"
                    f"run:\n  entrypoint: driver.py\n  launcher: ray\n"
                    f"  ray_port: {port}\n")  # fmt: skip
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               RAY_TMPDIR=str(one_ray_on_the_machine),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # fmt: skip
    argv = [GPUJOB, "submit", str(spec), "--detach", "--job-id", "ray-join"]
    started = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                             cwd=REPO, check=False)  # fmt: skip
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    logs = tmp_path / "state" / "jobs" / "ray-join"
    argv = [GPUJOB, "cancel", "ray-join", "--grace", "30"]
    try:
        deadline = time.monotonic() + 120
        while not (_has(logs / "node-0" / "job.log", "Ray runtime started")
                   and _has(logs / "node-1" / "job.log", "held: joining")):  # fmt: skip
            assert time.monotonic() < deadline, (
                "the head never started or node 1 never tried:\n"
                + ("\n".join(_tail(logs / f"node-{rank}" / "job.log") for rank in (0, 1)))
            )
            time.sleep(0.2)
    except BaseException:
        subprocess.run(argv, env=env, capture_output=True, timeout=300, cwd=REPO, check=False)
        raise
    cancelled = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                               cwd=REPO, check=False)  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    assert stop_seen.is_file(), "node 1 never ran `ray stop`: its run script was SIGKILLed"
    left = _ray_left(port, mark=str(one_ray_on_the_machine))
    assert left == [], f"Ray processes left: {left}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _has(log: Path, text: str) -> bool:
    return log.is_file() and text in log.read_text(errors="replace")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-1500:] if log.is_file() else f"{log}: none"


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
