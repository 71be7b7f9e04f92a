"""The DeepSpeed example on a GPU machine through gpujob: `launcher: deepspeed` runs
DeepSpeed's own runner, ZeRO-2 trains, and its checkpoint ends complete for gpujob."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


NO_DEEPSPEED = "needs deepspeed in this Python (carry its wheel to the device)"


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason=NO_DEEPSPEED)
def test_the_deepspeed_example_trains_and_checkpoints(tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "submit", "jobs/deepspeed.yaml", "--set", "profile=gpu",
         "--set", 'run.args=["--steps", "20", "--warmup", "5", "--seq-len", "256"]',
         "--job-id", "ds-gpu"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "ZeRO stage 2" in done.stdout and "final loss" in done.stdout
    ckpt = tmp_path / "state" / "jobs" / "ds-gpu" / "checkpoints" / "global_step20"
    marker = json.loads((ckpt / ".gpujob-complete").read_text())
    assert marker["step"] == 20 and marker["files"]
