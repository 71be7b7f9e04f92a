"""A step captured on GPU 0 (the quickstart's gpu profile) replayed on GPU 1 by `gpujob
replay`: from the checkpoint before it, with its batches and RNG states, the same loss."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.gpus(2)]
REPO = Path(__file__).resolve().parents[2]
ARGS = ["--steps", "11", "--seq-len", "512", "--hidden", "1024", "--layers", "8",
        "--heads", "8", "--dtype", "bf16", "--lr", "3e-4", "--warmup-steps", "2"]  # fmt: skip


def test_a_step_captured_on_gpu_0_gives_the_same_loss_on_gpu_1(tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_CACHE_DIR=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="0")  # fmt: skip
    submit = [sys.executable, "-m", "launcher", "submit", "jobs/quickstart.yaml", "--job-id",
              "gpu-cap", "--set", "profile=gpu", "--set", "checkpoints.every_steps=10",
              "--set", "envs.GPUJOB_CAPTURE_STEPS=11",
              "--set", "run.args=[" + ",".join(f'"{a}"' for a in ARGS) + "]"]  # fmt: skip
    run = subprocess.run(submit, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "rank 0 step 11 (requested): saved" in run.stdout + run.stderr
    env["CUDA_VISIBLE_DEVICES"] = "1"
    replay = subprocess.run([sys.executable, "-m", "launcher", "replay", "gpu-cap", "--",
                             sys.executable, "replay.py", "--dtype", "bf16"],
                            cwd=REPO / "jobs" / "quickstart", env=env, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert replay.returncode == 0, replay.stderr[-3000:]
    found = re.search(r"from checkpoint-10 on cuda:0: loss (\S+) \(the job's: (\S+)\)",
                      replay.stdout)  # fmt: skip
    assert found, replay.stdout + replay.stderr[-2000:]
    assert abs(float(found.group(1)) - float(found.group(2))) < 1e-6, replay.stdout
