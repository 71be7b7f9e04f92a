"""What each node runs under every launcher, and the variables every node's processes get:
the scripts are written where the plan says and run for real with bash."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from planning import REPO, node_ips, plan_of, run_sh, spec_of, target, written

from launcher.plan.model import Plan, WriteFile

TWO_HOSTS = target(2, hosts=("gpu-a", "gpu-b"), addresses=("10.0.0.1", "10.0.0.2"))
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
PRINT_ENV = 'python3 -c "import json, os; print(json.dumps(dict(os.environ)))"'


def run_node(plan: Plan, rank: int, env: dict[str, str] | None = None) -> str:
    """Write every file of node `rank` where the plan says, run its run.sh, return stdout."""
    node = plan.nodes[rank]
    (Path(node.job_dir) / "workdir").mkdir(parents=True, exist_ok=True)
    for step in node.steps:
        if isinstance(step, WriteFile):
            Path(step.path).parent.mkdir(parents=True, exist_ok=True)
            Path(step.path).write_text(step.content)
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path(node.job_dir).parent)}
    done = subprocess.run(["bash", "run.sh"], cwd=node.node_dir, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def two_host_target(folder: Path):
    return target(2, hosts=("gpu-a", "gpu-b"), addresses=("10.0.0.1", "10.0.0.2"),
                  job_root=str(folder / "jobs"), python="/usr/bin/python3")  # fmt: skip


def test_a_shell_run_block_gets_gpujobs_and_skypilots_names_on_every_node(tmp_path: Path) -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:4"}, run=PRINT_ENV)
    plan = plan_of(spec, two_host_target(tmp_path), job_id="sky-1")
    for rank in (0, 1):
        env = json.loads(run_node(plan, rank).splitlines()[-1])
        assert env["SKYPILOT_NODE_RANK"] == env["GPUJOB_NODE_RANK"] == str(rank)
        assert env["SKYPILOT_NODE_IPS"] == env["GPUJOB_NODE_IPS"] == "10.0.0.1\n10.0.0.2"
        assert env["SKYPILOT_NUM_NODES"] == env["GPUJOB_NUM_NODES"] == "2"
        assert env["SKYPILOT_NUM_GPUS_PER_NODE"] == env["GPUJOB_NUM_GPUS_PER_NODE"] == "4"
        assert env["GPUJOB_HEAD_IP"] == env["MASTER_ADDR"] == "10.0.0.1"
        assert env["MASTER_PORT"] == "29400" and env["SKYPILOT_TASK_ID"] == "sky-1"
        assert json.loads(env["SKYPILOT_CLUSTER_INFO"]) == {
            "cluster_name": "sky-1", "cloud": "test", "region": None, "zone": None
        }  # fmt: skip


def test_skypilots_own_torchrun_line_reads_the_variables(tmp_path: Path) -> None:
    """The shape of SkyPilot's distributed example: its words come out as torchrun's flags."""
    block = (
        'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
        "echo torchrun --nnodes=$SKYPILOT_NUM_NODES --node_rank=${SKYPILOT_NODE_RANK} "
        "--master_addr=$MASTER_ADDR --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE train.py"
    )
    spec = spec_of(nodes=2, resources={"accelerators": "H100:8"}, run=block)
    out = run_node(plan_of(spec, two_host_target(tmp_path)), 1).splitlines()[-1]
    assert out == ("torchrun --nnodes=2 --node_rank=1 --master_addr=10.0.0.1 "
                   "--nproc_per_node=8 train.py")  # fmt: skip


@pytest.mark.parametrize("source", ["environment", "BASH_ENV"])
def test_clashing_and_unset_names_are_absent_from_the_shell_blocks_processes(
    tmp_path: Path, source: str
) -> None:
    spec = spec_of(unset_envs=["RAY_ADDRESS"], run=PRINT_ENV)
    plan = plan_of(spec, target(job_root=str(tmp_path / "jobs")))
    names = {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0", "RAY_ADDRESS": "x:1"}
    if source == "BASH_ENV":  # what an image's ~/.bashrc does when BASH_ENV points at it
        rc = tmp_path / "bashrc"
        rc.write_text("".join(f"export {k}={v}\n" for k, v in names.items()))
        names = {"BASH_ENV": str(rc)}
    env = json.loads(run_node(plan, 0, names).splitlines()[-1])
    assert not {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "RAY_ADDRESS"} & set(env)


def words(script: str) -> list[str]:
    """The words after `exec`, continuation lines joined, as the shell splits them."""
    return shlex.split(script.split("\nexec ", 1)[1].replace(" \\\n    ", " "))


def test_deepspeed_runs_its_own_runner_per_node_without_ssh() -> None:
    run = {"entrypoint": "train.py", "launcher": "deepspeed", "args": ["--zero", "2"]}
    spec = spec_of(nodes=2, resources={"accelerators": "A100:2"}, run=run)
    plan = plan_of(spec, TWO_HOSTS)
    assert words(run_sh(plan, 1)) == [
        "/usr/bin/python3", "-u", "-m", "deepspeed.launcher.runner",
        "--hostfile=/jobs/job-1/hostfile", "--no_ssh", "--node_rank=1",
        "--master_addr=10.0.0.1", "--master_port=29400",
        "train.py", "--zero", "2",
    ]  # fmt: skip
    assert written(plan.nodes[0], "hostfile").content == "node-0 slots=2\nnode-1 slots=2\n"
    one = plan_of(spec_of(resources={"accelerators": "H100:1"},
                          run={"module": "pkg.ds", "launcher": "deepspeed"}))  # fmt: skip
    assert words(run_sh(one))[4:] == ["--num_gpus=1", "--master_port=29400", "--module", "pkg.ds"]


def test_accelerate_gets_every_count_so_no_config_file_decides() -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:4"},
                   run={"entrypoint": "train.py", "launcher": "accelerate"})  # fmt: skip
    assert words(run_sh(plan_of(spec, TWO_HOSTS), 1)) == [
        "/usr/bin/python3", "-m", "accelerate.commands.launch", "--num_machines", "2",
        "--machine_rank", "1", "--main_process_ip", "10.0.0.1", "--main_process_port", "29400",
        "--num_processes", "8", "--multi_gpu", "train.py",
    ]  # fmt: skip


def test_launcher_none_runs_plain_python_once_per_node() -> None:
    run = {"module": "pkg.main", "launcher": "none", "args": ["${node_rank}"]}
    spec = spec_of(nodes=2, run=run)
    assert words(run_sh(plan_of(spec, TWO_HOSTS), 1)) == ["/usr/bin/python3", "-m", "pkg.main", "1"]


def test_ray_head_waits_for_every_node_and_workers_join_it() -> None:
    spec = spec_of(nodes=2, run={"entrypoint": "driver.py", "launcher": "ray"})
    plan = plan_of(spec, TWO_HOSTS)
    head, worker = run_sh(plan, 0), run_sh(plan, 1)
    assert "start --head --port=6379 --node-ip-address=10.0.0.1" in head
    assert "driver.py &" in head and "ray_cli stop --force" in head
    assert "start --address=10.0.0.1:6379 --node-ip-address=10.0.0.2" in worker
    assert "driver.py" not in worker


@pytest.mark.parametrize(
    ("run_yaml", "field"),
    [
        ('{shell: "echo hi", launcher: deepspeed}', "run.launcher"),
        ('{shell: "echo hi", args: [x]}', "run.args"),
        ("{entrypoint: a.py, launcher: mpirun}", "run.launcher"),
        # fields only torchrun honours, refused elsewhere rather than silently dropped
        ("{entrypoint: a.py, launcher: deepspeed, max_restarts: 2}", "run.max_restarts"),
        ('{shell: "echo hi", serialize_init: true}', "run.serialize_init"),
        ("{entrypoint: a.py, launcher: none, nproc_per_node: 2}", "run.nproc_per_node"),
        ("{entrypoint: a.py, launcher: ray, nproc_per_node: 2}", "run.nproc_per_node"),
        ("{entrypoint: a.py, ray_port: 7000}", "run.ray_port"),
        # accelerate on CPU would start unconnected copies (its simple launcher)
        ("{entrypoint: a.py, launcher: accelerate, nproc_per_node: 2}", "run.launcher"),
    ],
)
def test_bad_run_forms_are_one_line_errors(tmp_path: Path, run_yaml: str, field: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: host\nrun: {run_yaml}\n")
    done = subprocess.run([GPUJOB, "submit", str(spec), "--dry-run"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"gpujob: error: {spec}:3: {field}:"), done.stderr
    assert "Traceback" not in done.stderr


def test_one_node_torchrun_meets_on_loopback_not_the_hosts_own_name() -> None:
    """`--local-addr` spares the rendezvous a `getfqdn()` that hangs where the host's name
    does not resolve (launchers.md §1.3); every node of a multi-node job names its own."""
    one = words(run_sh(plan_of(spec_of())))
    assert one[one.index("--standalone") :][:5] == [
        "--standalone", "--nnodes", "1", "--local-addr", "127.0.0.1"
    ]  # fmt: skip
    plan = plan_of(spec_of(nodes=2), TWO_HOSTS)
    for rank, address in enumerate(("10.0.0.1", "10.0.0.2")):
        argv = words(run_sh(plan, rank))
        assert argv[argv.index("--local-addr") + 1] == address


@pytest.mark.parametrize("name", ["MASTER_ADDR", "MASTER_PORT", "GPUJOB_NODE_RANK",
                                  "SKYPILOT_NODE_IPS", "GPUJOB_ANYTHING"])  # fmt: skip
def test_envs_may_not_set_what_gpujob_sets_on_every_node(tmp_path: Path, name: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: host\nrun: {{entrypoint: a.py}}\nenvs:\n  {name}: x\n")
    done = subprocess.run([GPUJOB, "submit", str(spec), "--dry-run"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"gpujob: error: {spec}:5: envs.{name}: `{name}` is set by "
                                  "gpujob on every node"), done.stderr  # fmt: skip
    assert done.stderr.count("\n") == 1


def test_a_registry_login_is_not_a_node_variable() -> None:
    spec = spec_of(envs={"SKYPILOT_DOCKER_USERNAME": "me"})
    assert spec.envs == {"SKYPILOT_DOCKER_USERNAME": "me"}


@pytest.mark.parametrize("run", [{"entrypoint": "a.py", "launcher": "none"},
                                 {"entrypoint": "a.py", "launcher": "ray"},
                                 {"shell": "python a.py"}])  # fmt: skip
def test_one_process_per_node_is_the_world_size_shown_and_divided_by(run: dict) -> None:
    """Four GPUs a node, but launcher none/ray and a shell block start one process per node:
    the header and the batch arithmetic count nodes, not GPUs."""
    spec = spec_of(nodes=2, resources={"accelerators": "A100:4"}, run=run,
                   batch={"global_batch": 8, "micro_batch": 2})  # fmt: skip
    plan = plan_of(spec, TWO_HOSTS)
    assert (plan.world_size, plan.nproc_per_node, plan.grad_accum_steps) == (2, 1, 2)
    ranked = spec_of(nodes=2, resources={"accelerators": "A100:4"},
                     batch={"global_batch": 16, "micro_batch": 2})  # fmt: skip
    assert (ranked.world_size, ranked.grad_accum_steps) == (8, 1)


def test_one_process_per_node_still_sees_all_of_its_nodes_gpus_on_one_machine() -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:4"},
                   run={"entrypoint": "a.py", "launcher": "none"})  # fmt: skip
    plan = plan_of(spec, target(2, gpus_per_node=8))
    shown = [run_sh(plan, rank) for rank in (0, 1)]
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3" in shown[0]
    assert "export CUDA_VISIBLE_DEVICES=4,5,6,7" in shown[1]


def test_rays_port_comes_from_the_spec() -> None:
    spec = spec_of(nodes=2, run={"entrypoint": "driver.py", "launcher": "ray", "ray_port": 6390})
    plan = plan_of(spec, TWO_HOSTS)
    assert "start --head --port=6390" in run_sh(plan, 0)
    assert "start --address=10.0.0.1:6390" in run_sh(plan, 1)
    assert "export RAY_ADDRESS=10.0.0.1:6390" in run_sh(plan, 1)


FAKE_RAY_PYTHON = """#!/bin/bash
# Stands in for the job's Python: `ray start`/`ray stop` are noted and succeed; the head's
# wait for the other nodes (the heredoc on stdin) waits long, as one for a slow node does.
notes={notes}
case "$*" in
  "-m ray.scripts.scripts stop"*) echo stop >> "$notes" ;;
  "-m ray.scripts.scripts start"*) echo start >> "$notes" ;;
  "- "*) echo waiting >> "$notes"; exec /bin/sleep 600 ;;
  *) echo "driver $*" >> "$notes" ;;
esac
"""
FAKE_SLEEP = '#!/bin/bash\necho "sleep $*" >> {notes}\n'


def ray_node(tmp_path: Path, rank: int, head_port: int) -> tuple[subprocess.Popen, Path]:
    """Node `rank` of a two-node Ray job with its head on 127.0.0.1:`head_port`, run by bash
    with a stand-in Python (and a `sleep` that only notes its calls: no waiting)."""
    bin_dir, notes = tmp_path / "bin", tmp_path / "notes"
    bin_dir.mkdir()
    notes.touch()
    (bin_dir / "python").write_text(FAKE_RAY_PYTHON.format(notes=shlex.quote(str(notes))))
    (bin_dir / "sleep").write_text(FAKE_SLEEP.format(notes=shlex.quote(str(notes))))
    for tool in ("python", "sleep"):
        (bin_dir / tool).chmod(0o755)
    spec = spec_of(nodes=2, run={"entrypoint": "driver.py", "launcher": "ray",
                                 "ray_port": head_port})  # fmt: skip
    where = target(2, job_root=str(tmp_path / "jobs"), python=str(bin_dir / "python"))
    planned = plan_of(spec, where)
    node = planned.nodes[rank]
    (Path(node.job_dir) / "workdir").mkdir(parents=True, exist_ok=True)
    for step in (*node.steps, node_ips(planned, rank)):
        if isinstance(step, WriteFile):
            Path(step.path).parent.mkdir(parents=True, exist_ok=True)
            Path(step.path).write_text(step.content)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
           "RAY_TMPDIR": str(tmp_path / "ray-tmp")}  # fmt: skip
    if rank > 0:  # the head on this machine has started: a worker here joins only after that
        (tmp_path / "ray-tmp" / "ray").mkdir(parents=True)
        (tmp_path / "ray-tmp" / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{head_port}")
    proc = subprocess.Popen(["bash", "run.sh"], cwd=node.node_dir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    return proc, notes


def end_group(proc: subprocess.Popen) -> None:
    """Whatever the node left (its stand-in wait included), by its process group's id."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_term_reaches_the_ray_head_while_it_waits_for_the_other_nodes(tmp_path: Path) -> None:
    """The wait for the nodes runs in the background, waited for: a TERM sent to run.sh then
    ends it at once (Ray stopped on the way out), not after the wait's own deadline."""
    proc, notes = ray_node(tmp_path, 0, free_port())
    try:
        deadline = time.monotonic() + 30
        while "waiting" not in notes.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, notes.read_text()
            time.sleep(0.05)
        proc.terminate()  # run.sh's pid only: its own trap must act
        assert proc.wait(timeout=20) == 143
    finally:
        end_group(proc)
    assert notes.read_text().splitlines()[-1] == "stop"
    assert not any(line.startswith("driver") for line in notes.read_text().splitlines())


def test_a_ray_worker_leaves_only_after_the_head_missed_three_times_in_a_row(
    tmp_path: Path,
) -> None:
    """No head answers at all: the worker joins (its `ray start` succeeds), then probes the
    head, a second apart, and ends only after three refused connects."""
    proc, notes = ray_node(tmp_path, 1, free_port())
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        end_group(proc)
    assert proc.returncode == 0, out
    lines = notes.read_text().splitlines()
    after_join = lines[lines.index("start") + 1 :]
    assert after_join == ["sleep 1", "sleep 1", "sleep 1", "stop"], lines
