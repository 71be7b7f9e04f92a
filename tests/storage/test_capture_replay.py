"""Capture and replay end to end through the real CLI: a 2-rank torchrun job (gloo) whose
rank 1 raises at step 7 leaves `captures/rank-1/step-7.pt` in S3 beside its checkpoints;
`gpujob replay JOB --on local` raises the same error from it on one process, a replay with
the bug switched off by `--set` runs the step to a finite loss, and a healthy step captured
on request replays to the job's own loss (checkpoint, inputs and RNG states restored)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KEY_ID, SECRET

pytestmark = pytest.mark.e2e
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
JOB = Path(__file__).with_name("capture_job")
IMAGE = Path(__file__).resolve().parents[2] / "launcher/images/definitions/lab-cpu.yaml"


def s3_keys(remote: dict[str, str], prefix: str) -> list[str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    listed = s3.list_objects_v2(Bucket=remote["bucket"], Prefix=prefix)
    return sorted(o["Key"][len(prefix) :] for o in listed.get("Contents", []))


def gpujob(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=cwd)  # fmt: skip


def test_a_step_that_raised_on_rank_1_replays_on_one_process(remote, tmp_path, job_python):
    work = tmp_path / "work"
    shutil.copytree(JOB, work)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: capture\nimage: {IMAGE}\nworkdir: work\n"
        "run:\n  entrypoint: train.py\n  nproc_per_node: 2\n"
        "envs:\n  FAST_PATH: 1\n  GPUJOB_CAPTURE_STEPS: 6\n  OMP_NUM_THREADS: 1\n"
        "checkpoints:\n  dir: checkpoints\n  sync_to: t:cap\n"
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", str(spec), "--job-id", "cap-1", cwd=tmp_path)
    assert run.returncode != 0, run.stdout[-3000:]
    assert "RuntimeError: fast path: value out of range" in run.stdout, run.stdout[-3000:]

    # in S3 beside the checkpoints: the failing step of rank 1, the step asked for on each
    # rank (rank 0 may have saved step 7 too, failing in its all-reduce once rank 1 was gone)
    shipped = set(s3_keys(remote, "cap/cap-1/captures/"))
    wanted = {f"rank-{rank}/step-{step}.{kind}" for rank, step in ((0, 6), (1, 6), (1, 7))
              for kind in ("pt", "json")}  # fmt: skip
    assert wanted <= shipped <= wanted | {"rank-0/step-7.pt", "rank-0/step-7.json"}, shipped
    assert "checkpoint-5/.gpujob-complete" in s3_keys(remote, "cap/cap-1/")
    tree = gpujob(env, "storage", "tree", "t:cap/cap-1", "--depth", "1", cwd=tmp_path)
    assert any(line.startswith("captures/") and "captured steps" in line
               for line in tree.stdout.splitlines()), tree.stdout  # fmt: skip
    local = tmp_path / "state" / "jobs" / "cap-1" / "checkpoints"
    assert not list(local.glob("captures/**/.tmp-*")), "a capture left its temporary file"

    # the same error from the capture alone (the latest step, the one rank that has it)
    replay_env = dict(env, PATH=f"{Path(job_python).parent}:{env['PATH']}")
    again = gpujob(replay_env, "replay", "cap-1", "--on", "local", "--", "python", "replay.py",
                   cwd=work)  # fmt: skip
    assert again.returncode == 1, again.stderr[-3000:]
    assert "capture: rank 1, step 7" in again.stderr
    assert "RuntimeError: fast path: value out of range" in again.stderr, again.stderr[-3000:]

    # the bug switched off: the step runs to a finite loss, from the checkpoint before it
    fixed = gpujob(replay_env, "replay", "cap-1", "--set", "FAST_PATH=0", "--", "python",
                   "replay.py", cwd=work)  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "replayed step 7 rank 1 from checkpoint-5" in fixed.stdout, fixed.stdout
    assert "finite: True" in fixed.stdout, fixed.stdout

    # a healthy step asked for: the same loss as in the job (dropout's RNG restored)
    same = gpujob(replay_env, "replay", "cap-1", "--step", "6", "--rank", "0", "--", "python",
                  "replay.py", cwd=work)  # fmt: skip
    assert same.returncode == 0, same.stderr[-3000:]
    found = re.search(r"loss (\S+) \(job: (\S+),", same.stdout)
    assert found, same.stdout
    assert abs(float(found.group(1)) - float(found.group(2))) < 1e-6, same.stdout

    missing = gpujob(replay_env, "replay", "cap-1", "--step", "8", "--", "python", "replay.py",
                     cwd=work)  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith("gpujob: error: no capture for "
                                                              "--step 8")  # fmt: skip
    assert "rank-1/step-7" in missing.stderr
