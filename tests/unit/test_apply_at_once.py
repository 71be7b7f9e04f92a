"""A job's hosts are prepared and started at once (runtime/apply.py over remote/fanout.py),
yet what a user reads is what a serial run said: the nodes' lines in rank order, and the
first failing node by rank named, whichever host answered first."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from planning import plan_of, spec_of, target

from launcher.errors import GpujobError
from launcher.remote.base import Result
from launcher.remote.batch import Op, Outcome, Run
from launcher.runtime.apply import Starts, apply_plan

THREE = replace(target(3, hosts=("a", "b", "c"), addresses=("10.77.0.5", "10.77.0.6", "10.77.0.7")),
                python="python3")  # fmt: skip


class Host:
    """A Connection that answers ok; `met` makes every batch wait for the other hosts' (so
    only batches that run at once get through), `slow_start` delays its start's answer."""

    def __init__(self, met: threading.Barrier, fails: bool = False, slow_start: float = 0.0):
        self.met, self.fails, self.slow_start = met, fails, slow_start
        self.batches = 0

    def run(self, argv: Any, *, stream: bool = False, input: bytes | None = None) -> Result:
        if "start" in argv:
            time.sleep(self.slow_start)
        return Result(0, "{}", "")

    def batch(self, ops: list[Op]) -> Outcome:
        self.met.wait()
        self.batches += 1
        outcome = Outcome()
        for op in ops:
            if isinstance(op, Run):
                said = "ERROR: no space left" if self.fails else '{"state": "running"}'
                outcome.runs.append(Result(1 if self.fails else 0, "", said))
                outcome.outputs.append(b"")
                if self.fails:
                    break
        return outcome


def test_three_hosts_prepare_at_once_and_say_their_starts_in_rank_order() -> None:
    met = threading.Barrier(3, timeout=10)  # broken unless the three batches run together
    hosts = {"a": Host(met, slow_start=0.3), "b": Host(met), "c": Host(met)}
    said: list[str] = []
    apply_plan(plan_of(spec_of(nodes=3), THREE), hosts, said.append)  # type: ignore[arg-type]
    started = [line for line in said if line.endswith("job started")]
    assert started == [f"node {rank}: job started" for rank in range(3)]  # node 0 answered last


def test_the_first_failing_node_by_rank_is_named_and_nothing_starts() -> None:
    met = threading.Barrier(3, timeout=10)
    hosts = {"a": Host(met), "b": Host(met, fails=True), "c": Host(met, fails=True)}
    starts = Starts()
    with pytest.raises(GpujobError, match=r"node 1 \(b\)"):
        apply_plan(plan_of(spec_of(nodes=3), THREE), hosts, lambda _: None, starts)  # type: ignore[arg-type]
    assert [host.batches for host in hosts.values()] == [1, 1, 1]  # every host was prepared
    assert starts.may_run == []
