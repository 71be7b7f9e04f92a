"""A SLURM cluster as a target (`--on slurm:NAME[/PARTITION]`): the cluster read and the job
queued through its login host (submit.py); every node reached through that one login
connection, SLURM's view of the job laid over each agent's (cluster.py's SlurmNode).
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.errors import GpujobError, UsageError
from launcher.remote.base import Connection
from launcher.runtime.agent import NodeStatus
from launcher.say import say
from launcher.state.db import JobRecord
from launcher.targets.base import (
    BeforeStart,
    Cancelled,
    JobInput,
    LaunchRequest,
    Node,
    Started,
    Submission,
    Traits,
)
from launcher.targets.slurm.submit import EarlyCluster


class SlurmTarget:
    kind = "slurm"
    traits = Traits(on_this_machine=False, rents_hosts=False, runs_in_image=False,
                    stops_others_on_failure=False, recoverable=False,
                    agent_python="python3", follow_hint="queued",
                    forwards_ports=False, requeues=True)  # fmt: skip

    def __init__(self) -> None:
        self.early: EarlyCluster | None = None

    def start_contact(self, request: LaunchRequest) -> None:
        if not request.dry_run:
            self.early = EarlyCluster(request.on)

    def close(self) -> None:
        if self.early is not None:
            self.early.close()

    def dryrun(self, job: JobInput, request: LaunchRequest) -> Submission:
        from launcher.targets.slurm.submit import slurm_dryrun

        return slurm_dryrun(request, job, self.early)

    def submit(self, submission: Submission, before_start: BeforeStart | None) -> Started:
        from launcher.targets.slurm.submit import SlurmSubmission, queue

        assert isinstance(submission, SlurmSubmission)
        if before_start is not None:  # `submit --resume-from`: nothing pulls before sbatch
            submission.close()
            raise UsageError(
                "--resume-from: a SLURM job's checkpoint is not pulled before it is queued "
                "(not built yet); nothing was queued",
                "pull it onto the shared filesystem with `gpujob sync-ckpt --from "
                "REMOTE:prefix/run --latest --dest DIR --on LOGIN` and point the program at it",
            )
        try:
            return queue(submission)
        except BaseException:
            submission.close()
            raise

    def _login(self, job: JobRecord, opened: Mapping[str, Connection] | None) -> Connection:
        from launcher.remote.hosts import HostEntry, connect

        entry = HostEntry.from_record(job.hosts[0])
        found = (opened or {}).get(entry.name)
        return found if found is not None else connect(entry)

    def nodes(self, job: JobRecord, opened: Mapping[str, Connection] | None = None) -> list[Node]:
        """Each node read through the login host, SLURM's view of the job shared by all."""
        from launcher.targets.slurm.cluster import SlurmNode
        from launcher.targets.slurm.submit import slurm_view

        login = self._login(job, opened)
        view = slurm_view(job, login)
        return [Node(rank, node_dir, SlurmNode(login, view, rank, say), self.traits.agent_python)
                for rank, node_dir in enumerate(job.node_dirs)]  # fmt: skip

    def statuses(self, job: JobRecord) -> list[NodeStatus] | None:
        from launcher.targets.slurm.submit import slurm_statuses

        try:
            login = self._login(job, None)
        except GpujobError:
            return None
        try:
            return slurm_statuses(job, login)
        finally:
            login.close()

    def files_host(self, job: JobRecord) -> Connection:
        return self._login(job, None)

    def host_names(self, job: JobRecord) -> list[str]:
        from launcher.remote.hosts import HostEntry

        return [HostEntry.from_record(record).name for record in job.hosts]

    def cancel_lines(self, job: JobRecord, grace_s: float) -> list[str]:
        from launcher.targets.slurm.cancel import cancel_line

        return [cancel_line(job, grace_s)]

    def cancel(self, job: JobRecord, grace_s: float) -> Cancelled:
        from launcher.targets.slurm.cancel import slurm_cancel

        login = self._login(job, None)
        try:
            return Cancelled(slurm_cancel(job, grace_s, login))
        finally:
            login.close()

    def release(self, job: JobRecord, why: str) -> list[str]:
        return []
