"""The ROCm variables that break CUDA jobs (seed 004), and the spec's own `unset_envs`, reach
no process of a job on a real SSH host even when the host's ~/.bashrc exports them (bash
reads it for SSH commands, so the agent itself starts with them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import test_diagnostics as diag
from labtools import SSHHost, gpujob

pytestmark = pytest.mark.lab
bare_host = diag.bare_host  # a lab host with sshd only, as hosts.yaml `box`
NAMES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "RAY_ADDRESS")
PRINT = "import os; print('set:', sorted(k for k in os.environ if k in {names!r}))"


def test_names_the_hosts_bashrc_exports_reach_no_process_of_the_job(
    tmp_path: Path, bare_host: SSHHost
) -> None:
    rc = bare_host.root / ".bashrc"
    rc.write_text("export ROCR_VISIBLE_DEVICES=0 HIP_VISIBLE_DEVICES=0 RAY_ADDRESS=stale:6379\n")
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"),
               GPUJOB_HOSTS_FILE=str(bare_host.hosts_file))  # fmt: skip
    try:
        seen = gpujob(env, "ssh", "box", "--", "echo rocr=$ROCR_VISIBLE_DEVICES")
        assert seen.stdout.decode().strip() == "rocr=0", seen  # the source is live over SSH
        work = tmp_path / "work"
        work.mkdir()
        (work / "show.py").write_text(PRINT.format(names=set(NAMES)) + "\n")
        spec = tmp_path / "job.yaml"
        spec.write_text(
            "name: clash\nimage: host\nworkdir: work\nunset_envs: [RAY_ADDRESS]\n"
            "run: |\n  python3 show.py\n  bash -c 'python3 show.py'\n"
        )
        done = gpujob(env, "submit", str(spec), "--on", "box", "--job-id", "clash-1")
        out = done.stdout.decode()
        assert done.returncode == 0, out + done.stderr.decode()
        assert out.count("set: []") == 2, out  # the block's process and its child's
    finally:
        rc.unlink(missing_ok=True)
