"""The recovery controller's decisions, with no I/O: what it saw in, what to do out.

The controller (supervise/recover.py) polls each node's host twice, the cloud's `describe` (a
verdict: None, `preempted`, `host_lost`) and the node's agent over SSH (its state, or
nothing while the host does not answer), and asks `decide` what that means. As every anchor
does (recovery.md §0), loss is noticed by polling, a lost node restarts the whole job, and
the infrastructure's events are told apart from the program's own failure, which restarts
the job only when the spec lists `node_failure`.

A node that failed while another node's host does not answer is not yet a verdict: in a
multi-node job the survivors fail as soon as a peer vanishes, and the cause is the host
that went, once its window has passed or its cloud says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RUNNING = frozenset({"starting", "running", "unknown"})
"""`unknown`: the agent has not written its status yet (a start under way)."""
ENDED_BY_USER = frozenset({"cancelled", "timed out"})
"""Ends that are nobody's failure: a cancel is the user's word, a time limit the spec's."""


@dataclass(frozen=True)
class Policy:
    """A job's `recovery:` as the controller applies it."""

    max_restarts: int = 3
    on: tuple[str, ...] = ("host_lost", "preempted")
    unreachable_after_s: float = 120.0
    rent_tries: int = 3
    """Renting again is tried this often (no capacity, a failed bootstrap) before stopping."""


@dataclass(frozen=True)
class NodeSeen:
    """One node at one poll. `state` is None while its host does not answer SSH;
    `unreachable_since` is when it first stopped answering (None while it answers)."""

    rank: int
    host: str
    state: str | None = None
    exit_code: int | None = None
    verdict: str | None = None
    reason: str = ""
    unreachable_since: float | None = None


@dataclass(frozen=True)
class Watch:
    """Nothing to do yet; `note` says why, when something is pending."""

    note: str = ""


@dataclass(frozen=True)
class Recover:
    """Terminate what is left, rent again, resume from the latest checkpoint."""

    why: str
    host: str
    rank: int
    detail: str = ""

    def line(self, restart: int, max_restarts: int, step: int | None) -> str:
        """The one line of a recovery in the log and `status`."""
        frm = f"from step {step}" if step is not None else "from the start (no checkpoint yet)"
        said = f" ({self.detail})" if self.detail else ""
        return (f"recovering (attempt {restart + 1}, restart {restart}/{max_restarts}, "
                f"{self.why}: {self.host}{said}, {frm})")  # fmt: skip


@dataclass(frozen=True)
class Stop:
    """The controller stops for good and terminates every host of the job."""

    why: str
    state: str = "failed"
    exit_code: int = 1


@dataclass(frozen=True)
class Finished:
    """The job ended on its own (or by the user's word); no restart is due."""

    state: str
    exit_code: int


Decision = Watch | Recover | Stop | Finished


@dataclass
class Unreachable:
    """Since when each node's host has not answered, across polls (the only state `decide`
    needs from earlier polls)."""

    since: dict[int, float] = field(default_factory=dict)

    def seen(self, rank: int, answered: bool, now: float) -> float | None:
        if answered:
            self.since.pop(rank, None)
            return None
        return self.since.setdefault(rank, now)


def decide(policy: Policy, restarts: int, nodes: list[NodeSeen], now: float) -> Decision:
    """What the nodes seen at `now` call for, given `restarts` already made."""
    cancelled = [n for n in nodes if n.state == "cancelled"]
    if cancelled:  # the user's word: the other nodes' failures follow from it, never a restart
        node = cancelled[0]
        return Finished("cancelled", node.exit_code if node.exit_code is not None else 1)
    event = _infrastructure_event(policy, nodes, now)
    if event is None:
        waiting = [n for n in nodes if n.state is None]
        if waiting:  # an unanswered host within its window: nothing is known about it yet
            first = min(waiting, key=lambda n: n.unreachable_since or now)
            left = policy.unreachable_after_s - (now - (first.unreachable_since or now))
            return Watch(f"node {first.rank} ({first.host}) does not answer; lost in {left:.0f} s")
        event = _program_event(nodes)
        if event is None:
            return _ended(nodes)
    why, node, detail = event
    if why not in policy.on:
        listed = ", ".join(policy.on)
        return Stop(f"{why} on node {node.rank} ({node.host}{_said(detail)}), which recovery "
                    f"does not restart (it restarts on: {listed})",
                    exit_code=node.exit_code or 1)  # fmt: skip
    if restarts >= policy.max_restarts:
        return Stop(f"max_restarts ({policy.max_restarts}) used up: {why} on node {node.rank} "
                    f"({node.host}{_said(detail)})")  # fmt: skip
    return Recover(why, node.host, node.rank, detail)


def _said(detail: str) -> str:
    return f": {detail}" if detail else ""


def _infrastructure_event(
    policy: Policy, nodes: list[NodeSeen], now: float
) -> tuple[str, NodeSeen, str] | None:
    """The cloud's verdict first (it names the cause), then a host silent past its window,
    then an agent that says its supervisor is gone (`lost`: the host rebooted under it)."""
    for node in nodes:
        if node.verdict is not None and node.state not in ("succeeded",):
            return node.verdict, node, node.reason
    for node in nodes:
        since = node.unreachable_since
        if node.state is None and since is not None and now - since >= policy.unreachable_after_s:
            return "host_lost", node, f"no SSH answer for {now - since:.0f} s"
    for node in nodes:
        if node.state == "lost":
            return "host_lost", node, node.reason or "its agent is gone (the host rebooted?)"
    return None


def _program_event(nodes: list[NodeSeen]) -> tuple[str, NodeSeen, str] | None:
    failed = [n for n in nodes if n.state == "failed"]
    if not failed:
        return None
    first = failed[0]
    return "node_failure", first, f"exit code {first.exit_code}"


def _ended(nodes: list[NodeSeen]) -> Decision:
    """No event: the job runs, or has ended well or by the user's word."""
    states = [n.state for n in nodes]
    if any(state in RUNNING or state is None for state in states):
        return Watch()
    for state in ENDED_BY_USER:
        if state in states:
            node = next(n for n in nodes if n.state == state)
            return Finished(state, node.exit_code if node.exit_code is not None else 1)
    if all(state == "succeeded" for state in states):
        return Finished("succeeded", 0)
    return Watch()  # a mix still settling (one node ended, the others not yet)


def rent_delay_s(policy: Policy, tries_made: int, base_s: float) -> float | None:
    """How long to wait before renting again after `tries_made` failed tries, or None when
    the bound is reached: the controller stops."""
    if tries_made >= policy.rent_tries:
        return None
    return base_s * (2 ** (tries_made - 1))
