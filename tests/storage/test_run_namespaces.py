"""Runs own their checkpoints (issue 30): two jobs synced to one prefix, through the real CLI,
moto S3 and rclone. Each keeps its checkpoints, shipped logs and manifest in a folder of its
own (`PREFIX/JOB`); the second's bucket retention deletes only its own, a recovery reads only
its own run's newest, and a prefix left in the flat layout of earlier versions is read as it
is and named at submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KEY_ID, REPO, SAVER, SECRET, s3_keys

pytestmark = pytest.mark.e2e
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip


def saver_spec(folder: Path, saves: int, keep_last: int, sync_to: str) -> Path:
    """The stand-in program (checkpoint-10, -20, ... of 1 MB) as a local job."""
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "saver.py").write_bytes(SAVER.read_bytes())
    spec = folder / f"saver-{saves}.yaml"
    spec.write_text(
        "name: saver\nimage: host\nworkdir: work\n"
        f"run: echo resume=${{GPUJOB_RESUME_FROM:-none}} && python3 saver.py --dir "
        f"$GPUJOB_CHECKPOINT_DIR --saves {saves} --size 1 --every 0.2\n"
        f"checkpoints: {{keep_last: {keep_last}, sync_to: '{sync_to}'}}\n"
    )
    return spec


def s3(remote: dict[str, str]):
    import boto3

    return boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                        aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip


def stamps(remote: dict[str, str], prefix: str) -> dict[str, tuple[str, str]]:
    """key -> (ETag, LastModified): a key rewritten or deleted shows here."""
    pages = (
        s3(remote).get_paginator("list_objects_v2").paginate(Bucket=remote["bucket"], Prefix=prefix)
    )
    return {o["Key"]: (o["ETag"], str(o["LastModified"]))
            for page in pages for o in page.get("Contents", [])}  # fmt: skip


def checkpoints_in(remote: dict[str, str], prefix: str) -> list[str]:
    keys = s3_keys(remote["url"], remote["bucket"], prefix)
    names = {k[len(prefix) :].split("/")[0] for k in keys if k.endswith("/.gpujob-complete")}
    return sorted(names, key=lambda n: int(n.split("-")[1]))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    environ.pop("GPUJOB_RESUME_FROM", None)
    return environ


def test_two_runs_on_one_prefix_never_mix(remote, env, tmp_path):
    from launcher.supervise.recover_steps import latest_checkpoint

    first = saver_spec(tmp_path, saves=3, keep_last=2, sync_to="t:shared")
    done = gpujob(env, "submit", str(first), "--job-id", "run-a")
    assert done.returncode == 0, done.stderr[-3000:]
    assert checkpoints_in(remote, "shared/run-a/") == ["checkpoint-20", "checkpoint-30"]
    manifest = json.loads(s3(remote).get_object(
        Bucket=remote["bucket"], Key="shared/run-a/gpujob-run.json")["Body"].read())  # fmt: skip
    assert (manifest["run"], manifest["job_id"], manifest["steps"]) == ("run-a", "run-a", [20, 30])
    assert "shared/run-a/logs/run-a/node-0.log" in s3_keys(remote["url"], remote["bucket"])
    before = stamps(remote, "shared/run-a/")

    # The second run: the same checkpoint names, fewer steps, a tighter retention.
    second = saver_spec(tmp_path, saves=2, keep_last=1, sync_to="t:shared")
    done = gpujob(env, "submit", str(second), "--job-id", "run-b")
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("note: t:shared also holds run(s) run-a; this job keeps its own in t:shared/run-b"
            in done.stderr)  # fmt: skip
    assert checkpoints_in(remote, "shared/run-b/") == ["checkpoint-20"]  # its retention: its own
    assert stamps(remote, "shared/run-a/") == before  # not one object of the first touched
    assert "retention in gpujob_t:" in done.stdout and "/shared/run-b: deleted checkpoint-10" in (
        done.stdout
    )

    # A recovery of either reads only its own run: never the other's higher step.
    for job, spec, newest in (("run-b", second, 20), ("run-a", first, 30)):
        found = latest_checkpoint({"spec_path": str(spec), "sets": []}, job)
        assert found is not None and (found.name, found.remote) == (f"checkpoint-{newest}",
                                                                   f"t:shared/{job}")  # fmt: skip
    # sync-ckpt of a run pulls that run's checkpoint
    pulled = gpujob(env, "sync-ckpt", "--from", "t:shared/run-b", "--latest", "--dest",
                    str(tmp_path / "pulled"))  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    assert [p.name for p in (tmp_path / "pulled").iterdir()] == ["checkpoint-20"]


def test_a_named_run_continues_only_from_the_same_spec(remote, env, tmp_path):
    first = saver_spec(tmp_path, saves=2, keep_last=2, sync_to="t:named")
    assert gpujob(env, "submit", str(first), "--job-id", "n-1").returncode == 0
    again = gpujob(env, "submit", str(first), "--job-id", "n-2", "--set", "checkpoints.run=n-1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert ("continuing run n-1 in t:named (job n-1, newest checkpoint-20): its checkpoints "
            "stay" in again.stderr)  # fmt: skip
    manifest = json.loads(s3(remote).get_object(
        Bucket=remote["bucket"], Key="named/n-1/gpujob-run.json")["Body"].read())  # fmt: skip
    assert manifest["jobs"] == ["n-1", "n-2"] and manifest["job_id"] == "n-2"

    other = saver_spec(tmp_path, saves=3, keep_last=2, sync_to="t:named")
    refused = gpujob(env, "submit", str(other), "--job-id", "n-3", "--set", "checkpoints.run=n-1")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert ("error: checkpoints.sync_to t:named: t:named/n-1 holds run n-1 of job n-2 (from "
            "another spec); this job would mix its checkpoints with them, so it was not started"
            in refused.stderr)  # fmt: skip
    assert "--resume-from t:named/n-1/checkpoint-20" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not s3_keys(remote["url"], remote["bucket"], "named/n-3")


def test_a_flat_layout_is_read_as_it_is_and_named_at_submit(remote, env, tmp_path):
    client, bucket = s3(remote), remote["bucket"]
    first = saver_spec(tmp_path, saves=2, keep_last=2, sync_to="t:seed")
    assert gpujob(env, "submit", str(first), "--job-id", "seed").returncode == 0
    for key in s3_keys(remote["url"], bucket, "seed/seed/checkpoint-"):  # an earlier gpujob's
        client.copy_object(Bucket=bucket, Key="flat/" + key[len("seed/seed/"):],
                           CopySource={"Bucket": bucket, "Key": key})  # fmt: skip
    legacy = stamps(remote, "flat/")

    third = saver_spec(tmp_path, saves=1, keep_last=1, sync_to="t:flat")
    done = gpujob(env, "submit", str(third), "--job-id", "after-flat")
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if "flat layout" in line]
    assert said == [
        "gpujob: note: t:flat holds checkpoints in the flat layout of an earlier gpujob (newest "
        "checkpoint-20); this job keeps its own in t:flat/after-flat and does not resume from "
        "them (to: submit with --resume-from t:flat/checkpoint-20)"
    ]
    assert checkpoints_in(remote, "flat/after-flat/") == ["checkpoint-10"]
    assert {k: v for k, v in stamps(remote, "flat/").items() if "/after-flat/" not in k} == legacy

    tree = gpujob(env, "storage", "tree", "t:flat", "--depth", "1")
    assert tree.returncode == 0, tree.stderr
    assert "note: checkpoints directly under the prefix are the flat layout" in tree.stdout
    assert "after-flat/" in tree.stdout and "  run (its checkpoints" in tree.stdout
    pulled = gpujob(env, "sync-ckpt", "--from", "t:flat", "--latest", "--dest",
                    str(tmp_path / "old"))  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["checkpoint-20"]


def test_resume_from_starts_a_job_from_another_runs_checkpoint(remote, env, tmp_path):
    spec = saver_spec(tmp_path, saves=3, keep_last=2, sync_to="t:cont")
    assert gpujob(env, "submit", str(spec), "--job-id", "base").returncode == 0

    wrong = gpujob(
        env, "submit", str(spec), "--job-id", "w", "--resume-from", "t:cont/base/checkpoint-10"
    )
    assert wrong.returncode == 2, wrong.stderr[-2000:]
    assert ("error: --resume-from t:cont/base/checkpoint-10: no complete checkpoint "
            "checkpoint-10 in t:cont/base (complete there: checkpoint-20, checkpoint-30)"
            in wrong.stderr)  # fmt: skip
    vague = gpujob(env, "submit", str(spec), "--job-id", "v", "--resume-from", "t:cont")
    assert vague.returncode == 2 and "it holds the run(s) base" in vague.stderr, vague.stderr
    assert not (tmp_path / "state" / "jobs" / "w").exists()

    short = saver_spec(tmp_path / "short", saves=1, keep_last=2, sync_to="t:cont")  # step 10
    done = gpujob(env, "submit", str(short), "--job-id", "next", "--resume-from",
                  "t:cont/base/checkpoint-20")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt_dir = tmp_path / "state" / "jobs" / "next" / "checkpoints"
    assert f"resume={ckpt_dir}/checkpoint-20\n" in done.stdout
    assert "pulled checkpoint-20 (step 20) onto this machine" in done.stderr
    newest = gpujob(env, "submit", str(short), "--job-id", "newest", "--resume-from", "t:cont/base",
                    "--detach")  # fmt: skip
    assert newest.returncode == 0, newest.stderr[-3000:]
    assert "resuming from t:cont/base/checkpoint-30 (step 30)" in newest.stderr
    assert (tmp_path / "state" / "jobs" / "newest" / "checkpoints" / "checkpoint-30").is_dir()
