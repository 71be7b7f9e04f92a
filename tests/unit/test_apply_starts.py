"""What apply says of each node's start when it breaks off (runtime/apply.py `Starts`): a
start that went out unanswered, or ran, may run on its host (the caller records the job
`starting`, and its agents tell); one never sent, or answered with a failure, or stopped
again by the all-or-none undo, does not (the job is `failed`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from planning import plan_of, spec_of, target

from launcher.errors import GpujobError
from launcher.remote.base import Result
from launcher.remote.batch import Op, Outcome, Run, run_local
from launcher.runtime.apply import Starts, apply_plan

TWO = replace(target(2, hosts=("a", "b"), addresses=("10.77.0.5", "10.77.0.6")),
              python="python3")  # fmt: skip
DROPPED = GpujobError("the connection dropped")


class Host:
    """A Connection whose commands answer ok, except `start` (its answer, or a dropped
    connection) and, in a batch, a failing preparation command or a drop after it all went."""

    def __init__(
        self, start: Result | Exception | None = None, batch: str = "ok", cancel_drops: bool = False
    ) -> None:
        self.start, self.batch_says, self.cancel_drops = start, batch, cancel_drops
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Any, *, stream: bool = False, input: bytes | None = None) -> Result:
        self.ran.append(tuple(argv))
        if "cancel" in argv and self.cancel_drops:
            raise DROPPED
        if "start" in argv and self.start is not None:
            if isinstance(self.start, Exception):
                raise self.start
            return self.start
        return Result(0, "{}", "")

    def batch(self, ops: list[Op]) -> Outcome:
        outcome = Outcome()
        for op in ops:
            if not isinstance(op, Run):
                continue
            if op.on_sent is not None:
                op.on_sent()
            if self.batch_says == "prep fails":
                outcome.runs.append(Result(1, "", "ERROR: no space left"))
                return outcome
            outcome.runs.append(Result(0, "", '{"state": "running"}'))
            outcome.outputs.append(b"")
        if self.batch_says == "dropped at the end":
            raise DROPPED
        return outcome


def apply(plan: Any, hosts: dict[str, Host]) -> Starts:
    starts = Starts()
    with pytest.raises((GpujobError, KeyboardInterrupt)):
        apply_plan(plan, hosts, lambda _: None, starts)  # type: ignore[arg-type]
    return starts


def test_a_start_cut_off_before_its_answer_may_run_and_the_others_are_stopped() -> None:
    plan = plan_of(spec_of(nodes=2), TWO)
    hosts = {"a": Host(), "b": Host(start=DROPPED)}
    starts = apply(plan, hosts)
    assert starts.may_run == []  # node 0 was started, then stopped by its printed cancel; the
    # last node, whose start may have reached its agent, is cancelled too (a start that comes
    # after the cancel refuses)
    assert starts.nodes[0].stopped and hosts["a"].ran[-1] == plan.nodes[0].on_failure.argv  # type: ignore[union-attr]
    assert starts.nodes[1].stopped and hosts["b"].ran[-1] == plan.nodes[1].on_failure.argv  # type: ignore[union-attr]


def test_a_start_that_answered_a_failure_does_not_run() -> None:
    plan = plan_of(spec_of(nodes=2), TWO)
    starts = apply(plan, {"a": Host(), "b": Host(start=Result(1, "", "no python3"))})
    assert starts.may_run == []


def test_a_node_whose_cancel_did_not_answer_may_still_run() -> None:
    plan = plan_of(spec_of(nodes=2), TWO)
    hosts = {"a": Host(cancel_drops=True), "b": Host(start=Result(1, "", "no"))}
    assert apply(plan, hosts).may_run == [0]


@pytest.mark.parametrize(("batch", "may_run"), [("prep fails", []), ("dropped at the end", [0])])
def test_a_one_node_batch_says_whether_its_start_went(batch: str, may_run: list[int]) -> None:
    plan = plan_of(spec_of(), target(1, hosts=("a",)))
    assert apply(plan, {"a": Host(batch=batch)}).may_run == may_run


def test_a_real_batch_cut_after_the_start_went_leaves_the_job_running(tmp_path) -> None:
    """The host program of a real batch (this machine's) runs the start; the channel is
    then cut before the answer is read: the start is known to have gone out."""

    class CutAfter(Host):
        def batch(self, ops: list[Op]) -> Outcome:
            run_local([op for op in ops if isinstance(op, Run)])
            raise DROPPED

    marker = tmp_path / "started"
    plan = plan_of(spec_of(), target(1, hosts=("a",)))
    node = plan.nodes[0]
    start = replace(node.start, argv=("touch", str(marker)))
    steps = tuple(start if s is node.start else s for s in node.steps)
    plan = replace(plan, nodes=(replace(node, steps=steps),))
    starts = apply(plan, {"a": CutAfter()})
    assert marker.exists() and starts.may_run == [0]
