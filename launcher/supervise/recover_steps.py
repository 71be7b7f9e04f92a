"""The recovery controller's effects, each one step: look at the job's hosts (the cloud's
`describe` and each node's agent over SSH), terminate them, find the latest complete
checkpoint in S3, pull it onto a new head, and wait for the agents to finish shipping.

Only the job's own hosts are ever touched: the ones its record names, each by the instance
id gpujob recorded when it rented them.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import Instance
from launcher.errors import GpujobError
from launcher.jobs.state import NODE_FAILURES
from launcher.plan.recovery import NodeSeen, Unreachable
from launcher.remote.base import Connection
from launcher.runtime.agent import NodeStatus
from launcher.say import say
from launcher.state.db import JobRecord
from launcher.targets.base import BeforeStart, Node, close_all, target_for
from launcher.targets.cloud.target import CloudTarget, job_hosts

if TYPE_CHECKING:
    from launcher.plan.model import Plan

PULL_TRIES = 3
AGENTS_END_S = 120.0
"""How long a finished job's agents get to ship its last checkpoint and log."""


def verdict_of(inst: Instance) -> tuple[str | None, str]:
    """The cloud's word on a host (each cloud's own reading, clouds/loss.py): None while
    it is fine or still booting, `preempted` or `host_lost`, with the cloud's reason."""
    from launcher.clouds.loss import loss_verdict

    found = loss_verdict(inst)
    return (None, "") if found is None else (found.kind, found.reason)


def observe(job: JobRecord, unreachable: Unreachable, now: float) -> list[NodeSeen]:
    """Every node at one poll: the cloud's verdict on its host, then (unless the cloud says
    it is gone) its agent's status over SSH."""
    from launcher.clouds.registry import get_provider

    provider = get_provider(job.provider)
    target = CloudTarget(job.provider)
    seen = []
    conns: list[Connection] = []
    try:
        for host, node_dir in zip(job_hosts(job), job.node_dirs, strict=True):
            verdict, reason = None, ""
            if host.instance_id:
                try:
                    verdict, reason = verdict_of(provider.describe(host.instance_id))
                except GpujobError as error:  # the cloud's API failing is not a lost host
                    say(f"node {host.rank}: could not ask {provider.name} about {host.name}: "
                        f"{error.one_line()}")  # fmt: skip
            status: NodeStatus | None = None
            if verdict is None:
                status = _agent_status(target, job, host.rank, node_dir, conns)
            since = unreachable.seen(host.rank, status is not None, now)
            seen.append(NodeSeen(
                rank=host.rank, host=host.name, state=(status or {}).get("state"),
                exit_code=(status or {}).get("exit_code"), verdict=verdict,
                reason=reason or str((status or {}).get("reason") or ""),
                unreachable_since=since,
            ))  # fmt: skip
    finally:
        close_all(conns)
    return seen


def _agent_status(target: CloudTarget, job: JobRecord, rank: int, node_dir: str,
                  conns: list[Connection]) -> NodeStatus | None:  # fmt: skip
    """The node's agent status, or None while its host does not answer (a connection of
    its own: a host that went does not hold up the others)."""
    try:
        _, conn = target.connection(job.hosts[rank], {})
    except (GpujobError, OSError, EOFError):  # EOFError: a first contact cut off
        return None
    conns.append(conn)
    return Node(rank, node_dir, conn, target.traits.agent_python).status()


def terminate_hosts(job: JobRecord, why: str) -> list[str]:
    """Terminate every host of the job that its cloud still runs; lines for what could not
    be (the user's `gpujob down` then)."""
    return target_for(job).release(job, why)


def keep_or_terminate(job: JobRecord, state: str, request: dict[str, Any],
                      why: str | None = None) -> bool:  # fmt: skip
    """The job's end: a failure with a keep window (the flag's, else the spec's) keeps its
    hosts up for it (targets/cloud/keep.py), anything else terminates them (`why`, said).
    A host the keep could not arm (one that does not answer: its watcher may be as gone
    as its SSH) is terminated as without the window. True if kept."""
    from launcher.jobs.keep import keeps_hosts
    from launcher.spec.keep import keep_window

    window = None
    if state in NODE_FAILURES:
        with contextlib.suppress(GpujobError, OSError, KeyError):  # an unreadable spec: no keep
            from launcher.spec.load import load_requested

            window = keep_window(request.get("keep_on_failure"),
                                 load_requested(request).spec.keep_on_failure)  # fmt: skip
    if keeps_hosts(state, window):
        from launcher.jobs.keep import failed_node
        from launcher.remote.hosts import HostEntry
        from launcher.targets.cloud.keep import keep_failed

        assert window is not None
        node = failed_node(job)  # None: a cancel came first (`decide` says so before here)
        armed = keep_failed(job, window, say, node) if node is not None else []
        if armed:
            rest = [host for host in job.hosts if HostEntry.from_record(host).name not in armed]
            if rest:
                terminate_hosts(replace(job, hosts=rest), f"job {job.id} {state}, not kept: "
                                "it could not be armed for the window")  # fmt: skip
            return True
    terminate_hosts(job, why or f"job {job.id} {state}")
    return False


@dataclass(frozen=True)
class Checkpoint:
    """The latest complete checkpoint in S3: its folder name and step."""

    name: str
    step: int
    remote: str
    """`REMOTE:prefix/run` it is under (the job's run folder in the spec's sync_to)."""


def latest_checkpoint(request: dict[str, Any], job_id: str) -> Checkpoint | None:
    """The newest checkpoint whose marker is in S3 (complete) in the job's own run folder
    (storage/runs.py), read from here: never another run's, whatever its steps."""
    from dataclasses import replace

    from launcher.agent.ckpt_store import MARKER, step_of
    from launcher.spec.load import load_requested
    from launcher.storage.remotes import all_remotes, parse_remote_path
    from launcher.storage.runs import run_name, run_prefix
    from launcher.storage.s3 import list_keys

    spec = load_requested(request).spec
    run = run_name(spec, job_id)
    target = f"{str(spec.checkpoints.sync_to).rstrip('/')}/{run}"
    path = parse_remote_path(str(spec.checkpoints.sync_to), all_remotes(spec.storage),
                             "checkpoints.sync_to")  # fmt: skip
    path = replace(path, prefix=run_prefix(path.prefix, run))
    complete = {key.split("/")[0] for key, _ in list_keys(path)
                if key.count("/") == 1 and key.endswith(f"/{MARKER}")}  # fmt: skip
    steps = {name: step_of(name) for name in complete}
    found = sorted((step, name) for name, step in steps.items() if step is not None)
    if not found:
        return None
    step, name = found[-1]
    return Checkpoint(name, step, target)


def pull_onto_head(checkpoint: Checkpoint) -> BeforeStart:
    """The step between placement and start of a restart (or of `submit --resume-from`):
    the checkpoint pulled from S3 into the job's checkpoint folder on every node's host (in
    parallel), each copy verified against its marker; here, for a job on this machine (its
    record is no host's). Every host, not node 0's only: torchrun's c10d rendezvous gives
    the global rank 0, which reads the checkpoint, to whichever node it orders first, and a
    2-node restart whose rank 0 landed on node 1 refused to resume ("not a complete
    checkpoint")."""

    def before_start(plan: Plan, records: list[str]) -> None:
        pull_onto(checkpoint, plan.derived["checkpoint_dir"], heads_of(records))

    return before_start


def heads_of(records: list[str]) -> list[str | None]:
    """Each host of a placement once, by name (None: this machine, a record of no host)."""
    from launcher.remote.hosts import HostEntry

    heads: list[str | None] = []
    for record in records:
        try:
            name: str | None = HostEntry.from_record(record).name
        except (ValueError, TypeError):
            name = None
        if name not in heads:
            heads.append(name)
    return heads


def pull_onto(checkpoint: Checkpoint, dest: str, heads: list[str | None]) -> None:
    """The checkpoint pulled into `dest` on each of `heads`, in parallel, each verified."""
    from concurrent.futures import ThreadPoolExecutor

    if not heads:
        return
    with ThreadPoolExecutor(len(heads)) as pool:
        for done in [pool.submit(_pull_onto, checkpoint, dest, head) for head in heads]:
            done.result()


def _pull_onto(checkpoint: Checkpoint, dest: str, head: str | None) -> None:
    from launcher.storage.sync import SyncRequest, sync_ckpt

    started = time.monotonic()
    request = SyncRequest(source=checkpoint.remote, dest=dest, step=checkpoint.step, on=head)
    for attempt in range(1, PULL_TRIES + 1):
        try:
            sync_ckpt(request)
            break
        except GpujobError as error:  # a copy resumes: what was pulled stays
            if attempt == PULL_TRIES:
                raise
            say(f"pull of {checkpoint.name} onto {head} failed ({error.one_line()}); "
                "trying again")  # fmt: skip
    say(f"pulled {checkpoint.name} (step {checkpoint.step}) onto {head or 'this machine'} in "
        f"{time.monotonic() - started:.1f} s, verified")  # fmt: skip


def wait_for_agents(job: JobRecord, deadline_s: float = AGENTS_END_S) -> None:
    """A job that ended: its agents ship the last checkpoint and the log before they exit;
    the hosts go only once they have (or after the bound)."""
    try:
        nodes = target_for(job).nodes(job)
    except (GpujobError, OSError, EOFError):
        return
    deadline = time.monotonic() + deadline_s
    try:
        for node in nodes:
            while time.monotonic() < deadline:
                status = node.status()
                pid = (status or {}).get("supervisor_pid")
                if not pid or not node.connection.run(["kill", "-0", str(int(pid))]).ok:
                    break
                time.sleep(0.5)
    except (GpujobError, ValueError, OSError, EOFError):
        return
    finally:
        close_all([node.connection for node in nodes])
