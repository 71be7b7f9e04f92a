"""Which nodes a recovery rents again and which it keeps (launcher/plan/replace.py), table
by table: the last poll of the nodes and what the job's record says of their hosts in, the
ranks kept and replaced out."""

from __future__ import annotations

import pytest

from launcher.plan.recovery import NodeSeen
from launcher.plan.replace import KeptHost, Replacement, which_to_replace

NOW = 1000.0


def node(rank: int, **seen: object) -> NodeSeen:
    return NodeSeen(rank=rank, host=f"h{rank}", **seen)  # type: ignore[arg-type]


def hosts(count: int, **changed: KeptHost) -> list[KeptHost]:
    made = [KeptHost(rank, owned=True, same_offer=True) for rank in range(count)]
    for key, host in changed.items():
        made[int(key[1:])] = host
    return made


RUNNING, FAILED = {"state": "running"}, {"state": "failed", "exit_code": 1}
TERMINATED = {"verdict": "host_lost", "reason": "terminated", "unreachable_since": NOW}


@pytest.mark.parametrize(
    ("cause", "nodes", "held", "keep", "replace"),
    [
        ("host_lost", [node(0, **RUNNING), node(1, **TERMINATED)], hosts(2), (0,), (1,)),
        ("host_lost", [node(0, **TERMINATED), node(1, **RUNNING)], hosts(2), (1,), (0,)),
        ("preempted", [node(0, **FAILED), node(1, verdict="preempted", reason="outbid")],
         hosts(2), (0,), (1,)),
        ("host_lost", [node(0, **RUNNING), node(1, unreachable_since=NOW - 200),
                       node(2, **RUNNING), node(3, state="lost")], hosts(4), (0, 2), (1, 3)),
        ("host_lost", [node(0, **RUNNING), node(1, **TERMINATED), node(2, **RUNNING)],
         hosts(3, h2=KeptHost(2, owned=False, same_offer=True)), (0,), (1, 2)),
        ("host_lost", [node(0, **RUNNING), node(1, **TERMINATED), node(2, **RUNNING)],
         hosts(3, h0=KeptHost(0, owned=True, same_offer=False)), (2,), (0, 1)),
    ],
    ids=["node-1-lost", "node-0-lost", "outbid-survivor-failed", "two-of-four",
         "not-owned-goes-too", "other-offer-goes-too"],
)  # fmt: skip
def test_the_lost_nodes_are_replaced_and_the_others_kept(
    cause: str, nodes: list[NodeSeen], held: list[KeptHost], keep: tuple[int, ...],
    replace: tuple[int, ...],
) -> None:  # fmt: skip
    plan = which_to_replace(cause, nodes, held)
    assert (plan.keep, plan.replace, plan.partial) == (keep, replace, True)


@pytest.mark.parametrize(
    ("cause", "nodes", "held", "why"),
    [
        ("host_lost", [node(0, **TERMINATED)], hosts(1), "a single node"),
        ("node_failure", [node(0, **FAILED), node(1, **RUNNING)], hosts(2),
         "node_failure: no host was lost"),
        ("host_lost", [node(0, **TERMINATED), node(1, verdict="preempted")], hosts(2),
         "no host is left to keep"),
        ("host_lost", [node(0, **RUNNING), node(1, **TERMINATED)],
         hosts(2, h0=KeptHost(0, owned=False, same_offer=True)), "no host is left to keep"),
    ],
    ids=["single-node", "program-failure", "all-lost", "survivor-not-owned"],
)  # fmt: skip
def test_every_node_is_rented_again_when_nothing_can_be_kept(
    cause: str, nodes: list[NodeSeen], held: list[KeptHost], why: str
) -> None:
    plan = which_to_replace(cause, nodes, held)
    assert plan == Replacement((), tuple(n.rank for n in nodes), why)
    assert not plan.partial


def test_a_host_silent_within_its_window_is_not_kept() -> None:
    """Node 1's cloud says it is gone while node 2 has not answered for a few seconds: a
    host whose state is not known is not trusted with the next attempt."""
    nodes = [node(0, **RUNNING), node(1, **TERMINATED), node(2, unreachable_since=NOW - 5)]
    assert which_to_replace("host_lost", nodes, hosts(3)) == Replacement((0,), (1, 2))


def test_hosts_on_a_vast_overlay_are_all_rented_again() -> None:
    """A replacement is rented outside the job's overlay network: it could not reach the kept
    node's overlay address, so the whole job goes again."""
    from types import SimpleNamespace

    from launcher.remote.hosts import HostEntry
    from launcher.state.db import JobRecord
    from launcher.supervise.recover_partial import replacement_for

    hosts = [HostEntry(name=f"h{r}", address=f"203.0.113.{r}", instance=f"vast:{r}",
                       peer=f"10.0.0.{r}").to_record() for r in range(2)]  # fmt: skip
    job = JobRecord(id="j", name="j", spec_path="j.yaml", provider="vast", runtime="docker",
                    hosts=hosts, node_dirs=["/n0", "/n1"], state="running", exit_code=None,
                    created_at=NOW, ended_at=None, last_line=None)  # fmt: skip
    decision = SimpleNamespace(why="host_lost")
    plan = replacement_for(job, decision, [node(0, **RUNNING), node(1, **TERMINATED)])  # type: ignore[arg-type]
    assert (plan.keep, plan.partial) == ((), False)
    assert "overlay" in plan.why
