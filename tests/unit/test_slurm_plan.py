"""SLURM planning, pure: the cluster's own words parsed, the refusals before queueing (one
line naming the field), the sbatch script and the node step (rendered, shellchecked, and
run by bash with fake SLURM commands), the container line, the state laid over the agent's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from planning import lab_cpu, spec_of, written

from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
from launcher.errors import UsageError
from launcher.plan.build import Sources
from launcher.plan.slurm import (
    SlurmCluster,
    build_slurm_plan,
    container_prefix,
    directives,
    exit_code,
)
from launcher.plan.slurm_checks import (
    Partition,
    check_request,
    minutes,
    parse_partitions,
    parse_sinfo,
)
from launcher.targets.slurm.cluster import SlurmJobView, node_status, parse_clusters, parse_state

SHELLCHECK = Path(sys.executable).with_name("shellcheck")
CLUSTER = SlurmCluster(name="hpc", login="hpc", shared="/scratch/me", account="proj",
                       partition="gpu", where="hosts.yaml: hosts[0] (hpc)")  # fmt: skip
SOURCES = Sources(workdir="/src/work", agent=str(AGENT_SOURCE), init_lock=str(INIT_LOCK_SOURCE))
SINFO = """\
debug*|up|1:00:00|2|2|2000|(null)|(null)
gpu|up|2-00:00:00|4|64|512000|gpu:a100:8(S:0-1)|a100,ib
gpu|up|2-00:00:00|2|32|256000|gpu:a100:4|a100
"""
SCONTROL = """\
PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=YES MaxTime=01:00:00 State=UP
PartitionName=gpu AllowGroups=ALL AllowAccounts=proj,other AllowQos=normal,high Default=NO MaxTime=2-00:00:00 State=UP
"""  # noqa: E501
WHERE = {k: f"job.yaml:{i}" for i, k in
         enumerate(("nodes", "accelerators", "cpus", "memory_gb", "max_duration"), 3)}  # fmt: skip


def partitions() -> dict[str, Partition]:
    return parse_partitions(SCONTROL, parse_sinfo(SINFO))


def test_the_clusters_words_are_read() -> None:
    found = partitions()
    assert found["gpu"].nodes == 6 and found["gpu"].gpus == 8 and found["gpu"].cpus == 64
    assert found["gpu"].features == frozenset({"a100", "ib"})
    assert found["gpu"].allow_accounts == ("proj", "other")
    assert found["gpu"].max_time_min == 2 * 24 * 60
    assert found["debug"].default and found["debug"].gpus == 0
    assert found["debug"].allow_accounts is None


@pytest.mark.parametrize(("text", "mins"), [("60", 60), ("2:00", 2), ("01:00:00", 60),
                                            ("1-00:00:00", 1440), ("UNLIMITED", None)])  # fmt: skip
def test_slurm_times_in_minutes(text: str, mins: int | None) -> None:
    assert minutes(text) == mins


@pytest.mark.parametrize(("text", "code"), [("0:0", 0), ("7:0", 7), ("0:15", 143), ("x", None)])
def test_exit_codes(text: str, code: int | None) -> None:
    assert exit_code(text) == code


@pytest.mark.parametrize(
    ("fields", "cluster", "said"),
    [
        ({}, {"partition": "nope"}, r"^hosts.yaml: hosts\[0\] \(hpc\): partition: 'nope' does not "
                                    r"exist on cluster hpc \(its partitions: debug, gpu\)$"),
        ({"resources": {"accelerators": "A100:16"}}, {},
         r"^job.yaml:4: resources.accelerators: 16 GPU\(s\) per node, but the nodes of "
         r"partition gpu have at most 8"),
        ({"resources": {"accelerators": "A100:1"}}, {"partition": "debug"},
         r"nodes of partition debug have none"),
        ({"nodes": 8}, {}, r"^job.yaml:3: nodes: 8, but partition gpu has 6 node\(s\)$"),
        ({"max_duration": "3d"}, {}, r"^job.yaml:7: max_duration: 4320 min \+ 4 min for SLURM's "
                                     r"time-limit warning = --time=4324, over the MaxTime"),
        ({"max_duration": "2877m"}, {}, r"--time=2881, over the MaxTime of partition gpu "
                                        r"\(2880 min\)"),
        ({}, {"account": None}, r"^hosts.yaml: hosts\[0\] \(hpc\): account: missing"),
        ({}, {"account": "stranger"}, r"account: 'stranger' may not use partition gpu"),
        ({}, {"qos": "low"}, r"qos: 'low' is not allowed in partition gpu"),
        ({}, {"constraint": "h100"}, r"constraint: no node of partition gpu has the feature"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(fields: dict, cluster: dict, said: str) -> None:
    from dataclasses import replace

    with pytest.raises(UsageError) as refused:
        check_request(spec_of(**fields), replace(CLUSTER, **cluster), partitions(), WHERE)
    assert "\n" not in refused.value.message
    assert re.search(said, refused.value.message), refused.value.message


def test_a_fitting_request_passes_and_the_default_partition_is_found() -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:8"}, max_duration="1h")
    assert check_request(spec, CLUSTER, partitions(), WHERE).name == "gpu"
    from dataclasses import replace

    default = replace(CLUSTER, partition=None)
    assert check_request(spec_of(), default, partitions(), WHERE).name == "debug"


def test_directives() -> None:
    spec = spec_of(nodes=2, resources={"accelerators": "A100:4", "cpus": 8, "memory_gb": 1.5},
                   max_duration="90m")  # fmt: skip
    assert directives(spec, CLUSTER, "t-1", "/s/jobs/t-1") == [
        "--job-name=t", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:4", "--cpus-per-task=8",
        "--mem=1536M", "--time=94", "--partition=gpu", "--account=proj",
        "--output=/s/jobs/t-1/slurm-%j.out", "--open-mode=append", "--signal=B:USR1@120",
        "--no-requeue", "--chdir=/s/jobs/t-1", "--comment=gpujob:t-1",
    ]  # fmt: skip


def plan(nodes: int = 2, cluster: SlurmCluster = CLUSTER, **fields: object):
    spec = spec_of(nodes=nodes, **fields)
    return build_slurm_plan(spec, cluster, "t-1", {}, None, SOURCES, python="/usr/bin/python3")


def test_every_node_runs_the_same_run_sh_with_addresses_filled_in_later() -> None:
    planned = plan(run={"entrypoint": "train.py", "nproc_per_node": 2})
    run0 = written(planned.plan.nodes[0], "run.sh").content
    assert "--rdzv-endpoint GPUJOB-SLURM-NODE-0-ADDR:29400" in run0
    run1 = written(planned.plan.nodes[1], "run.sh").content
    assert "--local-addr GPUJOB-SLURM-NODE-1-ADDR" in run1
    assert "export SKYPILOT_NODE_RANK=1" in run1
    config = json.loads(written(planned.plan.nodes[1], "job.json").content)
    assert config["slurm"] == {"time_limit": "the partition's", "warn_s": 120}
    assert planned.submit == ("sbatch", "--parsable", "/scratch/me/.gpujob/jobs/t-1/job.sbatch")
    assert not any(getattr(s, "starts_job", False) for n in planned.plan.nodes for s in n.steps)
    assert "#SBATCH --signal=B:USR1@120" in planned.script


def test_the_scripts_pass_shellcheck() -> None:
    planned = plan()
    for script in (planned.script, planned.node_step):
        done = subprocess.run([str(SHELLCHECK), "--shell=bash", "-"], input=script,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(
    ("container", "line"),
    [
        ("pyxis", "srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=1 "
                  "--container-image=reg/job:1 --container-mounts=/scratch/me:/scratch/me "
                  "--no-container-entrypoint \\\n    bash "
                  "/scratch/me/.gpujob/jobs/t-1/slurm-node.sh"),
        ("apptainer", "srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=1 \\\n    apptainer "
                      "exec --nv --bind /scratch/me:/scratch/me docker://reg/job:1 bash "
                      "/scratch/me/.gpujob/jobs/t-1/slurm-node.sh"),
    ],
)  # fmt: skip
def test_the_container_line(container: str, line: str) -> None:
    from dataclasses import replace

    cluster = replace(CLUSTER, container=container)
    planned = build_slurm_plan(spec_of(nodes=2), cluster, "t-1", {}, lab_cpu(), SOURCES,
                               python="/usr/bin/python3", image_ref="reg/job:1")  # fmt: skip
    assert line in planned.script
    paths = [getattr(step, "path", "") for step in planned.plan.nodes[0].steps]
    assert not any(path.endswith("requirements.txt") for path in paths)  # no env built
    assert container_prefix(CLUSTER, "reg/job:1", "/s") == []  # no tool named: bare


def test_the_sbatch_script_fills_in_addresses_and_keeps_the_failing_nodes_code(
    tmp_path: Path,
) -> None:
    """The script under bash with `scontrol` and `srun` as small fakes: each node's files get
    its NodeAddr, and the job exits with the code node 1's agent recorded, not srun's 143."""
    planned = plan()
    job = Path(planned.job_dir)
    root = tmp_path / job.relative_to("/")
    for node in planned.plan.nodes:
        folder = tmp_path / Path(node.node_dir).relative_to("/")
        folder.mkdir(parents=True)
        for name in ("run.sh", "job.json"):
            (folder / name).write_text(written(node, name).content)
    (root / "node_ips").write_text(written(planned.plan.nodes[0], "node_ips").content)
    (root / "node-1" / "status.json").write_text(json.dumps(
        {"state": "failed", "exit_code": 7, "ended_at": 5.0}))  # fmt: skip
    (root / "node-0" / "status.json").write_text(json.dumps(
        {"state": "cancelled", "exit_code": 143, "ended_at": 6.0}))  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\ncase "$1 $2" in\n"show hostnames") printf "n1\\nn2\\n";;\n'
        '"show node") [ "$3" = n1 ] && echo "NodeName=n1 NodeAddr=10.1.0.1 Arch=x" '
        '|| echo "NodeName=n2 NodeAddr=10.1.0.2";;\n"show config") echo "KillWait = 5 sec";;\n'
        "esac\n"
    )
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 143\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    script = planned.script.replace(planned.job_dir, str(root))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="9",
               SLURM_JOB_NODELIST="n[1-2]")  # fmt: skip
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 7, done.stdout + done.stderr
    run1 = (root / "node-1" / "run.sh").read_text()
    assert "GPUJOB-SLURM" not in run1
    assert "export GPUJOB_HEAD_IP=10.1.0.1" in run1
    assert (root / "node_ips").read_text() == "10.1.0.1\n10.1.0.2\n"


def test_hosts_yaml_slurm_entries() -> None:
    text = ("hosts:\n  - {name: gpu1, address: 10.0.0.1}\n"
            "  - {name: hpc, type: slurm, address: login.example, user: me, partition: gpu,"
            " account: proj, shared: /scratch/me, container: pyxis}\n")  # fmt: skip
    clusters = parse_clusters(text, "hosts.yaml")
    cluster, login = clusters["hpc"]
    assert (cluster.partition, cluster.account, cluster.container) == ("gpu", "proj", "pyxis")
    assert (login.address, login.user) == ("login.example", "me")
    from launcher.remote.hosts import parse_hosts

    assert list(parse_hosts(text, "hosts.yaml")) == ["gpu1"]
    with pytest.raises(UsageError, match=r"hosts\[0\]: unknown field\(s\) gpus"):
        parse_clusters("hosts:\n  - {name: x, type: slurm, address: a, gpus: 4}\n", "hosts.yaml")
    for entry, said in (("port: ssh", r"hosts\[1\]: port: 'ssh' is not a port number"),
                        ("port: 70000", r"port: 70000 is not a port number"),
                        ("user: [a]", r"hosts\[1\]: user: \['a'\] is not a user name"),
                        ("name: gpu1", r"hosts\[1\]: the name 'gpu1' is used twice")):  # fmt: skip
        bad = text.replace("user: me,", f"user: me, {entry},") if "name" not in entry else (
            text.replace("name: hpc", entry))  # fmt: skip
        with pytest.raises(UsageError, match=said):
            parse_clusters(bad.replace("user: me, user: [a]", "user: [a]"), "hosts.yaml")


def test_a_partition_from_on_is_named_as_such_the_other_fields_as_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.targets.slurm.cluster import resolve_cluster

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {name: hpc, type: slurm, address: a, shared: /s}\n")
    monkeypatch.setenv("GPUJOB_HOSTS_FILE", str(hosts))
    cluster, _ = resolve_cluster(["slurm:hpc/nope"])
    with pytest.raises(UsageError, match=r"^--on slurm:hpc/nope: partition: 'nope' does not"):
        check_request(spec_of(), cluster, partitions(), WHERE)
    fitting = replace(cluster, partition="gpu")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(hosts))}: hosts\[0\] \(hpc\): account"):
        check_request(spec_of(), fitting, partitions(), WHERE)


class _View(SlurmJobView):
    def __init__(self, state: str, reason: str = "", code: int | None = None) -> None:
        super().__init__(login=None, job_id="9", state=state, reason=reason, code=code)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("agent", "slurm", "state", "code"),
    [
        ({"state": "unknown"}, _View("PENDING", "Priority"), "pending", None),
        ({"state": "unknown"}, _View("RUNNING"), "starting", None),
        ({"state": "running"}, _View("RUNNING"), "running", None),
        ({"state": "failed", "exit_code": 7}, _View("COMPLETING"), "failed", 7),
        ({"state": "running"}, _View("CANCELLED", code=0), "cancelled", 143),
        ({"state": "unknown"}, _View("CANCELLED", "Resources"), "cancelled", 143),
        ({"state": "running"}, _View("TIMEOUT"), "timed out", 124),
        ({"state": "running"}, _View("NODE_FAIL", "NodeDown", 1), "failed", 1),
    ],
)  # fmt: skip
def test_slurm_state_over_the_agents(agent: dict, slurm: _View, state: str, code: int | None):
    shown = node_status(agent, slurm)
    assert shown["state"] == state
    assert shown.get("exit_code") == code


def test_state_from_scontrol_then_sacct() -> None:
    line = "JobId=9 JobName=t JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0"
    assert parse_state(line) == ("PENDING", "Resources", 0, "")
    assert parse_state("sacct|9|FAILED|7:0|n[1-2]\nsacct|9.batch|FAILED|7:0|n1\n") == (
        "FAILED", "", 7, "n[1-2]")  # fmt: skip


def test_usr1_in_the_prelude_is_written_down_for_the_nodes_not_fatal(tmp_path: Path) -> None:
    """USR1 while the batch shell still asks scontrol (SIGUSR1's default would end it): the
    shell lives on, writes `time-up` for the node steps and srun's step is not signalled."""
    planned = plan(resources={"cpus": 2})
    assert "--ntasks-per-node=1 --cpus-per-task=2" in planned.script  # srun does not inherit
    job = Path(planned.job_dir)
    root = tmp_path / job.relative_to("/")
    for node in planned.plan.nodes:
        folder = tmp_path / Path(node.node_dir).relative_to("/")
        folder.mkdir(parents=True)
        for name in ("run.sh", "job.json"):
            (folder / name).write_text(written(node, name).content)
    pid_file = tmp_path / "shell.pid"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\ncase "$1 $2" in\n"show hostnames") kill -USR1 "$(cat "$PID_FILE")"; '
        'printf "n1\\nn2\\n";;\n"show node") echo "NodeName=$3 NodeAddr=10.1.0.1";;\n'
        '"show config") echo "KillWait = 5 sec";;\nesac\n'
    )
    (bin_dir / "srun").write_text(
        f"#!/bin/sh\ni=0\nuntil [ -e {root}/time-up ] || [ $i -gt 200 ]; do sleep 0.05; "
        "i=$((i+1)); done\ntrap 'echo srun signalled; exit 9' USR1 TERM\n"
        f"[ -e {root}/time-up ] && exit 0\nexit 3\n"
    )
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    script = planned.script.replace(planned.job_dir, str(root))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="9",
               SLURM_JOB_NODELIST="n[1-2]", PID_FILE=str(pid_file), SCRIPT=script)  # fmt: skip
    done = subprocess.run(["bash", "-c", 'echo $$ > "$PID_FILE"; exec bash -c "$SCRIPT"'],
                          env=env, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "time-up").exists()
    assert "srun signalled" not in done.stdout


def test_an_end_no_agent_recorded_shows_the_tail_of_slurms_output() -> None:
    """A failure before any agent ran (here: no NodeAddr) is only in slurm-<id>.out."""
    view = _View("FAILED", "NonZeroExitCode", 1)
    view.out_file = "/s/jobs/t-1/slurm-9.out"
    view.tail = ["[gpujob] node n2 has no usable NodeAddr (scontrol says '')"]
    shown = node_status({"state": "unknown"}, view)
    assert shown["state"] == "failed"
    assert shown["reason"] == (
        "SLURM FAILED (NonZeroExitCode); slurm-9.out ends: [gpujob] node n2 has no usable "
        "NodeAddr (scontrol says '')"
    )


FAKE_AGENT = r"""
import json, os, subprocess, sys, time
command, node_dir = sys.argv[1], sys.argv[2]
if command == "start":
    supervisor = subprocess.Popen(
        ["bash", "-c", os.environ["SUPERVISOR"], "supervisor", node_dir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(node_dir, "supervisor.pid"), "w") as handle:
        handle.write(str(supervisor.pid))
    time.sleep(0.5)  # the node step is signalled meanwhile
    print(json.dumps({"state": "running", "supervisor_pid": supervisor.pid}))
"""
SUPERVISOR = """\
trap 'printf "{\\n  \\"state\\": \\"timed out\\",\\n  \\"exit_code\\": 124\\n}\\n" \
> "$1/status.json"; exit 0' USR1
while :; do sleep 0.05; done
"""


def test_the_node_step_passes_an_early_usr1_on_to_its_own_agent(tmp_path: Path) -> None:
    """USR1 while `agent start` still runs (its default would end the node step): remembered,
    then sent to this node's supervisor once its pid is known; the step exits with the code
    the agent recorded."""
    from launcher.agent import AGENT_FILE

    planned = plan()
    root = tmp_path / "job"
    node_dir = root / "node-0"
    node_dir.mkdir(parents=True)
    (root / AGENT_FILE).write_text(FAKE_AGENT)
    step = planned.node_step.replace(planned.job_dir, str(root))
    env = dict(os.environ, SLURM_NODEID="0", SUPERVISOR=SUPERVISOR)
    proc = subprocess.Popen(["bash", "-c", step, "node-step", "5"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    pid_file = node_dir / "supervisor.pid"
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid_file.exists(), "the fake agent started"
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 124, out + err
        assert json.loads((node_dir / "status.json").read_text())["state"] == "timed out"
    finally:
        proc.kill()
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_an_unreachable_controller_is_a_failure_not_a_refusal() -> None:
    from launcher.targets.slurm.submit import UNREACHABLE

    said = ("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
            "(connect failure)")  # fmt: skip
    assert UNREACHABLE.search(said)
    assert not UNREACHABLE.search("sbatch: error: Batch job submission failed: Invalid feature")
