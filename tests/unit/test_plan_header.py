"""The dry run's first line says what runs per node: ranks for torchrun, deepspeed and
accelerate; one process for launcher none, ray and a shell block (the golden quickstart
dry run, torchrun's, is pinned in test_dry_run.py)."""

from __future__ import annotations

import json

import pytest
from planning import plan_of, spec_of, target

from launcher.plan.show import plan_json, plan_text

TWO_HOSTS = target(2, hosts=("gpu-a", "gpu-b"), addresses=("10.0.0.1", "10.0.0.2"))


@pytest.mark.parametrize(
    ("run", "each"),
    [
        ({"module": "pkg.train"}, "2 rank(s) = world size 4"),
        ({"module": "pkg.train", "launcher": "deepspeed"}, "2 rank(s) = world size 4"),
        ({"module": "pkg.train", "launcher": "none"}, "1 process = world size 2"),
        ({"module": "pkg.train", "launcher": "ray"}, "1 process = world size 2"),
        ({"shell": "echo hi"}, "1 process = world size 2"),
    ],
)
def test_the_header_counts_processes_per_node_as_the_launcher_starts_them(
    run: dict, each: str
) -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:2"}, run=run)
    plan = plan_of(spec, TWO_HOSTS)
    head = plan_text(plan).splitlines()[0]
    assert head == f"job job-1: {spec.name} on test (bare runtime), 2 node(s) x {each}"
    one = json.loads(plan_json(plan)).get("one_process_per_node", False)
    assert one == each.startswith("1 process")
