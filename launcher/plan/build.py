"""spec -> Plan, with no I/O: the files and steps of every node (what each node runs, its
launcher and environment, is in `launch.py`).

Late-bound values (job id, node rank, rendezvous address) are substituted in planning and only
there, like TorchX's `macros.Values.apply`: `${name}` in `run.args` for the derived values.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from launcher.agent import AGENT_FILE, agent_argv
from launcher.errors import UsageError
from launcher.plan import docker
from launcher.plan.bucket_mounts import BucketSource, bucket_care, bucket_lines
from launcher.plan.env_build import env_script
from launcher.plan.file_mounts import container_volumes, lasting_copies, mount_steps
from launcher.plan.hook_files import hook_files
from launcher.plan.launch import (
    HOSTFILE,
    INIT_FILE,
    NODE_IPS_FILE,
    PYLIB,
    USER_RUN_FILE,
    NodeContext,
    hostfile,
    node_env,
    node_ips,
    run_script,
    user_run_file,
)
from launcher.plan.merge_step import merge_files
from launcher.plan.model import (
    CopyFile,
    NodeLayout,
    NodePlan,
    Plan,
    RunCommand,
    Step,
    SyncDir,
    WriteFile,
)
from launcher.plan.node_files import (
    GRACE_S,
    SECRETS_JSON,
    STORAGE_JSON,
    agent_config,
    checkpoint_care,
    job_limits,
    logs_path,
    notify_care,
    secrets_file,
    start_input,
)
from launcher.plan.node_sources import clone_steps, setup_script
from launcher.plan.reach import check_rendezvous, reach_checks
from launcher.plan.sandbox import home_step, job_venv, uses_job_venv, venv_step
from launcher.plan.setup_barrier import barrier_file
from launcher.spec.image import ImageDefinition
from launcher.spec.job import JobSpec
from launcher.spec.run import ONE_PER_NODE

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # fullmatch: `$` would let "x\n" pass
DEFAULT_EXCLUDES = (".git", "__pycache__", "*.pyc", ".venv", ".gpujob")
START_WINDOW_S = 30
"""A one-node start comes right after job.json in one batch: none by then never will."""
FIRST_READ_WAIT_S = 1  # how long a followed start waits on the host for the log's first bytes
CANCEL_GRACE_S = 5  # a started node stopped because another failed to start
# The job's own copy of the host's workdir copy: a later submit updating that one never
# changes a running job's files. ($1 is absent when the workdir had nothing to ship.)
COPY_WORKDIR = 'mkdir -p "$1" "$2" && cp -a "$1/." "$2/"'

if TYPE_CHECKING:
    from launcher.agent.notify import Hook  # its poster imports urllib and ssl


@dataclass(frozen=True)
class Sources:
    """What comes from this machine: the workdir ("": nothing to ship) and the agent's own
    source (shipped), and who submits (SKYPILOT_USER on every node)."""

    workdir: str
    agent: str
    init_lock: str
    spec_where: str = "the job spec"
    excludes: tuple[str, ...] = ()
    agent_modules: tuple[str, ...] = ()
    job_modules: tuple[str, ...] = ()
    """Imported by the job's program (gpujob_capture): into the job's `pylib/`, on PYTHONPATH."""
    user: str = ""
    mounts_where: dict[str, str] = field(default_factory=dict)
    """The file:line of each file_mounts destination, for a refusal that names it."""
    notify: tuple[Hook, ...] = ()
    """The webhooks node 0's agent posts the job's end to (`notify:`), URLs from here."""
    price_per_hour: float | None = None
    """What the job's hosts cost together, where rented (for the cost in a notification)."""
    buckets: tuple[BucketSource, ...] = ()
    """Bucket file_mounts, resolved at submit (storage/bucket_mounts.py)."""


@dataclass(frozen=True)
class CheckpointSync:
    """`checkpoints.sync_to` resolved at submit (storage/): the rclone path, bucket included,
    and the remote's RCLONE_CONFIG_* variables, shipped as a 0600 file the agent deletes."""

    rclone_path: str
    env: dict[str, str]


def build_plan(
    spec: JobSpec,
    target: NodeLayout,
    job_id: str,
    secrets: dict[str, str],
    image: ImageDefinition | None,
    sources: Sources,
    sync: CheckpointSync | None = None,
    *,
    follow: bool = False,
    resume_from: str | None = None,
    max_steps: int | None = None,
    secrets_on_stdin: bool = True,
) -> Plan:
    """`follow`: the log is followed from the start, so a one-node start also reads its
    first bytes (one exec fewer before the first line is shown). `resume_from`: the name of
    the checkpoint a recovery pulled into the checkpoint dir (GPUJOB_RESUME_FROM). `max_steps`:
    a ladder rung's bound (GPUJOB_MAX_STEPS).
    `secrets_on_stdin`: the secrets go on the start's stdin; without it (SLURM, which runs
    the start), in 0600 files the agent deletes at the start."""
    if not JOB_ID.fullmatch(job_id):
        raise UsageError(f"job id {job_id!r}: use letters, digits, `.`, `_` and `-` (up to 128)")
    if len(target.hosts) != spec.nodes:
        raise UsageError(f"the job needs {spec.nodes} nodes but {len(target.hosts)} were given")
    check_rendezvous(spec, target)
    job_dir = str(PurePosixPath(target.job_root) / job_id)
    python = _job_python(target, image, job_dir)
    ips = node_ips(target, spec.nodes)  # one string, shared by every host's copy
    derived = _derived_values(spec, job_id, job_dir)
    if resume_from:
        derived["resume_from"] = str(PurePosixPath(derived["checkpoint_dir"]) / resume_from)
    if max_steps:
        derived["max_steps"] = str(max_steps)
    nodes = []
    shipped_to: set[str] = set()
    for rank, host in enumerate(target.hosts):
        first_on_host = host not in shipped_to
        shipped_to.add(host)
        nodes.append(
            _node_plan(
                spec,
                target,
                job_id,
                rank,
                job_dir,
                python,
                image,
                secrets,
                sources,
                derived,
                first_on_host,
                ips,
                sync,
                follow=follow,
                secrets_on_stdin=secrets_on_stdin,
            )
        )
    return Plan(
        job_id=job_id,
        name=spec.name,
        provider=target.provider,
        runtime=target.runtime,
        world_size=spec.world_size,
        nproc_per_node=spec.nproc_per_node,
        grad_accum_steps=spec.grad_accum_steps,
        nodes=tuple(nodes),
        derived=derived,
        checks=reach_checks(spec, target),
        image_ref=target.image_ref if target.runtime == "docker" else None,
        logs_to=logs_path(sync.rclone_path, job_id) if sync else None,
        limits=job_limits(spec, sync),
        one_process_per_node=spec.run.launcher_name in ONE_PER_NODE,
        buckets=bucket_lines(sources.buckets, target),
    )


def _job_python(target: NodeLayout, image: ImageDefinition | None, job_dir: str) -> str:
    if uses_job_venv(target, image is not None):
        return f"{job_venv(job_dir)}/bin/python"
    if image is None or target.runtime == "docker":
        return target.python
    return str(PurePosixPath(_env_dir(target, image)) / "bin" / "python")


def _env_dir(target: NodeLayout, image: ImageDefinition) -> str:
    return str(PurePosixPath(target.env_root) / f"{image.name}-{image.fingerprint}")


def _derived_values(spec: JobSpec, job_id: str, job_dir: str) -> dict[str, str]:
    values = {
        "job_id": job_id,
        "nnodes": str(spec.nodes),
        "nproc_per_node": str(spec.nproc_per_node),
        "world_size": str(spec.world_size),
        "checkpoint_dir": str(PurePosixPath(job_dir) / spec.checkpoints.dir),
    }
    optional = {
        "global_batch": spec.batch.global_batch,
        "micro_batch": spec.batch.micro_batch,
        "grad_accum_steps": spec.grad_accum_steps,
        "keep_last": spec.checkpoints.keep_last,
        "save_every": spec.checkpoints.every_steps,
    }
    values.update({key: str(value) for key, value in optional.items() if value is not None})
    return values


def workdir_copy(target: NodeLayout, workdir: str) -> str:
    """The host's lasting copy of one local workdir (named by its folder and a hash of its
    path), which every submit from it updates with only what changed."""
    digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", PurePosixPath(workdir).name)[:40] or "workdir"
    return f"{PurePosixPath(target.job_root).parent}/workdirs/{name}-{digest}"


def _node_plan(
    spec: JobSpec,
    target: NodeLayout,
    job_id: str,
    rank: int,
    job_dir: str,
    python: str,
    image: ImageDefinition | None,
    secrets: dict[str, str],
    sources: Sources,
    derived: dict[str, str],
    first_on_host: bool,
    ips: str,
    sync: CheckpointSync | None = None,
    *,
    follow: bool = False,
    secrets_on_stdin: bool = True,
) -> NodePlan:
    node_dir = f"{job_dir}/node-{rank}"
    values = {**derived, "node_rank": str(rank)}
    steps: list[Step] = []
    prepare: list[Step] = []  # after the files, which then go in one round trip
    if first_on_host:
        lasting = lasting_copies(spec, target, workdir_copy)
        ships, places = mount_steps(job_dir, spec, target, lasting, sources.mounts_where)
        steps.extend(ships)  # every folder's listing before the batch's first command
        workdir = f"{job_dir}/workdir"
        steps.extend(
            clone_steps(spec, workdir, secrets) or _workdir_steps(target, sources, workdir)
        )
        if target.sandbox:  # the job's own HOME, before a `~/...` mount is put there
            steps.append(home_step(target, job_dir))
        steps.extend(places)  # after the workdir's copy: a mount inside it overwrites it
        steps.append(WriteFile(path=f"{job_dir}/{NODE_IPS_FILE}", content=ips))
        if spec.run.serialize_init:
            steps.append(CopyFile(source=sources.init_lock, path=f"{job_dir}/{INIT_FILE}"))
        for module in sources.agent_modules:
            name = PurePosixPath(module).name
            steps.append(CopyFile(source=module, path=f"{job_dir}/{name}"))
        # the agent after the modules it imports: a submit killed between the two leaves no
        # agent that `cancel` or `status` would run and see fail on a missing sibling
        steps.append(CopyFile(source=sources.agent, path=f"{job_dir}/{AGENT_FILE}", mode=0o755))
        for module in sources.job_modules:
            name = PurePosixPath(module).name
            steps.append(CopyFile(source=module, path=f"{job_dir}/{PYLIB}/{name}"))
        if target.runtime == "docker":
            if not target.image_present:
                prepare.append(docker.pull_step(target))
        elif uses_job_venv(target, image is not None):
            prepare.append(venv_step(target, job_dir))
        elif image is not None:
            requirements = f"{job_dir}/requirements.txt"
            steps.append(WriteFile(path=requirements, content="\n".join(image.pins) + "\n"))
            prepare.append(_env_setup(target, image, requirements))
        if spec.run.launcher_name == "deepspeed" and spec.nodes > 1:
            steps.append(WriteFile(path=f"{job_dir}/{HOSTFILE}", content=hostfile(spec)))
    setup = setup_script(spec, job_dir, target, sources.mounts_where)
    if setup:
        steps.append(WriteFile(path=f"{node_dir}/setup.sh", content=setup))
        if spec.nodes > 1:
            steps.append(barrier_file(node_dir))
    shell_block = user_run_file(spec)
    if shell_block is not None:
        steps.append(WriteFile(path=f"{node_dir}/{USER_RUN_FILE}", content=shell_block))
    steps.extend(merge_files(spec, node_dir, rank))
    node = NodeContext(spec, target, rank, job_dir, node_dir, python, values, sources.spec_where,
                       sources.user)  # fmt: skip
    steps.append(WriteFile(path=f"{node_dir}/run.sh", content=run_script(node), mode=0o755))
    steps.extend(hook_files(spec, node_dir, f"{job_dir}/workdir", node_env(node), rank))
    in_files = not secrets_on_stdin
    secret_file = secrets_file(f"{node_dir}/{SECRETS_JSON}", secrets) if in_files else None
    if secret_file is not None:
        steps.append(secret_file)
    argv = ["bash", "run.sh"]
    if target.runtime == "docker":
        argv = docker.run_argv(
            target,
            job_id=job_id,
            rank=rank,
            job_dir=job_dir,
            node_dir=node_dir,
            checkpoint_dir=derived["checkpoint_dir"],
            shm_gb=spec.resources.shm_gb,
            grace_s=GRACE_S,
            secret_names=sorted(secrets),
            volumes=container_volumes(spec, target, job_dir),
        )
    care = None
    if first_on_host:
        care = checkpoint_care(spec, job_dir, sync, job_id, node_env(node), storage_file=in_files)
    storage = sync.env if care and sync and sync.env else {}
    if care is not None and sources.buckets:  # the agent of the host's first node fetches
        care["buckets"], bucket_env = bucket_care(sources.buckets, job_dir, target,
                                                  sources.mounts_where)  # fmt: skip
        storage = {**storage, **bucket_env}
        care["storage_env_file"] = STORAGE_JSON if in_files and storage else None
    storage_file = secrets_file(f"{node_dir}/{STORAGE_JSON}", storage) if in_files else None
    if storage_file is not None:
        steps.append(storage_file)
    price = 0.0 if target.on_this_machine else sources.price_per_hour  # this machine: no rent
    notify, urls, notify_file = notify_care(sources.notify * (rank == 0), node_dir, in_files,
                                            price)  # fmt: skip
    steps.extend([notify_file] if notify_file else [])
    given = None if in_files else start_input(secrets, storage, urls)
    # One node starts in its preparation's batch, right after job.json, written last: if
    # its start never reaches the agent, the agent says so once the window has passed
    window = START_WINDOW_S if spec.nodes == 1 else None
    config = agent_config(spec, target, job_id, rank, secrets, argv, care,
                          on_stdin=given is not None, start_window_s=window,
                          notify=notify)  # fmt: skip
    steps.extend(prepare)
    steps.append(WriteFile(path=f"{node_dir}/job.json", content=config))
    reads_log = follow and spec.nodes == 1
    steps.append(
        RunCommand(
            argv=_agent(target, node_dir, "start", *[str(FIRST_READ_WAIT_S)] * reads_log),
            why="start the job detached under the agent"
            + (", then read the log's first bytes" if reads_log else ""),
            starts_job=True,
            reads_log=reads_log,
            input=given,
        )
    )
    on_failure = None
    if spec.nodes > 1:  # any node's start may fail or be cut off unanswered, the last's too
        on_failure = RunCommand(
            argv=_agent(target, node_dir, "cancel", str(CANCEL_GRACE_S)),
            why=f"stop node {rank}: a node failed to start",
        )
    return NodePlan(rank=rank, host=target.hosts[rank], job_dir=job_dir, node_dir=node_dir,
                    steps=tuple(steps), on_failure=on_failure)  # fmt: skip


def _agent(target: NodeLayout, node_dir: str, command: str, *args: str) -> tuple[str, ...]:
    return tuple(agent_argv(target.agent_python, node_dir, command, *args))


def _workdir_steps(target: NodeLayout, sources: Sources, path: str) -> list[Step]:
    """Locally, the workdir goes straight into the job's folder. On a remote host it updates
    that host's lasting copy (only changed files move), which is then copied on the host.
    No workdir (`workdir: null`, a SkyPilot task without one): an empty folder, as SkyPilot
    ships nothing then."""
    if not sources.workdir:
        return [RunCommand(argv=("mkdir", "-p", path), why="make the job's (empty) workdir")]
    excludes = DEFAULT_EXCLUDES + sources.excludes
    if target.on_this_machine:
        return [SyncDir(source=sources.workdir, path=path, excludes=excludes)]
    copy = workdir_copy(target, sources.workdir)
    return [
        SyncDir(source=sources.workdir, path=copy, excludes=excludes, mirror=True),
        RunCommand(
            argv=("sh", "-c", COPY_WORKDIR, "sh", copy, path),
            why="copy the workdir into the job folder",
            hint="check the free space on the host: `gpujob doctor HOST`",
        ),
    ]


def _env_setup(target: NodeLayout, image: ImageDefinition, requirements: str) -> RunCommand:
    """uv (or venv and pip) write to stderr: streamed as they come, and a failure's last
    lines name its cause (venv's `ensurepip is not available` may come on stdout)."""
    script = env_script(_env_dir(target, image), target.python, requirements, len(image.pins))
    return RunCommand(
        argv=("bash", "-c", script),
        why=f"make the job environment from images/{image.name}.yaml",
        hint=f"uv (or pip) must find the pins of images/{image.name}.yaml in the sources the "
        "host's pip.conf names (an index or a wheelhouse) and its Python needs venv "
        "(python3-venv) where uv is missing; the job environment is made once per pin set",
    )
