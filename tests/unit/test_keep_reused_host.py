"""A kept host reused: the user fixed the bug and ran a new job on it (`submit --on HOST`).
The keep's hard end is the failed job's window, not the new job's: while a job started
after the keep was armed runs, the host is busy with it and not ended under it (the hard
end holds again once it is done); a kept job's own ranks still running (started before the
arm) do not stretch the hard end. In-process watchers
over real node folders, as test_keep_on_failure.py's."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from test_keep_on_failure import Config

from launcher.agent.agent_os import start_ticks
from launcher.agent.autostop import Watcher
from launcher.agent.autostop_busy import job_busy


def running_node(home: Path, job_id: str, started_at: float) -> None:
    """A node whose supervisor is alive (this test's process stands in for it)."""
    node = home / "jobs" / job_id / "node-0"
    node.mkdir(parents=True)
    (node / "status.json").write_text(json.dumps({
        "state": "running", "started_at": started_at, "supervisor_pid": os.getpid(),
        "supervisor_start": start_ticks(os.getpid())}))  # fmt: skip


@pytest.mark.parametrize(("started", "ended"), [
    (-50.0, False),  # a new job since the arm: it runs on, the idle rule holds
    (-500.0, True),  # the kept job's own (started before the arm): the hard end holds
])  # fmt: skip
def test_past_the_hard_end_only_a_job_started_since_the_arm_keeps_the_host(
    tmp_path: Path, started: float, ended: bool
) -> None:
    folder = tmp_path / "autostop"
    folder.mkdir()
    now = time.time()
    Config.write(folder, idle_s=60, until=now - 1, armed_at=now - 100, kept=True)
    running_node(tmp_path, "j-new", now + started)
    watcher = Watcher(folder, looks=lambda root: job_busy(root.parent / "jobs"))
    watcher.load()
    assert watcher.look() is ended
    assert (watcher.in_use() is None) is ended
