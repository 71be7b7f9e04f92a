"""Where a job's nodes run, as pure decisions over hosts' facts: which host each node
gets, which runtime (Docker where every host has it and the image has a name, else bare),
which image name, and the NodeLayout a plan is built for. No I/O: `launcher.targets.placement`
contacts the hosts and calls these.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from launcher.errors import UsageError
from launcher.plan.model import HostFacts, NodeLayout

RuntimeChoice = Literal["auto", "docker", "bare"]


def image_reference(spec_image: str, definition: Any) -> str | None:
    """A full image name as it is; an image definition under `$GPUJOB_REGISTRY` as
    `REGISTRY/REPO:NAME` (REPO: `$GPUJOB_IMAGE_REPO`, default `gpujob/job`), where
    `gpujob image build` pushes it; None when neither applies (`host`, no registry)."""
    if definition is None:
        return None if spec_image == "host" else spec_image
    registry = os.environ.get("GPUJOB_REGISTRY")
    if not registry:
        return None
    repo = os.environ.get("GPUJOB_IMAGE_REPO", "gpujob/job")
    return f"{registry}/{repo}:{definition.name}"


def node_hosts(on: list[str], nodes: int) -> list[str]:
    """One host for every node, or one per node in order: `--on a,b` with `nodes: 2`."""
    if len(on) == 1:
        return on * nodes
    if len(on) != nodes:
        raise UsageError(
            f"--on names {len(on)} hosts but the job has nodes: {nodes}",
            "name one host (all nodes on it) or one host per node, node 0 first",
        )
    return on


def split_on(values: tuple[str, ...] | list[str]) -> list[str]:
    return [name for value in values for name in value.split(",") if name]


def target_for(
    spec: Any,
    image: Any,
    entries: list[Any],
    facts: dict[str, HostFacts],
    addresses: list[str],
    ref: str | None,
    runtime: RuntimeChoice,
    provider: str,
) -> NodeLayout:
    head = facts[entries[0].name]
    use_docker = runtime == "docker" or (
        runtime == "auto" and ref is not None and all(f.docker for f in facts.values())
    )
    if use_docker:
        if ref is None:
            raise UsageError(
                "--runtime docker needs an image: give `image:` a full image name, "
                "or set GPUJOB_REGISTRY for an image definition"
            )
        lacking = [name for name, f in facts.items() if not f.docker]
        if lacking:
            raise UsageError(f"--runtime docker: no Docker answers on {', '.join(lacking)}")
    else:
        for name, f in facts.items():
            if image is not None and f.version != "?" and image.python != f.version:
                raise UsageError(
                    f"image {image.name} is for Python {image.python} but {name} runs {f.version}",
                    "use `--set image=host` to run with the host's own Python environment",
                )
    homes = {f.home for f in facts.values()}
    if len(homes) > 1:
        raise UsageError(
            f"the hosts' home folders differ ({', '.join(sorted(homes))})",
            "use the same login user on every host of a multi-node job",
        )
    python = "python3" if use_docker or image is not None else head.python
    return NodeLayout(
        provider=provider,
        runtime="docker" if use_docker else "bare",
        hosts=tuple(e.name for e in entries),
        addresses=tuple(addresses),
        job_root=f"{head.home}/.gpujob/jobs",
        python=python,
        agent_python="python3",
        env_root=f"{head.home}/.cache/gpujob/envs",
        gpus_per_node=spec.resources.gpus_per_node,
        image_ref=ref if use_docker else None,
        image_present=use_docker and all(ref in f.images for f in facts.values()),
        host_gpus=min(f.gpus for f in facts.values()),
        raise_memlock=all(f.memlock_unlimited for f in facts.values()),
    )
