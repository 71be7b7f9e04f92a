"""The keeper's rule (supervise/keeper.py): once a node has failed or been lost, the nodes not yet
ended are stopped; a cancel or a time limit is nobody's failure."""

from __future__ import annotations

import pytest

from launcher.jobs.state import first_failed
from launcher.supervise.keeper import others_to_stop


@pytest.mark.parametrize(
    ("states", "stopped"),
    [
        (["running", "running"], []),
        (["failed", "running"], [1]),
        (["running", "lost", "starting", "succeeded"], [0, 1, 2]),
        (["lost", "failed"], [0]),  # its processes may outlive its supervisor
        (["failed", "cancelled"], []),
        (["cancelled", "running"], []),
        (["timed out", "running"], []),
        (["failed", "failed"], []),
        (["failed", None], [1]),
    ],
)
def test_who_is_stopped(states: list[str | None], stopped: list[int]) -> None:
    assert others_to_stop(states) == stopped


def test_the_cause_is_the_node_that_failed_first_not_the_lowest_rank() -> None:
    statuses = [
        {"state": "failed", "exit_code": 1, "ended_at": 20.0},  # died of its lost peer
        {"state": "failed", "exit_code": 3, "ended_at": 10.0},
        {"state": "running"},
    ]
    assert first_failed(statuses) == 1
    assert first_failed([{"state": "lost"}, {"state": "failed", "ended_at": 5.0}]) == 1
    assert first_failed([{"state": "running"}, {"state": "cancelled"}]) is None
