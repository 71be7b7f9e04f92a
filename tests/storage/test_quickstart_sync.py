"""The quickstart with a sync target, end to end through the real CLI: its checkpoints reach
S3 as the job runs, the bucket holds only complete ones, and a pull of the latest into a
fresh folder reproduces it byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KEY_ID, REPO, SECRET

pytestmark = pytest.mark.e2e
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)  # fmt: skip


def s3_object(remote: dict[str, str], key: str) -> bytes:
    import boto3

    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    return s3.get_object(Bucket=remote["bucket"], Key=key)["Body"].read()


def files(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_quickstart_synced_then_pulled_latest_is_byte_identical(remote, tmp_path):
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", "jobs/quickstart.yaml", "--set", "checkpoints.sync_to=t:qs",
                 "--job-id", "qs-sync")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "sync target t:qs: bucket" in run.stderr and "write probe ok" in run.stderr
    job_dir = tmp_path / "state" / "jobs" / "qs-sync"
    local = job_dir / "checkpoints"
    assert sorted(p.name for p in local.iterdir()) == ["checkpoint-40", "checkpoint-60"]
    assert "[gpujob-agent] synced" in run.stdout

    # the job's own run folder under the prefix (the job id), its manifest beside them
    tree = gpujob(env, "storage", "tree", "t:qs/qs-sync", "--depth", "1")
    assert tree.returncode == 0, tree.stderr
    listed = tree.stdout.splitlines()[1:]
    checkpoints = [line for line in listed if line.startswith("checkpoint-")]
    assert checkpoints and all(line.endswith("  complete") for line in checkpoints), tree.stdout
    assert any(line.startswith("checkpoint-60/") for line in listed)
    assert any(line.startswith("logs/") and "job logs" in line for line in listed), tree.stdout
    # the agent shipped the log beside the checkpoints, whole, after the job's last line
    shipped = s3_object(remote, "qs/qs-sync/logs/qs-sync/node-0.log")
    assert shipped == (job_dir / "node-0" / "job.log").read_bytes()
    manifest = json.loads(s3_object(remote, "qs/qs-sync/gpujob-run.json"))
    assert (manifest["run"], manifest["job_id"], manifest["jobs"]) == ("qs-sync", "qs-sync",
                                                                     ["qs-sync"])  # fmt: skip
    assert manifest["steps"] == [40, 60] and len(manifest["spec_hash"]) == 16

    fresh = tmp_path / "fresh"
    pulled = gpujob(env, "sync-ckpt", "--from", "t:qs/qs-sync", "--latest", "--dest", str(fresh))
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    assert sorted(p.name for p in fresh.iterdir()) == ["checkpoint-60"]
    assert files(fresh / "checkpoint-60") == files(local / "checkpoint-60")

    again = gpujob(env, "sync-ckpt", "qs-sync", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    moved = json.loads(again.stdout)["checkpoints"]
    assert [m["name"] for m in moved] == ["checkpoint-40", "checkpoint-60"]
    assert all(m["skipped"] for m in moved)

    for path in job_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
