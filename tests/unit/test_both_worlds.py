"""One file, both worlds, through the real CLI's dry run: a SkyPilot task with gpujob's own
sections, a gpujob spec with SkyPilot's names, a remote in rclone's option names; every
conflict of a file at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

TASK = """name: sft
num_nodes: 2
resources:
  accelerators: A100:8
  disk_size: 200
envs:
  MODEL: llama
checkpoints:
  dir: /ckpt
  sync_to: r2:ckpts
storage:
  r2:
    type: s3
    provider: cloudflare
    access_key_id: $R2_KEY
    secret_access_key: ${R2_SECRET}
    endpoint: https://acct.r2.cloudflarestorage.com
    prefix: my-bucket/runs/sft
max_duration: 2h
run: |
  python train.py
"""
OWN = """name: own
image: host
num_nodes: 2
resources:
  disk_size: 1TB
  gpus: A100:8
run:
  shell: python train.py
"""
BAD = """name: own
image: host
num_nodes: 2
nodes: 2
resources:
  disk_size: 10
  disk_gb: 10
  image_id: docker:x
storage:
  s3:
    type: gcs
    access_key_id: AKIAWRITTENHERE
    secret_access_key: $S
    bucket: bucket-1
run:
  shell: python train.py
"""


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2_KEY", "r2-key-value")
    monkeypatch.setenv("R2_SECRET", "r2-secret-value")


def test_a_task_carries_gpujobs_sections_and_rclones_remote(
    tmp_path: Path, gpujob: Callable, keys: None
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(TASK)
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    for line in (8, "checkpoints"), (11, "storage"), (19, "max_duration"):
        assert f"{path}:{line[0]}: {line[1]}: gpujob's own section, kept" in result.stderr
    assert f"{path}:5: resources.disk_size -> resources.disk_gb: 200" in result.stderr
    assert "world size 2" in result.stdout and "time limit: 2h" in result.stdout
    # under the prefix, the job's own run folder (its id: storage/runs.py)
    assert '"sync_to": "gpujob_r2:my-bucket/runs/sft/ckpts/sft-' in result.stdout
    assert "RCLONE_CONFIG_GPUJOB_R2_ACCESS_KEY_ID=***" in result.stdout  # from $R2_KEY
    assert "r2-key-value" not in result.stdout + result.stderr


def test_a_gpujob_spec_takes_skypilots_names(tmp_path: Path, gpujob: Callable) -> None:
    path = tmp_path / "own.yaml"
    path.write_text(OWN)
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "2 node(s)" in result.stdout
    assert "SKYPILOT_NUM_GPUS_PER_NODE=8" in result.stdout.replace("export ", "")


def test_every_conflict_of_a_file_at_once(tmp_path: Path, gpujob: Callable) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = gpujob("submit", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"gpujob: error: {path}:{line}" for line in (
        "3: num_nodes: SkyPilot's name for `nodes`, which is given too; keep one",
        "6: resources.disk_size: SkyPilot's name for `resources.disk_gb`, which is given too; "
        "keep one",
        "8: resources.image_id: SkyPilot's name for `image`, which this spec gives; keep `image`",
        "11: storage.s3.type: gpujob's remotes are S3 (rclone `type: s3`), not gcs; use an S3 "
        "endpoint",
        "12: storage.s3.access_key_id: a key written in the file; gpujob never reads one from a "
        "file: write `access_key_id: $AWS_ACCESS_KEY_ID` or the variable that holds it",
    )], result.stderr  # fmt: skip
