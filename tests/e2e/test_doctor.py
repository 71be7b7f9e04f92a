"""`gpujob doctor local` for real on this machine (no GPU): the CPU stages run and say what
they measured, the GPU stages say why they did not run, and a Python without torch fails the
torch stage by name instead of crashing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def doctor(*args: str) -> tuple[int, dict[str, dict]]:
    done = subprocess.run([GPUJOB, "doctor", "local", "--json", *args], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.stdout.startswith("["), done.stderr
    return done.returncode, {v["stage"]: v for v in json.loads(done.stdout)}


def test_cpu_stages_run_and_gpu_stages_say_why_not(job_python: str) -> None:
    code, stages = doctor("--python", job_python)
    assert code == 0, stages
    assert stages["gpus"]["verdict"] == "not run" and "nvidia-smi" in stages["gpus"]["detail"]
    assert stages["torch"]["verdict"] == "ok" and "CPU only" in stages["torch"]["detail"]
    assert stages["matmul cpu"]["verdict"] == "ok" and stages["matmul cpu"]["value"] > 0
    reduces = [s for name, s in stages.items() if name.startswith("gloo all-reduce")]
    assert reduces and all(s["verdict"] == "ok" and s["value"] > 0 for s in reduces)
    assert stages["import torch"]["verdict"] == "ok" and stages["import torch"]["value"] > 0
    assert stages["import flash_attn"]["verdict"] == "not run"  # not in the CPU image
    for name in ("disk", "shm", "memory"):
        assert stages[name]["verdict"] in ("ok", "warn") and stages[name]["value"] > 0


def test_a_python_without_torch_fails_the_torch_stage_by_name() -> None:
    code, stages = doctor("--python", "/usr/bin/python3")
    assert code == 1
    assert stages["torch"]["verdict"] == "fail"
    assert "cannot import torch" in stages["torch"]["detail"]
    assert stages["matmul"]["verdict"] == "not run"
    assert stages["disk"]["verdict"] in ("ok", "warn")


def test_each_stage_is_announced_on_stderr_as_it_starts() -> None:
    """In a pipe, a line per stage before it runs (torch's first import takes tens of seconds
    on a GPU host), in order, then the table on stdout."""
    done = subprocess.run([GPUJOB, "doctor", "local", "--python", sys.executable],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    started = [line for line in done.stderr.splitlines() if line.startswith("doctor [")]
    assert [line.split("]")[0] for line in started] == [
        "doctor [1/7",
        "doctor [2/7",
        "doctor [5/7",
        "doctor [6/7",
        "doctor [7/7",
    ], done.stderr  # no torch here: matmul (3) and all-reduce (4) do not start
    assert "torch: import and CUDA" in started[1]
    assert "gpujob doctor local" in done.stdout and "Traceback" not in done.stderr
