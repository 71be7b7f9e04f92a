"""A real Ray cluster across two lab hosts, in containers, through the real CLI: jobs/ray.yaml
with the lab's Ray image (`gpujob-lab/job:lab-ray`, lab-cpu plus Ray from PyPI; built once,
about a minute, then cached by tag). Node 0's container starts the head, node 1's joins it
over the lab bridge, and the driver pins one task to each node. Afterwards no Ray process is
left in either host's network namespace (a container on a lab host is a process of this
machine in that namespace, so /proc tells)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import test_remote_jobs as remote
from labtools import REPO, docker, gpujob
from labtools import job_row as status_of

# The machine's Ray lock (tests/conftest.py): an e2e Ray job's `ray stop` on this machine would
# stop the Ray processes of these hosts' containers too, whichever test session ran it.
pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("one_ray_on_the_machine")]
docker_lab, env = remote.docker_lab, remote.env  # the two docker hosts as `ta`, `tb`
RAY_DAEMONS = ("raylet", "gcs_server")


@pytest.fixture(scope="module")
def ray_image(docker_lab: remote.DockerLab) -> str:
    """The hosts' ref of the Ray image (built and pushed here unless the registry has it)."""
    from infra.lab import ray_image

    return ray_image.build(report=lambda line: print(f"lab: {line}"))


def ray_left(host) -> list[str]:
    """Ray daemons running in a lab host's network namespace, as `comm(pid)`."""
    from infra.lab import network

    namespace = os.stat(network.NETNS_DIR / host.name).st_ino
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if os.stat(proc / "ns" / "net").st_ino != namespace:
                continue
            name = (proc / "comm").read_text().strip()
        except (OSError, ValueError):
            continue  # not a process, or it ended while read
        if name in RAY_DAEMONS:
            left.append(f"{name}({proc.name})")
    return left


def submit_ray(env: dict[str, str], image: str, job_id: str, *more: str):
    spec = str(REPO / "jobs" / "ray.yaml")
    return gpujob(env, "submit", spec, "--on", "ta,tb", "--set", f"image={image}",
                  "--job-id", job_id, *more)  # fmt: skip


def test_a_ray_cluster_spans_both_hosts_and_leaves_no_ray_on_either(
    env: dict[str, str], docker_lab: remote.DockerLab, ray_image: str
) -> None:
    head, other = (h.address for h in docker_lab.hosts)
    done = submit_ray(env, ray_image, "ray-lab")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:] + out[-3000:]
    assert "(docker runtime)" in out
    both = " ".join(sorted((head, other)))
    assert f"[node 0] [gpujob] ray: 2 node(s) in the cluster: {both}\n" in out, out[-3000:]
    assert f"[node 1] [gpujob] ray: node 1 ({other}) joined" in out
    assert "[node 0] driver: 2 node(s) in the cluster\n" in out
    # one task pinned to each node, each run at its own host's address
    ran_at = {line.split("ran at ")[1].split()[0] for line in out.splitlines()
              if line.startswith("[node 0] task on node ")}  # fmt: skip
    assert ran_at == {head, other}, out[-3000:]
    assert "job ray-lab succeeded (exit code 0)" in err
    for index, host in enumerate(docker_lab.hosts):
        assert ray_left(host) == [], f"Ray left on {host.name}"
        assert remote.containers(docker_lab, index, "ray-lab") == []


def test_a_node_whose_ray_start_fails_stops_the_job_naming_it_and_leaves_no_ray(
    env: dict[str, str], docker_lab: remote.DockerLab, ray_image: str
) -> None:
    """Host tb holds another image under the job's image name (an older build, one without
    Ray; gpujob pulls only an image a host lacks), so node 1's `ray start` fails every time
    while node 0's head is up: the job fails within its join timeout naming node 1."""
    from infra.lab import job_image, registry

    other_host = docker_lab.hosts[1]
    stale = f"{registry.address()}/{job_image.TAG}"
    for argv in (["pull", "-q", stale], ["tag", stale, ray_image]):
        done = docker(other_host, *argv)
        assert done.returncode == 0, done.stderr
    try:
        done = submit_ray(env, ray_image, "ray-lab-fail", "--set", "run.rdzv_timeout_s=20")
    finally:
        docker(other_host, "rmi", ray_image)  # the tag only; the next job pulls the real one
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 1, err[-3000:] + out[-3000:]
    head, other = (h.address for h in docker_lab.hosts)
    assert "node 1 failed first (exit code 1)" in err, err[-3000:]
    assert f"ray: node 1 ({other}) could not join the head at {head}:6379 in 20 s" in err
    assert "No module named 'ray'" in err, err[-3000:]  # why: node 1's last lines
    assert "driver:" not in out
    assert status_of(env, "ray-lab-fail")["state"] == "failed"
    for index, host in enumerate(docker_lab.hosts):
        assert ray_left(host) == [], f"Ray left on {host.name}"
        assert remote.containers(docker_lab, index, "ray-lab-fail") == []


def firewall(host, *rule: str) -> None:
    """iptables in a lab host's network namespace (its containers share it: --network host)."""
    from infra.lab import network, state

    state.run(["nsenter", f"--net={network.NETNS_DIR / host.name}", "--", "iptables", *rule])


def test_a_node_that_cannot_reach_the_heads_ray_port_fails_before_anything_starts(
    env: dict[str, str], docker_lab: remote.DockerLab, ray_image: str
) -> None:
    """A firewall on host tb refuses its connections to the head's Ray port. Ray's own
    `ray start` would wait minutes for an unreachable GCS; the reach check dials the Ray port
    (not the rendezvous port) from every node before any starts, so the job fails in seconds,
    naming the port's field, with no container and no Ray on either host. (A node whose
    `ray start` fails after the check is bounded by the join timeout: the test above.)"""
    head = docker_lab.hosts[0].address
    rule = ["OUTPUT", "-p", "tcp", "-d", head, "--dport", "6379", "-j", "REJECT",
            "--reject-with", "tcp-reset"]  # fmt: skip
    firewall(docker_lab.hosts[1], "-I", *rule)
    try:
        done = submit_ray(env, ray_image, "ray-lab-wall", "--set", "run.rdzv_timeout_s=20")
    finally:
        firewall(docker_lab.hosts[1], "-D", *rule)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 1, err[-3000:] + out[-3000:]
    assert "rendezvous check failed, nothing started" in err, err[-3000:]
    assert f"cannot reach {head}:6379" in err, err[-3000:]
    assert "set run.ray_port to a free port" in err, err[-3000:]
    assert "driver:" not in out and "[node 1]" not in out
    for index, host in enumerate(docker_lab.hosts):
        assert ray_left(host) == [], f"Ray left on {host.name}"
        assert remote.containers(docker_lab, index, "ray-lab-wall") == []
