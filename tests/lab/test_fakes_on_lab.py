"""The fakes serve real lab hosts: a Lambda launch is a host that `ssh` reaches with the key
given at launch, a Vast instance is a container with sshd, and terminate removes them."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from labtools import base_image_ref

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake, serve_lambda, serve_vast

pytestmark = pytest.mark.lab


@pytest.fixture
def lab_hosts(lab: None) -> Any:
    """infra.lab.hosts, with the session lab (bridge, registry, base image) up."""
    from infra.lab import hosts

    return hosts


@pytest.fixture
def lab_backend(lab_hosts: Any, tmp_path: Path) -> Any:
    from infra.fakes.lab_backend import LabBackend

    backend = LabBackend(tmp_path / "records.json")
    yield backend
    backend.close()  # whatever a failed test left running


@pytest.fixture
def lambda_lab(lab_backend: Any) -> Iterator[RunningFake]:
    fake = serve_lambda(lab_backend)
    yield fake
    fake.stop()


def ssh(key: Path, address: str, port: int, command: str, known_hosts: Path,
        strict: str = "yes") -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes",
         "-o", f"StrictHostKeyChecking={strict}", "-o", f"UserKnownHostsFile={known_hosts}",
         "-o", "ConnectTimeout=10", f"root@{address}", command],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def wait_for(get: Any, field: str, wanted: str, reads: int = 600) -> dict[str, Any]:
    """Poll like a client until `field` is `wanted`; a read budget, not a clock."""
    import time

    for _ in range(reads):
        seen = get()
        if seen and seen.get(field) == wanted:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{field} never became {wanted}: {seen}")


def test_lambda_launch_is_a_host_ssh_reaches_and_terminate_removes(
    lab_hosts: Any, lambda_lab: RunningFake, tmp_path: Path
) -> None:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {LAMBDA_API_KEY}"
    base = lambda_lab.url
    api.post(f"{base}/ssh-keys", json={"name": "mine", "public_key": key.with_suffix(".pub")
                                       .read_text()}).raise_for_status()  # fmt: skip
    launched = api.post(f"{base}/instance-operations/launch", json={
        "region_name": "us-east-1", "instance_type_name": "gpu_1x_a10", "ssh_key_names": ["mine"],
    })  # fmt: skip
    (instance_id,) = launched.json()["data"]["instance_ids"]
    active = wait_for(lambda: api.get(f"{base}/instances/{instance_id}").json()["data"],
                      "status", "active")  # fmt: skip
    known = lab_hosts.known_hosts_path()
    for private in (key, lab_hosts.user_key()):  # the key named at launch, and the lab's own
        done = ssh(private, active["ip"], 22, "hostname; docker info --format '{{.ID}}' >/dev/null"
                   " && echo docker-ok", known)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [lambda_lab.api.books.backend.records[instance_id]["host"],
                                       "docker-ok"]  # fmt: skip

    session = subprocess.Popen(
        ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known}",
         f"root@{active['ip']}", "sleep 120"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for(lambda: {"n": str(len(_sessions(lab_backend_of(lambda_lab), instance_id)))},
             "n", "1")  # fmt: skip
    lambda_lab.control.drop_ssh(instance_id)
    assert session.wait(timeout=30) == 255  # cut, not finished
    assert ssh(key, active["ip"], 22, "true", known).returncode == 0  # new sessions still work

    assert ssh(key, active["ip"], 22, "touch /root/kept", known).returncode == 0
    restarted = api.post(f"{base}/instance-operations/restart",
                         json={"instance_ids": [instance_id]})  # fmt: skip
    assert restarted.json()["data"]["restarted_instances"][0]["status"] == "booting"
    wait_for(lambda: api.get(f"{base}/instances/{instance_id}").json()["data"], "status", "active")
    kept = ssh(key, active["ip"], 22, "ls /root/kept && docker info >/dev/null && echo ok", known)
    assert kept.stdout.split() == ["/root/kept", "ok"], kept.stderr  # same disk, same address

    host = lab_backend_of(lambda_lab).records[instance_id]["host"]
    api.post(f"{base}/instance-operations/terminate", json={"instance_ids": [instance_id]})
    wait_for(lambda: api.get(f"{base}/instances/{instance_id}").json().get("data"),
             "status", "terminated")  # fmt: skip
    assert host not in {h.name for h in lab_hosts.list_hosts()}
    assert ssh(key, active["ip"], 22, "true", known).returncode == 255


def lab_backend_of(fake: RunningFake) -> Any:
    return fake.api.books.backend  # type: ignore[attr-defined]


def _sessions(backend: Any, instance_id: str) -> list[int]:
    from infra.fakes.lab_backend import children, comm
    from infra.lab import state

    listener = state.read_state()["hosts"][backend.records[instance_id]["host"]]["sshd"]["pid"]
    return [p for p in children(listener) if comm(p).startswith("sshd")]


def _registry_has_base() -> bool:
    try:
        from infra.lab import registry

        with urllib.request.urlopen(f"http://{registry.address()}/v2/gpujob-lab/base/tags/list",
                                    timeout=3) as reply:  # fmt: skip
            return "bookworm" in json.loads(reply.read()).get("tags", [])
    except OSError:
        return False


def test_vast_instance_is_a_container_with_sshd_and_destroy_removes_it(
    lab_hosts: Any, lab_backend: Any, tmp_path: Path
) -> None:
    if not _registry_has_base():
        pytest.skip(f"{base_image_ref()} is not in the lab registry (run `gpujob lab up`)")
    fake = serve_vast(lab_backend)
    try:
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {VAST_API_KEY}"
        base = fake.url
        public = Path(f"{lab_hosts.user_key()}.pub").read_text()
        api.post(f"{base}/ssh/", json={"ssh_key": public}).raise_for_status()
        created = api.put(f"{base}/asks/12345601/", json={
            "image": base_image_ref(), "disk": 10, "runtype": "ssh_direc ssh_proxy",
            "env": {"GREETING": "hello"}, "onstart": "echo \"$GREETING\" > /root/greeting",
        }).json()  # fmt: skip
        instance_id = created["new_contract"]
        shown = wait_for(lambda: api.get(f"{base}/instances/{instance_id}/").json()["instances"],
                         "actual_status", "running")  # fmt: skip
        port = int(shown["ports"]["22/tcp"][0]["HostPort"])
        assert port == shown["ssh_port"]
        known = tmp_path / "known_hosts"
        done = ssh(lab_hosts.user_key(), shown["public_ipaddr"], port,
                   "cat /root/greeting; test -S /var/run/docker.sock || echo no-docker; "
                   "echo id=$CONTAINER_ID", known, strict="accept-new")  # fmt: skip
        assert done.returncode == 0, done.stderr
        # env reaches onstart but not SSH sessions unless onstart exports it (§7.2)
        assert done.stdout.split() == ["hello", "no-docker", "id="]

        extra = tmp_path / "extra"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(extra)],
                       check=True)  # fmt: skip
        api.post(
            f"{base}/instances/{instance_id}/ssh/",
            json={"ssh_key": extra.with_suffix(".pub").read_text()},
        ).raise_for_status()
        fake.control.reboot(instance_id)  # the container restarts: onstart runs again
        wait_for(lambda: api.get(f"{base}/instances/{instance_id}/").json()["instances"],
                 "actual_status", "running")  # fmt: skip
        again = ssh(extra, shown["public_ipaddr"], port, "cat /root/greeting", known)
        assert (again.returncode, again.stdout) == (0, "hello\n"), again.stderr
        api.delete(f"{base}/instances/{instance_id}/").raise_for_status()
        assert api.get(f"{base}/instances/{instance_id}/").json() == {"instances": None}
    finally:
        fake.stop()
    assert str(instance_id) not in lab_backend.records
    assert lab_hosts.host_name("v88001") not in {h.name for h in lab_hosts.list_hosts()}


def test_start_fakes_serves_both_apis_and_stop_fakes_removes_their_hosts(lab_hosts: Any) -> None:
    from infra.fakes import start_fakes, stop_fakes

    lab_dir = lab_hosts.lab_dir()
    env = start_fakes(lab_dir)
    try:
        assert start_fakes(lab_dir) == env  # a second call reuses the running daemons
        lam = {"Authorization": f"Bearer {env['LAMBDA_API_KEY']}"}
        base = env["GPUJOB_LAMBDA_API_URL"]
        assert base.startswith("http://127.0.0.1:") and base.endswith("/api/v1")
        public = Path(f"{lab_hosts.user_key()}.pub").read_text()
        requests.post(f"{base}/ssh-keys", json={"name": "lab", "public_key": public},
                      headers=lam).raise_for_status()  # fmt: skip
        launched = requests.post(f"{base}/instance-operations/launch", headers=lam, json={
            "region_name": "us-east-1", "instance_type_name": "gpu_1x_a10",
            "ssh_key_names": ["lab"]})  # fmt: skip
        (instance_id,) = launched.json()["data"]["instance_ids"]
        wait_for(lambda: requests.get(f"{base}/instances/{instance_id}", headers=lam)
                 .json()["data"], "status", "active")  # fmt: skip
        vast = requests.get(f"{env['GPUJOB_VAST_API_URL']}/instances/", headers={
            "Authorization": f"Bearer {env['VAST_API_KEY']}"})  # fmt: skip
        assert vast.status_code == 410
        records = json.loads((lab_dir / "fakes" / "backend-lambda.json").read_text())
        host = records[instance_id]["host"]
        assert host in {h.name for h in lab_hosts.list_hosts()}
    finally:
        stop_fakes(lab_dir)
    assert host not in {h.name for h in lab_hosts.list_hosts()}
    assert not (lab_dir / "fakes" / "lambda.json").exists()
