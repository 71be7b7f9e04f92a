"""Remotes and sync against a real moto server through the real CLI, rclone and boto3:
check and tree, a pull that reproduces a checkpoint byte for byte, only complete checkpoints
moving, a half-written checkpoint at a kill, S3 dropping mid-sync, S3 down at submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, Forward, s3_keys, wait_until

SYNC = REPO / "launcher" / "agent" / "ckpt_sync.py"


def make_checkpoint(root: Path, step: int, sizes: dict[str, int], marker: bool = True) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name, size in sizes.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(os.urandom(size))
    if marker:
        from launcher.agent.ckpt_store import write_marker

        write_marker(path, step, "program")
    return path


def tree_bytes(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def push(root: Path, dest: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    env_file = root.parent / "env.json"
    env_file.write_text(json.dumps(env))
    env_file.chmod(0o600)
    argv = [sys.executable, str(SYNC), "push", str(root), dest, "--env-file", str(env_file)]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=300)


def rclone_vars(url: str) -> dict[str, str]:
    from launcher.storage.rclone_config import env_vars
    from launcher.storage.remotes import credentials, user_remotes

    remote = user_remotes()["t"]
    remote = type(remote)(remote.name, remote.model.model_copy(update={"endpoint": url}), "")
    return env_vars(remote, credentials(remote))


def test_check_names_the_remote_when_bucket_prefix_or_endpoint_is_wrong(gpujob, remote):
    ok = gpujob("storage", "check", "t")
    assert ok.exit_code == 0, ok.stderr
    assert f"t: {remote['bucket']} ok" in ok.stdout and "wrote and deleted" in ok.stdout
    assert s3_keys(remote["url"], remote["bucket"]) == {}  # the probe is gone

    missing = gpujob("storage", "check", "t:no/such/prefix")
    assert missing.exit_code == 1
    assert missing.stderr.count("\n") == 1 and "remote t (" in missing.stderr
    assert "nothing under no/such/prefix/" in missing.stderr

    config = Path(remote["config"]) / "config.yaml"
    config.write_text(config.read_text().replace(remote["bucket"], "gj-not-a-bucket"))
    nobucket = gpujob("storage", "check", "t")
    assert nobucket.exit_code == 1 and "bucket gj-not-a-bucket does not exist" in nobucket.stderr

    port = remote["url"].rsplit(":", 1)[1]
    config.write_text(config.read_text().replace(f":{port}", ":9"))
    down = gpujob("storage", "check", "t")
    assert down.exit_code == 1 and down.stderr.count("\n") == 1
    assert "remote t (http://127.0.0.1:9" in down.stderr and "unreachable" in down.stderr
    assert "Traceback" not in down.stderr


def test_pull_latest_reproduces_it_byte_for_byte_and_skips_incomplete(gpujob, remote, tmp_path):
    root = tmp_path / "ckpts"
    make_checkpoint(root, 10, {"model.bin": 3 << 20, "state.json": 100})
    latest = make_checkpoint(root, 20, {"model.bin": 70 << 20, "sub/opt.bin": 1 << 20})
    env = rclone_vars(remote["url"])
    pushed = push(root, f"gpujob_t:{remote['bucket']}/run", env, "--json")
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    assert [c["name"] for c in json.loads(pushed.stdout)["checkpoints"]] == [
        "checkpoint-10",
        "checkpoint-20",
    ]
    # a newer checkpoint whose upload never finished: data in S3, no marker
    make_checkpoint(root, 30, {"model.bin": 1 << 20}, marker=False)
    subprocess.run(["rclone", "copy", str(root / "checkpoint-30"),
                    f"gpujob_t:{remote['bucket']}/run/checkpoint-30"],
                   env={k: v for k, v in {**os.environ, **env}.items() if k != "AWS_CA_BUNDLE"},
                   check=True, capture_output=True)  # fmt: skip

    again = push(root, f"gpujob_t:{remote['bucket']}/run", env, "--json")
    assert all(c["skipped"] for c in json.loads(again.stdout)["checkpoints"])

    tree = gpujob("storage", "tree", "t:run", "--depth", "2")
    assert tree.exit_code == 0, tree.stderr
    lines = {line.split("/")[0].strip(): line for line in tree.stdout.splitlines()[1:]}
    assert lines["checkpoint-20"].endswith("complete")
    assert "INCOMPLETE" in lines["checkpoint-30"]

    dest = tmp_path / "fresh"
    planned = gpujob("sync-ckpt", "--from", "t:run", "--latest", "--dest", str(dest), "--dry-run")
    assert planned.exit_code == 0, planned.stderr
    assert (
        "rclone copy gpujob_t:" in planned.stdout and "checkpoint-20: 0 file(s)" in planned.stdout
    )
    assert "rclone check" in planned.stdout and not dest.exists()
    pulled = gpujob("sync-ckpt", "--from", "t:run", "--latest", "--dest", str(dest), "--json")
    assert pulled.exit_code == 0, pulled.stderr
    assert [c["name"] for c in json.loads(pulled.stdout)["checkpoints"]] == ["checkpoint-20"]
    assert sorted(p.name for p in dest.iterdir()) == ["checkpoint-20"]
    assert tree_bytes(dest / "checkpoint-20") == tree_bytes(latest)

    step = gpujob("sync-ckpt", "--from", "t:run", "--step", "30", "--dest", str(dest))
    assert step.exit_code == 1 and "no complete checkpoint of step 30" in step.stderr


def test_a_sync_that_loses_s3_midway_retries_and_verifies(remote, tmp_path):
    proxy = Forward(int(remote["url"].rsplit(":", 1)[1]))
    root = tmp_path / "ckpts"
    source = make_checkpoint(root, 100, {f"shard-{i}.bin": 40 << 20 for i in range(5)})
    cut = threading.Event()
    seen: dict[str, int] = {}

    def drop_for_a_while() -> None:
        wait_until(lambda: len(proxy.conns) >= 4, "the upload to start", 60)
        time.sleep(0.5)
        proxy.cut()
        seen["at_cut"] = len(s3_keys(remote["url"], remote["bucket"], "run/"))
        cut.set()
        time.sleep(2)
        proxy.accepted = 0
        proxy.start()

    threading.Thread(target=drop_for_a_while, daemon=True).start()
    try:
        pushed = push(root, f"gpujob_t:{remote['bucket']}/run", rclone_vars(
            f"http://127.0.0.1:{proxy.port}"))  # fmt: skip
    finally:
        proxy.close()
    assert cut.is_set()
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    assert "verified" in pushed.stdout
    assert seen["at_cut"] < 5, "the cut came after the upload; nothing was tested"
    assert proxy.accepted > 0, "rclone never came back through the restored endpoint"
    keys = s3_keys(remote["url"], remote["bucket"], "run/")
    expected = {f"run/checkpoint-100/{n}": len(b) for n, b in tree_bytes(source).items()}
    assert keys == expected


def test_a_checkpoint_half_written_at_a_kill_is_neither_synced_nor_latest(
    agent_job, remote, tmp_path, gpujob
):
    ckpt = tmp_path / "ckpts"
    job = agent_job(ckpt, ["--saves", "5", "--size", "4", "--every", "0.5", "--stall-at", "3"],
                    keep_last=5, sync_to=f"gpujob_t:{remote['bucket']}/run",
                    storage_env_file="storage.json")  # fmt: skip
    (job.node_dir / "storage.json").write_text(json.dumps(rclone_vars(remote["url"])))
    job.start()
    wait_until(lambda: "stalling inside save 30" in job.log, "the stalled save", 60)
    wait_until(lambda: "synced checkpoint-20" in job.log or "synced checkpoint-10, checkpoint-20"
               in job.log, "the first two syncs", 60)  # fmt: skip
    time.sleep(1.5)  # several more looks of the watcher while checkpoint-30 sits half-written
    job.kill()

    from launcher.agent.ckpt_store import latest_complete

    assert (ckpt / "checkpoint-30").is_dir()
    assert latest_complete(ckpt).name == "checkpoint-20"
    synced = {k.split("/")[1] for k in s3_keys(remote["url"], remote["bucket"], "run/")}
    assert synced == {"checkpoint-10", "checkpoint-20"}
    dest = tmp_path / "fresh"
    pulled = gpujob("sync-ckpt", "--from", "t:run", "--latest", "--dest", str(dest))
    assert pulled.exit_code == 0, pulled.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["checkpoint-20"]


def test_submit_refuses_before_training_when_s3_is_unreachable(gpujob, remote, tmp_path):
    config = Path(remote["config"]) / "config.yaml"
    port = remote["url"].rsplit(":", 1)[1]
    config.write_text(config.read_text().replace(f":{port}", ":9"))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('trained')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: s3down\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n"
                    "checkpoints: {sync_to: 't:runs/s3down'}\n")  # fmt: skip
    result = gpujob("submit", str(spec))
    assert result.exit_code == 1
    assert result.stderr.startswith("gpujob: error: checkpoints.sync_to t:runs/s3down: remote t (")
    assert "unreachable" in result.stderr and "the job was not started" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("sync_to: 'nope:runs'", "no remote `nope` (known: t)"),
        ("sync_to: 'bad-name:runs'", "write it as REMOTE:prefix"),
    ],
)
def test_submit_explains_a_bad_sync_target(gpujob, remote, tmp_path, line, expected):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('x')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: bad\nimage: host\nworkdir: work\nrun: {{entrypoint: train.py}}\n"
                    f"checkpoints:\n  {line}\n")  # fmt: skip
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2 and expected in result.stderr, result.stderr
    assert f"{spec}:6" in result.stderr


def test_keep_last_holds_in_the_bucket_and_never_takes_the_newest(agent_job, remote, tmp_path):
    ckpt = tmp_path / "ckpts"
    job = agent_job(ckpt, ["--saves", "4", "--size", "1", "--every", "0.4"], keep_last=2,
                    sync_to=f"gpujob_t:{remote['bucket']}/kept",
                    storage_env_file="storage.json")  # fmt: skip
    (job.node_dir / "storage.json").write_text(json.dumps(rclone_vars(remote["url"])))
    assert job.start().wait(120)["state"] == "succeeded", job.log
    held = {k.split("/")[1] for k in s3_keys(remote["url"], remote["bucket"], "kept/")}
    assert held == {"checkpoint-30", "checkpoint-40"}, job.log
    assert "retention in gpujob_t:" in job.log and "deleted checkpoint-10" in job.log
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint-30", "checkpoint-40"]


def test_retention_in_the_bucket_never_counts_an_earlier_runs_checkpoints(
    agent_job, remote, tmp_path
):
    """An earlier run left checkpoint-900 under the same prefix: counted, it would make every
    checkpoint this run pushes look older than the newest, and keep_last 1 would delete each
    one right after its push. Retention counts only what this job's agent pushed."""
    prefix = f"gpujob_t:{remote['bucket']}/reused"
    make_checkpoint(tmp_path / "earlier", 900, {"model.bin": 4096})
    before = push(tmp_path / "earlier", prefix, rclone_vars(remote["url"]))
    assert before.returncode == 0, before.stdout + before.stderr
    ckpt = tmp_path / "ckpts"
    job = agent_job(ckpt, ["--saves", "3", "--size", "1", "--every", "0.4"], keep_last=1,
                    sync_to=prefix, storage_env_file="storage.json")  # fmt: skip
    (job.node_dir / "storage.json").write_text(json.dumps(rclone_vars(remote["url"])))
    assert job.start().wait(120)["state"] == "succeeded", job.log
    held = {k.split("/")[1] for k in s3_keys(remote["url"], remote["bucket"], "reused/")}
    assert held == {"checkpoint-30", "checkpoint-900"}, job.log
    assert "deleted checkpoint-30" not in job.log and "checkpoint-900" not in job.log
