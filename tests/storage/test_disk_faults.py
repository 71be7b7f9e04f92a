"""The agent on a small disk (seed 002: ENOSPC at step 9000 while save_total_limit was not
honoured): retention keeps a 1 GiB filesystem from filling; with retention off the job is
stopped before a save can fail, its last complete checkpoint intact and synced."""

from __future__ import annotations

import json
import re
import shutil

from conftest import s3_keys


def test_keep_last_two_runs_twenty_200mb_saves_on_1gib_without_enospc(small_fs, agent_job):
    disk = small_fs("1G")
    ckpt = disk / "checkpoints"
    job = agent_job(ckpt, ["--saves", "20", "--size", "200", "--every", "1"], keep_last=2)
    status = job.start().wait(timeout=300)
    assert (status["state"], status["exit_code"]) == ("succeeded", 0), job.log[-2000:]
    assert "No space left" not in job.log and "failed" not in job.log
    assert job.log.count("saved checkpoint-") == 20
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint-190", "checkpoint-200"]
    assert job.log.count("retention: deleted") == 18
    assert status["checkpoints"]["latest"] == "checkpoint-200"


def test_retention_off_is_stopped_at_95_percent_with_the_last_checkpoint_synced(
    small_fs, agent_job, remote, gpujob
):
    disk = small_fs("256M")
    ckpt = disk / "checkpoints"
    env = {
        "RCLONE_CONFIG_GPUJOB_T_TYPE": "s3",
        "RCLONE_CONFIG_GPUJOB_T_PROVIDER": "Other",
        "RCLONE_CONFIG_GPUJOB_T_ENDPOINT": remote["url"],
        "RCLONE_CONFIG_GPUJOB_T_ACCESS_KEY_ID": "gj-test-access",
        "RCLONE_CONFIG_GPUJOB_T_SECRET_ACCESS_KEY": "gj-test-secret-value-3f9a",
        "RCLONE_CONFIG_GPUJOB_T_FORCE_PATH_STYLE": "true",
    }
    job = agent_job(
        ckpt,
        ["--saves", "20", "--size", "50", "--every", "1.5"],
        keep_last=None,
        sync_to=f"gpujob_t:{remote['bucket']}/run",
        storage_env_file="storage.json",
    )
    storage = job.node_dir / "storage.json"
    storage.write_text(json.dumps(env))
    storage.chmod(0o600)
    status = job.start().wait(timeout=300)

    assert status["state"] == "failed"
    assert status["reason"].startswith("stopped by gpujob: checkpoint disk")
    assert "retention is off" in status["reason"] and "kept and synced" in status["reason"]
    assert "No space left" not in job.log and not re.search(r"^save \d+ failed", job.log, re.M)
    assert "job paused while syncing and pruning" in job.log
    assert not storage.exists()  # the agent read the keys and deleted the file

    done = sorted(
        (p for p in ckpt.iterdir() if p.name.startswith("checkpoint-")),
        key=lambda p: int(p.name[11:]),
    )
    latest = done[-1]
    assert (latest / ".gpujob-complete").exists()
    assert latest.name in status["reason"]
    marker = json.loads((latest / ".gpujob-complete").read_text())
    assert {p.name: p.stat().st_size for p in latest.iterdir() if p.name[0] != "."} == marker[
        "files"
    ]
    keys = s3_keys(remote["url"], remote["bucket"], f"run/{latest.name}/")
    assert keys[f"run/{latest.name}/.gpujob-complete"] > 0
    for name, size in marker["files"].items():
        assert keys[f"run/{latest.name}/{name}"] == size
    assert "disk warning" in job.log and status["disk"]["warning"]

    from launcher.state.db import JobRecord, StateDB

    StateDB().add_job(JobRecord(
        id="full", name="full", spec_path="-", provider="local", runtime="bare", hosts=["local"],
        node_dirs=[str(job.node_dir)], state="failed", exit_code=1, created_at=0.0,
        ended_at=1.0, last_line=None,
    ))  # fmt: skip
    rows = json.loads(gpujob("status", "--json").stdout)["jobs"]
    assert rows[0]["warning"] == status["reason"]
    assert "stopped by gpujob: checkpoint disk" in gpujob("status").stdout
    shutil.rmtree(ckpt)
