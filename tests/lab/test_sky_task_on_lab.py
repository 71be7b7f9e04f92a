"""SkyPilot-style work on two lab hosts, in containers, through the real CLI: the example's
`run: |` block that builds its own torchrun line from SKYPILOT_* variables, and a task file
exactly as SkyPilot users write it (`num_nodes`, `resources.image_id: docker:...`, `workdir:
.`). Each forms one world of four (two nodes x two ranks, gloo over the lab bridge)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import test_remote_jobs as remote
from labtools import GPUJOB, REPO, gpujob
from labtools import job_row as status_of

pytestmark = pytest.mark.lab
docker_lab, env = remote.docker_lab, remote.env  # the two docker hosts as `ta`, `tb`


def assert_world_of_four(out: str, head: str) -> None:
    """Both nodes' own lines (rank from SKYPILOT_NODE_RANK, ta's address as the master) and
    every global rank of the one world done."""
    for rank in (0, 1):
        assert f"[node {rank}] node {rank} of 2, master {head}\n" in out, out[-3000:]
    assert set(re.findall(r"rank (\d)/4: done", out)) == {"0", "1", "2", "3"}, out[-3000:]
    assert "final loss" in out


def test_the_sky_torchrun_example_unchanged_is_one_world_of_four_on_two_hosts(
    env: dict[str, str], docker_lab: remote.DockerLab
) -> None:
    spec = str(REPO / "jobs" / "sky-torchrun.yaml")
    done = gpujob(env, "submit", spec, "--on", "ta,tb", "--job-id", "sky-lab")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:] + out[-3000:]
    assert "(docker runtime)" in out and "job sky-lab succeeded (exit code 0)" in err
    assert_world_of_four(out, docker_lab.hosts[0].address)
    # each node's rank line is in its own host's log
    for index in (0, 1):
        assert f"node {index} of 2".encode() in docker_lab.job_log(index, "sky-lab", index)
    row = status_of(env, "sky-lab")
    assert [n["state"] for n in row["node_states"]] == ["succeeded", "succeeded"]


SKY_TASK = """\
# as SkyPilot's minGPT-DDP example is written, on CPU: `sky launch task.yaml`
name: sky-lab-task

resources:
  cpus: 2+
  image_id: docker:{image}

num_nodes: 2

workdir: .

envs:
  OMP_NUM_THREADS: 1
  NPROC: 2

setup: |
  echo "setup on node $SKYPILOT_SETUP_NODE_RANK"

run: |
  MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
  echo "node ${{SKYPILOT_NODE_RANK}} of ${{SKYPILOT_NUM_NODES}}, master ${{MASTER_ADDR}}"
  torchrun \\
    --nnodes=$SKYPILOT_NUM_NODES \\
    --nproc_per_node=$NPROC \\
    --master_addr=$MASTER_ADDR \\
    --master_port=8008 \\
    --node_rank=${{SKYPILOT_NODE_RANK}} \\
    train.py --steps 10 --seq-len 32 --micro-batch 2 --grad-accum 1 || exit 1
"""


def test_a_skypilot_task_file_as_written_runs_on_two_hosts_in_its_container(
    tmp_path: Path, env: dict[str, str], docker_lab: remote.DockerLab
) -> None:
    from infra.lab import job_image, registry

    project = tmp_path / "project"  # SkyPilot's workdir `.`: the folder `sky launch` runs in
    project.mkdir()
    for name in ("train.py", "model.py"):  # the quickstart's program and its model
        (project / name).write_text((REPO / "jobs" / "quickstart" / name).read_text())
    image = f"{registry.address()}/{job_image.TAG}"
    (project / "task.yaml").write_text(SKY_TASK.format(image=image))
    argv = [GPUJOB, "submit", "task.yaml", "--on", "ta,tb", "--job-id", "sky-task-lab"]
    done = subprocess.run(argv, env=env, cwd=project, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "a SkyPilot task, read as gpujob's spec" in done.stderr
    for rank in (0, 1):
        assert f"[node {rank}] setup on node {rank}\n" in done.stdout
    assert_world_of_four(done.stdout, docker_lab.hosts[0].address)
    assert remote.containers(docker_lab, 0, "sky-task-lab") == []
    assert remote.containers(docker_lab, 1, "sky-task-lab") == []
