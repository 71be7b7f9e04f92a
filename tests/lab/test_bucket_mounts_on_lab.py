"""Bucket file_mounts on a lab host over SSH, through the real CLI: the host's rclone fetches
a `REMOTE:path` of the user config (S3 at the bridge address, the remote's `host_endpoint`)
before `setup`, the job reads it, and what it writes into a MOUNT_CACHED mount in the host's
home is in the bucket once the job has ended; the keys are in no file on the host."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import with_lab_s3
from test_ssh_jobs import gpujob, ssh_host  # noqa: F401 (a lab host with sshd, per session)

pytestmark = pytest.mark.lab

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
