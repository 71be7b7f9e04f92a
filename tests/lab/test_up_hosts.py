"""`gpujob up` through the real CLI against the provider fakes backed by real lab hosts: the
host answers SSH, is bootstrapped (checks and fixes reported), `gpujob ssh` reaches it with
its key pinned, a second check changes nothing, and `gpujob down` removes it.

Lab hosts have no GPU: `--allow-cpu` lets the bootstrap go on, and without it `up` stops at
the GPU step and terminates what it rented.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from labtools import base_image_ref

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake, serve_lambda, serve_vast

pytestmark = pytest.mark.lab
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


@pytest.fixture
def backend(lab: None, tmp_path: Path) -> Iterator[Any]:
    from infra.fakes.lab_backend import LabBackend

    made = LabBackend(tmp_path / "records.json")
    yield made
    made.close()  # whatever a failed test left running


@pytest.fixture
def clouds(backend: Any) -> Iterator[dict[str, RunningFake]]:
    lam, vast = serve_lambda(backend), serve_vast(backend)
    yield {"lambda": lam, "vast": vast}
    lam.stop()
    vast.stop()


@pytest.fixture
def env(clouds: dict[str, RunningFake], tmp_path: Path) -> dict[str, str]:
    """What a user's shell would hold: API keys, the fakes' URLs, the key gpujob registers."""
    import os

    from infra.lab import user_key

    return {
        **os.environ,
        "GPUJOB_STATE_DIR": str(tmp_path / "state"),
        "GPUJOB_CACHE_DIR": str(tmp_path / "cache"),
        "GPUJOB_HOSTS_FILE": str(tmp_path / "hosts.yaml"),
        "GPUJOB_SSH_KEY": str(user_key()),
        "GPUJOB_POLL_S": "0.5",
        "GPUJOB_LAMBDA_SSH_USER": "root",  # Lambda logs in as ubuntu; lab hosts have root only
        "LAMBDA_API_KEY": LAMBDA_API_KEY,
        "GPUJOB_LAMBDA_API_URL": clouds["lambda"].url,
        "VAST_API_KEY": VAST_API_KEY,
        "GPUJOB_VAST_API_URL": clouds["vast"].url,
        "GPUJOB_VAST_IMAGE": base_image_ref(),
    }


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True, timeout=600)


def live(fake: RunningFake, provider: str) -> list[dict[str, Any]]:
    if provider == "lambda":
        reply = requests.get(f"{fake.url}/instances", timeout=10,
                             headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
        going = ("terminating", "terminated")  # terminating: billing has stopped (Lambda)
        return [i for i in reply.json()["data"] if i["status"] not in going]
    root = fake.url.rsplit("/api/v0", 1)[0]
    reply = requests.get(f"{root}/api/v1/instances/", timeout=10,
                         headers={"Authorization": f"Bearer {VAST_API_KEY}"})  # fmt: skip
    return reply.json()["instances"]


@pytest.mark.parametrize(("provider", "gpu"), [("lambda", "a100"), ("vast", "rtx4090")])
def test_up_bootstraps_a_host_that_gpujob_ssh_reaches_and_down_removes(
    provider: str, gpu: str, env: dict[str, str], clouds: dict[str, RunningFake]
) -> None:
    up = gpujob(env, "up", gpu, "--provider", provider, "--yes", "--allow-cpu",
                "--timeout", "300")  # fmt: skip
    assert up.returncode == 0, up.stderr
    name, cloud, _instance, login, _ = up.stdout.splitlines()[-1].split("\t")
    assert (cloud, name.startswith("gpujob-")) == (provider, True)
    for step in ("system", "gpu", "docker", "disk", "rclone"):
        assert f"{name}: " in up.stderr and f" {step} " in up.stderr, up.stderr
    assert "no NVIDIA GPU" in up.stderr  # said plainly, never pretended
    if provider == "vast":  # a container of the base image: no Docker, no rclone until fixed
        assert "skipped docker  bare runtime" in up.stderr
        assert "fixed   rclone" in up.stderr
        assert "fixed   uv" in up.stderr  # this machine's uv, for the job environments

    hello = gpujob(env, "ssh", name, "--", "echo hello from $(hostname)")  # as ssh: one string
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout.startswith("hello from ")
    pins = Path(env["GPUJOB_STATE_DIR"], "known_hosts").read_text()
    assert login.split("@")[1].rsplit(":", 1)[0] in pins  # pinned on first contact
    again = gpujob(env, "up", "--host", name, "--allow-cpu")
    assert again.returncode == 0, again.stderr
    assert f"{name}: ready; nothing changed" in again.stderr

    down = gpujob(env, "down", name)
    assert down.returncode == 0, down.stderr
    assert f"terminated {name}" in down.stdout
    assert live(clouds[provider], provider) == []
    gone = gpujob(env, "ssh", name, "--", "true")
    assert gone.returncode != 0


def test_up_without_allow_cpu_stops_at_the_gpu_step_and_terminates(
    env: dict[str, str], clouds: dict[str, RunningFake]
) -> None:
    up = gpujob(env, "up", "a100", "--provider", "lambda", "--yes", "--timeout", "300")
    assert up.returncode == 1
    last = up.stderr.strip().splitlines()[-1]
    assert "gpu: no NVIDIA GPU" in last and "--allow-cpu" in last, up.stderr
    assert re.search(r"terminated gpujob-[0-9a-f]{8}-a100-", up.stderr), up.stderr
    assert live(clouds["lambda"], "lambda") == []


def test_a_static_host_is_bootstrapped_once_and_then_only_checked(
    lab: None, env: dict[str, str]
) -> None:
    import infra.lab

    host = infra.lab.create_host("static", docker=True)
    try:
        Path(env["GPUJOB_HOSTS_FILE"]).write_text(
            f"hosts:\n  - {{name: box, address: {host.address}, user: root, "
            f"key: {infra.lab.user_key()}}}\n"
        )
        first = gpujob(env, "up", "--host", "box", "--allow-cpu", "--json")
        assert first.returncode == 0, first.stderr
        import json

        report = json.loads(first.stdout)
        statuses = {s["step"]: s["status"] for s in report["steps"]}
        assert statuses["docker"] == "ok" and statuses["gpu"] == "skipped"
        second = gpujob(env, "up", "--host", "box", "--allow-cpu")
        assert "box: ready; nothing changed" in second.stderr, second.stderr
        # Each job ships its own agent: bootstrap leaves none of its own for jobs to ignore.
        listed = gpujob(env, "ssh", "box", "--", "ls", "-a", f"{report['facts']['home']}")
        assert ".gpujob" not in listed.stdout.split(), listed.stdout
    finally:
        infra.lab.destroy_host("static")
