"""The DeepSpeed example's capture and replay, where DeepSpeed is not installed (this machine):
its scripts parse, train_ds.py runs without gpujob (the helper's import is guarded), and
`gpujob replay` of a recorded DeepSpeed job takes the capture and the ZeRO checkpoint saved
before it and runs the command under `deepspeed --num_gpus=1` (DeepSpeed's runner, as
`python -m deepspeed.launcher.runner`). The run itself needs DeepSpeed (tests/gpu)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.agent.ckpt_store import write_marker
from launcher.state.db import JobRecord, StateDB

REPO = Path(__file__).resolve().parents[2]
DS = REPO / "jobs" / "ds"


def test_the_ds_scripts_parse_and_only_the_replay_needs_gpujob() -> None:
    trees = {name: ast.parse((DS / name).read_text()) for name in ("train_ds.py", "replay.py")}
    guarded = [
        node
        for node in ast.walk(trees["train_ds.py"])
        if isinstance(node, ast.Try)
        and any(
            isinstance(s, ast.Import) and s.names[0].name == "gpujob_capture" for s in node.body
        )
        and any(ast.unparse(h.type or ast.Name("")) == "ImportError" for h in node.handlers)
    ]
    assert guarded, "train_ds.py must run bare (deepspeed --num_gpus=N train_ds.py)"
    imported = {
        alias.name for node in ast.walk(trees["replay.py"]) if isinstance(node, ast.Import)
        for alias in node.names
    }  # fmt: skip
    assert {"deepspeed", "gpujob_capture"} <= imported
    names = {n.id for n in ast.walk(trees["train_ds.py"]) if isinstance(n, ast.Name)}
    assert "gpujob_capture" in names  # used around the step, not only imported


def test_replay_of_a_deepspeed_job_runs_under_deepspeeds_runner_on_one_gpu(
    state_dir: Path, tmp_path: Path
) -> None:
    """A job of jobs/deepspeed.yaml as a submit records it, its rank-1 capture of step 3 and
    its checkpoints global_step2 and global_step4 in its checkpoint folder (no sync_to)."""
    node_dir = tmp_path / "jobs" / "ds-cap" / "node-0"
    ckpts = tmp_path / "jobs" / "ds-cap" / "checkpoints"
    node_dir.mkdir(parents=True)
    (node_dir / "job.json").write_text(json.dumps({"checkpoints": {"dir": str(ckpts)}}))
    for step in (2, 4):
        folder = ckpts / f"global_step{step}"
        (folder / "global_step").mkdir(parents=True)
        (folder / "global_step" / "mp_rank_00_model_states.pt").write_bytes(b"weights")
        write_marker(folder, step, "program")
    captures = ckpts / "captures" / "rank-1"
    captures.mkdir(parents=True)
    (captures / "step-3.pt").write_bytes(b"a capture")
    (captures / "step-3.json").write_text(json.dumps({"step": 3, "rank": 1, "saved_at": 1.0}))
    StateDB().add_job(JobRecord("ds-cap", "deepspeed-zero2", str(REPO / "jobs/deepspeed.yaml"),
                                "local", "bare", [], [str(node_dir)], "failed", 1, time.time(),
                                time.time(), "boom"))  # fmt: skip

    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "launcher", "replay", "ds-cap", "--", "python3",
                           "replay.py", "--layers", "2"], cwd=DS, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    said = done.stderr
    assert f"[gpujob replay] capture: rank 1, step 3 ({captures}/step-3.pt)" in said, said
    assert f"[gpujob replay] checkpoint: {ckpts}/global_step2\n" in said  # the one before step 3
    assert "[gpujob replay] running: python3 -u -m deepspeed.launcher.runner --num_gpus=1 " \
        "replay.py --layers 2\n" in said  # fmt: skip
    pulled = state_dir / "replay" / "ds-cap" / "rank-1-step-3.pt"
    assert pulled.read_bytes() == b"a capture"
    assert done.returncode != 0  # the runner's own exit: DeepSpeed is not installed here
