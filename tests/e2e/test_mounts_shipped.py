"""SkyPilot's `file_mounts` of local paths, through the real CLI on two loopback nodes: a
folder put in the home (the job's own here) and a file put inside the workdir, both read by
the task's `run:` block on every node; a second submit after a local change brings it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

GPUJOB = str(Path(sys.executable).with_name("gpujob"))


def submit(folder: Path, job_id: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(folder / "state"))
    return subprocess.run([GPUJOB, "submit", "task.yaml", "--job-id", job_id], env=env,
                          cwd=folder / "task", capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def test_a_tasks_local_file_mounts_are_read_by_its_run_block_on_every_node(
    tmp_path: Path,
) -> None:
    (tmp_path / "task").mkdir()
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "sub" / "a.txt").write_text("shard a\n")
    (tmp_path / "cfg.yaml").write_text("lr: 0.1\n")
    (tmp_path / "task" / "task.yaml").write_text(
        "num_nodes: 2\nenvs:\n  PLACED: on-host/data\nfile_mounts:\n"
        "  ~/$PLACED: ../data\n  conf/cfg.yaml: ../cfg.yaml\n"
        'run: |\n  echo "$SKYPILOT_NODE_RANK: $(cat ~/"$PLACED/sub/a.txt") $(cat conf/cfg.yaml)"\n'
    )
    done = submit(tmp_path, "mounts-1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for rank in (0, 1):
        assert f"[node {rank}] {rank}: shard a lr: 0.1" in done.stdout

    (tmp_path / "data" / "sub" / "a.txt").write_text("shard b\n")
    again = submit(tmp_path, "mounts-2")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "[node 1] 1: shard b lr: 0.1" in again.stdout


def test_a_mounted_file_keeps_its_permissions_on_the_host(tmp_path: Path) -> None:
    """A 0600 credentials file stays 0600 (never world-readable there), a script stays
    executable."""
    (tmp_path / "task").mkdir()
    key, tool = tmp_path / "key.json", tmp_path / "tool.sh"
    key.write_text("{}\n")
    key.chmod(0o600)
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    (tmp_path / "task" / "task.yaml").write_text(
        "file_mounts:\n  conf/key.json: ../key.json\n  bin/tool.sh: ../tool.sh\n"
        'run: |\n  echo "key $(stat -c %a conf/key.json) tool $(stat -c %a bin/tool.sh)"\n'
        "  bin/tool.sh\n"
    )
    done = submit(tmp_path, "mounts-modes")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "key 600 tool 755\n" in done.stdout
    assert "tool ran\n" in done.stdout
    shipped = tmp_path / "state" / "jobs" / "mounts-modes" / "mounts"
    assert sorted(oct(p.stat().st_mode & 0o777) for p in shipped.iterdir()) == ["0o600", "0o755"]
