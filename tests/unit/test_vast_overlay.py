"""Multi-node on Vast: one physical cluster, one overlay network, all or nothing, against
the Vast fake on a thread (`up --count 2 --one-network`: the rent `submit --up` of a 2-node
job makes, launch_hosts with one_network)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests
from clouds import calls, vast_instances

from infra.fakes import VAST_API_KEY, RunningFake
from launcher.remote.hosts import HostEntry
from launcher.targets.cloud.overlay import address_in


@pytest.fixture
def env(vast_fake: RunningFake) -> RunningFake:
    return vast_fake


def overlays(fake: RunningFake) -> list[dict]:
    auth = {"Authorization": f"Bearer {VAST_API_KEY}"}
    reply = requests.get(f"{fake.url}/overlay/", headers=auth,
                         timeout=10)  # fmt: skip
    reply.raise_for_status()
    return reply.json()


def up_together(gpujob: Callable, count: int) -> Any:
    """`up --count N --one-network`: the rent of a job of N nodes."""
    return gpujob("up", "h100", "--provider", "vast", "--count", str(count), "--one-network",
                  "--yes", "--no-bootstrap")  # fmt: skip


def test_two_nodes_rent_in_one_cluster_joined_to_one_overlay(
    env: RunningFake, gpujob: Callable
) -> None:
    result = up_together(gpujob, 2)
    assert result.exit_code == 0, result.stderr
    (made,) = calls(env, "create_overlay")
    assert made["body"]["cluster_id"] == 3002  # 3001 is cheaper, but has one machine only
    creates = calls(env, "create_instance")
    assert len(creates) == 2
    purchases = [c for c in calls(env, "search_offers") if "cluster_id" in c["body"]]
    assert purchases[0]["body"]["cluster_id"] == {"neq": None}  # the clusters, then one
    assert all(c["body"]["cluster_id"] == {"eq": 3002} for c in purchases[1:])
    joins = calls(env, "join_overlay")
    instances = vast_instances(env)
    assert sorted(j["body"]["instance_id"] for j in joins) == sorted(i["id"] for i in instances)
    assert {i["cluster_id"] for i in instances} == {3002}
    (net,) = overlays(env)
    assert net["name"] == made["body"]["name"] and net["name"].startswith("gpujob-")
    assert sorted(net["instances"]) == sorted(i["id"] for i in instances)
    looked = gpujob("down", "--all", "--dry-run")
    assert f"would delete vast overlay network {net['name']}" in looked.stdout, looked.stderr
    assert len(overlays(env)) == 1 and calls(env, "delete_overlay") == []  # a look only
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert vast_instances(env) == [] and overlays(env) == []
    assert f"deleted vast overlay network {net['name']}" in down.stderr


def test_a_failed_second_create_destroys_the_first_and_the_overlay(
    env: RunningFake, gpujob: Callable
) -> None:
    env.control.fault(op="create_instance", status=400, skip=1, body={
        "success": False, "error": "invalid_args", "msg": "error 400/3467: Invalid."})  # fmt: skip
    result = up_together(gpujob, 2)
    assert result.exit_code != 0
    assert [c["status"] for c in calls(env, "create_instance")][:2] == [200, 400]
    assert len(calls(env, "destroy_instance")) == 1
    assert vast_instances(env) == []
    assert calls(env, "delete_overlay") and overlays(env) == []
    assert "deleted vast overlay network" in result.stderr


def test_hosts_that_need_not_meet_make_no_overlay(env: RunningFake, gpujob: Callable) -> None:
    result = gpujob("up", "h100", "--provider", "vast", "--count", "2", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    assert calls(env, "create_overlay") == [] and calls(env, "join_overlay") == []
    assert gpujob("down", "--all").exit_code == 0


def test_no_cluster_with_enough_machines_is_one_line(env: RunningFake, gpujob: Callable) -> None:
    result = up_together(gpujob, 3)
    assert result.exit_code == 1
    assert "no physical cluster has 3 offers" in result.stderr
    assert calls(env, "create_instance") == [] and overlays(env) == []


def test_the_overlay_address_is_read_from_the_hosts_addresses() -> None:
    ip_out = ("1: lo    inet 127.0.0.1/8 scope host lo\n"
              "2: eth0    inet 172.17.0.5/16 brd 172.17.255.255 scope global eth0\n"
              "3: vxlan0    inet 10.200.0.3/24 scope global vxlan0\n")  # fmt: skip
    assert address_in(ip_out, "10.200.0.0/24") == "10.200.0.3"
    assert address_in("172.17.0.5 10.200.0.4 ", "10.200.0.0/24") == "10.200.0.4"
    assert address_in(ip_out, "10.9.0.0/24") is None
    trie = ("     +-- 10.200.0.0/24 2 0 2\n        |-- 10.200.0.0\n           /32 link BROADCAST\n"
            "        |-- 10.200.0.7\n           /32 host LOCAL\n"
            "        |-- 10.200.0.255\n           /32 link BROADCAST\n")  # fmt: skip
    assert address_in(trie, "10.200.0.0/24") == "10.200.0.7"  # an image without iproute2


def test_a_peer_address_is_where_the_nodes_meet() -> None:
    from planning import spec_of

    from launcher.targets.placement import remote_placement

    entries = [HostEntry("a", "203.0.113.1", 40001, peer="10.200.0.2"),
               HostEntry("b", "203.0.113.2", 40002, peer="10.200.0.3")]  # fmt: skip
    placed = remote_placement(spec_of(nodes=2), None, entries, runtime="bare", dry_run=True)
    assert placed.target.addresses == ("10.200.0.2", "10.200.0.3")
