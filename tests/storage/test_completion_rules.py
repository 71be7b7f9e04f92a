"""Checkpoints completed by the trainer's own rule, not gpujob's marker: a `DONE` file named
by `checkpoints.complete_when`, verl's tracker file; and what no rule recognises is said in
the log and the status instead of being silently never synced or pruned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import KEY_ID, SECRET, s3_keys, wait_until

from launcher.spec.checkpoints import CheckpointSpec

SAVER = """\
import os, sys, time
root, kind = sys.argv[1], sys.argv[2]
for step in (10, 20, 30):
    name = {"done": f"step_{step}", "verl": f"global_step_{step}"}[kind]
    folder = os.path.join(root, name)
    os.makedirs(folder)
    open(os.path.join(folder, "weights.bin"), "wb").write(b"w" * 1000)
    if kind == "done":
        open(os.path.join(folder, "DONE"), "w").close()
    else:
        open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w").write(str(step))
    time.sleep(1.5)
os.makedirs(os.path.join(root, "eval-results"))
os.makedirs(os.path.join(root, "step_5"))  # an older save that never finished
time.sleep(2.5)
"""


def run_saver(agent_job, tmp_path: Path, kind: str, **care: object):
    ckpt = tmp_path / "ckpts"
    ckpt.mkdir()
    program = tmp_path / "saver.py"
    program.write_text(SAVER)
    job = agent_job(ckpt, [], **care)
    config = json.loads((job.node_dir / "job.json").read_text())
    config["argv"] = ["python3", str(program), str(ckpt), kind]
    (job.node_dir / "job.json").write_text(json.dumps(config))
    job.start()
    return job, ckpt


@pytest.mark.parametrize("kind", ["done", "verl"])
def test_saves_complete_by_the_trainers_rule_are_adopted_and_retention_applies(
    agent_job, tmp_path: Path, kind: str
) -> None:
    care = {"complete_when": "step_{step}/DONE"} if kind == "done" else {}
    job, ckpt = run_saver(agent_job, tmp_path, kind, keep_last=2, **care)
    status = job.wait(60)
    assert status["state"] == "succeeded", job.log
    prefix = "step_" if kind == "done" else "global_step_"
    for step in (20, 30):
        marker = json.loads((ckpt / f"{prefix}{step}" / ".gpujob-complete").read_text())
        assert marker["step"] == step and marker["written_by"] == "agent"
    assert f"checkpoint {prefix}30: complete (marker written by the agent)" in job.log
    assert f"retention: deleted {prefix}10" in job.log  # keep_last 2 held
    assert not (ckpt / f"{prefix}10").exists()


def test_what_no_rule_recognises_is_said_in_the_log_and_the_status(
    agent_job, tmp_path: Path
) -> None:
    job, ckpt = run_saver(agent_job, tmp_path, "done", keep_last=3)  # no complete_when given
    wait_until(lambda: "eval-results/ is named as no checkpoint" in job.log, "the stray said", 30)
    status = job.wait(60)
    assert "step_10/ is complete by no rule" in job.log, job.log
    assert {"eval-results", "step_10", "step_20"} <= set(status["checkpoints_unrecognised"])
    assert not (ckpt / "step_10" / ".gpujob-complete").exists()


@pytest.mark.parametrize("rule", ["ckpt-{step}/DONE", "step_{step}", "step_{step}/../x"])
def test_a_completion_rule_gpujob_cannot_order_is_refused(rule: str) -> None:
    with pytest.raises(ValueError, match="write it as FOLDER/FILE"):
        CheckpointSpec(complete_when=rule)


MIXED = """\
import json, os, sys, time
root = sys.argv[1]
saves = {
    "step_10": {"DONE": ""},
    "checkpoint-20": {"trainer_state.json": json.dumps({"global_step": 20})},  # HF's format
    "global_step_30": {"DONE": ""},  # the rule's file, another folder name
    "step_40": {".metadata": ""},  # DCP's format
    "step_50": {"DONE": ""},
}
for name, files in saves.items():
    os.makedirs(os.path.join(root, name))
    open(os.path.join(root, name, "weights.bin"), "wb").write(b"w" * 1000)
    for file, body in files.items():
        open(os.path.join(root, name, file), "w").write(body)
time.sleep(2.5)
"""


def test_complete_when_is_the_only_rule_and_its_folder_part_must_match_too(
    agent_job, tmp_path: Path
) -> None:
    """`step_{step}/DONE` given: only step_N/ folders holding DONE are adopted; a Hugging Face
    trainer_state.json, a DCP .metadata or a DONE under another folder name is not a
    finished save to this trainer, and the log says so."""
    ckpt = tmp_path / "ckpts"
    ckpt.mkdir()
    program = tmp_path / "mixed.py"
    program.write_text(MIXED)
    job = agent_job(ckpt, [], complete_when="step_{step}/DONE")
    config = json.loads((job.node_dir / "job.json").read_text())
    config["argv"] = ["python3", str(program), str(ckpt)]
    (job.node_dir / "job.json").write_text(json.dumps(config))
    assert job.start().wait(60)["state"] == "succeeded", job.log
    adopted = {p.parent.name for p in ckpt.glob("*/.gpujob-complete")}
    assert adopted == {"step_10", "step_50"}, job.log
    for name in ("checkpoint-20", "global_step_30", "step_40"):
        assert (
            f"checkpoints: {name}/ is complete by no rule (no .gpujob-complete, and not "
            "complete by checkpoints.complete_when `step_{step}/DONE`" in job.log
        ), job.log


def test_verls_tracker_reaches_the_bucket_after_its_checkpoint_and_a_pull_restores_it(
    agent_job, remote, tmp_path: Path, gpujob
) -> None:
    """verl resumes from `latest_checkpointed_iteration.txt`: in S3 it only ever names a
    checkpoint whose marker is there (sampled all along the run), and a pull writes it."""
    import boto3

    from launcher.storage.rclone_config import env_vars
    from launcher.storage.remotes import credentials, user_remotes

    bucket, prefix = remote["bucket"], "verl"
    ckpt = tmp_path / "ckpts"
    ckpt.mkdir()
    (tmp_path / "saver.py").write_text(SAVER)
    job = agent_job(ckpt, [], keep_last=2, storage_env_file="storage.json",
                    sync_to=f"gpujob_t:{bucket}/{prefix}")  # fmt: skip
    config = json.loads((job.node_dir / "job.json").read_text())
    config["argv"] = ["python3", str(tmp_path / "saver.py"), str(ckpt), "verl"]
    (job.node_dir / "job.json").write_text(json.dumps(config))
    t = user_remotes()["t"]
    (job.node_dir / "storage.json").write_text(json.dumps(env_vars(t, credentials(t))))
    job.start()
    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    tracker = f"{prefix}/latest_checkpointed_iteration.txt"
    named: set[int] = set()

    def tracker_names_a_whole_checkpoint() -> bool:
        keys = s3_keys(remote["url"], bucket, prefix + "/")
        if tracker in keys:
            step = int(s3.get_object(Bucket=bucket, Key=tracker)["Body"].read())
            assert f"{prefix}/global_step_{step}/.gpujob-complete" in keys, keys
            named.add(step)
        return job.status.get("state") in ("succeeded", "failed")

    wait_until(tracker_names_a_whole_checkpoint, "the job to end", 90)
    assert job.status["state"] == "succeeded", job.log
    wait_until(tracker_names_a_whole_checkpoint, "a last look at the bucket", 5)
    assert max(named) == 30, (named, job.log)

    dest = tmp_path / "resume"
    pulled = gpujob("sync-ckpt", "--from", f"t:{prefix}", "--latest", "--dest", str(dest))
    assert pulled.exit_code == 0, pulled.stderr
    assert "latest_checkpointed_iteration.txt: 30 (verl's tracker)" in pulled.stdout
    assert (dest / "latest_checkpointed_iteration.txt").read_text() == "30"
    assert (dest / "global_step_30" / "weights.bin").stat().st_size == 1000


def test_an_unchanged_tracker_is_not_sent_again(remote, tmp_path: Path) -> None:
    """The agent pushes on every pass of its checkpoint care: verl's tracker goes up once per
    step it names, not once per pass (the copy taken out of the bucket stays out until the
    tracker names a new landed step)."""
    import boto3

    import launcher.agent.ckpt_sync  # noqa: F401 - puts the agent's folder on sys.path
    from launcher.storage.rclone_config import env_vars
    from launcher.storage.remotes import credentials, user_remotes

    from ckpt_rclone import Rclone  # isort: skip
    from ckpt_tracker import push_tracker  # isort: skip

    t = user_remotes()["t"]
    rc = Rclone(env_vars(t, credentials(t)))
    bucket, key = remote["bucket"], "verl-again/latest_checkpointed_iteration.txt"
    where = f"gpujob_t:{bucket}/verl-again"
    s3 = boto3.client("s3", endpoint_url=remote["url"], region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    push_tracker(rc, tmp_path, where, {"global_step_10"})
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"10"
    s3.delete_object(Bucket=bucket, Key=key)
    push_tracker(rc, tmp_path, where, {"global_step_10"})  # the next pass: nothing changed
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=key)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("20")
    push_tracker(rc, tmp_path, where, {"global_step_10"})  # names a step not landed yet
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=key)
    push_tracker(rc, tmp_path, where, {"global_step_10", "global_step_20"})
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"20"
