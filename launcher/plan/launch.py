"""What each node runs: its run.sh, the variables every process of the node gets, and the
launcher's command line (torchrun, deepspeed, accelerate, ray, plain python, or the user's own
shell block), all planned here with no I/O.

Every node gets the same names whatever launches the program, under gpujob's names and
SkyPilot's (`SKYPILOT_NODE_RANK`, `SKYPILOT_NODE_IPS`, ...), so a SkyPilot `run:` block runs
unchanged (reference/skypilot-task.md §3). The launchers follow reference/launchers.md: one
process per node, nothing of theirs fans out over SSH.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from launcher.agent import METRICS_JOB_FILE
from launcher.errors import UsageError
from launcher.plan.merge_step import merge_step
from launcher.plan.model import NodeLayout
from launcher.plan.render import render_shell
from launcher.plan.sandbox import sandbox_env
from launcher.plan.setup_barrier import barrier_argv
from launcher.spec.job import CLASHING_ENV, JobSpec
from launcher.spec.run import ONE_PER_NODE

MACRO = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
INIT_FILE = "gpujob-init.py"
USER_RUN_FILE = "run-user.sh"
HOSTFILE = "hostfile"
NODE_IPS_FILE = "node_ips"
PYLIB = "pylib"
"""The job's folder of modules gpujob ships for the program to import (gpujob_capture)."""


@dataclass(frozen=True)
class NodeContext:
    """One node of one job, as the launchers see it."""

    spec: JobSpec
    target: NodeLayout
    rank: int
    job_dir: str
    node_dir: str
    python: str
    values: dict[str, str]
    spec_where: str = "the job spec"
    user: str = ""

    @property
    def head(self) -> str:
        return self.target.addresses[0]

    @property
    def address(self) -> str:
        return self.target.addresses[self.rank]


def node_ips(target: NodeLayout, nodes: int) -> str:
    """The job's `node_ips` file, written once per host: every node's address, one a line,
    node 0 first. run.sh reads it into GPUJOB_NODE_IPS and SkyPilot's names; written into
    each node's own script instead, a plan of N nodes would hold N copies of N addresses."""
    return "\n".join(target.addresses[:nodes]) + "\n"


def node_env(node: NodeContext) -> dict[str, str]:
    """The variables every process of the node gets (run.sh exports them, and the address
    lists GPUJOB_NODE_IPS, SKYPILOT_NODE_IPS and SKYPILOT_SETUP_NODE_IPS read from the file
    GPUJOB_NODE_IPS_FILE names)."""
    spec = node.spec
    env: dict[str, str] = {f"GPUJOB_{key.upper()}": value for key, value in node.values.items()}
    gpus = str(spec.resources.gpus_per_node)
    env.update(
        GPUJOB_NODE_IPS_FILE=f"{node.job_dir}/{NODE_IPS_FILE}",
        GPUJOB_NUM_NODES=str(spec.nodes),
        GPUJOB_NUM_GPUS_PER_NODE=gpus,
        GPUJOB_HEAD_IP=node.head,
        GPUJOB_METRICS=f"{node.node_dir}/{METRICS_JOB_FILE}",
        MASTER_ADDR=node.head,
        MASTER_PORT=str(spec.run.rdzv_port),
        SKYPILOT_NODE_RANK=str(node.rank),
        SKYPILOT_NUM_NODES=str(spec.nodes),
        SKYPILOT_NUM_GPUS_PER_NODE=gpus,
        SKYPILOT_TASK_ID=node.values["job_id"],
        SKYPILOT_SETUP_NODE_RANK=str(node.rank),
        SKYPILOT_SETUP_NUM_GPUS_PER_NODE=gpus,
        SKYPILOT_CLUSTER_INFO=cluster_info(node),
    )
    if node.user:  # who submitted, as SkyPilot's SKYPILOT_USER says
        env["SKYPILOT_USER"] = node.user
    env.update(spec.nccl)
    env.update(spec.envs)
    if node.target.sandbox:  # after the spec's envs: the job stays inside its folder
        venv = str(PurePosixPath(node.python).parents[1]) if _venv_python(node.python) else None
        env.update(sandbox_env(node.target, node.job_dir, venv))
    if spec.run.serialize_init:
        env["GPUJOB_INIT_LOCK"] = f"{node.job_dir}/init.lock"
        env["GPUJOB_INIT_IMPORTS"] = ",".join(spec.run.init_imports)
    target = node.target
    if spec.nodes > 1 and target.one_machine and target.gpus_per_node:
        per_node = spec.nproc_per_node
        if spec.run.launcher_name in ONE_PER_NODE:  # its one process gets the node's GPUs
            per_node = spec.resources.gpus_per_node or 1
        first = node.rank * per_node
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in range(first, first + per_node))
    return env


def cluster_info(node: NodeContext) -> str:
    """SkyPilot's JSON (skypilot-task.md §3): the job is the cluster, the provider its cloud;
    gpujob does not track regions or zones."""
    return json.dumps({"cluster_name": node.values["job_id"], "cloud": node.target.provider,
                       "region": None, "zone": None})  # fmt: skip


def unset_names(spec: JobSpec) -> list[str]:
    """Removed from every process: ROCm's variables break CUDA jobs (seed 004), wherever the
    image's ENV, /etc/environment or ~/.bashrc set them; plus the spec's own `unset_envs`."""
    return list(dict.fromkeys([*CLASHING_ENV, *spec.unset_envs]))


def run_script(node: NodeContext) -> str:
    spec = node.spec
    limit = spec.run.memory_limit_gb
    python_dir = str(PurePosixPath(node.python).parent)
    launcher = spec.run.launcher_name
    return render_shell(
        "run.sh.j2",
        job_id=node.values["job_id"],
        node_rank=node.rank,
        nnodes=spec.nodes,
        env=sorted(node_env(node).items()),
        unset=unset_names(spec),
        path_prefix=python_dir if _venv_python(node.python) else None,
        hidden_path=list(node.target.hidden_path),
        sandbox=node.target.sandbox,
        memory_limit_kib=int(limit * 1024 * 1024) if limit else None,
        workdir=f"{node.job_dir}/workdir",
        pylib=f"{node.job_dir}/{PYLIB}",
        setup=f"{node.node_dir}/setup.sh" if spec.setup or spec.hf_mounts else None,
        barrier=_setup_barrier(node),
        merge=merge_step(spec, node.python, node.node_dir, node.rank),
        started=f"[gpujob] node {node.rank} of {spec.nodes} ({node.target.runtime} runtime): "
        + started_words(spec),
        python=node.python,
        command=launch_argv(node),
        ray=ray_context(node) if launcher == "ray" else None,
    )


def _venv_python(python: str) -> bool:
    """The job's Python is a venv's (a job environment), whose bin goes first on PATH."""
    return python.endswith("/bin/python")


def _setup_barrier(node: NodeContext) -> list[list[str]] | None:
    """With several nodes, every setup must succeed before any run starts (setup_barrier.py)."""
    spec = node.spec
    if not (spec.setup or spec.hf_mounts) or spec.nodes == 1:
        return None
    port = spec.run.rdzv_port
    bound = spec.run.rdzv_timeout_s
    return [barrier_argv(node.python, node.node_dir, node.rank, spec.nodes, node.head, port, bound)]


def started_words(spec: JobSpec) -> str:
    launcher = spec.run.launcher_name
    if launcher == "shell":
        return "running the run: block"
    if launcher == "none":
        return "starting python (launcher: none)"
    return f"starting {launcher}, {spec.nproc_per_node} rank(s)"


def user_run_file(spec: JobSpec) -> str | None:
    """The shell block as its own script: the clashing names are unset again at its top,
    after bash has read any BASH_ENV the image sets. A stop's TERM reaches every process of
    the job: the trap makes bash wait for the command it runs (whose handler may save and
    say so) before it exits, instead of dying first and, as a container's main process,
    taking that command down with it."""
    if spec.run.shell is None:
        return None
    unset = " ".join(unset_names(spec))
    return f"unset {unset}\ntrap 'exit 143' TERM INT\n{spec.run.shell.rstrip()}\n"


def launch_argv(node: NodeContext) -> list[list[str]]:
    """The node's command as groups of words (one flag and its value per group)."""
    launcher = node.spec.run.launcher_name
    if launcher == "shell":
        return [["bash", f"{node.node_dir}/{USER_RUN_FILE}"]]
    if launcher == "none" or launcher == "ray":
        return [[node.python, *_program(node, module_flag="-m")]]
    if launcher == "deepspeed":
        return _deepspeed_argv(node)
    if launcher == "accelerate":
        return _accelerate_argv(node)
    return _torchrun_argv(node)


def _program(node: NodeContext, module_flag: str) -> list[str]:
    """The program and its arguments: a module after the launcher's flag for one (`-m`,
    torchrun's `--module`, deepspeed's and accelerate's boolean `--module`)."""
    run = node.spec.run
    program: list[str] = []
    if run.module:
        program += [module_flag, run.module]
    else:
        assert run.entrypoint is not None
        program.append(run.entrypoint)
    return program + [substitute(arg, node.values, node.spec_where) for arg in run.args]


def _torchrun_argv(node: NodeContext) -> list[list[str]]:
    spec, run = node.spec, node.spec.run
    groups = [[node.python, "-m", "torch.distributed.run"]]
    if spec.nodes == 1:
        # The address workers meet at is `--local-addr or socket.getfqdn()`: a host whose own
        # name does not resolve (no DNS in reach) would hang the rendezvous on it.
        groups += [["--standalone"], ["--nnodes", "1"], ["--local-addr", "127.0.0.1"]]
    else:
        groups += [
            ["--nnodes", str(spec.nodes)],
            ["--rdzv-backend", "c10d"],
            ["--rdzv-endpoint", f"{node.head}:{run.rdzv_port}"],
            ["--rdzv-id", node.values["job_id"]],
            ["--rdzv-conf", f"join_timeout={run.rdzv_timeout_s},read_timeout=60"],
            ["--local-addr", node.address],
        ]
    groups += [
        ["--nproc-per-node", str(spec.nproc_per_node)],
        ["--max-restarts", str(run.max_restarts)],
    ]
    if run.serialize_init:  # the init lock's wrapper runs the program (`-m` for a module)
        return [*groups, [f"{node.job_dir}/{INIT_FILE}", *_program(node, "-m")]]
    return [*groups, _program(node, "--module")]


def hostfile(spec: JobSpec) -> str:
    """DeepSpeed's hostfile: names are only keys in no-SSH mode (launchers.md §2.2)."""
    return "".join(f"node-{rank} slots={spec.nproc_per_node}\n" for rank in range(spec.nodes))


def _deepspeed_argv(node: NodeContext) -> list[list[str]]:
    """DeepSpeed's own runner on every node, no SSH: the hostfile orders the ranks, node 0's
    address is the master (it must be named: the runner guesses with `hostname -I`)."""
    spec = node.spec
    groups = [[node.python, "-u", "-m", "deepspeed.launcher.runner"]]
    if spec.nodes == 1:
        groups.append([f"--num_gpus={spec.nproc_per_node}"])
    else:
        groups += [
            [f"--hostfile={node.job_dir}/{HOSTFILE}"],
            ["--no_ssh"],
            [f"--node_rank={node.rank}"],
            [f"--master_addr={node.head}"],
        ]
    groups.append([f"--master_port={spec.run.rdzv_port}"])
    return [*groups, _program(node, "--module")]


def _accelerate_argv(node: NodeContext) -> list[list[str]]:
    """`accelerate launch` with every count given, so no config file in the image decides
    them (launchers.md §3.3): processes are the job's total, not the node's."""
    spec = node.spec
    groups = [
        [node.python, "-m", "accelerate.commands.launch"],
        ["--num_machines", str(spec.nodes)],
        ["--machine_rank", str(node.rank)],
        ["--main_process_ip", node.head],
        ["--main_process_port", str(spec.run.rdzv_port)],
        ["--num_processes", str(spec.world_size)],
    ]
    if spec.world_size > 1 and spec.resources.gpus_per_node:
        groups.append(["--multi_gpu"])
    elif not spec.resources.gpus_per_node:
        groups.append(["--cpu"])
    return [*groups, _program(node, "--module")]


@dataclass(frozen=True)
class RayPlan:
    """Node 0 starts the head and runs the driver once every node has joined; the others
    join and stay until the head stops answering (launchers.md §4.1). Every node runs
    `ray stop --force` on its way out, which stops every Ray on that host, not only the
    job's: a host running a Ray of its own should not run a `launcher: ray` job."""

    head: bool
    head_ip: str
    node_ip: str
    port: int
    nodes: int
    gpus: int
    join_timeout_s: int
    head_misses: int = 3
    """Failed connects to the head in a row (a second apart) before a worker ends: one
    refused connect under load is not the head gone."""

    def join_failed(self, rank: int) -> str:
        return (f"[gpujob] ray: node {rank} ({self.node_ip}) could not join the head at "
                f"{self.head_ip}:{self.port} in {self.join_timeout_s} s")  # fmt: skip

    def joined(self, rank: int) -> str:
        return f"[gpujob] ray: node {rank} ({self.node_ip}) joined; staying while the head answers"


def ray_context(node: NodeContext) -> RayPlan:
    spec = node.spec
    return RayPlan(
        head=node.rank == 0,
        head_ip=node.head,
        node_ip=node.address,
        port=spec.run.ray_port,
        nodes=spec.nodes,
        gpus=spec.resources.gpus_per_node,
        join_timeout_s=spec.run.rdzv_timeout_s,
    )


def substitute(text: str, values: dict[str, str], where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise UsageError(
                f"{where}: run.args: unknown macro ${{{name}}}",
                f"known: {', '.join('${' + key + '}' for key in sorted(values))}",
            )
        return values[name]

    return MACRO.sub(replace, text)
