"""The agent's cancel (agent/stopping.py): what it does from the node's record, whether its
supervisor lives and whether anything of the job still runs. The behaviour itself (processes
and containers stopped) is tested on real jobs: tests/e2e, tests/lab."""

from __future__ import annotations

import pytest

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.stopping import (
    ASK_SUPERVISOR,
    ENDED,
    NEVER_STARTED,
    NOTHING_LEFT,
    STOP_LEFTOVERS,
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
