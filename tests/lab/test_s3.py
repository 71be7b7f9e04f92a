"""The lab's S3: one moto server, seen the same by boto3, by rclone, and from a lab host."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from labtools import ssh

pytestmark = pytest.mark.lab


def rclone(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
    from infra.lab import s3

    env = s3.without_ca_bundle() | s3.rclone_env("lab", url)
    return subprocess.run(["rclone", *args], env=env, capture_output=True, text=True, timeout=60)


def test_rclone_and_boto3_see_the_same_object(lab, tmp_path):
    from infra.lab import s3

    bucket = s3.create_bucket()
    body = uuid.uuid4().hex.encode()
    s3.client().put_object(Bucket=bucket, Key="from-boto3/a.txt", Body=body)
    seen = rclone("cat", f"lab:{bucket}/from-boto3/a.txt")
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.encode() == body

    (tmp_path / "b.txt").write_bytes(body[::-1])
    copied = rclone("copy", str(tmp_path / "b.txt"), f"lab:{bucket}/from-rclone")
    assert copied.returncode == 0, copied.stderr
    got = s3.client().get_object(Bucket=bucket, Key="from-rclone/b.txt")["Body"].read()
    assert got == body[::-1]


def test_a_lab_host_reaches_the_same_s3_through_the_bridge(docker_hosts, known_hosts):
    import shlex

    from infra.lab import s3

    bucket = s3.create_bucket()
    s3.client().put_object(Bucket=bucket, Key="k", Body=b"from the machine")
    env = s3.rclone_env("lab", s3.endpoint(for_hosts=True))
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    done = ssh(docker_hosts[0], f"env -u AWS_CA_BUNDLE {exports} rclone cat lab:{bucket}/k",
               known_hosts)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "from the machine"
