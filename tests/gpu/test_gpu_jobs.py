"""The quickstart's gpu profile through gpujob on real GPUs: spec -> plan -> agent -> torchrun,
the local provider and the bare runtime (the device machine has no Docker or sshd)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gpu_name

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
FAST_ARGS = [
    "--steps", "30", "--seq-len", "512", "--hidden", "1024", "--layers", "8", "--heads", "8",
    "--dtype", "bf16", "--lr", "3e-4", "--log-every", "5", "--warmup-steps", "5",
]  # fmt: skip
FAST = ["--set", "run.args=[" + ",".join(f'"{arg}"' for arg in FAST_ARGS) + "]"]


def submit(tmp_path: Path, *sets: str) -> tuple[int, str]:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    argv = [sys.executable, "-m", "launcher", "submit", "jobs/quickstart.yaml",
            "--set", "profile=gpu", *FAST]  # fmt: skip
    for item in sets:
        argv += ["--set", item]
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


def losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"step \d+/\d+ loss ([0-9.]+)", text)]


def test_gpu_profile_trains_in_bf16_on_one_gpu(tmp_path: Path) -> None:
    code, out = submit(tmp_path)
    assert code == 0, out[-2000:]
    assert "ready on cuda:0" in out
    assert losses(out)[-1] < losses(out)[0]


@pytest.mark.gpus(2)
def test_two_nodes_on_one_machine_form_one_world_across_both_gpus(tmp_path: Path) -> None:
    one = f"resources.accelerators={gpu_name()}:1"
    code, out = submit(tmp_path, "nodes=2", "run.nproc_per_node=1", one, "batch.global_batch=16")
    assert code == 0, out[-2000:]
    assert "[node 0] rank 0/2: ready on cuda:0" in out
    assert "[node 1] rank 1/2: ready on cuda:0" in out  # each node sees its own one GPU
    assert "[node 1] rank 1/2: done" in out
