"""Plans built straight from specs and Targets, and readers for the run script they hold."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
from launcher.plan.build import Sources, build_plan
from launcher.plan.model import NodePlan, Plan, RunCommand, Target, WriteFile
from launcher.spec.image import ImageDefinition, load_image_definition
from launcher.spec.job import JobSpec

REPO = Path(__file__).resolve().parents[2]


def spec_of(**fields: Any) -> JobSpec:
    """A valid one-node spec with `fields` on top."""
    data: dict[str, Any] = {"name": "t", "image": "host", "run": {"entrypoint": "train.py"}}
    data.update(fields)
    return JobSpec.model_validate(data)


def lab_cpu() -> ImageDefinition:
    image = load_image_definition("lab-cpu", REPO / "jobs")
    assert image is not None
    return image


def target(
    nodes: int = 1,
    *,
    hosts: tuple[str, ...] | None = None,
    addresses: tuple[str, ...] | None = None,
    job_root: str = "/jobs",
    python: str = "/usr/bin/python3",
    gpus_per_node: int = 0,
) -> Target:
    """One machine (loopback) unless `hosts`/`addresses` say otherwise."""
    return Target(
        provider="test",
        runtime="bare",
        hosts=hosts or ("local",) * nodes,
        addresses=addresses or ("127.0.0.1",) * nodes,
        job_root=job_root,
        python=python,
        agent_python="/usr/bin/python3",
        env_root="/envs",
        gpus_per_node=gpus_per_node,
    )


def plan_of(
    spec: JobSpec,
    where: Target | None = None,
    *,
    secrets: dict[str, str] | None = None,
    image: ImageDefinition | None = None,
    job_id: str = "job-1",
) -> Plan:
    sources = Sources(workdir="/src/work", agent=str(AGENT_SOURCE), init_lock=str(INIT_LOCK_SOURCE))
    return build_plan(spec, where or target(spec.nodes), job_id, secrets or {}, image, sources)


def written(node: NodePlan, name: str) -> WriteFile:
    """The file step whose path ends in `/name`."""
    return next(s for s in node.steps if isinstance(s, WriteFile) and s.path.endswith(f"/{name}"))


def run_sh(plan: Plan, rank: int = 0) -> str:
    return written(plan.nodes[rank], "run.sh").content


def env_setup(plan: Plan) -> str:
    """The bash script that makes the job environment (bare runtime with an image)."""
    return next(
        s.argv[-1] for s in plan.nodes[0].steps if isinstance(s, RunCommand) and s.argv[0] == "bash"
    )


def exports(script: str) -> dict[str, str]:
    """`export K=V` lines of a run script, as the shell reads them."""
    pairs = [shlex.split(line)[1] for line in script.splitlines() if line.startswith("export ")]
    return dict(pair.split("=", 1) for pair in pairs)


def torchrun_argv(script: str) -> list[str]:
    """The words after `exec`, continuation lines joined, as the shell splits them."""
    return shlex.split(script.split("\nexec ", 1)[1].replace(" \\\n    ", " "))
