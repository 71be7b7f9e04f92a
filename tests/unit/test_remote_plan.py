"""Plans for remote hosts: the docker runtime's `docker run`, secrets as an env file, and the
multi-node rendezvous (resolved endpoint, reach check, MASTER_ADDR, clashing variables)."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
from planning import exports, plan_of, run_sh, spec_of, target, torchrun_argv, written
from pydantic import ValidationError

from launcher.errors import UsageError
from launcher.plan.model import RunCommand
from launcher.plan.show import plan_json, plan_text

IMAGE = "10.77.0.1:5000/gpujob-lab/job:lab-cpu"
TWO = target(2, hosts=("a", "b"), addresses=("10.77.0.5", "10.77.0.6"), job_root="/root/jobs")
DOCKER_TWO = replace(TWO, runtime="docker", python="python3", image_ref=IMAGE)


def docker_argv(plan, rank: int = 0) -> list[str]:
    return json.loads(written(plan.nodes[rank], "job.json").content)["argv"]


def test_docker_run_has_the_training_flags_and_mounts_at_the_same_paths() -> None:
    spec = spec_of(nodes=2, resources={"shm_gb": 8})
    argv = docker_argv(plan_of(spec, DOCKER_TWO), 1)
    line = shlex.join(argv)
    for flag in ("--init", "--ipc=host", "--shm-size 8g", "--network host",
                 "--ulimit memlock=-1", "--label gpujob.job=job-1", "--detach"):  # fmt: skip
        assert flag in line, line
    assert "--gpus" not in argv  # the lab hosts have none: never pretend
    for mount in ("/root/jobs/job-1/workdir", "/root/jobs/job-1/checkpoints",
                  "/root/jobs/job-1/node-1"):  # fmt: skip
        assert f"{mount}:{mount}" in argv
    assert argv[argv.index(IMAGE) + 1 :] == [
        "-c", 'exec bash "$0" >>"$1" 2>&1',
        "/root/jobs/job-1/node-1/run.sh", "/root/jobs/job-1/node-1/job.log",
    ]  # fmt: skip
    assert "exec " in run_sh(plan_of(spec, DOCKER_TWO), 1)  # torchrun replaces the shell


def test_gpus_all_only_when_the_host_has_gpus() -> None:
    argv = docker_argv(plan_of(spec_of(), replace(DOCKER_TWO, hosts=("a",), addresses=(
        "10.77.0.5",), host_gpus=8)))  # fmt: skip
    assert argv[argv.index("--gpus") + 1] == "all"


def test_memlock_is_raised_only_where_the_host_can() -> None:
    one = replace(DOCKER_TWO, hosts=("a",), addresses=("10.77.0.5",))
    assert "memlock=-1" in docker_argv(plan_of(spec_of(), one))
    assert "memlock=-1" not in docker_argv(plan_of(spec_of(), replace(one, raise_memlock=False)))


def test_docker_pulls_once_per_host_before_any_start_unless_the_hosts_have_it() -> None:
    plan = plan_of(spec_of(nodes=2), replace(DOCKER_TWO, hosts=("a", "a")))
    pulls = [s for n in plan.nodes for s in n.steps
             if isinstance(s, RunCommand) and "docker pull" in s.argv[-1]]  # fmt: skip
    assert len(pulls) == 1 and IMAGE in pulls[0].argv[-1]
    there = plan_of(spec_of(nodes=2), replace(DOCKER_TWO, hosts=("a", "a"), image_present=True))
    assert [s.why for n in there.nodes for s in n.steps if isinstance(s, RunCommand)] == [
        "copy the workdir into the job folder",
        "start the job detached under the agent",
        "start the job detached under the agent",
    ]  # no pull, and no environment built: the image is the environment


def test_a_container_gets_secrets_by_name_from_the_agents_environment() -> None:
    """`--env NAME`: Docker takes the value from the environment the agent runs it with; no
    env file, no value on the command line (a value may hold a line break)."""
    value = "v a$l'ue\nline two"
    plan = plan_of(spec_of(secrets=["TOKEN"]), replace(DOCKER_TWO, hosts=("a",),
                   addresses=("10.77.0.5",)), secrets={"TOKEN": value})  # fmt: skip
    argv = docker_argv(plan)
    assert argv[argv.index("--env", argv.index("TINI_KILL_PROCESS_GROUP=1")) + 1] == "TOKEN"
    assert "--env-file" not in argv
    assert json.loads(plan.nodes[0].start.input.content)["secrets"] == {"TOKEN": value}  # type: ignore[union-attr]
    for shown in (plan_text(plan), plan_json(plan)):
        assert "v a$l'ue" not in shown


def test_two_hosts_rendezvous_at_node_0s_address_with_a_reach_check() -> None:
    spec = spec_of(nodes=2, run={"entrypoint": "train.py", "nproc_per_node": 2,
                                 "rdzv_port": 29411, "rdzv_timeout_s": 90})  # fmt: skip
    plan = plan_of(spec, DOCKER_TWO)
    for rank, own in ((0, "10.77.0.5"), (1, "10.77.0.6")):
        argv = torchrun_argv(run_sh(plan, rank))
        assert argv[argv.index("--rdzv-endpoint") + 1] == "10.77.0.5:29411"
        assert argv[argv.index("--local-addr") + 1] == own
        assert "join_timeout=90" in argv[argv.index("--rdzv-conf") + 1]
        env = exports(run_sh(plan, rank))
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.77.0.5", "29411")
        assert "unset ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES" in run_sh(plan, rank)
    (check,) = plan.checks
    assert (check.host, check.address, check.port, check.from_hosts) == (
        "a",
        "10.77.0.5",
        29411,
        ("b",),
    )
    assert "must reach node 0 at 10.77.0.5:29411" in plan_text(plan)


def test_a_ray_cluster_checks_the_head_port_its_workers_join_on() -> None:
    spec = spec_of(nodes=2, run={"entrypoint": "driver.py", "launcher": "ray",
                                 "ray_port": 6390, "rdzv_port": 29411})  # fmt: skip
    (check,) = plan_of(spec, DOCKER_TWO).checks
    assert (check.port, check.port_field) == (6390, "run.ray_port")
    assert check.listen[-3] == check.dial[-2] == "6390"


def test_a_loopback_node_0_across_hosts_is_a_plan_error() -> None:
    with pytest.raises(UsageError, match="loopback"):
        plan_of(spec_of(nodes=2), replace(TWO, addresses=("127.0.0.1", "10.77.0.6")))


def test_nccl_variables_from_the_spec_reach_every_node() -> None:
    plan = plan_of(spec_of(nodes=2, nccl={"NCCL_SOCKET_IFNAME": "=eth0"}), DOCKER_TWO)
    assert exports(run_sh(plan, 1))["NCCL_SOCKET_IFNAME"] == "=eth0"


@pytest.mark.parametrize(
    ("on", "nodes", "hosts"),
    [(("a",), 2, ["a", "a"]), (("a,b",), 2, ["a", "b"]), (("a", "b"), 2, ["a", "b"])],
)
def test_on_places_every_node_on_one_host_or_one_per_node(
    on: tuple[str, ...], nodes: int, hosts: list[str]
) -> None:
    from launcher.plan.placement import node_hosts, split_on

    assert node_hosts(split_on(on), nodes) == hosts


def test_on_with_the_wrong_number_of_hosts_is_a_usage_error() -> None:
    from launcher.plan.placement import node_hosts

    with pytest.raises(UsageError, match="names 3 hosts but the job has nodes: 2"):
        node_hosts(["a", "b", "c"], 2)


def test_an_image_definition_is_named_under_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from planning import lab_cpu

    from launcher.plan.placement import image_reference

    monkeypatch.delenv("GPUJOB_REGISTRY", raising=False)
    assert image_reference("lab-cpu", lab_cpu()) is None
    assert image_reference("host", None) is None
    assert image_reference("ghcr.io/x/y:1", None) == "ghcr.io/x/y:1"
    monkeypatch.setenv("GPUJOB_REGISTRY", "10.77.0.1:5000")
    monkeypatch.setenv("GPUJOB_IMAGE_REPO", "gpujob-lab/job")
    assert image_reference("lab-cpu", lab_cpu()) == IMAGE


def test_an_absolute_checkpoint_folder_is_mounted_at_the_same_path() -> None:
    spec = spec_of(nodes=2, checkpoints={"dir": "/ckpt/run"})
    plan = plan_of(spec, DOCKER_TWO)
    assert "/ckpt/run:/ckpt/run" in docker_argv(plan, 0)
    assert exports(run_sh(plan, 0))["GPUJOB_CHECKPOINT_DIR"] == "/ckpt/run"


@pytest.mark.parametrize("folder", ["/", "../elsewhere", "/ckpt/../etc"])
def test_a_checkpoint_folder_of_dots_or_the_root_is_refused(folder: str) -> None:
    with pytest.raises(ValidationError, match=r"no `\.\.`"):
        spec_of(checkpoints={"dir": folder})
