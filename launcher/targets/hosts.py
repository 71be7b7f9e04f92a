"""What the targets that run a job's nodes on hosts share (this machine, SSH hosts, rented
hosts): the plan for the placement, its submission (checks on the hosts, the record before
the start, the start), and each node reached through its host's agent.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.errors import GpujobError, UsageError
from launcher.remote.base import Connection
from launcher.runtime.agent import NodeStatus, agent_argv
from launcher.say import say
from launcher.state.db import JobRecord, StateDB
from launcher.state.job_states import JobState
from launcher.targets.base import (
    BeforeStart,
    Cancelled,
    JobInput,
    LaunchRequest,
    Node,
    Started,
    Submission,
    Traits,
    close_all,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.plan.model import NodeLayout, Plan
    from launcher.spec.image import ImageDefinition
    from launcher.storage.probes import Probe
    from launcher.targets.placement import Placement


@dataclass
class HostsSubmission:
    """The plan for the placed nodes; `text` is what `--dry-run` prints, `submit` runs it."""

    job: JobInput
    request: LaunchRequest
    plan: Plan
    placed: Placement
    image: ImageDefinition | None
    """The image the plan was built for (None where the host is the image)."""
    probes: tuple[Probe, ...] = ()
    """The checks before any file reaches a host (storage/probes.py), run by `submit`."""

    @property
    def job_id(self) -> str:
        return self.plan.job_id

    def text(self, as_json: bool) -> str:
        import json

        from launcher.plan.show import as_json as shown_json
        from launcher.plan.show import plan_data, plan_text
        from launcher.storage.probes import probe_lines

        if not as_json:
            return plan_text(self.plan) + "".join(f"{line}\n" for line in probe_lines(self.probes))
        data = {**plan_data(self.plan), "probes": shown_json(self.probes)}
        return json.dumps(data, indent=2) + "\n"

    def close(self) -> None:
        close_all(list(self.placed.connections.values()))


class HostsTarget:
    """The shared half of `LocalTarget`, `SshTarget` and `CloudTarget`; each places the
    nodes its own way (`place`)."""

    kind: str
    traits: Traits

    def place(
        self, job: JobInput, request: LaunchRequest
    ) -> tuple[Placement, ImageDefinition | None]:
        """The nodes' placement, and the image the plan is for."""
        raise NotImplementedError

    def start_contact(self, request: LaunchRequest) -> None:
        return None

    def close(self) -> None:
        return None

    def plan_for(
        self,
        job: JobInput,
        request: LaunchRequest,
        layout: NodeLayout,
        image: ImageDefinition | None,
        report: Callable[[str], None] = say,
    ) -> Plan:
        from launcher.plan.build import build_plan
        from launcher.storage.preflight import preflight

        sync = preflight(job.loaded, layout, image, report, job.job_id)
        return build_plan(job.loaded.spec, layout, job.job_id, job.secrets, image, job.sources,
                          sync, follow=not request.detach,
                          resume_from=request.resume_from, max_steps=request.max_steps)  # fmt: skip

    def dryrun(self, job: JobInput, request: LaunchRequest) -> Submission:
        from launcher.storage.preflight import env_dir
        from launcher.storage.probes import probes_for

        placed, image = self.place(job, request)
        try:
            plan = self.plan_for(job, request, placed.target, image)
            probes = probes_for(job.loaded, plan, env_dir(placed.target, image),
                                on_this_machine=self.traits.on_this_machine)  # fmt: skip
        except BaseException:
            close_all(list(placed.connections.values()))
            raise
        return HostsSubmission(job, request, plan, placed, image, probes)

    def submit(self, submission: Submission, before_start: BeforeStart | None) -> Started:
        from launcher.storage.preflight import env_dir
        from launcher.storage.probes import run_probes

        assert isinstance(submission, HostsSubmission)
        placed, plan = submission.placed, submission.plan
        try:
            environment = env_dir(placed.target, submission.image)
            run_probes(submission.probes, submission.job.loaded, environment, placed.connections,
                       say, placed.facts, plan.job_id)  # fmt: skip
            if before_start is not None:
                before_start(plan, placed.records)
            return self._start(submission)
        except BaseException:
            submission.close()
            raise

    def _start(self, submission: HostsSubmission) -> Started:
        from launcher.runtime.apply import Starts, apply_plan
        from launcher.state.starter import this_starter

        plan, loaded, request = submission.plan, submission.job.loaded, submission.request
        spec, job_id = loaded.spec, plan.job_id
        db = StateDB()
        taken = db.job(job_id) is not None and db.job(job_id).id == job_id  # type: ignore[union-attr]
        if taken and not request.attempt:
            raise UsageError(f"job id {job_id} is taken", "leave out --job-id to get a new one")
        say(f"job {job_id}: {spec.name}, {plan.world_size} rank(s) on {plan.provider}")
        record = JobRecord(
            id=job_id, name=spec.name, spec_path=str(loaded.path), provider=plan.provider,
            runtime=plan.runtime, hosts=submission.placed.records, node_dirs=plan.node_dirs,
            state=JobState.STARTING, exit_code=None, created_at=time.time(), ended_at=None,
            last_line=None, logs_to=plan.logs_to, starter=this_starter(),
        )  # fmt: skip
        if request.attempt:
            db.restart_job(record)
        else:
            db.add_job(record)
        starts = Starts()
        try:
            first_reads = apply_plan(plan, submission.placed.connections, say, starts)
        except BaseException:
            # A start went out unanswered or ran: its agent says, next time. Not on rented
            # hosts: the command's way out terminates them, so the job cannot run on.
            if starts.may_run and not self.traits.rents_hosts:
                ranks = ", ".join(map(str, starts.may_run))
                db.update_job(job_id, JobState.STARTING,
                              last_line=f"the start may have reached node(s) {ranks}")  # fmt: skip
            else:
                gone = "; its hosts are terminated" if self.traits.rents_hosts else ""
                db.update_job(
                    job_id,
                    JobState.FAILED,
                    exit_code=1,
                    last_line=f"failed to start{gone}",
                    unconfirmed=not self.traits.rents_hosts,
                )  # a channel cut may hide a start: asked again (not on hosts now terminated)
            raise
        kept = self.hand_over()  # the job runs on what was rented: it outlives the command now
        db.update_job(job_id, JobState.RUNNING)
        return Started(job_id, dict(submission.placed.connections), first_reads, kept)

    def hand_over(self) -> list[str]:
        """The hosts rented for the job, now its own (a rented target's)."""
        return []

    def connection(self, host_record: str, opened: dict[str, Connection]) -> tuple[str, Connection]:
        """The host of a node, by its record: its name and a connection (reused if open)."""
        raise NotImplementedError

    def nodes(self, job: JobRecord, opened: Mapping[str, Connection] | None = None) -> list[Node]:
        by_host = dict(opened or {})
        nodes = []
        for rank, (record, node_dir) in enumerate(zip(job.hosts, job.node_dirs, strict=True)):
            _, conn = self.connection(record, by_host)
            nodes.append(self.node(rank, node_dir, conn))
        return nodes

    def node(self, rank: int, node_dir: str, conn: Connection) -> Node:
        return Node(rank, node_dir, conn, self.traits.agent_python)

    def statuses(self, job: JobRecord) -> list[NodeStatus] | None:
        try:
            nodes = self.nodes(job)
        except GpujobError:
            return None
        try:
            read = [node.status() for node in nodes]
        finally:
            close_all([node.connection for node in nodes])
        statuses = [status for status in read if status is not None]
        return statuses if len(statuses) == len(read) else None

    def files_host(self, job: JobRecord) -> Connection:
        return self.connection(job.hosts[0], {})[1]

    def host_names(self, job: JobRecord) -> list[str]:
        from launcher.remote.hosts import HostEntry

        return [HostEntry.from_record(record).name for record in job.hosts]

    def cancel_argvs(self, job: JobRecord, grace_s: float) -> list[list[str]]:
        """Each node's agent asked to cancel: what `cancel` runs, and what its dry run prints."""
        python = self.traits.agent_python
        return [
            agent_argv(python, node_dir, "cancel", f"{grace_s:g}") for node_dir in job.node_dirs
        ]

    def cancel_lines(self, job: JobRecord, grace_s: float) -> list[str]:
        pairs = zip(self.host_names(job), self.cancel_argvs(job, grace_s), strict=True)
        return [
            f"node {rank} on {host}: {shlex.join(argv)}" for rank, (host, argv) in enumerate(pairs)
        ]

    def cancel(self, job: JobRecord, grace_s: float) -> Cancelled:
        nodes = self.nodes(job)
        failures, answers = [], []
        try:
            for node in nodes:
                result = node.cancel(grace_s)
                if not result.ok:
                    said = result.stderr.strip() or result.stdout.strip()
                    failures.append(f"node {node.rank}: {said[-200:]}")
                answers.append(last_json(result.stdout))
        finally:
            close_all([node.connection for node in nodes])
        if failures:
            raise GpujobError(f"cancel failed on {'; '.join(failures)}")
        return Cancelled(f"job {job.id} cancelled on {len(nodes)} node(s)", answers)

    def release(self, job: JobRecord, why: str) -> list[str]:
        return []


def last_json(stdout: str) -> NodeStatus:
    """The agent's answer: the last line it printed, a JSON status (empty if none)."""
    import json

    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return NodeStatus()
    return NodeStatus(**answer) if isinstance(answer, dict) else NodeStatus()
