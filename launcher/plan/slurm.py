"""SLURM as a target, planned with no I/O: the cluster entry, what the cluster says about
its partitions (parsed from `sinfo`/`scontrol` text), the refusals before anything is queued,
and the Plan: every node's usual files (run.sh, job.json, the agent) in the job folder on the
cluster's shared filesystem, plus one sbatch script and the node step srun runs on each node.

The nodes run the same run.sh and agent as on any host. What SLURM decides only at run time,
each node's address, is planned as a placeholder per rank (`address_placeholder`) that the
sbatch script replaces once the allocation is known (`scontrol show hostnames`, each node's
NodeAddr: node names need not resolve, reference/slurm.md B7): one place, like TorchX's
`macros.Values.apply`, only later.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from launcher.agent import AGENT_FILE
from launcher.errors import UsageError
from launcher.plan.build import CheckpointSync, Sources, build_plan
from launcher.plan.model import NodeLayout, NodePlan, Plan, RunCommand, Step, WriteFile
from launcher.plan.recovery import Policy
from launcher.plan.render import Word, render_shell
from launcher.plan.slurm_requeue import Requeue, requeue_of, requeue_option, requeue_steps
from launcher.spec.image import ImageDefinition
from launcher.spec.job import JobSpec

WARN_S = 120
"""`--signal=B:USR1@120`: the time limit's warning, passed to every node's agent, which stops
the job with its grace so its last checkpoint is saved and synced before SLURM's SIGKILL."""
MARGIN_MIN = 4
"""Added to max_duration for `--time`: the warning (WARN_S), up to 60 s of it early (sbatch's
man page), and a minute for the prelude and the agent's grace."""
SCRIPT = "job.sbatch"
NODE_STEP = "slurm-node.sh"
CONTAINERS = ("pyxis", "apptainer")
SAFE_VALUE = re.compile(r"[A-Za-z0-9_.,:=/@%+&|\[\]*!-]+")
"""An `#SBATCH` value sbatch reads as one word (no blanks, quotes, `$`, `#` or `\\`)."""
SAFE_PATH = re.compile(r"/[A-Za-z0-9_./+-]*")
STATE_WORDS = {
    "COMPLETED": "succeeded", "CANCELLED": "cancelled", "TIMEOUT": "timed out",
    "FAILED": "failed", "NODE_FAIL": "failed", "OUT_OF_MEMORY": "failed", "PREEMPTED": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "REVOKED": "failed", "SPECIAL_EXIT": "failed",
}  # fmt: skip
"""SLURM's ended states (squeue's JOB STATE CODES) as gpujob's node states."""


def address_placeholder(rank: int) -> str:
    """Shell-safe (left unquoted by the renderer), and no placeholder is a prefix of another."""
    return f"GPUJOB-SLURM-NODE-{rank}-ADDR"


@dataclass(frozen=True)
class SlurmCluster:
    """A `type: slurm` entry of hosts.yaml: the login host (`login`, its entry name) and where
    and as whom jobs are queued. `shared`: a folder on the cluster's shared filesystem, the
    same path on the login host and every node (job folders, workdirs, job environments).
    `container`: `pyxis` or `apptainer` when the cluster runs images through one."""

    name: str
    login: str
    shared: str
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    constraint: str | None = None
    container: str | None = None
    where: str = "hosts.yaml"
    """The entry's place (`FILE: hosts[i] (NAME)`), for refusals that name its fields."""
    partition_where: str | None = None
    """Where the partition came from when not the entry (`--on slurm:NAME/PARTITION`)."""


def time_minutes(spec: JobSpec) -> int | None:
    """The spec's `max_duration` in whole minutes (SLURM's unit), rounded up."""
    return math.ceil(spec.max_duration / 60) if spec.max_duration is not None else None


def sbatch_minutes(spec: JobSpec) -> int | None:
    """`--time`: max_duration plus MARGIN_MIN, so the agent's own max_duration ends the job
    (stop with grace, final checkpoint pass, "timed out after <max_duration>") and USR1 only
    guards SLURM's hard limit. With `--time` = max_duration, USR1 (120 s before, maybe 60 s
    more) would cut every job short by 2-3 minutes and end short jobs at once."""
    wanted = time_minutes(spec)
    return wanted + MARGIN_MIN if wanted is not None else None


def directives(
    spec: JobSpec, cluster: SlurmCluster, job_id: str, job_dir: str, requeue: Requeue | None = None
) -> list[str]:
    """The `#SBATCH` options, in the order shown."""
    options = [
        f"--job-name={spec.name}",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",
    ]
    if spec.resources.gpus_per_node:
        options.append(f"--gres=gpu:{spec.resources.gpus_per_node}")
    if spec.resources.cpus:
        options.append(f"--cpus-per-task={spec.resources.cpus}")
    if spec.resources.memory_gb:
        options.append(f"--mem={math.ceil(spec.resources.memory_gb * 1024)}M")
    wanted = sbatch_minutes(spec)
    if wanted is not None:
        options.append(f"--time={wanted}")
    for flag, value in (("partition", cluster.partition), ("account", cluster.account),
                        ("qos", cluster.qos), ("constraint", cluster.constraint)):  # fmt: skip
        if value:
            options.append(f"--{flag}={value}")
    options += [
        f"--output={job_dir}/slurm-%j.out",
        "--open-mode=append",
        f"--signal=B:USR1@{WARN_S}",
        requeue_option(requeue),
        f"--chdir={job_dir}",
        f"--comment=gpujob:{job_id}",
    ]
    for option in options:
        if not SAFE_VALUE.fullmatch(option):
            raise UsageError(f"{cluster.where}: sbatch option {option!r} has blanks, quotes, "
                             "`$` or `#`, which an #SBATCH line cannot carry")  # fmt: skip
    return options


@dataclass(frozen=True)
class SlurmPlan:
    """The node files (`plan`, as on any host but with no start of their own), the sbatch
    script and the node step (both also among node 0's files), and the literal commands."""

    plan: Plan
    cluster: SlurmCluster
    script: str
    node_step: str
    submit: tuple[str, ...]
    test_only: tuple[str, ...]
    script_path: str
    options: list[str] = field(default_factory=list)

    @property
    def job_dir(self) -> str:
        return self.plan.nodes[0].job_dir


def slurm_target(cluster: SlurmCluster, spec: JobSpec, python: str) -> NodeLayout:
    """All nodes planned on the login host's filesystem (the shared one); each node's
    address is its placeholder until the allocation is known."""
    if not SAFE_PATH.fullmatch(cluster.shared):
        raise UsageError(f"{cluster.where}: shared: {cluster.shared!r} must be an absolute "
                         "path of letters, digits and `_./+-`")  # fmt: skip
    root = str(PurePosixPath(cluster.shared) / ".gpujob")
    return NodeLayout(
        provider="slurm",
        runtime="bare",
        hosts=(cluster.login,) * spec.nodes,
        addresses=tuple(address_placeholder(rank) for rank in range(spec.nodes)),
        job_root=f"{root}/jobs",
        python=python,
        agent_python="python3",
        env_root=f"{root}/envs",
        gpus_per_node=spec.resources.gpus_per_node,
    )


def container_prefix(cluster: SlurmCluster, image_ref: str | None, shared: str) -> list[str]:
    """srun's words that run the node step in the job's image, where the cluster has a way."""
    if cluster.container is None or image_ref is None:
        return []
    if cluster.container == "pyxis":
        return [f"--container-image={image_ref}", f"--container-mounts={shared}:{shared}",
                "--no-container-entrypoint"]  # fmt: skip
    return ["apptainer", "exec", "--nv", "--bind", f"{shared}:{shared}", f"docker://{image_ref}"]


def build_slurm_plan(
    spec: JobSpec,
    cluster: SlurmCluster,
    job_id: str,
    secrets: dict[str, str],
    image: ImageDefinition | None,
    sources: Sources,
    *,
    python: str,
    image_ref: str | None = None,
    sync: CheckpointSync | None = None,
    recovery: Policy | None = None,
) -> SlurmPlan:
    """`image_ref`: the job's image by name, run through the cluster's container tool when it
    has one (the node's python3 is then the image's); else the job environment is built on
    the shared filesystem from the image's pins, as on an SSH host. `recovery`: SLURM
    requeues the job, which resumes from its newest complete checkpoint (slurm_requeue.py)."""
    if cluster.container is not None and cluster.container not in CONTAINERS:
        raise UsageError(f"{cluster.where}: container: {cluster.container!r} is not one of "
                         f"{', '.join(CONTAINERS)}")  # fmt: skip
    in_container = bool(cluster.container and image_ref)
    target = slurm_target(cluster, spec, "python3" if in_container else python)
    # SLURM runs the nodes' starts, not gpujob: the secrets wait in 0600 files on the shared
    # filesystem, which each node's agent deletes at its start (and `cancel`, if it never did)
    plan = build_plan(spec, target, job_id, secrets, None if in_container else image, sources,
                      sync, follow=False, secrets_on_stdin=False)  # fmt: skip
    job_dir = plan.nodes[0].job_dir
    script_path = f"{job_dir}/{SCRIPT}"
    requeue = requeue_of(recovery, plan.derived["checkpoint_dir"])
    options = directives(spec, cluster, job_id, job_dir, requeue)
    prefix = container_prefix(cluster, image_ref if in_container else None, cluster.shared)
    srun = ["srun", "--kill-on-bad-exit=1", f"--nodes={spec.nodes}", "--ntasks-per-node=1"]
    if spec.resources.cpus:  # srun does not inherit sbatch's --cpus-per-task (22.05 on)
        srun.append(f"--cpus-per-task={spec.resources.cpus}")
    if prefix and cluster.container == "pyxis":
        srun, prefix = srun + prefix, []
    elif spec.nodes == 1:  # the batch shell is on the one node already: no step to launch
        srun = ["SLURM_NODEID=0"]
    node_step = render_shell(
        "slurm-node.sh.j2", job_id=job_id, job_dir=job_dir, agent_python=target.agent_python,
        agent=f"{job_dir}/{AGENT_FILE}",
    )  # fmt: skip
    script = render_shell(
        "sbatch.sh.j2", job_id=job_id, name=spec.name, nnodes=spec.nodes,
        options=[Word(option) for option in options],
        job_dir=job_dir, placeholders=[address_placeholder(r) for r in range(spec.nodes)],
        srun=[srun, [*prefix, "bash", f"{job_dir}/{NODE_STEP}"]],
        python=target.agent_python, warn_s=WARN_S, requeue=requeue,
    )  # fmt: skip
    nodes = []
    for node in plan.nodes:
        steps = [_with_slurm_note(s, spec) for s in node.steps
                 if not (isinstance(s, RunCommand) and s.starts_job)]  # fmt: skip
        if node.rank == 0:
            steps += [
                WriteFile(path=f"{job_dir}/{NODE_STEP}", content=node_step, mode=0o755),
                WriteFile(path=script_path, content=script, mode=0o755),
                *requeue_steps(requeue, job_dir),
            ]
        nodes.append(NodePlan(rank=node.rank, host=node.host, job_dir=node.job_dir,
                              node_dir=node.node_dir, steps=tuple(steps)))  # fmt: skip
    return SlurmPlan(
        plan=replace(plan, nodes=tuple(nodes), checks=()),
        cluster=cluster,
        script=script,
        node_step=node_step,
        submit=("sbatch", "--parsable", script_path),
        test_only=("sbatch", "--test-only", script_path),
        script_path=script_path,
        options=options,
    )


def _with_slurm_note(step: Step, spec: JobSpec) -> Step:
    """job.json gains `slurm`: the agent then leaves liveness to SLURM (its supervisor runs
    on a node, not where the login host reads the status) and stops the job on USR1, the
    time limit's warning, saying which limit it was."""
    if not (isinstance(step, WriteFile) and step.path.endswith("/job.json")):
        return step
    wanted = sbatch_minutes(spec)
    limit = f"{wanted}m" if wanted is not None else "the partition's"
    config = dict(json.loads(step.content), slurm={"time_limit": limit, "warn_s": WARN_S})
    return replace(step, content=json.dumps(config, indent=2, sort_keys=True) + "\n")


def exit_code(text: str) -> int | None:
    """scontrol's or sacct's `ExitCode=A:B` (B: the signal that ended it) as one exit code."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if match is None:
        return None
    code, sig = int(match.group(1)), int(match.group(2))
    return code if code or not sig else 128 + sig
