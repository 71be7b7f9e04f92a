"""remote/fanout.py: hosts at once, a host's items in turn, results and errors in item order."""

from __future__ import annotations

import threading

import pytest

from launcher.remote.fanout import per_host


def test_results_come_in_item_order_and_hosts_run_at_once() -> None:
    met = threading.Barrier(3, timeout=10)  # only passes if the three hosts wait together

    def work(item: tuple[str, int]) -> int:
        _, value = item
        if value == 0:
            met.wait()
        return value * 10

    items = [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 2)]
    assert per_host(items, lambda item: item[0], work) == [0, 0, 0, 10, 20]


def test_one_hosts_items_run_in_turn_and_stop_at_its_failure() -> None:
    ran: list[str] = []
    lock = threading.Lock()

    def work(name: str) -> str:
        with lock:
            ran.append(name)
        if name in ("a2", "b1"):
            raise ValueError(name)
        return name

    with pytest.raises(ValueError, match="b1"):  # the first failure in item order, not a2
        per_host(["b1", "a1", "a2", "a3", "b2"], lambda name: name[0], work)
    assert [name for name in ran if name[0] == "a"] == ["a1", "a2"]  # a3 follows a failure
    assert "b2" not in ran


def test_one_host_runs_on_the_callers_thread() -> None:
    caller = threading.get_ident()
    assert per_host([1, 2], lambda _: "h", lambda _: threading.get_ident()) == [caller, caller]
    assert per_host([], str, str) == []
