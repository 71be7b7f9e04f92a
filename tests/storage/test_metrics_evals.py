"""Eval figures per checkpoint: the quickstart's `on_checkpoint` hook writes a `metrics.csv`
into each checkpoint, and `gpujob metrics JOB` shows a row per checkpoint, from the host while
its folder is there and from the run's folder in S3 once it is gone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_metrics_shipped import gpujob, s3_object

pytestmark = pytest.mark.e2e
S = '"$GPUJOB_CHECKPOINT_STEP"'
HOOK = (  # an eval per checkpoint: into the checkpoint, and a row in the outputs folder
    f"printf 'step,acc\\n%s,0.%s\\n' {S} {S} > \"$GPUJOB_CHECKPOINT/metrics.csv\"; mkdir -p evals; "
    "[ -f evals/metrics.csv ] || echo step,ppl > evals/metrics.csv; "
    f"echo {S},{S} >> evals/metrics.csv"
)


def test_a_hooks_metrics_csv_per_checkpoint_is_shown_from_s3_after_the_folder_is_gone(
    remote, tmp_path: Path
) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", "jobs/quickstart.yaml", "--set", "checkpoints.sync_to=t:qe",
                 "--set", f"checkpoints.on_checkpoint={HOOK}",
                 "--set", "checkpoints.outputs=evals", "--job-id", "qs-e1",
                 # the program keeps every save (its own keep-last would delete checkpoint-20
                 # as it saves checkpoint-60, a second later, maybe before the agent's look)
                 "--set", "run.args=[--steps, '60', --seq-len, '64', --keep-last, '0']",
                 )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    # gpujob's keep_last: 2 prunes checkpoint-20 (its metrics.csv) here and in S3; outputs stay
    assert s3_object(remote, "qe/qs-e1/checkpoint-40/metrics.csv") == b"step,acc\n40,0.40\n"
    assert s3_object(remote, "qe/qs-e1/outputs/metrics.csv") == b"step,ppl\n20,20\n40,40\n60,60\n"
    here = json.loads(gpujob(env, "metrics", "qs-e1", "--json").stdout)["evals"]
    assert here["source"] == "host"
    expected = [{"step": 20, "figures": {"ppl": 20.0}}] + [
        {"step": s, "figures": {"ppl": float(s), "acc": s / 100}} for s in (40, 60)
    ]
    assert here["checkpoints"] == expected

    shutil.rmtree(tmp_path / "state" / "jobs" / "qs-e1")  # the host and everything on it gone
    every = gpujob(env, "metrics", "qs-e1", "--json")
    assert every.returncode == 0, every.stderr
    evals = json.loads(every.stdout)["evals"]
    final = json.loads(every.stdout)["nodes"][0]["steps"][-1]["loss"]
    assert evals["source"].endswith(f"{remote['bucket']}/qe/qs-e1")
    assert evals["checkpoints"] == expected
    assert evals["notes"] == []

    shown = gpujob(env, "metrics", "qs-e1")
    assert shown.returncode == 0, shown.stderr
    assert "eval per checkpoint (3 checkpoint(s), from " in shown.stdout
    assert shown.stdout.rstrip().splitlines()[-4:] == [
        "STEP  PPL  ACC", "  20   20    -", "  40   40  0.4", "  60   60  0.6"]  # fmt: skip
    # status, its agents no longer asked: the figures the follow kept here at the job's end,
    # else those `gpujob metrics` kept as it read the record from S3
    assert status_figures(env).startswith(f"loss {final:.4g} ↓ @60, ")
    (tmp_path / "state" / "figures" / "qs-e1.json").unlink()
    assert status_figures(env) == ""
    assert gpujob(env, "metrics", "qs-e1").returncode == 0
    assert status_figures(env) == f"loss {final:.4g} ↓ @60"

    png = tmp_path / "evals.png"
    plotted = gpujob(env, "metrics", "qs-e1", "--plot", str(png))
    assert plotted.returncode == 0, plotted.stderr
    assert "ppl 3 checkpoint(s), acc 2 checkpoint(s)" in plotted.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def status_figures(env: dict[str, str]) -> str:
    shown = gpujob(env, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = [r for r in json.loads(shown.stdout)["jobs"] if r["id"] == "qs-e1"]
    return str(row.get("metrics", ""))
