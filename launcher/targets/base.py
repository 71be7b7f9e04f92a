"""Where a job runs, as one interface (TorchX's Scheduler, dstack's Compute): a `Target` turns
a loaded spec into a `Submission` (`dryrun`: the plan and every check it will run, the object
`--dry-run` prints), carries out exactly that object (`submit`), and later reaches the job's
nodes (`nodes`, `statuses`), cancels it and releases what it rented. What differs between
targets that the rest of gpujob must know is declared in its `Traits`, never found by
comparing kind names; `target_for` (a recorded job) and `target_for_request` (`--on`, `--up`)
are the registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from launcher.errors import GpujobError, UsageError
from launcher.remote.base import Connection, Result
from launcher.runtime.agent import NodeStatus, agent_argv, agent_path
from launcher.state.job_states import JobState

if TYPE_CHECKING:
    from launcher.plan.build import Sources
    from launcher.plan.model import Plan
    from launcher.plan.placement import RuntimeChoice
    from launcher.plan.recovery import Policy
    from launcher.spec.image import ImageDefinition
    from launcher.spec.load import LoadedSpec
    from launcher.state.db import JobRecord
    from launcher.targets.cloud.rent import Rent


@dataclass(frozen=True)
class Traits:
    """What a target declares about itself; code that runs a job reads these."""

    on_this_machine: bool
    """Its nodes are processes of this machine (their files are read directly)."""
    rents_hosts: bool
    """Its hosts are rented for the job (`release` terminates them; recovery can rent again)."""
    runs_in_image: bool
    """The host IS the job's image (Vast): the job runs in its environment as it is."""
    stops_others_on_failure: bool
    """gpujob stops the other nodes once one fails (the follow, or a keeper when detached);
    False where the scheduler does it itself (SLURM's srun --kill-on-bad-exit)."""
    recoverable: bool
    """A lost host can be replaced and the job restarted (`recovery:`)."""
    agent_python: str
    """The Python the node's agent runs with: this one here, the host's python3 elsewhere."""
    follow_hint: str = "detached"
    """How `submit --detach` says the job was left (`queued` on a cluster)."""
    requeues: bool = False
    """`recovery:` is the scheduler's requeue (SLURM's `--requeue`), carried out by the job's
    own script: no controller here, no rental, the checkpoints on its shared filesystem."""
    forwards_ports: bool = True
    """A node's port is reached over its host's own SSH connection (`port-forward`, `tb`);
    False where the node sits behind a login host (a cluster's compute node)."""


@dataclass(frozen=True)
class LaunchRequest:
    """What the user asked `submit` for (or the recovery controller, for a restart): every
    field explicit, no callback."""

    spec_path: str
    sets: tuple[str, ...] = ()
    dry_run: bool = False
    as_json: bool = False
    detach: bool = False
    job_id: str | None = None
    on: tuple[str, ...] = ()
    up: str | None = None
    provider: str = "lambda"
    runtime: RuntimeChoice = "auto"
    allow_cpu: bool = False
    disk: int = 0
    max_price: float | None = None
    max_cost: float | None = None
    autostop_key_on_host: bool = False
    recover: bool = False
    """`--recover`: recovery with its defaults where the spec has no `recovery:`."""
    attempt: int = 0
    """A recovery's restart number (supervise/recover_loop.py): the job's record is reused."""
    resume_from: str | None = None
    """The checkpoint a recovery pulls onto the new head (GPUJOB_RESUME_FROM)."""
    max_steps: int | None = None
    """A ladder rung's bound (`--ladder-steps`): GPUJOB_MAX_STEPS, which the job honours."""
    keep_hosts: tuple[str, ...] = ()
    """A recovery that replaces only lost nodes: each rank's host record to keep, "" for a
    rank whose host is rented again (plan/replace.py); empty: every node is rented."""
    resume_path: str | None = None
    """`--resume-from REMOTE:prefix/run[/checkpoint-N]`: a checkpoint of another run (or of
    a flat prefix) the job starts from, pulled onto node 0's host (storage/resume.py)."""
    envs: tuple[str, ...] = ()
    """`--env K=V`, `--env K` (from this environment), `--env-file` lines (spec/env_flags.py)."""
    secrets: tuple[str, ...] = ()
    """`--secret K[=V]`: names only; the values are in this process's environment."""
    keep_on_failure: str | None = None
    """`--keep-on-failure 30m`: a failed job's rented hosts stay up this long (spec/keep.py)."""
    yes: bool = False
    """`--yes` with --up: a `resources.filesystem` you do not have is created (Lambda)."""
    group_task: str | None = None
    """A job group's task: the document of that name in `spec_path` (spec/job_group.py)."""


@dataclass(frozen=True)
class JobInput:
    """A job ready for a target: the loaded spec and what the launch derived from it."""

    loaded: LoadedSpec
    image: ImageDefinition | None
    job_id: str
    secrets: dict[str, str]
    sources: Sources
    """The files shipped beside the job."""
    policy: Policy | None = None
    """Its recovery, if it has one (`recovery:`, `--recover`)."""


class Submission(Protocol):
    """What a target will do, whole: printed by `--dry-run`, carried out by `submit`."""

    @property
    def job_id(self) -> str: ...

    def text(self, as_json: bool) -> str: ...

    def close(self) -> None:
        """Close what the dry run opened (contacted hosts) and the submit did not take."""
        ...


BeforeStart = Callable[["Plan", list[str]], None]
"""A step between placement and start (a recovery's checkpoint pull onto node 0's host):
called with the plan and each node's host record."""


@dataclass
class Started:
    """A submitted job: its id, its connections by host name (open: the follow reads through
    them, the caller closes them), the first reads its start made, and the hosts the command
    rented that now outlive it."""

    job_id: str
    opened: dict[str, Connection] = field(default_factory=dict)
    first_reads: dict[int, tuple[bytes, dict[str, object]]] | None = None
    kept: list[str] = field(default_factory=list)
    policy: Policy | None = None
    keep_s: float | None = None
    """How long its rented hosts stay up if it fails (`--keep-on-failure`), else None."""

    def close(self) -> None:
        close_all(list(self.opened.values()))


NO_AGENT = "no agent on the host: the start never reached it"


@dataclass
class Node:
    """One node of a recorded job: its agent, reached over its host's connection (shared
    by the nodes of one host)."""

    rank: int
    node_dir: str
    connection: Connection
    agent_python: str

    def status(self) -> NodeStatus | None:
        """The agent's status, or None while its host does not answer."""
        try:
            result = self.connection.run(agent_argv(self.agent_python, self.node_dir, "status"))
            if not result.ok:  # the host answered: has the start reached it at all?
                there = self.connection.run(["test", "-e", agent_path(self.node_dir)])
                absent = there.exit_code == 1
                return NodeStatus(state=JobState.UNKNOWN, reason=NO_AGENT) if absent else None
            status: NodeStatus | None = json.loads(result.stdout)
            return status
        except (GpujobError, ValueError, OSError, EOFError):  # EOFError: a handshake cut off
            return None

    def cancel_argv(self, grace_s: float, dump_first: bool = False) -> list[str]:
        extra = ["--dump-first"] if dump_first else []  # py-spy dumps of its ranks (agent/hung.py)
        return agent_argv(self.agent_python, self.node_dir, "cancel", f"{grace_s:g}", *extra)

    def cancel(self, grace_s: float, dump_first: bool = False) -> Result:
        return self.connection.run(self.cancel_argv(grace_s, dump_first))


@dataclass(frozen=True)
class Cancelled:
    """What a cancel found: each node's answer in rank order (its end, or `had_ended` where it
    had ended before the cancel), or none where the target recorded the end itself and
    `line` says how."""

    line: str
    answers: list[NodeStatus] = field(default_factory=list)


class Target(Protocol):
    kind: str
    traits: Traits

    def dryrun(self, job: JobInput, request: LaunchRequest) -> Submission:
        """Everything decided and checked before anything runs; contacts hosts only when
        `request.dry_run` is false (a dry run says what it assumed)."""
        ...

    def submit(self, submission: Submission, before_start: BeforeStart | None) -> Started:
        """Carry out exactly `submission`: the job is recorded before it starts."""
        ...

    def nodes(self, job: JobRecord, opened: Mapping[str, Connection] | None = None) -> list[Node]:
        """Each node in rank order; `opened` (by host name) are reused, not reopened."""
        ...

    def statuses(self, job: JobRecord) -> list[NodeStatus] | None:
        """Each node's status in rank order, or None while a host does not answer."""
        ...

    def host_names(self, job: JobRecord) -> list[str]: ...

    def files_host(self, job: JobRecord) -> Connection:
        """A connection to the host holding node 0's folder (a cluster's login host: its
        filesystem is shared), for what runs beside the agent (`sync-ckpt`)."""
        ...

    def cancel_lines(self, job: JobRecord, grace_s: float) -> list[str]:
        """What `cancel` runs, as `cancel --dry-run` prints it."""
        ...

    def cancel(self, job: JobRecord, grace_s: float) -> Cancelled:
        """Stop every node: each agent's answer (its node's end, as it recorded it), or the
        line that says how it ended where the target records the end itself (a cluster's job
        may have ended first). Records the end itself where
        the target knows better than "cancelled" (a cluster's job may have ended first)."""
        ...

    def release(self, job: JobRecord, why: str) -> list[str]:
        """Terminate what was rented for the job (a no-op elsewhere); lines for what could
        not be."""
        ...

    def start_contact(self, request: LaunchRequest) -> None:
        """Contact the hosts on a thread while the spec loads (a no-op where none are)."""
        ...

    def close(self) -> None: ...


def close_all(conns: list[Connection]) -> None:
    for conn in {id(c): c for c in conns}.values():
        conn.close()


def target_for(job: JobRecord) -> Target:
    """The target a recorded job runs on, by the kind its record names."""
    return _of_kind(job.provider)


def _of_kind(kind: str, rent: Rent | None = None) -> Target:
    if kind == "local":
        from launcher.targets.local import LocalTarget

        return LocalTarget()
    if kind == "ssh":
        from launcher.targets.ssh import SshTarget

        return SshTarget()
    if kind == "slurm":
        from launcher.targets.slurm.target import SlurmTarget

        return SlurmTarget()
    from launcher.clouds.registry import CLOUDS  # not for the kinds above: `status` of local jobs

    if kind in CLOUDS:
        from launcher.targets.cloud.target import CloudTarget

        return CloudTarget(kind, rent)
    raise UsageError(f"a job recorded on {kind!r}, which this gpujob does not know")


def target_for_request(request: LaunchRequest, rent: Rent | None = None) -> Target:
    """`--on slurm:NAME`, `--on HOST`, `--up GPU` (renting through `rent`), or this machine."""
    from launcher.targets.slurm.on import is_slurm_target

    if request.on and is_slurm_target(request.on):
        if request.up:
            raise UsageError("give --on slurm:NAME or --up, not both")
        return _of_kind("slurm")
    if request.on and request.up:
        raise UsageError("give --on or --up, not both")
    if request.up:
        from launcher.clouds.registry import CLOUDS

        if request.provider not in CLOUDS:
            raise UsageError(f"--provider {request.provider}: not a cloud gpujob rents from",
                             f"one of: {', '.join(sorted(CLOUDS))}")  # fmt: skip
        return _of_kind(request.provider, rent)
    return _of_kind("ssh" if request.on else "local")
