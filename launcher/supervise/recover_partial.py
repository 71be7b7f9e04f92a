"""A recovery that replaces only the lost nodes of a multi-node job (plan/replace.py
decides which): the lost hosts terminated, then `submit --up`'s own launch with `keep_hosts`:
it rents only the replacements (the same rent path, `count` = the lost nodes) and restarts
every node from the same checkpoint in a world re-formed with the new addresses (node 0's
among them when node 0 was the lost one: MASTER_ADDR and the rendezvous follow the plan's
node 0).

The kept hosts' share runs on a thread while the replacements are rented and bootstrapped
(`KeptSide`): the job stopped on them (the agent's cancel: the hosts stay, booted and
bootstrapped), the resume checkpoint found once their supervisors have shipped their last
files, their previous attempt's files set aside and the checkpoint pulled onto them. The
launch waits for it only once the nodes are placed: the plan is the first thing that needs
the checkpoint's name, and only the replacements still need its files.

Money: the replacements are rented inside the launch's own rent, so any way out before the
job starts terminates them (targets.cloud.rent); when the partial restart fails, the caller
terminates every host of the job and rents them all again.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
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
    from collections.abc import Callable

    from launcher.plan.model import Plan
    from launcher.remote.base import Connection
    from launcher.supervise.recover_steps import Checkpoint

WHOLE_ENV = "GPUJOB_RECOVER_WHOLE"
"""Set to 1: every recovery rents all nodes again (the anchors' way; the benchmark's baseline)."""
STOP_GRACE_S = 3.0
"""The kept nodes' job gets this long after SIGTERM before SIGKILL: it has lost a peer, so its
ranks sit in a collective that never returns (a Python SIGTERM handler cannot run there)
and no save of theirs could complete; a longer grace only delays the restart."""
HOLD_S = 1800.0
"""A kept host's autostop hold while its job restarts: the replacement's rent bounded by
its --timeout (1200 s by default) and the margin after it; it expires by itself should the
controller die meanwhile."""
SUPERVISOR_END_S = 60.0
"""How long a kept node's supervisor may take to ship its last files before they are set aside."""


def replacement_for(job: JobRecord, decision: Recover, seen: list[NodeSeen]) -> Replacement:
    """Which of the job's nodes the recovery rents again (all of them where WHOLE_ENV says so)."""
    from launcher.remote.hosts import HostEntry

    ranks = tuple(node.rank for node in seen)
    if os.environ.get(WHOLE_ENV) == "1":
        return Replacement((), ranks, f"{WHOLE_ENV}=1")
    if any(HostEntry.from_record(record).peer for record in job.hosts):
        return Replacement((), ranks, "its hosts meet over a Vast overlay network, which a "
                           "replacement does not join")  # fmt: skip
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


def hold_autostop(job: JobRecord, ranks: tuple[int, ...], held: bool) -> None:
    """A kept host's autostop watcher (where one runs) held while the job is stopped there,
    as the rent holds a new host until its hand-over: the gap until the restart (a boot,
    a bootstrap) may be longer than its idle window. `held` False: the hold removed, once
    the job runs there again. A host that does not answer is the stop's to say."""
    from launcher.bootstrap.autostop import FOLDER, HOLD_FILE

    hold, body = f"{FOLDER}/{HOLD_FILE}", json.dumps({"seconds": HOLD_S, "by": "gpujob recover"})
    script = (f"if [ -d {FOLDER} ]; then printf '%s\\n' {shlex.quote(body)} > {hold}.tmp && "
              f"mv {hold}.tmp {hold}; fi" if held else f"rm -f {hold}")  # fmt: skip
    nodes = _kept_nodes(job, ranks)
    try:
        for node in nodes:
            node.connection.run(["sh", "-c", script])  # from the login's home, as bootstrap's
    except (OSError, EOFError):
        return
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


class KeptSide:
    """The kept nodes' share of a partial restart, started on a thread of its own: their job
    stopped, the resume checkpoint found (only then: a kept supervisor may still ship the
    newest), their last attempt set aside, the checkpoint pulled onto them. `checkpoint()`
    waits for it; a failure there is the partial restart's (the caller rents every node)."""

    def __init__(self, job: JobRecord, plan: Replacement, request: dict[str, Any], restart: int,
                 found: Callable[[Checkpoint | None], None]) -> None:  # fmt: skip
        self.job, self.plan, self.request, self.restart = job, plan, request, restart
        self.found = found
        """Told the checkpoint as soon as it is known (the recovery's line, said then)."""
        self.pulled: dict[str, str] = {}
        """Host name -> the folder the checkpoint was pulled into there."""
        self._found: Checkpoint | None = None
        self._error: BaseException | None = None
        self._early: threading.Thread | None = None
        """The pull onto the replacements, started as soon as they are placed."""
        self._thread = threading.Thread(target=self._run, name="kept-hosts", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from launcher.supervise.recover_steps import latest_checkpoint, pull_onto

        try:
            hold_autostop(self.job, self.plan.keep, held=True)
            stop_kept(self.job, self.plan.keep)
            self._found = latest_checkpoint(self.request, self.job.id)
            self.found(self._found)
            folder = checkpoint_dir_of(self.request)
            set_aside(self.job, self.plan.keep, folder, self.restart)
            if self._found is not None:  # in parallel, into each kept host's job folder
                by_dest: dict[str, list[str | None]] = {}
                for rank in self.plan.keep:
                    dest = str(PurePosixPath(self.job.node_dirs[rank]).parent / folder)
                    by_dest.setdefault(dest, []).append(self._name(rank))
                for dest, heads in by_dest.items():
                    pull_onto(self._found, dest, heads)
                    self.pulled.update(dict.fromkeys(map(str, heads), dest))
        except BaseException as error:  # said by `checkpoint()`, on the controller's thread
            self._error = error

    def _name(self, rank: int) -> str:
        from launcher.remote.hosts import HostEntry

        return HostEntry.from_record(self.job.hosts[rank]).name

    def settle(self) -> None:
        """Its work over, whatever came of it."""
        self._thread.join()
        if self._early is not None:
            self._early.join()

    def checkpoint(self) -> Checkpoint | None:
        """The resume checkpoint, once the kept nodes are ready for the restart."""
        self._thread.join()
        if isinstance(self._error, GpujobError):
            raise self._error
        if self._error is not None:
            raise GpujobError(f"the kept hosts could not be made ready: {self._error!r}")
        return self._found

    def resume_from(self, records: list[str]) -> str | None:
        """The resume checkpoint's name (`CloudTarget.resume`), once the nodes are placed
        on `records`: the pull onto the replacements starts then, on a thread, into the
        folder the kept hosts got it in, while the plan is built and its probes run (the
        plan's own folder is checked by `before_start`, which pulls again where it differs)."""
        from launcher.supervise.recover_steps import heads_of, pull_onto

        found = self.checkpoint()
        dests = set(self.pulled.values())
        new = [h for h in heads_of(records) if h is not None and h not in self.pulled]
        if found is not None and len(dests) == 1 and new:
            (dest,) = dests

            def pull() -> None:
                try:
                    pull_onto(found, dest, list(new))
                except (GpujobError, OSError, EOFError):
                    return  # `before_start` pulls it again, and says why if it fails then
                self.pulled.update(dict.fromkeys(new, dest))

            self._early = threading.Thread(target=pull, name="replacement-pull", daemon=True)
            self._early.start()
        return found.name if found else None

    def before_start(self, plan: Plan, records: list[str]) -> None:
        """The launch's step before the start: the checkpoint pulled onto the hosts that
        do not have it in the plan's folder (the replacements, unless their early pull
        has put it there)."""
        from launcher.supervise.recover_steps import heads_of, pull_onto

        checkpoint = self.checkpoint()
        if self._early is not None:
            self._early.join()
        dest = plan.derived["checkpoint_dir"]
        if checkpoint is not None:
            heads = [h for h in heads_of(records) if h is None or self.pulled.get(h) != dest]
            pull_onto(checkpoint, dest, heads)
