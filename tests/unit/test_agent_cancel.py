"""The agent's cancel (agent/stopping.py): what it does from the node's record, whether its
supervisor lives and whether anything of the job still runs. The behaviour itself (processes
and containers stopped) is tested on real jobs: tests/e2e, tests/lab."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.stopping import (
    ASK_SUPERVISOR,
    ENDED,
    NEVER_STARTED,
    NOTHING_LEFT,
    STOP_LEFTOVERS,
    cancel,
    cancel_step,
)


@pytest.mark.parametrize(
    ("recorded", "supervisor", "left", "step"),
    [
        ("succeeded", False, False, ENDED),  # its own end stands, never relabelled
        ("failed", False, True, ENDED),
        ("timed out", False, False, ENDED),
        ("cancelled", True, False, ENDED),
        (None, False, False, NEVER_STARTED),
        ("", False, False, NEVER_STARTED),
        ("running", True, True, ASK_SUPERVISOR),  # it records the end, syncs, ships logs
        ("starting", True, False, ASK_SUPERVISOR),
        ("running", False, True, STOP_LEFTOVERS),  # kill -9 of the supervisor
        ("starting", False, True, STOP_LEFTOVERS),
        ("running", False, False, NOTHING_LEFT),  # a reboot: lost, nothing to stop
    ],
)
def test_what_a_cancel_does(recorded: str | None, supervisor: bool, left: bool, step: str) -> None:
    assert cancel_step(recorded, supervisor, left) == step


@pytest.mark.parametrize(
    ("agent_gone", "state", "reason"),
    [
        (True, "lost", "the agent died; the node's SLURM step found nothing of the job left"),
        (False, "cancelled", "cancelled after the agent died (nothing of the job was left)"),
    ],
)
def test_a_slurm_node_whose_agent_died_with_nothing_left_gets_its_end_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], agent_gone: bool, state: str, reason: str
) -> None:
    """Under SLURM the node's status.json is all `status` reads: a cancel that finds the
    supervisor dead and nothing of the job running (the node step's own cancel stopped it,
    then was ended by scancel's TERM before it wrote) still records the end."""
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    node = tmp_path / "node-0"
    node.mkdir()
    (node / "job.json").write_text(json.dumps({"slurm": True, "log": "job.log"}))
    (node / "status.json").write_text(json.dumps(
        {"state": "running", "supervisor_pid": int(dead.stdout), "pid": int(dead.stdout)}
    ))  # fmt: skip
    assert cancel(node, 5, agent_gone=agent_gone) == 0
    recorded = json.loads((node / "status.json").read_text())
    assert (recorded["state"], recorded["reason"]) == (state, reason)
    assert json.loads(capsys.readouterr().out)["state"] == state
