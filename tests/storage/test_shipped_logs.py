"""The job log beside the checkpoints in S3: shipped by the agent while the job runs and once
more after its end, and read by `gpujob logs` when the job's host no longer answers."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import KEY_ID, SECRET, wait_until

GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def s3_object(remote: dict[str, str], key: str) -> bytes:
    import boto3

    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    return s3.get_object(Bucket=remote["bucket"], Key=key)["Body"].read()


def rclone_vars(url: str) -> dict[str, str]:
    from launcher.storage.rclone_config import env_vars
    from launcher.storage.remotes import credentials, user_remotes

    remote = user_remotes()["t"]
    return env_vars(remote, credentials(remote))


def test_the_agent_ships_the_log_while_the_job_runs_and_whole_at_its_end(
    agent_job, remote, tmp_path
):
    ckpt, bucket = tmp_path / "ckpts", remote["bucket"]
    job = agent_job(ckpt, ["--saves", "6", "--size", "1", "--every", "0.6"], keep_last=2,
                    sync_to=f"gpujob_t:{bucket}/run", storage_env_file="storage.json",
                    logs_to=f"gpujob_t:{bucket}/run/logs/t", job_dir=str(tmp_path / "job"),
                    log_every_s=0.5)  # fmt: skip
    (job.node_dir / "storage.json").write_text(json.dumps(rclone_vars(remote["url"])))
    job.start()
    key = "run/logs/t/node-0.log"

    def shipped_mid_run() -> bool:
        try:
            return job.status.get("state") == "running" and bool(s3_object(remote, key))
        except Exception:
            return False

    wait_until(shipped_mid_run, "a copy of the log in S3 while the job runs", 60)
    status = job.wait(timeout=120)
    assert status["state"] == "succeeded", job.log
    assert s3_object(remote, key) == (job.node_dir / "job.log").read_bytes()
    assert re.search(r"synced (checkpoint-\d+, )*checkpoint-60 ", job.log), job.log


def test_logs_reads_the_shipped_log_when_the_host_no_longer_answers(remote, tmp_path):
    """The job's record names a host whose port now accepts and hangs up (not sshd): `logs`
    says so, shows the log from S3, and exits with the job's recorded code."""
    from launcher.remote.hosts import HostEntry
    from launcher.state.db import JobRecord, StateDB

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def hang_up() -> None:
        while True:
            try:
                listener.accept()[0].close()
            except OSError:  # the listener closed: the test is over
                return

    threading.Thread(target=hang_up, daemon=True).start()
    state = tmp_path / "state"
    env = dict(os.environ, GPUJOB_STATE_DIR=str(state))
    log = b"step 1 loss 2.0\nstep 2 loss 1.5\nprogress 50%\rprogress 100%\ndone\n"
    logs_to = f"gpujob_t:{remote['bucket']}/run/logs/gone-1"
    from launcher.agent.ckpt_sync import rclone_env

    rclone = rclone_env(rclone_vars(remote["url"]))
    put = subprocess.run(["rclone", "rcat", f"{logs_to}/node-0.log"], input=log, env=rclone,
                         capture_output=True)  # fmt: skip
    assert put.returncode == 0, put.stderr
    host = HostEntry(name="gone", address="127.0.0.1", port=listener.getsockname()[1],
                     user="root")  # fmt: skip
    os.environ["GPUJOB_STATE_DIR"] = str(state)
    try:
        StateDB().add_job(JobRecord(
            id="gone-1", name="gone", spec_path=str(tmp_path / "moved.yaml"), provider="ssh",
            runtime="docker", hosts=[host.to_record()], node_dirs=["/root/.gpujob/jobs/g/node-0"],
            state="failed", exit_code=3, created_at=time.time(), ended_at=time.time(),
            last_line="done", logs_to=logs_to,
        ))  # fmt: skip
    finally:
        del os.environ["GPUJOB_STATE_DIR"]
    shown = subprocess.run([GPUJOB, "logs", "gone-1"], env=env, capture_output=True, timeout=120)
    assert shown.returncode == 3, shown.stderr
    assert shown.stdout == log
    assert b"showing the log the agents shipped to" in shown.stderr
    tail = subprocess.run([GPUJOB, "logs", "gone-1", "--tail", "1"], env=env,
                          capture_output=True, timeout=120)  # fmt: skip
    assert tail.stdout == b"done\n"
    # the job ended: a follow does not wait out the reconnect budget for a host that is gone
    patient = dict(env, GPUJOB_RECONNECT_S="600")
    followed = subprocess.run([GPUJOB, "logs", "gone-1", "-f"], env=patient,
                              capture_output=True, timeout=120)  # fmt: skip
    assert followed.returncode == 3 and followed.stdout == log, followed.stderr
    listener.close()
