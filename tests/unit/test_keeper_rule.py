"""The keeper's rule (ops/keeper.py): once a node has failed or been lost, the nodes not yet
ended are stopped; a cancel or a time limit is nobody's failure."""

from __future__ import annotations

import pytest

from launcher.ops.keeper import others_to_stop


@pytest.mark.parametrize(
    ("states", "stopped"),
    [
        (["running", "running"], []),
        (["failed", "running"], [1]),
        (["running", "lost", "starting", "succeeded"], [0, 2]),
        (["failed", "cancelled"], []),
        (["cancelled", "running"], []),
        (["timed out", "running"], []),
        (["failed", "failed"], []),
        (["failed", None], [1]),
    ],
)
def test_who_is_stopped(states: list[str | None], stopped: list[int]) -> None:
    assert others_to_stop(states) == stopped
