"""spec -> Plan: the numbers users get wrong by hand, the torchrun line, the per-node script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planning import (
    execute,
    exports,
    plan_of,
    reporting_target,
    run_sh,
    spec_of,
    target,
    torchrun_argv,
    written,
)
from pydantic import ValidationError

from launcher.errors import UsageError
from launcher.plan.model import CopyFile, RunCommand, WriteFile
from launcher.plan.show import plan_json, plan_text
from launcher.spec.job import JobSpec

TWO_HOSTS = target(2, hosts=("gpu-a", "gpu-b"), addresses=("10.0.0.1", "10.0.0.2"))


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# (global_batch, micro_batch, nodes, nproc_per_node, grad_accum_steps or the error's advice)
GRAD_ACCUM = [
    (16, 4, 1, 2, 2),
    (8, 8, 1, 1, 1),
    (64, 2, 2, 4, 4),
    (1024, 4, 4, 8, 8),
    (None, 4, 1, 2, None),
    (16, None, 1, 2, None),
    (10, 4, 1, 2, "use a global_batch of 8 or 16"),
    (4, 4, 1, 2, "use a global_batch of 8"),
    (24, 4, 2, 2, "use a global_batch of 16 or 32"),
]


@pytest.mark.parametrize(("global_batch", "micro", "nodes", "nproc", "expected"), GRAD_ACCUM)
def test_grad_accum_steps_are_derived(
    global_batch: int | None, micro: int | None, nodes: int, nproc: int, expected: int | str | None
) -> None:
    fields = {
        "nodes": nodes,
        "run": {"entrypoint": "train.py", "nproc_per_node": nproc},
        "batch": {"global_batch": global_batch, "micro_batch": micro},
    }
    if isinstance(expected, str):
        with pytest.raises(ValidationError, match=expected):
            spec_of(**fields)
        return
    plan = plan_of(spec_of(**fields))
    assert plan.grad_accum_steps == expected
    assert exports(run_sh(plan)).get("GPUJOB_GRAD_ACCUM_STEPS") == (
        None if expected is None else str(expected)
    )


@pytest.mark.parametrize(
    ("accelerators", "nproc", "expected"),
    [(None, None, 1), ("A100", None, 1), ("A100:8", None, 8), ("H100:2", 4, 4), (None, 3, 3)],
)
def test_nproc_per_node_defaults_to_the_gpus_per_node(
    accelerators: str | None, nproc: int | None, expected: int
) -> None:
    spec = spec_of(
        resources={"accelerators": accelerators},
        run={"entrypoint": "train.py", "nproc_per_node": nproc},
    )
    plan = plan_of(spec)
    assert plan.nproc_per_node == expected
    assert plan.world_size == expected
    assert flag(torchrun_argv(run_sh(plan)), "--nproc-per-node") == str(expected)


def test_one_node_is_standalone() -> None:
    argv = torchrun_argv(run_sh(plan_of(spec_of())))
    assert argv[:6] == ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone",
                        "--nnodes", "1"]  # fmt: skip
    assert not any(word.startswith("--rdzv") for word in argv)


@pytest.mark.parametrize("rank", [0, 1])
def test_multi_node_torchrun_flags(rank: int) -> None:
    spec = spec_of(
        nodes=2, run={"entrypoint": "train.py", "rdzv_port": 29500, "rdzv_timeout_s": 120}
    )
    argv = torchrun_argv(run_sh(plan_of(spec, TWO_HOSTS, job_id="job-9"), rank))
    assert "--standalone" not in argv
    assert flag(argv, "--nnodes") == "2"
    assert flag(argv, "--rdzv-backend") == "c10d"
    assert flag(argv, "--rdzv-endpoint") == "10.0.0.1:29500"
    assert flag(argv, "--rdzv-id") == "job-9"
    assert flag(argv, "--rdzv-conf") == "join_timeout=120,read_timeout=60"
    assert flag(argv, "--local-addr") == ("10.0.0.1", "10.0.0.2")[rank]
    assert exports(run_sh(plan_of(spec, TWO_HOSTS), rank))["GPUJOB_NODE_RANK"] == str(rank)


@pytest.mark.parametrize(
    ("hosts", "addresses"),
    [
        (("a", "b"), ("127.0.0.1", "10.0.0.2")),
        (("a", "b"), ("127.0.0.1", "127.0.0.1")),
        (("a", "b"), ("localhost", "10.0.0.2")),
        (("a", "b"), ("::1", "10.0.0.2")),
        (("a", "a"), ("127.0.0.1", "10.0.0.2")),
    ],
)
def test_loopback_rendezvous_across_hosts_is_a_plan_error(
    hosts: tuple[str, ...], addresses: tuple[str, ...]
) -> None:
    with pytest.raises(UsageError, match="loopback"):
        plan_of(spec_of(nodes=2), target(2, hosts=hosts, addresses=addresses))


def test_node_count_must_match_the_hosts() -> None:
    with pytest.raises(UsageError, match="needs 2 nodes but 1 were given"):
        plan_of(spec_of(nodes=2), target(1))


def test_two_nodes_on_one_machine_get_disjoint_gpus() -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:4"})
    plan = plan_of(spec, target(2, gpus_per_node=4))
    scripts = [run_sh(plan, rank) for rank in (0, 1)]
    assert [exports(s)["CUDA_VISIBLE_DEVICES"] for s in scripts] == ["0,1,2,3", "4,5,6,7"]
    assert [flag(torchrun_argv(s), "--rdzv-endpoint") for s in scripts] == ["127.0.0.1:29400"] * 2


@pytest.mark.parametrize("where", [target(2), TWO_HOSTS], ids=["one-machine-no-gpus", "two-hosts"])
def test_cuda_visible_devices_is_left_alone_otherwise(where: object) -> None:
    plan = plan_of(spec_of(nodes=2), where)  # type: ignore[arg-type]
    assert all("CUDA_VISIBLE_DEVICES" not in exports(run_sh(plan, r)) for r in (0, 1))


def test_workdir_and_agent_are_shipped_once_per_host() -> None:
    one_machine = plan_of(spec_of(nodes=2), target(2))
    two_hosts = plan_of(spec_of(nodes=2), TWO_HOSTS)

    def shipped(plan: object, rank: int) -> list[str]:
        steps = plan.nodes[rank].steps  # type: ignore[attr-defined]
        return [type(s).__name__ for s in steps if not isinstance(s, WriteFile | RunCommand)]

    assert shipped(one_machine, 1) == []
    assert shipped(two_hosts, 1) == shipped(two_hosts, 0) == ["SyncDir", "CopyFile"]


@pytest.mark.parametrize(
    ("program", "expected_tail"),
    [
        ({"entrypoint": "train.py"}, ["/jobs/job-1/gpujob-init.py", "train.py", "--a"]),
        ({"module": "pkg.train"}, ["/jobs/job-1/gpujob-init.py", "-m", "pkg.train", "--a"]),
    ],
)
def test_serialize_init_wraps_the_program(program: dict, expected_tail: list[str]) -> None:
    spec = spec_of(
        run={**program, "args": ["--a"], "serialize_init": True, "init_imports": ["torch", "tx"]}
    )
    plan = plan_of(spec)
    argv = torchrun_argv(run_sh(plan))
    assert argv[-len(expected_tail) :] == expected_tail
    assert flag(argv, "--max-restarts") == "0"
    env = exports(run_sh(plan))
    assert env["GPUJOB_INIT_LOCK"] == "/jobs/job-1/init.lock"
    assert env["GPUJOB_INIT_IMPORTS"] == "torch,tx"
    copies = [s for s in plan.nodes[0].steps if isinstance(s, CopyFile)]
    assert [(Path(s.source).name, s.path) for s in copies] == [
        ("init_lock.py", "/jobs/job-1/gpujob-init.py"),
        ("agent.py", "/jobs/job-1/gpujob-agent.py"),  # last: its siblings are there before it
    ]


@pytest.mark.parametrize(
    ("program", "expected_tail"),
    [
        ({"entrypoint": "train.py"}, ["--max-restarts", "0", "train.py"]),
        ({"module": "pkg.train"}, ["--max-restarts", "0", "--module", "pkg.train"]),
    ],
)
def test_without_serialize_init_torchrun_runs_the_program(
    program: dict, expected_tail: list[str]
) -> None:
    plan = plan_of(spec_of(run=program))
    script = run_sh(plan)
    assert torchrun_argv(script)[-len(expected_tail) :] == expected_tail
    assert "gpujob-init.py" not in script
    assert "GPUJOB_INIT_LOCK" not in exports(script)


@pytest.mark.parametrize(
    ("gib", "kib"), [(1, 1048576), (1.5, 1572864), (0.25, 262144), (64, 67108864)]
)
def test_memory_limit_is_ulimit_v_in_kib(gib: float, kib: int) -> None:
    script = run_sh(plan_of(spec_of(run={"entrypoint": "t.py", "memory_limit_gb": gib})))
    assert f"\nulimit -v {kib}\n" in script
    assert script.index("ulimit -v") < script.index("\nexec ")


def test_no_memory_limit_no_ulimit() -> None:
    assert "ulimit" not in run_sh(plan_of(spec_of()))


def test_clashing_and_stray_variables_are_unset(tmp_path: Path) -> None:
    plan = plan_of(spec_of(), reporting_target(tmp_path))
    stray = {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0", "PET_NNODES": "9",
             "PET_MASTER_ADDR": "x", "KEEP_ME": "1"}  # fmt: skip
    env = execute(plan, env=stray)["env"]
    assert {key: env.get(key) for key in stray} == {
        "ROCR_VISIBLE_DEVICES": None, "HIP_VISIBLE_DEVICES": None, "PET_NNODES": None,
        "PET_MASTER_ADDR": None, "KEEP_ME": "1",
    }  # fmt: skip
    assert env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize("name", ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"])
def test_envs_cannot_bring_back_a_clashing_variable(name: str) -> None:
    with pytest.raises(ValidationError, match=name):
        spec_of(envs={name: "0"})


SECRET = "s3cr3t-value-8d1f"


def test_secrets_go_only_on_the_starts_stdin_never_in_a_file() -> None:
    spec = spec_of(nodes=2, secrets=["HF_TOKEN"], setup="echo hi")
    plan = plan_of(spec, TWO_HOSTS, secrets={"HF_TOKEN": SECRET})
    for node in plan.nodes:
        given = node.start.input
        assert given is not None and given.names == ("HF_TOKEN",)
        assert json.loads(given.content) == {"secrets": {"HF_TOKEN": SECRET}, "storage": {}}
        assert not any(isinstance(s, WriteFile) and s.secret for s in node.steps)
        config = json.loads(written(node, "job.json").content)
        assert (config["secrets_file"], config["secrets_on_stdin"]) == (None, True)
        others = [s for s in node.steps if s is not node.start]
        assert SECRET not in repr(others) and SECRET not in repr(node.start)
        assert SECRET not in run_sh(plan, node.rank)
    assert SECRET not in plan_text(plan)
    assert SECRET not in plan_json(plan)
    shown = plan_text(plan)
    assert shown.count("# on its stdin, never in a file on the host: HF_TOKEN=***") == 2


def test_no_secrets_nothing_on_stdin() -> None:
    node = plan_of(spec_of()).nodes[0]
    assert not any(isinstance(s, WriteFile) and s.secret for s in node.steps)
    assert node.start.input is None
    config = json.loads(written(node, "job.json").content)
    assert config["secrets_file"] is None and "secrets_on_stdin" not in config


def test_a_name_in_both_envs_and_secrets_is_an_error() -> None:
    with pytest.raises(ValidationError, match="both in `envs` and `secrets`"):
        spec_of(envs={"HF_TOKEN": "x"}, secrets=["HF_TOKEN"])


def test_setup_runs_before_the_program_from_its_own_file() -> None:
    plan = plan_of(spec_of(setup="pip install -e .\n\n"))
    assert written(plan.nodes[0], "setup.sh").content == "pip install -e .\n"
    script = run_sh(plan)
    assert "\nbash /jobs/job-1/node-0/setup.sh\n" in script
    assert script.index("setup.sh") < script.index("\nexec ")


def test_the_job_starts_last_under_the_agent() -> None:
    node = plan_of(spec_of()).nodes[0]
    last = node.steps[-1]
    assert isinstance(last, RunCommand) and last.starts_job
    assert last.argv == ("/usr/bin/python3", "-S", "/jobs/job-1/gpujob-agent.py", "start",
                         "/jobs/job-1/node-0")  # fmt: skip
    assert [s for s in node.steps if isinstance(s, RunCommand) and s.starts_job] == [last]


def test_a_batch_that_does_not_divide_shows_the_division_the_silent_loss_and_both_fixes() -> None:
    spec = {"name": "t", "image": "host", "nodes": 1,
            "run": {"entrypoint": "train.py", "nproc_per_node": 3},
            "batch": {"global_batch": 32, "micro_batch": 4}}  # fmt: skip
    with pytest.raises(ValidationError) as err:
        JobSpec.model_validate(spec)
    message = str(err.value)
    assert "32 / (world_size 3 x batch.micro_batch 4) = 2.67" in message
    assert "shell arithmetic would take 2 and train on 24 per step" in message
    assert "use a global_batch of 24 or 36, or a world size of 1, 2, 4, 8" in message


def test_the_checkpoint_hooks_get_the_nodes_own_variables() -> None:
    spec = spec_of(envs={"EVAL_SET": "dev"}, checkpoints={"on_checkpoint": "true"})
    node = plan_of(spec, job_id="j").nodes[0]
    hook_env = json.loads(written(node, "job.json").content)["checkpoints"]["hook_env"]
    assert hook_env["GPUJOB_CHECKPOINT_DIR"] == "/jobs/j/checkpoints"
    assert hook_env["EVAL_SET"] == "dev" and hook_env["GPUJOB_NODE_RANK"] == "0"
