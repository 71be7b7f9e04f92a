"""Multi-node on Vast in the lab: a 2-node `submit --up` through the Vast fake (real lab
machines behind it) rents both nodes in one physical cluster, joins both to one overlay
network, and gives the job the overlay addresses read on the hosts (in the lab the fake's
overlay subnet is the lab's own, where the machines reach each other); `down` removes the
overlay with the instances."""

from __future__ import annotations

import ipaddress
import json
import sqlite3
from pathlib import Path

import pytest
import requests
import test_up_hosts as up_hosts

from infra.fakes import VAST_API_KEY, RunningFake


def calls(fake: RunningFake, op: str) -> list[dict]:
    return [r for r in fake.control.requests() if r["op"] == op]


pytestmark = pytest.mark.lab
backend, clouds, env, gpujob, live = (up_hosts.backend, up_hosts.clouds, up_hosts.env,
                                      up_hosts.gpujob, up_hosts.live)  # fmt: skip


def overlays(fake: RunningFake) -> list[dict]:
    auth = {"Authorization": f"Bearer {VAST_API_KEY}"}
    return requests.get(f"{fake.url}/overlay/", headers=auth, timeout=10).json()


def test_two_nodes_meet_on_the_overlay_and_down_removes_it(
    env: dict[str, str], clouds: dict[str, RunningFake], tmp_path: Path
) -> None:
    fake = clouds["vast"]
    spec = tmp_path / "ov.yaml"
    spec.write_text("name: ov\nimage: host\nnodes: 2\nresources: {cpus: 1, disk_gb: 1}\n"
                    'run: \'echo "node $GPUJOB_NODE_RANK meets at $MASTER_ADDR"\'\n')  # fmt: skip
    submit = gpujob(env, "submit", str(spec), "--up", "h100", "--provider", "vast",
                    "--allow-cpu", "--job-id", "ov-2n")  # fmt: skip
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-6000:]
    (made,) = calls(fake, "create_overlay")
    assert made["body"]["cluster_id"] == 3002  # the cluster with two machines
    joins = calls(fake, "join_overlay")
    creates = [c for c in calls(fake, "create_instance") if c["status"] == 200]
    assert len(joins) == len(creates) == 2
    assert {j["body"]["name"] for j in joins} == {made["body"]["name"]}
    from infra.lab import naming

    subnet = naming.subnet() or naming.DEFAULT_SUBNET  # the fake's overlay subnet in the lab
    with sqlite3.connect(Path(env["GPUJOB_STATE_DIR"]) / "state.db") as db:
        (row,) = db.execute("SELECT hosts FROM jobs WHERE id = 'ov-2n'").fetchall()
    hosts = [json.loads(record) for record in json.loads(row[0])]
    peers = [h["peer"] for h in hosts]
    assert len(set(peers)) == 2 and all(ipaddress.ip_address(p) in subnet for p in peers)
    assert f"meets at {peers[0]}" in submit.stdout  # node 0's overlay address: MASTER_ADDR
    (net,) = overlays(fake)  # the hosts stay after the job, in their overlay
    assert sorted(net["instances"]) == sorted(i["id"] for i in live(fake, "vast"))
    down = gpujob(env, "down", "--all")
    assert down.returncode == 0, down.stderr
    assert live(fake, "vast") == [] and overlays(fake) == []  # torn down with the instances
    assert f"deleted vast overlay network {net['name']}" in down.stderr


def test_a_volume_keeps_a_file_for_the_next_job_on_its_machine(
    env: dict[str, str], clouds: dict[str, RunningFake], tmp_path: Path
) -> None:
    """The first job's volume is created and written; the hosts go; a second job with the
    same volume is rented on its machine and reads the file; the volume, made without
    `delete: true`, outlives both."""
    fake = clouds["vast"]
    for n, run in enumerate(("echo kept-by-volume > /data/note", "cat /data/note")):
        spec = tmp_path / f"v{n}.yaml"
        spec.write_text(f"name: v{n}\nimage: host\nresources: {{cpus: 1, disk_gb: 1, volume: "
                        f"{{name: notes, size_gb: 5, mount: /data}}}}\nrun: '{run}'\n")  # fmt: skip
        submit = gpujob(env, "submit", str(spec), "--up", "rtx4090", "--provider", "vast",
                        "--allow-cpu", "--job-id", f"vol-{n}")  # fmt: skip
        assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-6000:]
        down = gpujob(env, "down", "--all")
        assert down.returncode == 0, down.stderr
    assert len(calls(fake, "create_volume")) == 1  # made once, found the second time
    assert "kept-by-volume" in submit.stdout
    auth = {"Authorization": f"Bearer {VAST_API_KEY}"}
    listed = requests.get(f"{fake.url}/volumes", params={"owner": "me"}, headers=auth,
                          timeout=10).json()["volumes"]  # fmt: skip
    assert [v["name"] for v in listed] == ["notes"]
    assert live(fake, "vast") == []
