"""gpujob_capture's file, in the job's own Python (torch): what a step saves and what
load_capture gives back, as a replay script would see it; and the quickstart's own replay of
a captured step, which gives the job's loss."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
CAPTURE_DIR = REPO / "launcher" / "capture"
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
PROGRAM = """
import json, math, os, random, sys
from pathlib import Path
import torch
import gpujob_capture as gc

torch.manual_seed(1)
random.seed(2)
inputs = {"ids": torch.arange(6, dtype=torch.int32).reshape(2, 3),
          "half": torch.ones(2, 2, dtype=torch.bfloat16),
          "nested": [torch.zeros(3), (1, "two", None)], "model": torch.nn.Linear(2, 2)}
drawn = {}
try:
    with gc.step(3, **inputs) as captured:
        drawn["torch"], drawn["py"] = torch.rand(3).tolist(), random.random()
        raise ValueError("planted")
except ValueError as error:
    drawn["passed_on"] = str(error)
with gc.step(4, x=torch.ones(1)) as captured:
    captured.loss(torch.tensor(float("nan")))
with gc.step(5, x=torch.ones(1)) as captured:   # healthy, not asked for: nothing saved
    captured.loss(0.5)
with gc.step(6, x=torch.ones(1)) as captured:   # healthy, listed in GPUJOB_CAPTURE_STEPS
    captured.loss(0.25)

@gc.captured()
def train_step(batch, step):
    return batch.sum() * float("inf")
train_step(torch.ones(2), step=8)

back = gc.load_capture(Path(sys.argv[1]) / "captures/rank-3/step-3.pt")
again = {"torch": torch.rand(3).tolist(), "py": random.random()}
files = sorted(p.relative_to(sys.argv[1]).as_posix() for p in Path(sys.argv[1]).rglob("*"))
print(json.dumps({
    "drawn": drawn, "again": again, "files": files,
    "step": back.step, "rank": back.rank, "world": back.world_size, "reason": back.reason,
    "error": back.error, "traceback_says": "planted" in back.traceback,
    "ids": [str(back.inputs["ids"].dtype), list(back.inputs["ids"].shape),
            back.inputs["ids"].tolist()],
    "half": str(back.inputs["half"].dtype), "device": str(back.inputs["ids"].device),
    "nested": [str(type(back.inputs["nested"][0]).__name__),
               back.inputs["nested"][1] == (1, "two", None)],
    "model": back.inputs["model"]["unsaved"],
    "nan": [gc.load_capture(Path(sys.argv[1]) / f"captures/rank-3/step-{s}.pt",
                            restore_rng=False).reason for s in (4, 6, 8)],
    "side": json.loads((Path(sys.argv[1]) / "captures/rank-3/step-3.json").read_text()),
}))
"""


def test_a_step_saves_its_inputs_and_rng_and_gives_them_back(job_python, tmp_path) -> None:
    env = {"PYTHONPATH": str(CAPTURE_DIR), "RANK": "3", "WORLD_SIZE": "4",
           "GPUJOB_CAPTURE_STEPS": "6", "PATH": "/usr/bin:/bin",
           "GPUJOB_CHECKPOINT_DIR": str(tmp_path)}  # fmt: skip
    done = subprocess.run([job_python, "-c", PROGRAM, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    # the exception went on unchanged; the RNG as the step began came back with the capture
    assert seen["drawn"]["passed_on"] == "planted"
    assert seen["again"] == {"torch": seen["drawn"]["torch"], "py": seen["drawn"]["py"]}
    assert (seen["step"], seen["rank"], seen["world"]) == (3, 3, 4)
    assert (seen["reason"], seen["error"], seen["traceback_says"]) == (
        "exception", "ValueError: planted", True)  # fmt: skip
    assert seen["ids"] == ["torch.int32", [2, 3], [[0, 1, 2], [3, 4, 5]]]
    assert (seen["half"], seen["device"]) == ("torch.bfloat16", "cpu")
    assert seen["nested"] == ["Tensor", True] and seen["model"] == "Linear"
    assert seen["nan"] == ["non-finite loss", "requested", "non-finite loss"]
    assert seen["side"]["reason"] == "exception" and seen["side"]["rank"] == 3
    # written whole under their final names: no temporary file, step 5 not saved
    saved = [f"captures/rank-3/step-{s}.{kind}" for s in (3, 4, 6, 8) for kind in ("json", "pt")]
    assert seen["files"] == ["captures", "captures/rank-3", *saved]


def test_the_quickstart_replays_a_captured_step_to_the_jobs_loss(job_python, tmp_path) -> None:
    """Step 21, the first after checkpoint-20, asked for on both ranks; rank 1's replayed
    alone from that checkpoint (no sync target: from the job's own folder) gives its loss."""
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = subprocess.run([GPUJOB, "submit", "jobs/quickstart.yaml", "--job-id", "qs-cap",
                          "--set", "envs.GPUJOB_CAPTURE_STEPS=21",
                          "--set", "run.args=[--steps,21,--seq-len,64]"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "rank 1 step 21 (requested): saved" in run.stdout
    assert "captures/ is named as no checkpoint" not in run.stdout  # not a checkpoint
    env["PATH"] = f"{Path(job_python).parent}:{env['PATH']}"
    replay = subprocess.run([GPUJOB, "replay", "qs-cap", "--rank", "1", "--", "python",
                             "replay.py"], cwd=REPO / "jobs" / "quickstart", env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert replay.returncode == 0, replay.stderr[-3000:]
    found = re.search(r"replayed step 21 of rank 1 from checkpoint-20 on cpu: loss (\S+) "
                      r"\(the job's: (\S+)\)", replay.stdout)  # fmt: skip
    assert found, replay.stdout + replay.stderr[-2000:]
    assert abs(float(found.group(1)) - float(found.group(2))) < 1e-6, replay.stdout
