"""Which nodes a recovery replaces and which it keeps, with no I/O (the controller's
`supervise/recover_partial.py` carries it out).

Every anchor restarts a multi-node job on all new hosts when one is lost (recovery.md §1.5,
§2; skypilot#3907 left open). A host that still answers, that gpujob rented from the job's
cloud and that runs the job's offer, is as good as a new one and already booted and
bootstrapped: only the lost node's host is rented again, the others are kept (their job
stopped, then every node restarted from the same checkpoint in a world re-formed with the
new addresses). The whole job is rented again when nothing would be kept, when the cause
is the program's own failure (no host was lost), or when a host's state is not known well
enough to trust it with the next attempt.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.plan.recovery import NodeSeen

INFRASTRUCTURE = frozenset({"host_lost", "preempted"})
"""The causes that name a host; `node_failure` is the program's and names none."""


@dataclass(frozen=True)
class KeptHost:
    """A node's host as the job's record names it, with what decides whether it may stay."""

    rank: int
    owned: bool
    """gpujob rented it for the job (its record names the instance): it can also release it."""
    same_offer: bool
    """It was rented from the cloud (and offer) the restart rents from."""


@dataclass(frozen=True)
class Replacement:
    """The ranks kept on their hosts and the ranks rented again; `keep` empty: every node
    is rented again (`why` says why)."""

    keep: tuple[int, ...]
    replace: tuple[int, ...]
    why: str = ""

    @property
    def partial(self) -> bool:
        return bool(self.keep)


def which_to_replace(cause: str, nodes: list[NodeSeen], hosts: list[KeptHost]) -> Replacement:
    """`cause` is the recovery's (`Recover.why`); `nodes` the last poll, in rank order."""
    ranks = tuple(node.rank for node in nodes)
    if len(nodes) < 2:
        return Replacement((), ranks, "a single node")
    if cause not in INFRASTRUCTURE:
        return Replacement((), ranks, f"{cause}: no host was lost")
    by_rank = {host.rank: host for host in hosts}
    keep: list[int] = []
    replace: list[int] = []
    for node in nodes:
        host = by_rank.get(node.rank)
        lost = node.verdict is not None or node.state in (None, "lost")
        trusted = host is not None and host.owned and host.same_offer
        (replace if lost or not trusted else keep).append(node.rank)
    if not keep:
        return Replacement((), ranks, "no host is left to keep")
    return Replacement(tuple(keep), tuple(replace))
