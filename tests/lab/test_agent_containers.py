"""The agent's cancel of a container job whose supervisor died, on the machine's own dockerd:
a container created but never started (the supervisor died in `docker run`) and one that
exited are the job's too, and none is left holding the secrets Docker keeps on disk
(config.v2.json has the values of its `--env NAME`).

The agent runs as on a host (its files, the host's Python); the node folder is what the plan
writes for a container job, with the states a dead supervisor leaves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

AGENT = Path(__file__).resolve().parents[2] / "launcher" / "agent" / "agent.py"
SECRET = "s3cr3t-kept-by-docker-on-disk"


def docker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False,
                          env=None if env is None else dict(os.environ, **env))  # fmt: skip


def agent(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(AGENT), *args], capture_output=True, text=True,
                          timeout=120, check=False, env=env)  # fmt: skip
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


@pytest.fixture
def node(tmp_path: Path, lab: None, request: pytest.FixtureRequest) -> tuple[Path, str]:
    """A container job's node folder whose supervisor is dead (a pid that ran and ended)."""
    from infra.lab import base_image

    name = f"gpujob-agentcancel-{os.getpid()}-{request.node.name[-12:].replace('_', '-')}"
    request.addfinalizer(lambda: docker("rm", "--force", name))
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    options = ["--name", name, "--network", "none", "--env", "GJ_TOKEN", base_image.TAG]
    argv = ["docker", "run", "--detach", *options, "sleep", "600"]
    config = {"runtime": "docker", "container": name, "argv": argv, "log": "job.log"}
    (node_dir / "job.json").write_text(json.dumps(config))
    dead = subprocess.Popen(["true"])
    dead.wait()
    status = {"state": "starting", "supervisor_pid": dead.pid, "requested_at": time.time() - 120}
    (node_dir / "status.json").write_text(json.dumps(status))
    created = docker("create", *options, "sleep", "600", env={"GJ_TOKEN": SECRET})
    assert created.returncode == 0, created.stderr
    return node_dir, name


def test_a_container_created_but_never_started_is_removed_by_the_cancel(
    node: tuple[Path, str],
) -> None:
    node_dir, name = node
    assert SECRET in docker("inspect", name).stdout
    code, said = agent("status", str(node_dir))
    assert said["state"] == "lost"
    assert f"its container is left (container {name}, created)" in said["reason"], said

    code, said = agent("cancel", str(node_dir), "2")
    assert code == 0, said
    assert said["state"] == "cancelled", said
    assert docker("inspect", name).returncode != 0  # gone, with its config.v2.json


def test_an_ended_nodes_exited_container_is_removed_by_the_cancel(
    node: tuple[Path, str],
) -> None:
    """The supervisor recorded the end, then died before removing the container."""
    node_dir, name = node
    assert docker("start", name).returncode == 0
    assert docker("kill", name).returncode == 0
    ended = {"state": "failed", "exit_code": 137, "container": name, "ended_at": time.time()}
    (node_dir / "status.json").write_text(json.dumps(ended))
    assert SECRET in docker("inspect", name).stdout  # Docker keeps the value while it exists

    code, said = agent("cancel", str(node_dir), "2")
    assert code == 0, said
    assert said["had_ended"] and said["state"] == "failed", said  # its own end stands
    assert docker("inspect", name).returncode != 0


def test_a_docker_run_that_fails_to_start_leaves_no_container(
    tmp_path: Path, lab: None, request: pytest.FixtureRequest
) -> None:
    """`docker run` creates the container, then cannot start its program: the node fails
    and the container, holding the secret in Docker's config, goes with it."""
    from infra.lab import base_image

    name = f"gpujob-agentcancel-{os.getpid()}-nostart"
    request.addfinalizer(lambda: docker("rm", "--force", name))
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    argv = ["docker", "run", "--detach", "--name", name, "--network", "none", "--env",
            "GJ_TOKEN", base_image.TAG, "/no/such/program"]  # fmt: skip
    config = {"runtime": "docker", "container": name, "argv": argv, "log": "job.log"}
    (node_dir / "job.json").write_text(json.dumps(config))
    started = subprocess.run([sys.executable, str(AGENT), "start", str(node_dir)],
                             env=dict(os.environ, GJ_TOKEN=SECRET), capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
    said = json.loads(started.stdout.splitlines()[-1])
    assert started.returncode == 1 and said["state"] == "failed", said
    assert docker("inspect", name).returncode != 0


def test_a_cancel_during_a_long_docker_run_stops_the_container(
    tmp_path: Path, lab: None, request: pytest.FixtureRequest
) -> None:
    """The supervisor lives but its `docker run` has not returned after the cancel's wait
    (a pull, a slow dockerd): the cancel stops the container by its planned name, and the
    supervisor, once its start returns, finds the cancel and ends the node cancelled."""
    from infra.lab import base_image

    name = f"gpujob-agentcancel-{os.getpid()}-slowrun"
    request.addfinalizer(lambda: docker("rm", "--force", name))
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    run = f"docker run --detach --name {name} --network none {base_image.TAG} sleep 600"
    # the cancel waits twice the agent's start window for the start to have a job to stop
    # (30 s by default, 3 s here); the start returns some 10 s after that wait is over
    wait_s = 3
    env = dict(os.environ, GPUJOB_AGENT_START_WAIT_S=str(wait_s))
    config = {"runtime": "docker", "container": name, "log": "job.log", "grace_s": 1,
              "argv": ["sh", "-c", f"{run} && sleep {2 * wait_s + 10}"]}  # fmt: skip
    (node_dir / "job.json").write_text(json.dumps(config))
    start = subprocess.Popen([sys.executable, str(AGENT), "start", str(node_dir)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    request.addfinalizer(start.wait)
    deadline = time.monotonic() + 30
    while docker("inspect", name).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)

    code, said = agent("cancel", str(node_dir), "1", env=env)
    assert code == 0 and said["state"] == "cancelled", said
    assert docker("inspect", name).returncode != 0  # stopped, then removed at the end
    assert "cancel: docker stop" in (node_dir / "job.log").read_text()
