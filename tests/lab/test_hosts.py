"""Lab hosts are real machines to an SSH client: own network, own files, pinned keys, reboots."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from labtools import pin_line, ssh

pytestmark = pytest.mark.lab


def test_ssh_command_runs_in_the_hosts_own_network_namespace(docker_hosts, known_hosts):
    host = docker_hosts[0]
    done = ssh(host, "readlink /proc/self/ns/net; ip -o -4 addr show; hostname", known_hosts)
    assert done.returncode == 0, done.stderr
    netns, *addresses, hostname = done.stdout.splitlines()
    assert netns != os.readlink("/proc/self/ns/net")
    assert any(f"inet {host.address}/24" in line for line in addresses)
    assert not any("eth0" in line and host.address not in line for line in addresses)
    assert hostname == host.name


def test_ssh_refuses_a_host_whose_key_is_not_the_pinned_one(docker_hosts, tmp_path):
    first, second = docker_hosts
    wrong = tmp_path / "known_hosts"
    wrong.write_text(pin_line(second).replace(second.address, first.address))
    done = ssh(first, "true", wrong)
    assert done.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in done.stderr


def test_each_host_has_its_own_root_and_tmp(docker_hosts, known_hosts):
    first, second = docker_hosts
    mark = f"mark-{uuid.uuid4().hex[:8]}"
    wrote = ssh(first, f"echo {mark} > /root/{mark} && echo {mark} > /tmp/{mark}", known_hosts)
    assert wrote.returncode == 0, wrote.stderr
    assert ssh(first, f"cat /root/{mark} /tmp/{mark}", known_hosts).stdout.split() == [mark] * 2
    seen = ssh(second, f"ls /root/{mark} /tmp/{mark}", known_hosts)
    assert seen.returncode != 0
    assert not Path(f"/root/{mark}").exists() and not Path(f"/tmp/{mark}").exists()


def test_a_crashed_host_boots_again_with_its_address_key_and_disk(lab, tmp_path):
    import infra.lab

    try:
        host = infra.lab.create_host("tc")
        pins = tmp_path / "known_hosts"
        pins.write_text(pin_line(host))
        assert ssh(host, "echo kept > /root/disk", pins).returncode == 0

        infra.lab.kill_host_processes(host.name)
        down = ssh(host, "true", pins, timeout=30)
        assert down.returncode == 255

        again = infra.lab.create_host(host.name)
        assert again == host
        assert ssh(again, "cat /root/disk", pins).stdout == "kept\n"
    finally:
        infra.lab.destroy_host("tc")
    assert infra.lab.host_name("tc") not in [h.name for h in infra.lab.list_hosts()]
