"""The agent's room for a node's end (agent/reserve.py) on a real full disk (a tmpfs filled
here, root): progress is skipped, an end is recorded whole, through the reserve or, with
none left, over status.json itself. The job's side is tests/e2e/test_local_jobs.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.reserve import RESERVE, make_reserve, write_status

RUNNING = {"state": "running", "pid": 7, "job_id": "j"}


def fill(disk: Path) -> None:
    with open(disk / "filler", "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"x" * 4096)
        except OSError:
            pass


def test_on_a_full_disk_progress_is_skipped_and_the_end_goes_through_the_reserve(
    small_disk: Callable[..., Path],
) -> None:
    node = small_disk("1m")
    assert make_reserve(node) and write_status(node, dict(RUNNING))
    fill(node)
    assert not write_status(node, {**RUNNING, "peak_rss_bytes": 1})  # skipped, not raised
    assert json.loads((node / "status.json").read_text()) == RUNNING
    assert not list(node.glob(".status.json.*.tmp"))  # the half-written copy is gone

    assert write_status(node, {**RUNNING, "state": "failed", "exit_code": 1})
    ended = json.loads((node / "status.json").read_text())
    assert (ended["state"], ended["exit_code"], ended["disk"]["full"]) == ("failed", 1, True)
    assert ended["reason"].startswith(f"the disk of {node} is full (")
    assert not (node / RESERVE).exists()  # it became status.json


def test_with_no_room_for_a_reserve_the_end_is_written_over_the_status_itself(
    small_disk: Callable[..., Path],
) -> None:
    node = small_disk("1m")
    assert write_status(node, dict(RUNNING))
    fill(node)
    assert not make_reserve(node) and not (node / RESERVE).exists()
    assert write_status(node, {**RUNNING, "state": "succeeded", "exit_code": 0})
    ended = json.loads((node / "status.json").read_text())
    assert (ended["state"], "reason" in ended) == ("succeeded", False)


def test_an_end_with_room_to_spare_gives_the_reserve_back(small_disk: Callable[..., Path]) -> None:
    node = small_disk("4m")
    assert make_reserve(node) and (node / RESERVE).stat().st_size == 64 * 1024
    assert write_status(node, {**RUNNING, "state": "failed", "exit_code": 2})
    ended = json.loads((node / "status.json").read_text())
    assert "reason" not in ended and not (node / RESERVE).exists()
