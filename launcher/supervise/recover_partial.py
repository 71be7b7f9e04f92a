"""A recovery that replaces only the lost nodes of a multi-node job (plan/replace.py
decides which): the lost hosts terminated, the job stopped on the kept ones (the agent's
cancel: the hosts stay, booted and bootstrapped), their previous attempt's files set aside,
and then `submit --up`'s own launch with `keep_hosts`: it rents only the replacements (the
same rent path, `count` = the lost nodes) and restarts every node from the same checkpoint
in a world re-formed with the new addresses (node 0's among them when node 0 was the lost
one: MASTER_ADDR and the rendezvous follow the plan's node 0).

Money: the replacements are rented inside the launch's own rent, so any way out before the
job starts terminates them (targets.cloud.rent); when the partial restart fails, the caller
terminates every host of the job and rents them all again.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from launcher.errors import GpujobError
from launcher.plan.recovery import NodeSeen, Recover
from launcher.plan.replace import KeptHost, Replacement, which_to_replace
from launcher.state.db import JobRecord
from launcher.targets.base import Node, close_all, target_for

if TYPE_CHECKING:
    from launcher.remote.base import Connection

WHOLE_ENV = "GPUJOB_RECOVER_WHOLE"
"""Set to 1: every recovery rents all nodes again (the anchors' way; the benchmark's baseline)."""
STOP_GRACE_S = 3.0
"""The kept nodes' job gets this long after SIGTERM before SIGKILL: it has lost a peer, so its
ranks sit in a collective that never returns (a Python SIGTERM handler cannot run there)
and no save of theirs could complete; a longer grace only delays the restart."""
SUPERVISOR_END_S = 60.0
"""How long a kept node's supervisor may take to ship its last files before they are set aside."""


def replacement_for(job: JobRecord, decision: Recover, seen: list[NodeSeen]) -> Replacement:
    """Which of the job's nodes the recovery rents again (all of them where WHOLE_ENV says so)."""
    from launcher.remote.hosts import HostEntry

    ranks = tuple(node.rank for node in seen)
    if os.environ.get(WHOLE_ENV) == "1":
        return Replacement((), ranks, f"{WHOLE_ENV}=1")
    hosts = []
    for rank, record in enumerate(job.hosts):
        instance = HostEntry.from_record(record).instance or ""
        cloud, _, instance_id = instance.partition(":")
        hosts.append(KeptHost(rank, owned=bool(instance_id), same_offer=cloud == job.provider))
    return which_to_replace(decision.why, seen, hosts)


def release_lost(job: JobRecord, ranks: tuple[int, ...], why: str) -> list[str]:
    """Terminate the lost nodes' hosts only (the cloud's own terminate, skipped where its
    cloud says it is gone); lines for what could not be."""
    only = replace(job, hosts=[job.hosts[r] for r in ranks],
                   node_dirs=[job.node_dirs[r] for r in ranks])  # fmt: skip
    return target_for(job).release(only, why)


def stop_kept(job: JobRecord, ranks: tuple[int, ...]) -> None:
    """The job stopped on each kept node by its agent (the supervisor syncs its last
    checkpoint and ships the log), and its supervisor gone; GpujobError where a kept host
    does not answer or its job does not stop: the caller rents every node again."""
    nodes = _kept_nodes(job, ranks)
    try:
        for node in nodes:
            result = node.cancel(STOP_GRACE_S)
            if not result.ok:
                said = (result.stderr.strip() or result.stdout.strip())[-200:]
                raise GpujobError(f"could not stop the job on node {node.rank}: {said}")
        deadline = time.monotonic() + SUPERVISOR_END_S
        for node in nodes:
            while time.monotonic() < deadline:
                pid = (node.status() or {}).get("supervisor_pid")
                if not pid or not node.connection.run(["kill", "-0", str(int(pid))]).ok:
                    break
                time.sleep(0.5)
    except (OSError, EOFError, ValueError) as error:
        raise GpujobError(f"a kept host stopped answering: {error!r}") from None
    finally:
        close_all([node.connection for node in nodes])


def set_aside(job: JobRecord, ranks: tuple[int, ...], checkpoint_dir: str, attempt: int) -> None:
    """The previous attempt's node folders and checkpoints on each kept host renamed to
    `<name>.attempt-N`: the restart starts there as on a new host (no old status, cancel
    request or log; no checkpoint newer than the resume one, perhaps partial), and the
    resume checkpoint is pulled and verified as on a new head. Renamed, not deleted: a
    rename needs no right over files the job's container wrote."""
    nodes = _kept_nodes(job, ranks)
    try:
        for node in nodes:
            job_dir = str(PurePosixPath(node.node_dir).parent)
            paths = [node.node_dir, str(PurePosixPath(job_dir) / checkpoint_dir)]
            moves = [f"if [ -e {shlex.quote(p)} ]; then mv {shlex.quote(p)} "
                     f"{shlex.quote(f'{p}.attempt-{attempt}')}; fi" for p in paths]  # fmt: skip
            result = node.connection.run(["sh", "-c", "set -e; " + "; ".join(moves)])
            if not result.ok:
                said = (result.stderr.strip() or result.stdout.strip())[-200:]
                raise GpujobError(f"could not set node {node.rank}'s last files aside: {said}")
    except (OSError, EOFError) as error:
        raise GpujobError(f"a kept host stopped answering: {error!r}") from None
    finally:
        close_all([node.connection for node in nodes])


def kept_records(job: JobRecord, plan: Replacement) -> tuple[str, ...]:
    """`LaunchRequest.keep_hosts`: the kept ranks' host records, "" for those rented again."""
    return tuple(job.hosts[r] if r in plan.keep else "" for r in range(len(job.hosts)))


def plan_line(job: JobRecord, plan: Replacement) -> str:
    from launcher.targets.cloud.target import job_hosts

    names = {host.rank: host.name for host in job_hosts(job)}
    kept = ", ".join(f"node {r} ({names[r]})" for r in plan.keep)
    lost = ", ".join(f"node {r} ({names[r]})" for r in plan.replace)
    return (f"replacing only {lost}; keeping {kept} (their job stopped, restarted with the "
            "others from the same checkpoint)")  # fmt: skip


def _kept_nodes(job: JobRecord, ranks: tuple[int, ...]) -> list[Node]:
    """Each kept node over a connection of its own host (the lost ones are never contacted)."""
    from launcher.targets.cloud.target import CloudTarget

    target = CloudTarget(job.provider)
    opened: dict[str, Connection] = {}
    nodes = []
    try:
        for rank in ranks:
            _, conn = target.connection(job.hosts[rank], opened)
            nodes.append(Node(rank, job.node_dirs[rank], conn, target.traits.agent_python))
    except (GpujobError, OSError, EOFError) as error:
        close_all(list(opened.values()))
        said = error.one_line() if isinstance(error, GpujobError) else repr(error)
        raise GpujobError(f"a kept host does not answer: {said}") from None
    return nodes


def checkpoint_dir_of(request: dict[str, Any]) -> str:
    """The spec's `checkpoints.dir` (relative to the job's folder, or absolute)."""
    from launcher.spec.load import load_requested

    return str(load_requested(request).spec.checkpoints.dir)
