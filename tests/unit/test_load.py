"""Loading a spec: profiles, `--set` overrides and their precedence, and how values are typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from planning import REPO

from launcher.errors import UsageError
from launcher.spec.load import load_job_spec

QUICKSTART = REPO / "jobs" / "quickstart.yaml"


def field(spec: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if part.isdigit():
            spec = spec[int(part)]
        else:
            spec = spec[part] if isinstance(spec, dict) else getattr(spec, part)
    return spec


def test_no_profile_is_the_file_as_written() -> None:
    spec = load_job_spec(QUICKSTART).spec
    assert (spec.profile, spec.image, spec.nproc_per_node, spec.grad_accum_steps) == (
        None, "lab-cpu", 2, 2,
    )  # fmt: skip


# (--set flags, field, value): the gpu profile of the quickstart merged deeply, --set on top
PRECEDENCE = [
    (["profile=gpu"], "profile", "gpu"),
    (["profile=gpu"], "image", "host"),
    (["profile=gpu"], "resources.accelerators", "H100:1"),
    (["profile=gpu"], "resources.disk_gb", 20),
    (["profile=gpu"], "resources.cpus", 2),  # kept: the profile's `resources` is merged
    (["profile=gpu"], "envs", {"OMP_NUM_THREADS": "1"}),
    (["profile=gpu"], "run.entrypoint", "train.py"),
    (["profile=gpu"], "run.args.1", "200"),
    (["profile=gpu"], "checkpoints.every_steps", 100),
    (["profile=gpu"], "checkpoints.dir", "checkpoints"),
    (["profile=gpu"], "grad_accum_steps", 1),
    (["profile=gpu", "image=lab-cpu"], "image", "lab-cpu"),
    (["image=lab-cpu", "profile=gpu"], "image", "lab-cpu"),
    (["run.nproc_per_node=2", "profile=gpu", "batch.micro_batch=4"], "nproc_per_node", 2),
    (["run.nproc_per_node=2", "profile=gpu", "batch.micro_batch=4"], "grad_accum_steps", 1),
    (
        [
            "profile=gpu",
            "resources.accelerators=A100:8",
            "run.nproc_per_node=null",
            "batch.micro_batch=1",
        ],
        "nproc_per_node",
        8,
    ),
]


@pytest.mark.parametrize(("sets", "dotted", "expected"), PRECEDENCE)
def test_set_beats_the_profile_which_beats_the_file(
    sets: list[str], dotted: str, expected: Any
) -> None:
    assert field(load_job_spec(QUICKSTART, sets).spec, dotted) == expected


def test_a_profile_named_in_the_file_applies(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: t\nimage: host\nprofile: big\nrun: {entrypoint: a.py}\n"
        "profiles:\n  big: {nodes: 4}\n  small: {nodes: 1}\n"
    )
    assert load_job_spec(spec).spec.nodes == 4
    assert load_job_spec(spec, ["profile=small"]).spec.nodes == 1


def test_an_error_inside_a_profile_names_the_profile_line(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: t\nimage: host\nrun: {entrypoint: a.py}\nprofiles:\n  big:\n    nodes: two\n"
    )
    with pytest.raises(UsageError, match=rf"^{spec}:6: nodes: "):
        load_job_spec(spec, ["profile=big"])


# (--set flag, field, value): values are read as YAML, then validated by the field's type
TYPING = [
    ("run.nproc_per_node=4", "run.nproc_per_node", 4),
    ("nodes=2", "nodes", 2),
    ("run.serialize_init=true", "run.serialize_init", True),
    ("run.serialize_init=false", "run.serialize_init", False),
    ("run.memory_limit_gb=1.5", "run.memory_limit_gb", 1.5),
    ("run.args=[--lr, '0.1', 3]", "run.args", ["--lr", "0.1", "3"]),
    ("run.args=[]", "run.args", []),
    ("run.args.1=5", "run.args", ["--steps", "5", "--seq-len", "64"]),
    ("run.init_imports=[torch, numpy]", "run.init_imports", ["torch", "numpy"]),
    ("envs.GREETING=hello world", "envs.GREETING", "hello world"),
    ("envs.OPTS=a=b", "envs.OPTS", "a=b"),
    ("envs.EMPTY=", "envs.EMPTY", ""),
    ("envs.N=7", "envs.N", "7"),
    ("envs.FLAG=true", "envs.FLAG", "1"),
    ("envs.QUOTED='007'", "envs.QUOTED", "007"),
    ("resources.accelerators=A100:8", "resources.accelerators", "A100:8"),
    ("secrets=[A, B_2]", "secrets", ["A", "B_2"]),
    ("envs.VERSION=1.10", "envs.VERSION", "1.10"),  # typed text kept, not str(1.1)
    ("envs.UMASK=0755", "envs.UMASK", "0755"),
    ("envs.BIG=1_000", "envs.BIG", "1_000"),
]


@pytest.mark.parametrize(("flag", "dotted", "expected"), TYPING)
def test_set_values_are_typed(flag: str, dotted: str, expected: Any) -> None:
    assert field(load_job_spec(QUICKSTART, [flag]).spec, dotted) == expected


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("nodes", "write it as KEY=VALUE"),
        ("=3", "write it as KEY=VALUE"),
        ("run..args=x", "write it as KEY=VALUE"),
        ("name.first=x", "name: Input should be a valid string"),
        ("run.args.9.x=1", "`9` is not a mapping"),
        ("run.nproc_per_node=four", "run.nproc_per_node: "),
        ("run.args.9=x", "cannot set a field there"),
    ],
)
def test_bad_set_flags_are_usage_errors(flag: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_job_spec(QUICKSTART, [flag])


@pytest.mark.parametrize("flag", ["name.first=x", "rn.args=x", "resources.gpu.count=1"])
def test_an_error_from_a_set_flag_names_the_flag(flag: str) -> None:
    with pytest.raises(UsageError, match=rf"^--set {flag.split('=')[0]}: "):
        load_job_spec(QUICKSTART, [flag])
