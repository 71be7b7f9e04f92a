"""Containers on lab hosts: host networking between hosts, images from the lab registry."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from labtools import ssh

pytestmark = pytest.mark.lab

LABEL = "gpujob.lab=test"


def test_host_network_container_on_one_host_reaches_another_host_by_address(
    docker_hosts, known_hosts
):
    from infra.lab import base_image, registry

    client, server = docker_hosts
    image = f"{registry.address()}/{base_image.TAG}"
    serve = ssh(
        server,
        f"docker run -d --label {LABEL} --network host {image} "
        f"python3 -m http.server 8765 --bind {server.address}",
        known_hosts,
    )
    assert serve.returncode == 0, serve.stderr
    fetch = (
        "import time, urllib.request\n"
        "for _ in range(50):\n"
        "    try:\n"
        f"        print(urllib.request.urlopen('http://{server.address}:8765/').status); break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
    )
    got = ssh(
        client,
        f'docker run --rm --label {LABEL} --network host {image} python3 -c "{fetch}"',
        known_hosts,
    )
    ssh(server, f"docker rm -f {serve.stdout.strip()}", known_hosts)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "200"


def test_plain_docker_on_a_host_is_the_hosts_own_engine(docker_hosts, known_hosts):
    host = docker_hosts[0]
    done = ssh(
        host, "echo $DOCKER_HOST; env -u DOCKER_HOST docker info -f '{{.Name}}'", known_hosts
    )
    assert done.stdout.split() == [host.docker_host, host.name]


def test_image_pushed_to_the_registry_is_pulled_by_a_hosts_dockerd(
    docker_hosts, known_hosts, tmp_path: Path
):
    from infra.lab import base_image, registry

    marker = uuid.uuid4().hex
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image.TAG}\nRUN echo {marker} > /marker\n")
    local = f"gpujob-lab/test-push:{marker[:12]}"
    subprocess.run(["docker", "build", "-q", "-t", local, str(tmp_path)], check=True,
                   capture_output=True)  # fmt: skip
    try:
        pulled_ref = registry.push(local, local)
    finally:
        names = [local, f"{registry.address()}/{local}"]
        subprocess.run(["docker", "rmi", *names], capture_output=True)
    assert marker[:12] in registry.tags("gpujob-lab/test-push")

    host = docker_hosts[1]
    done = ssh(host, f"docker run --rm --label {LABEL} {pulled_ref} cat /marker", known_hosts)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == marker


def test_job_image_runs_torch_on_a_host(docker_hosts, known_hosts):
    from infra.lab import job_image

    image = job_image.build(report=lambda _: None)  # cached: built once per machine
    check = "import torch, transformers; print(torch.__version__, transformers.__version__)"
    done = ssh(docker_hosts[0], f"docker run --rm --network host {image} python3 -c '{check}'",
               known_hosts, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.13.0+cpu", "5.23.0"]
