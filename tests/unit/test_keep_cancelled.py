"""A user's `gpujob cancel` of a job with several nodes keeps nothing, even where a node
failed: the cancel stops node 0 first (the nodes are asked in turn), node 1's ranks lose
their peer and fail before their own cancel comes, and the job reads `failed` (its nodes'
worst). The cancel's marker in a node's folder dates the ask; a node that failed before
any ask is a failure of its own, and a follow's stop of the others after it (its marker
later) keeps the hosts as before. Real node folders read by the agent's own status, on
this machine's target."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from launcher.jobs.keep import failed_node
from launcher.state.db import JobRecord


def node(folder: Path, state: str, ended_at: float, asked_at: float | None) -> str:
    folder.mkdir(parents=True)
    status = {"state": state, "exit_code": 1, "ended_at": ended_at}
    (folder / "status.json").write_text(json.dumps(status))
    if asked_at is not None:
        (folder / "cancel-requested").touch()
        os.utime(folder / "cancel-requested", (asked_at, asked_at))
    return str(folder)


def job_of(*node_dirs: str) -> JobRecord:
    now = time.time()
    return JobRecord("kc-1", "kc", "job.yaml", "local", "bare", ["local"] * len(node_dirs),
                     list(node_dirs), "failed", 1, now, now, "boom")  # fmt: skip


@pytest.mark.parametrize(("asked", "failed", "kept"), [
    (100.0, 101.5, None),  # the user's cancel, node 1's ranks failing for want of node 0
    (102.0, 101.5, 1),  # node 1 failed on its own; the follow stopped node 0 after it
])  # fmt: skip
def test_a_cancel_asked_before_any_failure_keeps_nothing(
    tmp_path: Path, asked: float, failed: float, kept: int | None
) -> None:
    now = time.time() - 1000
    job = job_of(node(tmp_path / "node-0", "cancelled", now + asked + 3, now + asked),
                 node(tmp_path / "node-1", "failed", now + failed, None))  # fmt: skip
    assert failed_node(job) == kept
