"""SkyPilot's `file_mounts` of local paths on two lab hosts, in containers, through the real
CLI: a folder put in each host's home (`~/...`, mounted into the container at the same path)
and a file put inside the workdir, both read by the task's `run:` block on each node (a
0600 file keeps its mode there); a second submit after a local change brings the change
(the hosts' lasting copies move only what changed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import test_remote_jobs as remote
from labtools import GPUJOB

pytestmark = pytest.mark.lab
docker_lab, env = remote.docker_lab, remote.env  # the two docker hosts as `ta`, `tb`

TASK = """\
num_nodes: 2
resources:
  image_id: docker:{image}
file_mounts:
  ~/gpujob-mounts-test/data: ../data
  conf/cfg.yaml: ../cfg.yaml
  ~/gpujob-mounts-test/key.json: ../key.json
run: |
  echo "node $SKYPILOT_NODE_RANK: $(cat ~/gpujob-mounts-test/data/sub/a.txt) $(cat conf/cfg.yaml)"
  echo "node $SKYPILOT_NODE_RANK: key $(stat -c %a ~/gpujob-mounts-test/key.json)"
"""


def submit(folder: Path, env: dict[str, str], job_id: str) -> subprocess.CompletedProcess:
    argv = [GPUJOB, "submit", "task.yaml", "--on", "ta,tb", "--job-id", job_id]
    return subprocess.run(argv, env=env, cwd=folder / "task", capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip


def test_a_tasks_local_file_mounts_reach_each_host_and_its_container(
    tmp_path: Path, env: dict[str, str], docker_lab: remote.DockerLab
) -> None:
    from infra.lab import job_image, registry

    (tmp_path / "task").mkdir()
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "sub" / "a.txt").write_text("shard a\n")
    (tmp_path / "cfg.yaml").write_text("lr: 0.1\n")
    (tmp_path / "key.json").write_text("{}\n")
    (tmp_path / "key.json").chmod(0o600)  # a credentials file stays 0600 on the host
    image = f"{registry.address()}/{job_image.TAG}"
    (tmp_path / "task" / "task.yaml").write_text(TASK.format(image=image))
    placed = [docker_lab.root(index) / "gpujob-mounts-test" for index in (0, 1)]
    try:
        done = submit(tmp_path, env, "mounts-lab-1")
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        assert "(docker runtime)" in done.stdout
        for rank in (0, 1):
            assert f"[node {rank}] node {rank}: shard a lr: 0.1\n" in done.stdout, done.stdout
        for folder in placed:
            assert (folder / "data" / "sub" / "a.txt").read_text() == "shard a\n"
            assert (folder / "key.json").stat().st_mode & 0o777 == 0o600
        for rank in (0, 1):
            assert f"[node {rank}] node {rank}: key 600\n" in done.stdout, done.stdout

        (tmp_path / "data" / "sub" / "a.txt").write_text("shard b\n")
        again = submit(tmp_path, env, "mounts-lab-2")
        assert again.returncode == 0, again.stderr[-3000:] + again.stdout[-3000:]
        for rank in (0, 1):
            assert f"[node {rank}] node {rank}: shard b lr: 0.1\n" in again.stdout
    finally:
        for folder in placed:
            shutil.rmtree(folder, ignore_errors=True)
