"""`gpujob doctor local` on the device machine: a matmul verdict per GPU and, with two or
more GPUs, the NCCL all-reduce bandwidth table across them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import GPUS

pytestmark = pytest.mark.gpu


def test_doctor_measures_every_gpu_and_the_all_reduce_between_them() -> None:
    done = subprocess.run([sys.executable, "-m", "launcher", "doctor", "local", "--json"],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    stages = {v["stage"]: v for v in json.loads(done.stdout)}
    assert stages["gpus"]["value"] == GPUS
    assert stages["torch"]["verdict"] == "ok" and stages["torch"]["value"] == GPUS
    for index in range(GPUS):
        assert stages[f"matmul cuda:{index}"]["value"] > 10  # TFLOPS: any data-centre GPU
    reduces = [s for name, s in stages.items() if name.startswith("nccl all-reduce")]
    if GPUS >= 2:
        assert len(reduces) == 4 and all(s["value"] > 0 for s in reduces)
    print(json.dumps(stages, indent=1))
