"""Jobs in containers on lab hosts with their own dockerd, through the real CLI: one node and
two, a crash, a cancel, a restarted client, a rebooted host.

The job image is the lab's (`gpujob-lab/job:lab-cpu`, torch CPU + the pins of
images/lab-cpu.yaml), pushed to the lab registry; each host pulls it on its first job, as a
rented host would. Rendezvous between the two hosts is real c10d over the lab bridge.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from labtools import LONG_JOB, docker, follow_through_cuts, gpujob, read_some, wait_until
from labtools import job_row as status_of

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
DEFINITIONS = REPO / "launcher" / "images" / "definitions"
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
REPO_IMAGE = "gpujob-lab/job"
SECRET = "s3cr3t-value-never-in-a-log"


@dataclass(frozen=True)
class DockerLab:
    hosts: tuple  # LabHost, LabHost
    hosts_file: Path

    def root(self, index: int) -> Path:
        from infra.lab import boot

        return boot.host_dir(self.hosts[index].name) / "root"

    def node_dir(self, index: int, job_id: str, rank: int) -> Path:
        return self.root(index) / ".gpujob" / "jobs" / job_id / f"node-{rank}"

    def job_log(self, index: int, job_id: str, rank: int = 0) -> bytes:
        return (self.node_dir(index, job_id, rank) / "job.log").read_bytes()


@pytest.fixture(scope="module")
def docker_lab(docker_hosts: tuple, tmp_path_factory: pytest.TempPathFactory) -> DockerLab:
    """The session's two docker hosts in a hosts.yaml, and the job image in the registry."""
    import infra.lab
    from infra.lab import job_image

    job_image.build(report=lambda line: print(f"lab: {line}"))
    hosts_file = tmp_path_factory.mktemp("hosts") / "hosts.yaml"
    hosts_file.write_text(
        "hosts:\n"
        + "".join(
            f"  - {{name: {name}, address: {h.address}, user: root, key: {infra.lab.user_key()}}}\n"
            for name, h in zip(("ta", "tb"), docker_hosts, strict=True)
        )
    )
    return DockerLab(docker_hosts, hosts_file)


@pytest.fixture
def env(tmp_path: Path, docker_lab: DockerLab) -> dict[str, str]:
    from infra.lab import registry

    return dict(
        os.environ,
        GPUJOB_STATE_DIR=str(tmp_path / "state"),
        GPUJOB_HOSTS_FILE=str(docker_lab.hosts_file),
        GPUJOB_REGISTRY=registry.address(),
        GPUJOB_IMAGE_REPO=REPO_IMAGE,
        GJ_TOKEN=SECRET,
    )


def write_job(
    folder: Path, program: str, *, nodes: int = 1, nproc: int = 1, extra: str = ""
) -> Path:
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "prog.py").write_text(program)
    spec = folder / "job.yaml"
    spec.write_text(
        f"name: tiny\nimage: lab-cpu\nworkdir: work\nnodes: {nodes}\nrun:\n  entrypoint: prog.py\n"
        f"  nproc_per_node: {nproc}\n  rdzv_timeout_s: 60\nsecrets: [GJ_TOKEN]\n"
        f"envs: {{OMP_NUM_THREADS: 1}}\n{extra}"
    )
    copy_images(folder)
    return spec


def copy_images(folder: Path) -> None:
    """`image: lab-cpu` is found in an images/ folder beside the spec."""
    images = folder / "images"
    images.mkdir(exist_ok=True)
    (images / "lab-cpu.yaml").write_text((DEFINITIONS / "lab-cpu.yaml").read_text())


def containers(lab: DockerLab, index: int, job_id: str) -> list[str]:
    listed = docker(lab.hosts[index], "ps", "-aq", "--filter", f"label=gpujob.job={job_id}")
    return listed.stdout.split()


IN_CONTAINER = """
import os, sys
print("in container:", os.path.exists("/.dockerenv"), flush=True)
print("secret seen:", os.environ.get("GJ_TOKEN") == "SECRET", flush=True)
import gpujob_capture  # shipped into the job's pylib/, mounted into the container
print("capture helper from:", os.path.dirname(gpujob_capture.__file__), flush=True)
print("progress 10%\\rprogress 50%\\rprogress 100%", flush=True)
for i in range(3000):
    print(f"line {i}", flush=i % 100 == 0)
sys.stdout.write("no newline at the end")
""".replace("SECRET", SECRET)


def test_a_job_runs_in_a_container_streams_byte_for_byte_and_leaves_nothing(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    spec = write_job(tmp_path, IN_CONTAINER)
    done = gpujob(env, "submit", str(spec), "--on", "ta", "--job-id", "dock-ok")
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr[-3000:]
    assert (
        "docker runtime"
        in gpujob(env, "submit", str(spec), "--on", "ta", "--dry-run").stdout.decode()
    )
    host_log = docker_lab.job_log(0, "dock-ok")
    assert b"in container: True\n" in host_log and b"secret seen: True\n" in host_log
    assert re.search(rb"capture helper from: /\S*/\.gpujob/jobs/dock-ok/pylib\n", host_log)
    # into a pipe the log is the host's file byte for byte, a progress bar's \r included
    # (a terminal is shown the bar's last state)
    assert done.stdout == host_log
    # the program's own last bytes: the agent may add its lines after them (a disk warning
    # where this machine's disk is over 60% full)
    own = re.sub(rb"\[gpujob-agent\][^\n]*\n", b"", done.stdout)
    assert own.endswith(b"line 2999\nno newline at the end"), done.stdout[-500:]
    assert SECRET not in stderr and SECRET.encode() not in done.stdout
    node = docker_lab.node_dir(0, "dock-ok", 0)
    assert not (node / "secrets.env").exists()  # removed once the container had started
    assert SECRET not in (node / "job.json").read_text() + (node / "run.sh").read_text()
    assert containers(docker_lab, 0, "dock-ok") == []
    row = status_of(env, "dock-ok")
    assert (row["state"], row["exit_code"], row["runtime"]) == ("succeeded", 0, "docker")
    assert row["last_line"] == "no newline at the end"
    tail = gpujob(env, "logs", "dock-ok", "--tail", "2")
    assert tail.stdout == b"line 2999\nno newline at the end"

    failing = write_job(
        tmp_path / "bad", "print('about to fail', flush=True)\nraise SystemExit(3)\n"
    )
    failed = gpujob(env, "submit", str(failing), "--on", "ta", "--job-id", "dock-bad")
    assert failed.returncode == 1  # torchrun's own status for a failed worker
    assert b"about to fail" in failed.stdout
    assert status_of(env, "dock-bad")["state"] == "failed"


RENDEZVOUS = """
import os, socket, sys, time
import torch, torch.distributed as dist


def say(line):
    # one write per line: print() writes the text and its newline apart, and two ranks
    # sharing the node's stdout can interleave between them
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
say(f"rank {rank}/{world} node {os.environ['GROUP_RANK']} sum {total.item():.0f}")
crash = os.environ.get("CRASH_NODE")
if crash == os.environ["GPUJOB_NODE_RANK"] and os.environ["LOCAL_RANK"] == "1":
    dist.barrier()  # every rank has said its line and is in the loop below: a mid-job crash
    raise RuntimeError(f"rank {rank} crashed on purpose")
for _ in range(3 if crash is None else 300):
    dist.barrier()
    time.sleep(0.2)
dist.barrier()
say(f"rank {rank} done")
dist.destroy_process_group()
os._exit(0)
"""


def assert_one_world(out: str, line: str) -> None:
    """Ranks 0-3, two per gpujob node, each node's two with one torch node rank. c10d numbers
    nodes in the order they join, so gpujob's node 1 may well be torch's node 0."""
    for node in (0, 1):
        seen = [
            (rank, group)
            for group in (0, 1)
            for rank in range(4)
            if f"[node {node}] " + line.format(rank=rank, group=group, local=rank % 2) in out
        ]
        groups, ranks = {group for _, group in seen}, sorted(rank for rank, _ in seen)
        assert len(groups) == 1 and len(ranks) == 2, out
        (group,) = groups
        assert ranks == [2 * group, 2 * group + 1], out


def test_two_nodes_on_two_hosts_form_one_world_of_four(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    spec = write_job(tmp_path, RENDEZVOUS, nodes=2, nproc=2)
    done = gpujob(env, "submit", str(spec), "--on", "ta,tb", "--job-id", "two-nodes")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:] + out[-3000:]
    assert "every node reaches node 0 at" in err
    assert_one_world(out, "rank {rank}/4 node {group} sum 10")
    # each node's log lives on its own host
    assert b"rank 2/4" in docker_lab.job_log(1, "two-nodes", 1)
    assert b"rank 2/4" not in docker_lab.job_log(0, "two-nodes", 0)
    only = gpujob(env, "logs", "two-nodes", "--node", "1")
    assert b"rank 3/4 node 1" in only.stdout and b"rank 0/4" not in only.stdout
    row = status_of(env, "two-nodes")
    assert row["state"] == "succeeded" and [n["state"] for n in row["node_states"]] == [
        "succeeded",
        "succeeded",
    ]


def test_a_rank_crash_on_node_1_stops_both_nodes_and_shows_its_last_lines(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    spec = write_job(tmp_path, RENDEZVOUS, nodes=2, nproc=2, extra="")
    env = dict(env)
    done = gpujob(env, "submit", str(spec), "--on", "ta", "--on", "tb", "--job-id", "crash",
                  "--set", "envs.CRASH_NODE=1")  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 1, err[-3000:]
    assert "node 1 failed first (exit code 1); its last lines:" in err, err[-3000:]
    assert "crashed on purpose" in err.split("its last lines:")[1]
    row = status_of(env, "crash")
    assert row["state"] == "failed"
    assert all(n["state"] in ("failed", "cancelled") for n in row["node_states"]), row
    assert containers(docker_lab, 0, "crash") == [] and containers(docker_lab, 1, "crash") == []


def test_cancel_stops_the_container_and_a_restarted_client_picks_up_the_log(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    program = (
        "import time\nfor i in range(100000):\n"
        "    print(f'tick {i:06d}', flush=True)\n    time.sleep(0.002)\n"
    )
    spec = write_job(tmp_path, program)
    started = gpujob(env, "submit", str(spec), "--on", "ta", "--detach", "--job-id", "ticker")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    first = subprocess.Popen([GPUJOB, "logs", "ticker", "-f"], env=env, stdout=subprocess.PIPE)
    seen = b""
    while seen.count(b"\n") < 500:
        seen += read_some(first.stdout, "the first `logs -f`")  # type: ignore[arg-type]
    first.terminate()  # the client is killed mid-stream; the job never notices
    seen += first.stdout.read()  # type: ignore[union-attr]
    first.wait()
    assert status_of(env, "ticker")["state"] == "running"
    # the job writes on with no client: the second has bytes the first never saw to resume to
    wait_until(lambda: len(docker_lab.job_log(0, "ticker")) > len(seen),
               "the job writing past what the first client saw")  # fmt: skip
    second = subprocess.Popen([GPUJOB, "logs", "ticker", "-f"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
    # the cancel comes while the second client streams (its first bytes are out)
    rest = read_some(second.stdout, "the second `logs -f`")  # type: ignore[arg-type]
    cancelled = gpujob(env, "cancel", "ticker", "--grace", "5")
    assert cancelled.returncode == 0, cancelled.stderr
    more, err = second.communicate(timeout=120)
    rest += more
    assert b"resuming at byte" in err
    host_log = docker_lab.job_log(0, "ticker")
    assert seen + rest == host_log  # nothing lost, nothing twice, across two clients
    assert status_of(env, "ticker")["state"] == "cancelled"
    assert containers(docker_lab, 0, "ticker") == []


def test_cancel_stops_the_container_after_its_agent_was_killed(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab, known_hosts: Path
) -> None:
    """What an OOM killer does to the supervisor: `docker wait` dies with it, the container
    runs on; status says so, and cancel stops and removes the container by its name."""
    from labtools import ssh

    from launcher.agent.agent_os import alive

    spec = write_job(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    started = gpujob(env, "submit", str(spec), "--on", "ta", "--detach", "--job-id", "orphan")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    node_dir = docker_lab.node_dir(0, "orphan", 0)
    wait_until(lambda: b"up" in docker_lab.job_log(0, "orphan"), "the job running")
    supervisor = json.loads((node_dir / "status.json").read_text())["supervisor_pid"]
    killed = ssh(docker_lab.hosts[0], f"kill -9 {supervisor}", known_hosts)
    assert killed.returncode == 0, killed.stderr
    wait_until(lambda: not alive(supervisor), "the supervisor gone")

    row = status_of(env, "orphan")
    assert row["state"] == "lost", row
    assert "still run (container gpujob-orphan-node0): gpujob cancel stops them" in row["last_line"]
    assert len(containers(docker_lab, 0, "orphan")) == 1

    cancelled = gpujob(env, "cancel", "orphan", "--grace", "3")
    assert cancelled.returncode == 0, cancelled.stderr
    assert b"cancelled on 1 node(s)" in cancelled.stderr
    assert containers(docker_lab, 0, "orphan") == []  # stopped and removed
    assert status_of(env, "orphan")["state"] == "cancelled"
    recorded = json.loads((node_dir / "status.json").read_text())
    assert recorded["reason"] == (
        "cancelled after the agent died (container gpujob-orphan-node0 stopped)")  # fmt: skip


def test_a_containers_log_survives_ten_dropped_connections_byte_for_byte(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    """The docker runtime's side of the fault: the container writes job.log through its bind
    mount while the sshd processes of gpujob's connection are killed 10 times."""
    spec = write_job(tmp_path, LONG_JOB)
    started = gpujob(env, "submit", str(spec), "--on", "ta", "--detach", "--job-id", "dock-long")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    out = follow_through_cuts(env, "dock-long", docker_lab.hosts[0].name)
    host_log = docker_lab.job_log(0, "dock-long")
    assert host_log.count(b"\nline ") == 100_000 and host_log.endswith(b"end\n")
    assert out == host_log


def test_a_rebooted_host_reads_lost_not_running(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    import infra.lab

    spec = write_job(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    started = gpujob(env, "submit", str(spec), "--on", "tb", "--detach", "--job-id", "rebooted")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    assert status_of(env, "rebooted")["state"] == "running"
    host = docker_lab.hosts[1]
    infra.lab.kill_host_processes(host.name)
    infra.lab.create_host(host.name, docker=True)  # boots again: sshd and dockerd, no job
    row = status_of(env, "rebooted")
    assert row["state"] == "lost", row
    assert gpujob(env, "logs", "rebooted", "-f").returncode == 1


def test_ppo_on_two_hosts_is_one_world_of_four_with_checkpoints(
    env: dict[str, str], docker_lab: DockerLab
) -> None:
    ppo = str(REPO / "jobs" / "ppo.yaml")
    done = gpujob(env, "submit", ppo, "--set", "profile=cpu", "--set", "nodes=2",
                  "--set", "batch.global_batch=32", "--on", "ta,tb", "--job-id", "ppo-2",
                  timeout=900)  # fmt: skip
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:] + out[-3000:]
    assert_one_world(out, "rank {rank}/4: node {group} local rank {local}")
    assert "[node 0] ppo: policy random:64:2" in out and "32 responses/step over 4 rank(s)" in out
    assert "[node 0] ppo step 8/8 score" in out
    state = docker_lab.root(0) / ".gpujob/jobs/ppo-2/checkpoints/checkpoint-8/trainer_state.json"
    assert json.loads(state.read_text())["global_step"] == 8


def test_cancel_reaches_a_program_under_a_shell_block_in_a_container(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    """`docker stop` signals the container's init; the program two shells down must hear
    SIGTERM (and may save) before the grace ends, not be killed at it."""
    program = (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('TERM heard', flush=True)\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('waiting', flush=True)\ntime.sleep(600)\n"
    )
    spec = write_job(tmp_path, program)
    spec.write_text(spec.read_text().replace(
        "run:\n  entrypoint: prog.py\n  nproc_per_node: 1\n  rdzv_timeout_s: 60\n",
        "run: |\n  bash -c 'python3 prog.py'\n",
    ))  # fmt: skip
    started = gpujob(env, "submit", str(spec), "--on", "ta", "--detach", "--job-id", "trapped")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    wait_until(lambda: b"waiting" in docker_lab.job_log(0, "trapped"), "the program to start")
    cancelled = gpujob(env, "cancel", "trapped", "--grace", "20")
    assert cancelled.returncode == 0, cancelled.stderr
    assert b"TERM heard" in docker_lab.job_log(0, "trapped")
    assert status_of(env, "trapped")["state"] == "cancelled"
    assert containers(docker_lab, 0, "trapped") == []


def test_a_detached_job_whose_node_0_fails_has_node_1_stopped_by_its_keeper(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    """Nobody follows: the keeper (a process of this machine) reads both agents over SSH,
    and once node 0 has failed it cancels node 1's container on the other host."""
    spec = write_job(tmp_path, "", nodes=2)
    spec.write_text(spec.read_text().replace(
        "run:\n  entrypoint: prog.py\n  nproc_per_node: 1\n  rdzv_timeout_s: 60\n",
        'run: |\n  if [ "$GPUJOB_NODE_RANK" = 0 ]; then\n'
        "    until [ -e fail-now ]; do sleep 0.2; done; exit 3\n  fi\n"
        "  echo 'node 1 runs on'; sleep 600\n",
    ))  # fmt: skip
    started = gpujob(env, "submit", str(spec), "--on", "ta,tb", "--detach", "--job-id", "kept",
                     timeout=600)  # fmt: skip
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    assert b"keeper pid" in started.stderr
    wait_until(lambda: b"node 1 runs on" in docker_lab.job_log(1, "kept", 1), "node 1 to run")
    (docker_lab.node_dir(0, "kept", 0).parent / "workdir" / "fail-now").touch()
    wait_until(
        lambda: containers(docker_lab, 1, "kept") == [], "node 1's container to stop", every=0.5
    )
    status = json.loads((docker_lab.node_dir(1, "kept", 1) / "status.json").read_text())
    assert status["state"] == "cancelled"
    keeper_log = Path(env["GPUJOB_STATE_DIR"]) / "keeper" / "kept.log"
    wait_until(lambda: "job kept failed (exit code 3)" in keeper_log.read_text(), "its end")
    assert "node 0 failed (exit code 3); stopping node(s) 1" in keeper_log.read_text()
    row = status_of(env, "kept")
    assert (row["state"], row["exit_code"]) == ("failed", 3)


METRICS_JOB = """
import json, os
with open(os.environ["GPUJOB_METRICS"], "a", buffering=1) as out:
    for step in range(1, 6):
        out.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\\n")
        print(f"eval {step} acc 0.{step}", flush=True)
"""


def test_a_containers_metrics_are_read_from_its_host(
    tmp_path: Path, env: dict[str, str], docker_lab: DockerLab
) -> None:
    """$GPUJOB_METRICS inside the container is the node folder's file on the host (a bind
    mount at the same path); the agent records it and the log's pattern beside the log, and
    `gpujob metrics` reads them over SSH."""
    extra = "metrics:\n  from_log: 'eval (?P<step>\\d+) acc (?P<acc>[0-9.]+)'\n"
    spec = write_job(tmp_path, METRICS_JOB, extra=extra)
    run = gpujob(env, "submit", str(spec), "--on", "ta", "--job-id", "lab-metrics")
    assert run.returncode == 0, run.stderr[-3000:]
    every = gpujob(env, "metrics", "lab-metrics", "--json")
    assert every.returncode == 0, every.stderr
    (node,) = json.loads(every.stdout)["nodes"]
    assert node["source"] == "host"
    losses = [(s["step"], s["loss"]) for s in node["steps"] if "loss" in s]
    accs = [(s["step"], s["acc"]) for s in node["steps"] if "acc" in s]
    assert losses == [(n, 1.0 / n) for n in range(1, 6)]
    assert accs == [(n, float(f"0.{n}")) for n in range(1, 6)]
    # what the agent's `status` answers while the job runs (gpujob status shows it)
    status = json.loads((docker_lab.node_dir(0, "lab-metrics", 0) / "status.json").read_text())
    assert status["metrics"] == {"step": 5, "name": "loss", "value": 0.2, "trend": "down"}
