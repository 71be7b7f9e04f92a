"""A failure between a host's boot and the job's first line says what failed, in the failing
program's own words, through the real CLI on lab hosts: a job environment that cannot be
built (on an SSH host, and on a host `submit --up` rented, which is then terminated), an
image pull that fails, and a container that exits before the job's script ran.

The hosts have no internet. The environment's pins are looked for where a pip.conf on the
host points (an empty folder, no index), or, on a rented host, on an index it cannot reach.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_up_hosts as up_hosts
from labtools import SSHHost, gpujob, job_row, wait_until

from infra.fakes import RunningFake

pytestmark = pytest.mark.lab
# The `up` tests' fixtures: both fakes over a LabBackend, and a user's environment.
backend, clouds, up_env, live = up_hosts.backend, up_hosts.clouds, up_hosts.env, up_hosts.live
DEFINITIONS = Path(__file__).resolve().parents[2] / "launcher" / "images" / "definitions"

HOST = "diag"  # with the lab's prefix: gjlab-diag in the default lab
BAD_PINS = ("name: bad\nbase: gpujob-lab/base:bookworm\npython: '3.11'\ntorch: 9.9.9\n"
            "cuda: cpu\nrequirements: []\n")  # fmt: skip
"""An image definition whose torch does not exist anywhere."""


@pytest.fixture(scope="module")
def bare_host(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHost]:
    """A lab host with sshd and no dockerd (the bare runtime), whose pip finds nothing: no
    index, and an empty find-links folder."""
    import infra.lab

    try:
        host = infra.lab.create_host(HOST)
        made = SSHHost(host, tmp_path_factory.mktemp("hosts") / "hosts.yaml")
        empty = made.root / "wheels"
        empty.mkdir(exist_ok=True)
        pip_conf = made.root / ".config" / "pip" / "pip.conf"
        pip_conf.parent.mkdir(parents=True, exist_ok=True)
        pip_conf.write_text("[global]\nno-index = true\nfind-links = /root/wheels\n")
        made.hosts_file.write_text(
            f"hosts:\n  - {{name: box, address: {host.address}, user: root,"
            f" key: {infra.lab.user_key()}}}\n"
        )
        yield made
    finally:
        infra.lab.destroy_host(HOST)


def bad_env_job(folder: Path) -> Path:
    (folder / "work").mkdir(parents=True, exist_ok=True)
    (folder / "work" / "train.py").write_text("print('never runs')\n")
    (folder / "images").mkdir(exist_ok=True)
    (folder / "images" / "bad.yaml").write_text(BAD_PINS)
    spec = folder / "job.yaml"
    spec.write_text("name: diag\nimage: bad\nworkdir: work\nrun: {entrypoint: train.py}\n")
    return spec


def test_an_environment_that_fails_to_build_shows_pips_own_error(
    tmp_path: Path, bare_host: SSHHost
) -> None:
    """What the user needs, whatever the host's installer and its configuration say in their
    own words (pip's wording changes with its index, its version, its config: "No matching
    distribution found for torch==9.9.9" with one, "ResolutionImpossible" with another): the
    installer's output on the terminal, naming the pin it could not get, then one last line
    saying which node, which step, which image file, the exit code, the installer's last
    complaint and what to check."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(bare_host.hosts_file))  # fmt: skip
    done = gpujob(env, "submit", str(bad_env_job(tmp_path)), "--on", "box", "--job-id", "diag-1")
    err = done.stderr.decode()
    assert done.returncode == 1, err
    *streamed, last = err.strip().splitlines()
    assert any("torch==9.9.9" in line for line in streamed), err  # the installer's own lines
    head = "gpujob: error: node 0 (box): make the job environment from images/bad.yaml failed "
    assert last.startswith(f"{head}(exit 1): "), err
    installer = [line for line in streamed if not line.startswith(("gpujob:", "[gpujob]"))]
    assert installer and installer[-1].strip() in last, err  # its last words, quoted
    assert "must find the pins of images/bad.yaml" in last, err
    assert job_row(env, "diag-1")["state"] == "failed"
    assert done.stdout == b""  # the job never ran


def test_an_environment_that_fails_to_build_on_a_rented_host_terminates_it(
    up_env: dict[str, str], clouds: dict[str, RunningFake], backend: object, tmp_path: Path
) -> None:
    """The rented host's pip has only the index it cannot reach (the lab has no internet):
    uv (bootstrap copied it: a bare job) leaves that index out and says so, then finds no
    torch; the cause is on the terminal, exit 1, and the host the submit rented is gone."""
    spec = bad_env_job(tmp_path)
    images = tmp_path / "images"
    for name in ("lab-cpu.yaml", "lab-cpu.lock"):  # a locked image: the rent is allowed
        (images / name).write_text((DEFINITIONS / name).read_text())
    spec.write_text(spec.read_text().replace("image: bad", "image: lab-cpu"))
    done = gpujob(up_env, "submit", str(spec), "--up", "a100", "--allow-cpu", "--runtime", "bare",
                  timeout=300)  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "does not answer here: left out" in err, err  # streamed as it came
    assert "torch was not found in the provided package locations" in err, err  # uv's words
    assert "make the job environment from images/lab-cpu.yaml failed (exit 1): " in err, err
    assert "after the failed submit --up" in err, err
    assert live(clouds["lambda"], "lambda") == [], err
    assert "terminate" in [r["op"] for r in clouds["lambda"].control.requests()]
    wait_until(lambda: not backend.records, "the lab host of the terminated instance goes")


NO_BASH_TAG = "gpujob-lab/no-bash:diag"


@dataclass(frozen=True)
class DockerBox:
    lab: object  # infra.lab.LabHost, with its own dockerd
    hosts_file: Path
    image: str
    """An image without bash, in the lab registry."""

    def node_dir(self, job_id: str) -> Path:
        from infra.lab import boot

        return boot.host_dir(self.lab.name) / "root" / ".gpujob" / "jobs" / job_id / "node-0"


@pytest.fixture(scope="module")
def docker_box(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerBox]:
    """A lab host with its own dockerd, and in the lab registry the base image with bash
    removed: a container of it cannot start the job's script."""
    import subprocess

    import infra.lab
    from infra.lab import base_image, registry

    base_image.build(lambda line: print(f"lab: {line}"))
    context = tmp_path_factory.mktemp("no-bash")
    (context / "Dockerfile").write_text(f"FROM {base_image.TAG}\nRUN rm /usr/bin/bash\n")
    local = "gpujob-lab/no-bash:local"
    built = subprocess.run(["docker", "build", "-q", "-t", local, str(context)],
                           capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stderr
    name = "diagd"
    try:
        ref = registry.push(local, NO_BASH_TAG)
        host = infra.lab.create_host(name, docker=True)
        hosts_file = tmp_path_factory.mktemp("docker-hosts") / "hosts.yaml"
        hosts_file.write_text(f"hosts:\n  - {{name: dbox, address: {host.address}, user: root,"
                              f" key: {infra.lab.user_key()}}}\n")  # fmt: skip
        yield DockerBox(host, hosts_file, ref)
    finally:
        infra.lab.destroy_host(name)
        for tag in (local, f"{registry.address()}/{NO_BASH_TAG}"):  # the tags; the base stays
            subprocess.run(["docker", "rmi", tag], capture_output=True)


def test_a_container_that_exits_before_its_script_ran_says_why(
    tmp_path: Path, docker_box: DockerBox
) -> None:
    """The entrypoint (bash) is not in the image: docker-init's complaint reaches only
    `docker logs`, so the agent copies it into the job's log and its status."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('never runs')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: diag\nimage: {docker_box.image}\nworkdir: work\n"
                    "run: {entrypoint: train.py}\n")  # fmt: skip
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(docker_box.hosts_file))  # fmt: skip
    done = gpujob(env, "submit", str(spec), "--on", "dbox", "--job-id", "diag-c")
    assert done.returncode == 127, done.stderr.decode()
    # tini names its own pid, which is not always the same inside the container
    found = re.search(r"\[FATAL tini \(\d+\)\] exec bash failed: No such file or directory",
                      done.stdout.decode())  # fmt: skip
    assert found, done.stdout.decode()
    cause = found.group(0)
    said = (
        "[gpujob-agent] the container exited 127 before the job's script ran; `docker logs` "
        f"says:\n[gpujob-agent]   {cause}\n[gpujob-agent] hint: the image lacks a program the "
        "container starts (`bash` runs the job's run.sh)\n"
    )
    # the follow streamed the host's log: the agent's lines (and its disk warning, where the
    # machine running the lab is over 60% full: its hosts' disks are that machine's)
    streamed = done.stdout.decode().splitlines(keepends=True)
    assert "".join(x for x in streamed if "] disk warning: " not in x) == said
    node = docker_box.node_dir("diag-c")
    assert (node / "job.log").read_bytes() == done.stdout
    status = json.loads((node / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("failed", 127)
    assert status["reason"] == f"the container exited 127 before the job's script ran: {cause}"
    assert job_row(env, "diag-c")["state"] == "failed"


def test_an_image_pull_that_fails_says_dockers_words_and_what_to_check(
    tmp_path: Path, docker_box: DockerBox
) -> None:
    from infra.lab import registry

    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('never runs')\n")
    spec = tmp_path / "job.yaml"
    image = f"{registry.address()}/gpujob-lab/no-such-image:1"
    spec.write_text(f"name: diag\nimage: {image}\nworkdir: work\nrun: {{entrypoint: train.py}}\n")
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(docker_box.hosts_file))  # fmt: skip
    done = gpujob(env, "submit", str(spec), "--on", "dbox", "--job-id", "diag-p")
    err = done.stderr.decode()
    assert done.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"gpujob: error: node 0 (dbox): pull the job image {image} if "
                           "missing failed (exit 1): Error response from daemon: manifest for "
                           f"{image} not found"), err  # fmt: skip
    assert last.endswith("and for a private one a `docker login` there"), err
    assert done.stdout == b""
