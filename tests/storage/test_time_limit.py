"""`max_duration` end to end through the real CLI: the quickstart, given more steps than its
time limit allows, is stopped by its agent (SIGTERM, grace), saves the step it reached, and
ends `timed out` with exit code 124; that checkpoint is complete in the bucket."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KEY_ID, REPO, SECRET, s3_keys

pytestmark = pytest.mark.e2e
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
BROKEN_NVIDIA_SMI = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
"""


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)  # fmt: skip


def test_a_job_past_its_time_limit_ends_timed_out_with_its_checkpoint_synced(
    remote: dict[str, str], tmp_path: Path
) -> None:
    # A CPU host whose nvidia-smi cannot reach a driver: the idle policy says it is off.
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(BROKEN_NVIDIA_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               PATH=f"{tools}:{os.environ['PATH']}")  # fmt: skip
    run = gpujob(
        env, "submit", "jobs/quickstart.yaml", "--job-id", "qs-limit",
        "--set", "checkpoints.sync_to=t:qs", "--set", "max_duration=15",
        "--set", 'run.args=["--steps", "100000", "--seq-len", "64"]',
        "--set", "resources.idle_gpu.minutes=0.1",
    )  # fmt: skip
    assert run.returncode == 124, run.stderr[-3000:]
    stopped = re.search(r"^stopped by SIGTERM at step (\d+)/100000; checkpoint-\d+ saved$",
                        run.stdout, re.M)  # fmt: skip
    assert stopped, run.stdout[-3000:]
    step = int(stopped.group(1))
    assert (
        "[gpujob-agent] time limit 15s reached (max_duration): stopping the job (SIGTERM, "
        "grace 30 s)"
    ) in run.stdout
    assert (
        "[gpujob-agent] GPU idle policy (resources.idle_gpu) is off: nvidia-smi failed: "
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    ) in run.stdout
    ending = (
        f"timed out after 15s (max_duration); last checkpoint: step {step} "
        f"(checkpoint-{step}), synced to t:qs/qs-limit"  # the job's own run folder
    )
    assert f"gpujob: job qs-limit {ending} (exit code 124)" in run.stderr.splitlines()

    status = gpujob(env, "status", "--json")
    row = next(r for r in json.loads(status.stdout)["jobs"] if r["id"] == "qs-limit")
    assert (row["state"], row["exit_code"], row["last_line"]) == ("timed out", 124, ending)
    assert gpujob(env, "logs", "qs-limit").returncode == 124

    # The step reached is in the bucket, complete: its marker lists every file at its size.
    import boto3

    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    prefix = f"qs/qs-limit/checkpoint-{step}/"
    marker = json.loads(
        s3.get_object(Bucket=remote["bucket"], Key=f"{prefix}.gpujob-complete")["Body"].read()
    )
    assert marker["step"] == step
    stored = s3_keys(remote["url"], remote["bucket"], prefix)
    assert {f"{prefix}{name}": size for name, size in marker["files"].items()}.items() <= (
        stored.items()
    )
    tree = gpujob(env, "storage", "tree", "t:qs/qs-limit", "--depth", "1")
    assert any(line.startswith(f"checkpoint-{step}/") and line.endswith("  complete")
               for line in tree.stdout.splitlines()), tree.stdout  # fmt: skip
