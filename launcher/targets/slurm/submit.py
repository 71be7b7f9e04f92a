"""`gpujob submit --on slurm:NAME`: the job queued on a SLURM cluster through its login host.

One exec reads the cluster (partitions, the login's python3), the checks before queueing
refuse what cannot run (one line naming the field, exit 2, nothing queued), then one batch
on the login host writes every node's files on the shared filesystem, builds the job
environment there if it is new, asks `sbatch --test-only` and queues with `sbatch
--parsable`. The log is then followed as on any host, with SLURM's state laid over it (target.py).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import GpujobError, UsageError
from launcher.plan.model import UNKNOWN_HOME, CopyFile, RunCommand, SyncDir, WriteFile
from launcher.plan.slurm import SlurmCluster, SlurmPlan
from launcher.remote.base import Connection
from launcher.runtime.agent import NodeStatus
from launcher.say import say
from launcher.state.db import JobRecord, StateDB
from launcher.state.job_states import JobState
from launcher.targets.base import JobInput, LaunchRequest, Started

if TYPE_CHECKING:
    from launcher.remote.hosts import HostEntry
    from launcher.targets.slurm.cluster import SlurmJobView


class EarlyCluster:
    """The login host contacted and the cluster described on a thread while this one loads
    the spec (both mostly wait); what the thread met is raised when `take` asks."""

    def __init__(self, on: tuple[str, ...]) -> None:
        self.conn: Any = None
        self.found: tuple[Any, Any, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._contact, args=(on,), daemon=True)
        self.thread.start()

    def _contact(self, on: tuple[str, ...]) -> None:
        from launcher.remote.hosts import connect
        from launcher.targets.slurm import cluster as slurm

        try:
            from launcher.runtime.trace import traced

            cluster, login = slurm.resolve_cluster(on)
            self.conn = connect(login)
            traced(login.name, None, login_checks(())[0])
            self.found = (cluster, login, self.conn.run(slurm.describe_argv()))
        except BaseException as err:  # raised in the caller's thread by take()
            self.error = err

    def take(self) -> tuple[Any, Any, Any, Any]:
        """(cluster, login entry, connection, the describe's Result); the connection is
        then the caller's to close."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.found is not None
        conn, self.conn = self.conn, None
        return (*self.found[:2], conn, self.found[2])

    def close(self) -> None:
        self.thread.join()
        if self.conn is not None:
            self.conn.close()


@dataclass
class SlurmSubmission:
    """The sbatch plan and its checks, all run on the login host: what `--dry-run` prints
    (`text`), and what `submit` queues (through `conn`, None for a dry run)."""

    job: JobInput
    request: LaunchRequest
    planned: SlurmPlan
    login: HostEntry
    conn: Connection | None

    @property
    def job_id(self) -> str:
        return self.planned.plan.job_id

    def text(self, as_json: bool) -> str:
        if not as_json:
            return slurm_plan_text(self.planned, self.login.name)
        import json

        from launcher.plan.show import as_json as shown_json
        from launcher.plan.show import plan_data

        planned = self.planned
        data = {"cluster": planned.cluster.name, "login": self.login.name,
                "plan": plan_data(planned.plan), "script_path": planned.script_path,
                "before_queue": shown_json(login_checks(planned.test_only)),
                "queue": shown_json(queue_command(planned.submit))}  # fmt: skip
        return json.dumps(data, indent=2) + "\n"

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def slurm_dryrun(
    request: LaunchRequest, job: JobInput, early: EarlyCluster | None
) -> SlurmSubmission:
    from launcher.plan.placement import image_reference
    from launcher.plan.slurm import build_slurm_plan
    from launcher.plan.slurm_checks import check_request, parse_partitions, parse_sinfo
    from launcher.storage.preflight import preflight
    from launcher.targets.slurm import cluster as slurm

    loaded, image = job.loaded, job.image
    spec = loaded.spec
    ref = image_reference(spec.image, image)
    conn = described = None
    if early is None and not request.dry_run:
        early = EarlyCluster(request.on)
    if early is not None:
        cluster, login, conn, described = early.take()
    else:
        cluster, login = slurm.resolve_cluster(request.on)
    try:
        python, home = "python3", UNKNOWN_HOME  # a dry run contacts nothing
        if described is not None:
            if not described.ok:
                raise GpujobError(
                    f"cluster {cluster.name}: sinfo/scontrol failed on the login host "
                    f"{login.address}: {last_said(described)}",
                    "check that the SLURM client commands work there: `gpujob ssh` it",
                )
            sinfo, partitions, rest = [*described.stdout.split("@@\n"), "", ""][:3]
            version, _, home = rest.strip().partition("\n")
            found = parse_partitions(partitions, parse_sinfo(sinfo))
            check_request(spec, cluster, found, _fields(loaded))
            if image is not None and version and image.python != version.strip():
                raise UsageError(f"image {image.name} is for Python {image.python} but the "
                                 f"login host {login.name} runs {version.strip()}",
                                 "use `--set image=host`")  # fmt: skip
        if not cluster.shared:
            from dataclasses import replace

            cluster = replace(cluster, shared=home.strip() or UNKNOWN_HOME)
        placeholder = _Target(cluster)
        sync = preflight(loaded, placeholder, image, say, job.job_id)
        planned = build_slurm_plan(spec, cluster, job.job_id, job.secrets, image, job.sources,
                                   python=python, image_ref=ref, sync=sync,
                                   recovery=job.policy)  # fmt: skip
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return SlurmSubmission(job, request, planned, login, conn)


class _Target:
    """What preflight asks of a target: where job folders go (the shared filesystem)."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.provider = "slurm"
        self.runtime = "bare"
        self.job_root = f"{cluster.shared}/.gpujob/jobs"
        self.hosts = (cluster.login,)
        self.on_this_machine = False


def _fields(loaded: Any) -> dict[str, str]:
    return {
        "nodes": loaded.where("nodes"),
        "accelerators": loaded.where("resources", "accelerators"),
        "cpus": loaded.where("resources", "cpus"),
        "memory_gb": loaded.where("resources", "memory_gb"),
        "max_duration": loaded.where("max_duration"),
    }


def login_checks(test_only: tuple[str, ...]) -> tuple[RunCommand, RunCommand]:
    """What runs on the login host before anything is queued, as steps: the cluster read
    (the partitions checked here) and SLURM's own check of the request."""
    from launcher.targets.slurm.cluster import describe_argv

    return (
        RunCommand(tuple(describe_argv()), "the partitions (nodes, GPUs, CPUs, memory, MaxTime, "
                   "accounts) checked here"),
        RunCommand(tuple(test_only), "SLURM's own check of the request; nothing is queued"),
    )  # fmt: skip


def queue_command(submit: tuple[str, ...]) -> RunCommand:
    return RunCommand(tuple(submit), "queue the job")


def slurm_plan_text(planned: SlurmPlan, login: str) -> str:
    """The dry run: every node's files (the sbatch script among node 0's), then the checks
    and the exact sbatch command, all run on the login host."""
    from launcher.plan.show import limit_lines, shell_join, shown, step_lines

    plan = planned.plan
    cluster = planned.cluster
    lines = [
        f"job {plan.job_id}: {plan.name} on SLURM cluster {cluster.name} (login host {login}), "
        f"{len(plan.nodes)} node(s) x {plan.nproc_per_node} rank(s) = world size "
        f"{plan.world_size}",
        "node N is the Nth of `scontrol show hostnames $SLURM_JOB_NODELIST`; "
        "its address (NodeAddr) is filled in by the sbatch script",
    ]
    if plan.grad_accum_steps is not None:
        lines.append(f"grad_accum_steps = {plan.grad_accum_steps}")
    if plan.limits is not None:
        lines.extend(limit_lines(plan.limits))
    for node in plan.nodes:
        lines += ["", f"node {node.rank}: files on the shared filesystem, written from "
                      f"{login}: job dir {shown(node.job_dir)}"]  # fmt: skip
        for step in node.steps:
            lines.extend(step_lines(step))
    lines += ["", f"before queueing, on {login}:"]
    for check in login_checks(planned.test_only):
        lines.extend(step_lines(check))
    lines += ["", f"queue, on {login}:", f"  run   {shell_join(planned.submit)}"]
    return "\n".join(lines) + "\n"


def queue(submission: SlurmSubmission) -> Started:
    """Queue exactly the submission; the job is recorded once SLURM has it."""
    from launcher.remote.batch import File, Run
    from launcher.runtime.trace import traced

    planned, conn, login = submission.planned, submission.conn, submission.login
    loaded = submission.job.loaded
    assert conn is not None
    plan = planned.plan
    spec = loaded.spec
    db = StateDB()
    if db.job(plan.job_id) is not None and db.job(plan.job_id).id == plan.job_id:  # type: ignore[union-attr]
        raise UsageError(f"job id {plan.job_id} is taken", "leave out --job-id to get a new one")
    # First SLURM's own check with the script alone: nothing else (secrets, the job
    # environment) is written or built for a job the cluster refuses.
    script = next(s for s in plan.nodes[0].steps
                  if isinstance(s, WriteFile) and s.path == planned.script_path)  # fmt: skip
    traced(login.name, 0, script)
    traced(login.name, None, login_checks(planned.test_only)[1])
    checked = conn.batch([File(planned.script_path, planned.script.encode(), 0o755),
                          Run(planned.test_only)])  # fmt: skip
    if len(checked.runs) != 1 or not checked.runs[0].ok:
        _remove_job_dir(conn, planned)
        said = last_said(checked.runs[0]) if checked.runs else "the script could not be written"
        if UNREACHABLE.search(said):
            raise GpujobError(f"cluster {planned.cluster.name} unreachable: {said}",
                              "its controller does not answer; try again later")  # fmt: skip
        raise UsageError(f"{planned.cluster.where}: sbatch --test-only refused the job: {said}",
                         "nothing was queued; see the sbatch options in --dry-run")  # fmt: skip
    ops: list[Any] = []
    commands: list[RunCommand] = []
    for node in plan.nodes:
        for step in node.steps:
            if step is not script:
                traced(login.name, node.rank, step)
            if isinstance(step, WriteFile):
                if step.path != planned.script_path:
                    ops.append(File(step.path, step.content.encode(), step.mode))
            elif isinstance(step, CopyFile):
                ops.append(File(step.path, Path(step.source).read_bytes(), step.mode))
            elif isinstance(step, SyncDir):
                ops.append(step)
            elif isinstance(step, RunCommand):
                ops.append(Run(step.argv, stream=True))
                commands.append(step)
    traced(login.name, None, queue_command(planned.submit))
    ops.append(Run(planned.submit))
    started = time.time()
    try:
        runs = conn.batch(ops).runs
        from launcher.runtime.apply import require_prepared

        for command, result in zip(commands, runs, strict=False):
            require_prepared(plan.nodes[0], command, result, say)
        if len(runs) < len(commands) + 1 or not runs[-1].ok:
            said = last_said(runs[-1]) if runs else "nothing ran"
            raise GpujobError(f"cluster {planned.cluster.name}: sbatch failed: {said}")
    except BaseException:
        _remove_job_dir(conn, planned)
        raise
    slurm_job = runs[-1].stdout.strip().split(";")[0]
    say(f"job {plan.job_id}: {spec.name}, {plan.world_size} rank(s) on {spec.nodes} node(s) "
        f"of SLURM cluster {planned.cluster.name}: SLURM job {slurm_job}")  # fmt: skip
    db.add_job(
        JobRecord(
            id=plan.job_id, name=spec.name, spec_path=str(loaded.path), provider="slurm",
            runtime="bare", hosts=[login.to_record()] * spec.nodes, node_dirs=plan.node_dirs,
            state=JobState.PENDING, exit_code=None, created_at=started, ended_at=None,
            last_line=None, logs_to=plan.logs_to, scheduler_job=slurm_job,
        )
    )  # fmt: skip
    return Started(plan.job_id, {login.name: conn})


UNREACHABLE = re.compile(r"Unable to contact slurm controller|connect failure|"
                         r"Could not establish a configuration source")  # fmt: skip
"""sbatch's words when the controller does not answer (reference/slurm.md B8): a failure
(exit 1), not a refusal of the request."""


def _remove_job_dir(conn: Any, planned: SlurmPlan) -> None:
    """A refused or failed submission leaves nothing on the shared filesystem (no secrets)."""
    try:
        conn.run(["rm", "-rf", "--", planned.job_dir])
    except (GpujobError, OSError) as err:
        say(f"could not remove {planned.job_dir} on the login host: {err}")


def last_said(result: Any) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.exit_code}"


def slurm_view(job: JobRecord, login: Connection) -> SlurmJobView:
    """SLURM's view of the job, its output file (slurm-<id>.out in the job folder) with it."""
    from launcher.targets.slurm.cluster import SlurmJobView

    job_dir = job.node_dirs[0].rsplit("/", 1)[0] if job.node_dirs else ""
    out = f"{job_dir}/slurm-{job.scheduler_job}.out" if job_dir and job.scheduler_job else ""
    return SlurmJobView(login, job.scheduler_job or "", out_file=out)


def slurm_statuses(job: JobRecord, login: Connection) -> list[NodeStatus] | None:
    """Each node's status for `gpujob status`: its agent's, with SLURM's state and reason."""
    import json

    from launcher.runtime.agent import agent_argv
    from launcher.targets.slurm.cluster import node_status
    from launcher.targets.slurm.requeue import attempt_note

    try:
        view = slurm_view(job, login)
        view.refresh()
        statuses: list[NodeStatus] = []
        for node_dir in job.node_dirs:
            result = login.run(agent_argv("python3", node_dir, "status"))
            agent = json.loads(result.stdout) if result.ok else {"state": "unknown"}
            status = node_status(agent, view)
            if view.state:
                status["slurm"] = (f"SLURM job {view.job_id} {view.state} ({view.reason})"
                                   f"{attempt_note(view)}")  # fmt: skip
            if status.get("state") == "pending":
                status["last_line"] = status.get("reason")
            statuses.append(status)  # type: ignore[arg-type]
        return statuses
    except (GpujobError, ValueError, OSError):
        return None
