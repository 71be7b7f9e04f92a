"""Bucket file_mounts round-trip through moto with a job on this machine, through the real
CLI and rclone: a SkyPilot task's `s3://` COPY mount is fetched before `setup` and read by
the job; what the job writes into a MOUNT_CACHED mount, and into a MOUNT one (`rclone mount`
where this machine has FUSE, else copied with its warning), is in the bucket once the job has
ended, and a MOUNT_CACHED one's on each checkpoint while it runs; gpujob's own spec reaches a
`REMOTE:path` of the user config, fetched once for the two nodes of one host. Nothing lands
outside the job's folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import KEY_ID, SECRET, s3_keys, wait_until
from test_quickstart_sync import gpujob, s3_object

pytestmark = pytest.mark.e2e

TASK = """\
name: bucket-rt
file_mounts:
  data: s3://{bucket}/inputs
  ~/out:
    source: s3://{bucket}/outputs
    mode: MOUNT_CACHED
  results:
    source: s3://{bucket}/results
    mode: MOUNT
setup: |
  echo "setup sees: $(cat data/hello.txt)"
run: |
  tr a-z A-Z < data/hello.txt > ~/out/upper.txt
  mkdir -p results/run1 && echo 42 > results/run1/answer.txt
  echo "run ended"
"""


def put(remote: dict[str, str], key: str, body: bytes) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    s3.put_object(Bucket=remote["bucket"], Key=key, Body=body)


def aws_env(remote: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The user's AWS variables, S3 being moto's endpoint (AWS_ENDPOINT_URL, as the AWS CLI)."""
    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
                AWS_ENDPOINT_URL=remote["url"], AWS_ACCESS_KEY_ID=KEY_ID,
                AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1")  # fmt: skip


def test_skypilot_task_copy_mount_read_and_outputs_uploaded(remote, tmp_path: Path) -> None:
    fuse = Path("/dev/fuse").exists() and bool(shutil.which("fusermount3") or
                                               shutil.which("fusermount"))  # fmt: skip
    put(remote, "inputs/hello.txt", b"hello from the bucket\n")
    task = tmp_path / "task"
    task.mkdir()
    (task / "sky.yaml").write_text(TASK.format(bucket=remote["bucket"]))
    env = aws_env(remote, tmp_path)

    dry = gpujob(env, "submit", str(task / "sky.yaml"), "--dry-run", "--job-id", "b1")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert (
        f"file_mounts data: s3://{remote['bucket']}/inputs (gpujob_mount0:"
        f"{remote['bucket']}/inputs), COPY: fetched with `rclone copy` before setup"
    ) in dry.stdout
    said = "with this machine's FUSE" if fuse else "warning: this machine has no FUSE"
    assert f"file_mounts results: s3://{remote['bucket']}/results" in dry.stdout
    assert said in dry.stdout.split("file_mounts results: ")[1].splitlines()[0]
    assert SECRET not in dry.stdout + dry.stderr

    run = gpujob(env, "submit", str(task / "sky.yaml"), "--job-id", "b1")
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    assert "setup sees: hello from the bucket" in run.stdout
    assert s3_object(remote, "outputs/upper.txt") == b"HELLO FROM THE BUCKET\n"
    assert s3_object(remote, "results/run1/answer.txt") == b"42\n"
    job_dir = tmp_path / "state" / "jobs" / "b1"
    log = (job_dir / "node-0" / "job.log").read_text()
    if fuse:  # writes went straight to the bucket; the mount is gone with the job
        assert "file_mounts results: s3://" in log and "mounted (rclone mount, FUSE)" in log
        assert not os.path.ismount(job_dir / "workdir" / "results")
    else:
        assert "warning: file_mounts results: " in log and "no FUSE" in log
    assert "file_mounts ~/out: uploaded to s3://" in log
    assert SECRET not in log
    assert (job_dir / "workdir" / "data" / "hello.txt").read_bytes() == b"hello from the bucket\n"


def test_own_spec_remote_path_and_refusals_in_one_go(remote, tmp_path: Path) -> None:
    put(remote, "ds/train.txt", b"1 2 3\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: own\nimage: host\nworkdir: null\nnodes: 2\n"
        "file_mounts:\n  ~/ds: t:ds\n"
        "setup: 'echo \"setup on $GPUJOB_NODE_RANK: $(wc -w < ~/ds/train.txt) words\"'\n"
        "run: {shell: 'true'}\n"
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", str(spec), "--job-id", "o1")
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    # two nodes of one host: the host's first node fetches, before either node's setup
    assert "setup on 0: 3 words" in run.stdout and "setup on 1: 3 words" in run.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: own\nimage: host\nworkdir: null\n"
        "file_mounts:\n"
        "  a: ftp://x/y\n"
        "  b: {source: t:ds, mode: FAST}\n"
        "run: {shell: 'true'}\n"
    )
    refused = gpujob(env, "submit", str(bad), "--dry-run")
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert any(f"{bad}:5: file_mounts.a: ftp:// buckets are not reached" in x for x in lines)
    assert any(f"{bad}:6: file_mounts.b: mode: Input should be" in x for x in lines)
    assert "Traceback" not in refused.stderr


CHECKPOINTING = """\
name: bucket-ckpt
image: host
workdir: null
file_mounts:
  ~/out: {{source: s3://{bucket}/outputs, mode: MOUNT_CACHED}}
run:
  shell: |
    echo first > ~/out/step1.txt
    mkdir -p "$GPUJOB_CHECKPOINT_DIR/checkpoint-1"
    touch "$GPUJOB_CHECKPOINT_DIR/checkpoint-1/.gpujob-complete"
    for _ in $(seq 600); do [ -e ~/go ] && break; sleep 0.1; done
    echo second > ~/out/step2.txt
"""


def test_a_writable_mount_is_uploaded_on_each_checkpoint_while_the_job_runs(
    remote, tmp_path: Path
) -> None:

    (tmp_path / "job.yaml").write_text(CHECKPOINTING.format(bucket=remote["bucket"]))
    env = aws_env(remote, tmp_path)
    run = gpujob(env, "submit", str(tmp_path / "job.yaml"), "--job-id", "c1", "--detach")
    assert run.returncode == 0, run.stderr[-3000:]
    job_dir = tmp_path / "state" / "jobs" / "c1"
    try:
        wait_until(lambda: "outputs/step1.txt" in s3_keys(remote["url"], remote["bucket"]),
                   "the upload after checkpoint-1", 60)  # fmt: skip
        assert '"state": "running"' in (job_dir / "node-0" / "status.json").read_text()
        assert "outputs/step2.txt" not in s3_keys(remote["url"], remote["bucket"])
    finally:
        (job_dir / "home" / "go").touch()
    wait_until(lambda: "outputs/step2.txt" in s3_keys(remote["url"], remote["bucket"]),
               "the upload at the job's end", 60)  # fmt: skip
    log = (job_dir / "node-0" / "job.log").read_text()
    assert "file_mounts ~/out: uploaded to s3://" in log and "(checkpoint checkpoint-1)" in log


def test_a_mount_that_cannot_be_made_is_copied_and_uploaded_with_a_warning(
    remote, tmp_path: Path
) -> None:
    """The workdir already holds the MOUNT's destination (rclone mounts only on an empty
    folder), or the machine has no FUSE: either way a copy, uploaded at the end, and said."""
    put(remote, "res/old.txt", b"from before\n")
    work = tmp_path / "work"
    (work / "res").mkdir(parents=True)
    (work / "res" / "shipped.txt").write_text("shipped\n")
    (work / "job.yaml").write_text(
        "name: fallback\nimage: host\n"
        f"file_mounts:\n  res: {{source: s3://{remote['bucket']}/res, mode: MOUNT}}\n"
        "run: {shell: 'cat res/old.txt && echo new > res/new.txt'}\n"
    )
    env = aws_env(remote, tmp_path)
    run = gpujob(env, "submit", str(work / "job.yaml"), "--job-id", "f1")
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    assert "from before" in run.stdout
    log = (tmp_path / "state" / "jobs" / "f1" / "node-0" / "job.log").read_text()
    assert "warning: file_mounts res: s3://" in log and "copied instead" in log
    assert s3_object(remote, "res/new.txt") == b"new\n"
    assert s3_object(remote, "res/shipped.txt") == b"shipped\n"


def test_a_bucket_that_cannot_be_fetched_fails_the_start_in_one_line(
    remote, tmp_path: Path
) -> None:
    (tmp_path / "job.yaml").write_text(
        "name: nofetch\nimage: host\nworkdir: null\n"
        "file_mounts:\n  ~/d: s3://gj-no-such-bucket-here/x\n"
        "setup: echo setup ran\nrun: {shell: 'echo run ran'}\n"
    )
    run = gpujob(aws_env(remote, tmp_path), "submit", str(tmp_path / "job.yaml"), "--job-id", "n1")
    assert run.returncode == 1, run.stderr[-3000:]
    assert "setup ran" not in run.stdout and "run ran" not in run.stdout
    assert "file_mounts ~/d: rclone copy of s3://gj-no-such-bucket-here/x into file_mounts ~/d " \
        "failed with exit 3: " in run.stderr and "directory not found" in run.stderr  # fmt: skip
    assert "Traceback" not in run.stderr + run.stdout
