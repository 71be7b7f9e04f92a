"""`submit --ladder 1,2` of the quickstart's gpu profile on real GPUs: one GPU, then two on
the same machine, each rung bounded to its steps, with each rank's GPU memory from
nvidia-smi in the table (the device machine: local provider, bare runtime)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gpu_name
from test_gpu_jobs import FAST_ARGS

pytestmark = [pytest.mark.gpu, pytest.mark.gpus(2)]
REPO = Path(__file__).resolve().parents[2]
ARGS = [*FAST_ARGS]
ARGS[ARGS.index("--steps") + 1] = "400"
LONGER = ["--set", "run.args=[" + ",".join(f'"{arg}"' for arg in ARGS) + "]"]
"""FAST's model, run long enough (--ladder-steps 100) for the agent's GPU samples (every 2 s)."""


def test_the_gpu_profile_climbs_from_one_gpu_to_two(tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    sets = ["profile=gpu", f"resources.accelerators={gpu_name()}:2", "batch.global_batch=16"]
    argv = [sys.executable, "-m", "launcher", "submit", "jobs/quickstart.yaml", *LONGER,
            *(arg for item in sets for arg in ("--set", item)),
            "--ladder", "1,2", "--ladder-steps", "100", "--job-id", "gpu-lad"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.index("world  exit") :]
    print(table)  # for RESULTS.md
    rows = table.splitlines()[1:]
    size = r"\d+\.\d[MG]"
    assert re.match(rf"1\s+0\s+0:{size}\s+0:{size}\s+\d+\.\ds\s+\d+ tokens/s$", rows[0]), rows
    assert re.match(rf"2\s+0\s+0:{size} 1:{size}\s+0:{size} 1:{size}\s+\d+\.\ds\s+\d+ tokens/s$",
                    rows[1]), rows  # fmt: skip
    log = (tmp_path / "state" / "jobs" / "gpu-lad-r2" / "node-0" / "job.log").read_text()
    assert "rank 1/2: ready on cuda:1" in log and "over 100 steps" in log
