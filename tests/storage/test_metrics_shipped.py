"""The metrics record beside the logs in S3: the agent ships it with the job's log, and
`gpujob metrics` reads it there once the job's folder (its host) is gone: the same steps,
the loss falling, a plot with a point per step."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_quickstart_sync import gpujob, s3_object

pytestmark = pytest.mark.e2e


def test_metrics_read_from_s3_after_the_jobs_folder_is_gone(remote, tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", "jobs/quickstart.yaml", "--set", "checkpoints.sync_to=t:qs",
                 "--job-id", "qs-m3")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    job_dir = tmp_path / "state" / "jobs" / "qs-m3"
    record = (job_dir / "node-0" / "metrics.jsonl").read_bytes()
    # shipped whole, after the agent's last pass
    assert s3_object(remote, "qs/qs-m3/logs/qs-m3/node-0.metrics.jsonl") == record
    here = json.loads(gpujob(env, "metrics", "qs-m3", "--json").stdout)["nodes"][0]

    shutil.rmtree(job_dir)  # the host and everything on it gone
    every = gpujob(env, "metrics", "qs-m3", "--json")
    assert every.returncode == 0, every.stderr
    (node,) = json.loads(every.stdout)["nodes"]
    assert node["source"].endswith(f"{remote['bucket']}/qs/qs-m3/logs/qs-m3/node-0.metrics.jsonl")
    assert (node["steps"], node["system"]) == (here["steps"], here["system"])
    assert [s["step"] for s in node["steps"]] == list(range(1, 61))

    shown = gpujob(env, "metrics", "qs-m3")
    assert shown.returncode == 0, shown.stderr
    assert "node 0: 60 step(s) recorded, from " in shown.stdout
    losses = [s["loss"] for s in node["steps"]]
    assert losses[-1] < losses[0] * 0.5

    png = tmp_path / "from-s3.png"
    plotted = gpujob(env, "metrics", "qs-m3", "--plot", str(png))
    assert plotted.returncode == 0, plotted.stderr
    assert "loss 60 point(s)" in plotted.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
