"""`submit --resume-from REMOTE:prefix/run/checkpoint-N` continues the quickstart exactly
(issue 30): a run synced to S3 stops after checkpoint-8; another job, in a run of its own,
starts from that checkpoint pulled from the bucket and prints the very losses of an
uninterrupted run from step 9 on (the check of tests/e2e/test_resume.py, here through S3)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.e2e
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
STEPS, SAVED_AT = 12, 8


def quickstart(env: dict[str, str], job_id: str, steps: int, *flags: str) -> str:
    args = json.dumps(["--steps", str(steps), "--log-every", "1"])
    done = subprocess.run(
        [GPUJOB, "submit", "jobs/quickstart.yaml", "--job-id", job_id, "--set", f"run.args={args}",
         "--set", "checkpoints.every_steps=4", "--set", "checkpoints.sync_to=t:qs", *flags],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def losses(log: str, total: int) -> list[tuple[int, str]]:
    line = re.compile(rf"^step (\d+)/{total} loss ([0-9.]+) ", re.M)
    return [(int(step), loss) for step, loss in line.findall(log)]


def test_resume_from_continues_the_first_run_exactly(remote, tmp_path):
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    env.pop("GPUJOB_RESUME_FROM", None)
    whole = losses(quickstart(env, "whole", STEPS), STEPS)
    assert [step for step, _ in whole] == list(range(1, STEPS + 1))
    first = losses(quickstart(env, "first", SAVED_AT), SAVED_AT)
    assert first == whole[:SAVED_AT]

    log = quickstart(env, "second", STEPS, "--resume-from", f"t:qs/first/checkpoint-{SAVED_AT}")
    assert log.count(f"resumed from checkpoint-{SAVED_AT} (step {SAVED_AT})\n") == 1
    assert losses(log, STEPS) == whole[SAVED_AT:]  # steps 9..12, each once, the same losses
    assert re.search(rf"^final loss {whole[-1][1]}$", log, re.M)
