"""Eval results kept: what an `on_checkpoint` hook writes after its checkpoint was pushed,
inside the checkpoint (`metrics.csv` beside the weights) or in the declared `outputs` folder,
reaches the bucket once the hook ends, and the checkpoint still pulls whole."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import s3_keys
from test_shipped_logs import rclone_vars, s3_object

from launcher.agent import ckpt_sync


def test_a_hooks_metrics_csv_written_after_the_push_reaches_the_bucket(agent_job, remote, tmp_path):
    ckpt, bucket, evals = tmp_path / "ckpts", remote["bucket"], tmp_path / "eval"
    hook = (
        'sleep 1.5; printf "step,acc\\n$GPUJOB_CHECKPOINT_STEP,0.9\\n" '
        '> "$GPUJOB_CHECKPOINT/metrics.csv"; '
        f'mkdir -p {evals}; echo "$GPUJOB_CHECKPOINT_STEP,0.9" >> {evals}/metrics.csv'
    )
    job = agent_job(ckpt, ["--saves", "3", "--size", "1", "--every", "0.5"], keep_last=3,
                    sync_to=f"gpujob_t:{bucket}/run", storage_env_file="storage.json",
                    on_checkpoint=hook, outputs=str(evals))  # fmt: skip
    (job.node_dir / "storage.json").write_text(json.dumps(rclone_vars(remote["url"])))
    assert job.start().wait(timeout=120)["state"] == "succeeded", job.log
    assert "synced checkpoint-10" in job.log  # pushed before its hook wrote its metrics
    keys = s3_keys(remote["url"], bucket, "run/")
    for step in (10, 20, 30):
        key = f"run/checkpoint-{step}/metrics.csv"
        assert s3_object(remote, key) == f"step,acc\n{step},0.9\n".encode(), sorted(keys)
    assert s3_object(remote, "run/outputs/metrics.csv") == b"10,0.9\n20,0.9\n30,0.9\n"
    # the marker in S3 promises the save's files; the hook's extra file does not break a pull
    pulled = tmp_path / "pulled"
    env = {**rclone_vars(remote["url"])}
    done = subprocess.run(
        [sys.executable, ckpt_sync.__file__, "pull", f"gpujob_t:{bucket}/run", str(pulled),
         "--latest"], env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (pulled / "checkpoint-30" / "metrics.csv").read_text() == "step,acc\n30,0.9\n"
