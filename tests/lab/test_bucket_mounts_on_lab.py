"""Bucket file_mounts on lab hosts over SSH, through the real CLI: the host's rclone fetches
a `REMOTE:path` of the user config (S3 at the bridge address, the remote's `host_endpoint`)
before `setup`, the job reads it, and what it writes into a MOUNT_CACHED mount in the host's
home is in the bucket once the job has ended; the keys are in no file on the host. Then a
SkyPilot task in containers on two hosts: each reads the bucket and writes its output."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import test_remote_jobs as remote
import yaml
from labtools import with_lab_s3
from test_ssh_jobs import gpujob, ssh_host  # noqa: F401 (a lab host with sshd, per session)

pytestmark = pytest.mark.lab
docker_lab, env = remote.docker_lab, remote.env  # the two docker hosts as `ta`, `tb`

SPEC = """\
name: buckets
image: host
workdir: null
file_mounts:
  ~/gj-bucket-test/in: lab:inputs
  ~/gj-bucket-test/out: {source: lab:outputs, mode: MOUNT_CACHED}
setup: echo "setup reads $(cat ~/gj-bucket-test/in/hello.txt)"
run:
  shell: tr a-z A-Z < ~/gj-bucket-test/in/hello.txt > ~/gj-bucket-test/out/upper.txt
"""


def test_a_bucket_is_fetched_on_the_host_and_its_outputs_uploaded(
    tmp_path: Path,
    ssh_host: Any,  # noqa: F811
    lab: None,
) -> None:
    from infra.lab import s3

    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(ssh_host.hosts_file))  # fmt: skip
    env = with_lab_s3(env, tmp_path)
    bucket = yaml.safe_load((tmp_path / "config" / "config.yaml").read_text())["remotes"]["lab"]
    s3.client().put_object(Bucket=bucket["bucket"], Key="inputs/hello.txt", Body=b"from s3\n")
    (tmp_path / "job.yaml").write_text(SPEC)
    run = gpujob(env, "submit", str(tmp_path / "job.yaml"), "--on", "lab", "--job-id", "bk1",
                 timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()[-3000:] + run.stdout.decode()[-3000:]
    assert b"setup reads from s3" in run.stdout
    upper = s3.client().get_object(Bucket=bucket["bucket"], Key="outputs/upper.txt")
    assert upper["Body"].read() == b"FROM S3\n"
    root = ssh_host.root
    assert (root / "gj-bucket-test" / "in" / "hello.txt").read_bytes() == b"from s3\n"
    job = root / ".gpujob" / "jobs" / "bk1"
    for path in job.rglob("*"):
        if path.is_file():
            assert s3.SECRET_KEY.encode() not in path.read_bytes(), path


DOCKER_TASK = """\
num_nodes: 2
resources:
  image_id: docker:{image}
file_mounts:
  ~/gj-bucket-docker/in:
    source: lab:inputs
    mode: COPY
  ~/gj-bucket-docker/out:
    source: lab:outputs
    mode: MOUNT_CACHED
run: |
  echo "node $SKYPILOT_NODE_RANK reads $(cat ~/gj-bucket-docker/in/hello.txt)"
  echo "from $SKYPILOT_NODE_RANK" > ~/gj-bucket-docker/out/node-$SKYPILOT_NODE_RANK.txt
"""


def test_a_skypilot_task_in_containers_on_two_hosts_reads_and_writes_buckets(
    tmp_path: Path, env: dict[str, str], docker_lab: Any
) -> None:
    """Each host's agent fetches before its container starts; the container sees the
    destinations at their paths (mounted at the same path), and each node's output is in
    the bucket once the job has ended."""
    from infra.lab import job_image, registry, s3

    env = with_lab_s3(env, tmp_path)
    bucket = yaml.safe_load((tmp_path / "config" / "config.yaml").read_text())["remotes"]["lab"]
    s3.client().put_object(Bucket=bucket["bucket"], Key="inputs/hello.txt", Body=b"from s3\n")
    image = f"{registry.address()}/{job_image.TAG}"
    (tmp_path / "task.yaml").write_text(DOCKER_TASK.format(image=image))
    placed = [docker_lab.root(index) / "gj-bucket-docker" for index in (0, 1)]
    try:
        done = gpujob(env, "submit", str(tmp_path / "task.yaml"), "--on", "ta,tb",
                      "--job-id", "bkd1", timeout=600)  # fmt: skip
        out = done.stdout.decode()
        assert done.returncode == 0, done.stderr.decode()[-3000:] + out[-3000:]
        assert "(docker runtime)" in out
        for rank in (0, 1):
            assert f"[node {rank}] node {rank} reads from s3\n" in out, out
            got = s3.client().get_object(Bucket=bucket["bucket"], Key=f"outputs/node-{rank}.txt")
            assert got["Body"].read() == f"from {rank}\n".encode()
    finally:
        for folder in placed:
            shutil.rmtree(folder, ignore_errors=True)
