"""Plans built straight from specs and Targets, and readers for the run script they hold."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
from launcher.plan.build import Sources, build_plan
from launcher.plan.model import NodeLayout, NodePlan, Plan, RunCommand, WriteFile
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
) -> NodeLayout:
    """One machine (loopback) unless `hosts`/`addresses` say otherwise."""
    return NodeLayout(
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
    where: NodeLayout | None = None,
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


def node_ips(plan: Plan, rank: int = 0) -> WriteFile:
    """The host's one list of node addresses that node `rank`'s run.sh reads."""
    path = f"{plan.nodes[rank].job_dir}/node_ips"
    steps = (step for node in plan.nodes for step in node.steps)
    return next(s for s in steps if isinstance(s, WriteFile) and s.path == path)


def env_setup(plan: Plan) -> str:
    """The bash script that makes the job environment (bare runtime with an image)."""
    return next(
        s.argv[-1] for s in plan.nodes[0].steps if isinstance(s, RunCommand) and s.argv[0] == "bash"
    )


def exports(script: str) -> dict[str, str]:
    """`export K=V` statements of a run script, as the shell reads them (a quoted value may
    span lines); `export NAME` of a name set before is left out."""
    pairs, pending = [], ""
    for line in script.splitlines():
        if not pending and not line.startswith("export "):
            continue
        pending = f"{pending}\n{line}" if pending else line
        try:
            pairs.extend(word for word in shlex.split(pending)[1:] if "=" in word)
        except ValueError:  # the quote closes on a later line
            continue
        pending = ""
    return dict(pair.split("=", 1) for pair in pairs)


def torchrun_argv(script: str) -> list[str]:
    """The words after `exec`, continuation lines joined, as the shell splits them."""
    return shlex.split(script.split("\nexec ", 1)[1].replace(" \\\n    ", " "))


REPORTER = f"""#!{sys.executable}
import json, os, sys
json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, sys.stdout)
"""


def reporting_target(folder: Path, nodes: int = 1, **fields: Any) -> NodeLayout:
    """A NodeLayout under `folder` whose `python` is a stand-in that prints the argv and the
    environment it was given as JSON (the run script `exec`s it in place of torchrun)."""
    python = folder / "python"
    python.write_text(REPORTER)
    python.chmod(0o755)
    return target(nodes, job_root=str(folder / "jobs"), python=str(python), **fields)


def execute(plan: Plan, rank: int = 0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Write node `rank`'s run.sh where the plan says and run `bash run.sh` for real. The
    workdir holds a file `x` that an injected `rm -rf x` would remove."""
    node = plan.nodes[rank]
    workdir = Path(node.job_dir) / "workdir"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "x").write_text("still here")
    Path(node.node_dir).mkdir(parents=True, exist_ok=True)
    (Path(node.node_dir) / "run.sh").write_text(run_sh(plan, rank))
    Path(node_ips(plan, rank).path).write_text(node_ips(plan, rank).content)
    base = {"PATH": os.environ["PATH"], "HOME": "/home/expanded"}
    result = subprocess.run(
        ["bash", "run.sh"],
        cwd=node.node_dir,
        env={**base, **(env or {})},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert (workdir / "x").read_text() == "still here"
    started, report = result.stdout.split(b"\n", 1)
    assert started.startswith(b"[gpujob] node %d of " % rank), started  # the job's first line
    return json.loads(report)
