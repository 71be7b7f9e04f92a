"""The Lambda fake answers as the reference says Lambda Cloud API v1 does (null backend)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests

from infra.fakes import LAMBDA_API_KEY, RunningFake
from infra.fakes.keys import LAMBDA_INACTIVE_KEY

TYPE, REGION = "gpu_1x_a10", "us-east-1"


def url(lam: requests.Session, path: str) -> str:
    return lam.base + path  # type: ignore[attr-defined]


def add_key(lam: requests.Session, name: str = "lab") -> dict[str, Any]:
    reply = lam.post(url(lam, "/ssh-keys"), json={"name": name, "public_key": "ssh-ed25519 AAAA x"})
    assert reply.status_code == 200, reply.text
    return reply.json()["data"]


def launch(lam: requests.Session, **extra: Any) -> requests.Response:
    body = {"region_name": REGION, "instance_type_name": TYPE, "ssh_key_names": ["lab"], **extra}
    return lam.post(url(lam, "/instance-operations/launch"), json=body)


def launched(lam: requests.Session, **extra: Any) -> str:
    reply = launch(lam, **extra)
    assert reply.status_code == 200, reply.text
    (instance_id,) = reply.json()["data"]["instance_ids"]
    return instance_id


def error_of(reply: requests.Response) -> dict[str, Any]:
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"])
    return body["error"]


WRONG_BASIC = "Basic " + base64.b64encode(b"no:").decode()


@pytest.mark.parametrize("header", [None, "Bearer wrong", WRONG_BASIC])
def test_missing_or_wrong_key_is_401_invalid_api_key(lambda_fake: RunningFake, header: str) -> None:
    headers = {"Authorization": header} if header else {}
    reply = requests.get(f"{lambda_fake.url}/instances", headers=headers)
    assert reply.status_code == 401
    assert error_of(reply) == {
        "code": "global/invalid-api-key",
        "message": "API key was invalid, expired, or deleted.",
        "suggestion": "Check your API key or create a new one, then try again.",
    }


@pytest.mark.parametrize("header", [
    f"Bearer {LAMBDA_API_KEY}",
    "Basic " + base64.b64encode(f"{LAMBDA_API_KEY}:".encode()).decode(),
])  # fmt: skip
def test_bearer_and_basic_auth_are_accepted(lambda_fake: RunningFake, header: str) -> None:
    reply = requests.get(f"{lambda_fake.url}/instances", headers={"Authorization": header})
    assert reply.status_code == 200
    assert reply.json() == {"data": []}


def test_inactive_account_is_403(lambda_fake: RunningFake) -> None:
    reply = requests.get(f"{lambda_fake.url}/instance-types",
                         headers={"Authorization": f"Bearer {LAMBDA_INACTIVE_KEY}"})  # fmt: skip
    assert reply.status_code == 403
    assert error_of(reply)["code"] == "global/account-inactive"


def test_instance_types_show_capacity_per_region(lam: requests.Session) -> None:
    types = lam.get(url(lam, "/instance-types")).json()["data"]
    a10 = types[TYPE]
    assert a10["instance_type"]["specs"] == {"vcpus": 30, "memory_gib": 200, "storage_gib": 1400,
                                             "gpus": 1}  # fmt: skip
    regions = a10["regions_with_capacity_available"]
    assert {"name": REGION, "description": "Virginia, USA"} in regions
    assert types["gpu_1x_gh200"]["regions_with_capacity_available"] == []


def test_launch_boots_then_turns_active_with_an_ip(lam: requests.Session,
                                                   lambda_fake: RunningFake) -> None:  # fmt: skip
    lambda_fake.control.knobs(boot_reads=2)
    add_key(lam)
    instance_id = launched(lam, name="job-head")
    assert len(instance_id) == 32
    first = lam.get(url(lam, f"/instances/{instance_id}")).json()["data"]
    assert first["status"] == "booting"
    assert "ip" not in first and "private_ip" not in first
    assert first["actions"]["restart"]["reason_code"] == "vm-has-not-launched"
    assert lam.get(url(lam, "/instances")).json()["data"][0]["status"] == "booting"
    active = lam.get(url(lam, f"/instances/{instance_id}")).json()["data"]
    assert active["status"] == "active"
    assert active["ip"].startswith("127.0.100.")
    assert active["name"] == "job-head"
    assert active["ssh_key_names"] == ["lab"]
    assert active["region"] == {"name": REGION, "description": "Virginia, USA"}


def test_terminate_goes_terminating_terminated_then_404(lam: requests.Session) -> None:
    add_key(lam)
    instance_id = launched(lam)
    reply = lam.post(url(lam, "/instance-operations/terminate"),
                     json={"instance_ids": [instance_id]})  # fmt: skip
    assert reply.status_code == 200
    (gone,) = reply.json()["data"]["terminated_instances"]
    assert (gone["id"], gone["status"]) == (instance_id, "terminating")
    again = lam.post(url(lam, "/instance-operations/terminate"),
                     json={"instance_ids": [instance_id]})  # fmt: skip
    assert error_of(again)["code"] == "global/unknown"
    seen = [lam.get(url(lam, f"/instances/{instance_id}")) for _ in range(2)]
    assert seen[0].json()["data"]["status"] == "terminated"
    assert seen[1].status_code == 404
    assert error_of(seen[1])["code"] == "global/object-does-not-exist"
    assert lam.get(url(lam, "/instances")).json()["data"] == []


def test_capacity_is_consumed_and_sold_out_is_400(lam: requests.Session,
                                                  lambda_fake: RunningFake) -> None:  # fmt: skip
    add_key(lam)
    lambda_fake.control.capacity([TYPE], [REGION], count=1)
    launched(lam)
    reply = launch(lam)
    assert reply.status_code == 400
    assert error_of(reply) == {
        "code": "instance-operations/launch/insufficient-capacity",
        "message": "Not enough capacity to fulfill launch request.",
    }
    listed = lam.get(url(lam, "/instance-types")).json()["data"][TYPE]
    assert REGION not in [r["name"] for r in listed["regions_with_capacity_available"]]


def test_capacity_race_lists_a_region_that_launch_refuses(
    lam: requests.Session, lambda_fake: RunningFake
) -> None:
    add_key(lam)
    lambda_fake.control.capacity([TYPE], [REGION], count=0, race=True)
    listed = lam.get(url(lam, "/instance-types")).json()["data"][TYPE]
    assert REGION in [r["name"] for r in listed["regions_with_capacity_available"]]
    assert error_of(launch(lam))["code"] == "instance-operations/launch/insufficient-capacity"


@pytest.mark.parametrize("extra, code, status", [
    ({"quantity": 2}, "global/invalid-parameters", 400),
    ({"region_name": "mars-1"}, "global/invalid-parameters", 400),
    ({"instance_type_name": "gpu_9x_nope"}, "global/object-does-not-exist", 404),
    ({"ssh_key_names": ["lab", "other"]}, "global/invalid-parameters", 400),
    ({"ssh_key_names": []}, "global/invalid-parameters", 400),
    ({"ssh_key_names": ["missing"]}, "global/object-does-not-exist", 404),
    ({"name": "x" * 65}, "global/invalid-parameters", 400),
    ({"hostname": "Bad_Host"}, "global/invalid-parameters", 400),
    ({"file_system_names": ["nope"]}, "global/object-does-not-exist", 404),
])  # fmt: skip
def test_launch_validation(lam: requests.Session, extra: dict[str, Any], code: str,
                           status: int) -> None:  # fmt: skip
    add_key(lam)
    reply = launch(lam, **extra)
    assert reply.status_code == status
    assert error_of(reply)["code"] == code


def test_quantity_one_is_tolerated(lam: requests.Session) -> None:
    add_key(lam)
    assert launch(lam, quantity=1, file_system_names=[]).status_code == 200


def test_429_then_success(lam: requests.Session, lambda_fake: RunningFake) -> None:
    add_key(lam)
    lambda_fake.control.fault(op="launch", status=429, retry_after=2)
    limited = launch(lam)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "2"
    assert error_of(limited)["code"] == "global/rate-limited"
    assert launch(lam).status_code == 200


def test_rate_limiter_refuses_a_second_launch_within_12_seconds(
    lam: requests.Session, lambda_fake: RunningFake
) -> None:
    add_key(lam)
    lambda_fake.control.knobs(rate_limits=True)
    assert launch(lam).status_code == 200
    lam.get(url(lam, "/instances"))  # spends the rest of the general burst
    refused = launch(lam)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("fault, status, code", [
    ({"status": 503}, 503, "provider/internal-unavailable"),
    ({"status": 500}, 500, "global/unknown"),
    ({"status": 400, "code": "global/quota-exceeded"}, 400, "global/quota-exceeded"),
])  # fmt: skip
def test_injected_errors_have_the_documented_shape(lam: requests.Session, lambda_fake: RunningFake,
                                                   fault: dict[str, Any], status: int,
                                                   code: str) -> None:  # fmt: skip
    lambda_fake.control.fault(op="list_instances", **fault)
    reply = lam.get(url(lam, "/instances"))
    assert reply.status_code == status
    assert error_of(reply)["code"] == code
    assert lam.get(url(lam, "/instances")).status_code == 200


def test_html_from_a_proxy_and_a_dropped_launch_that_still_created(
    lam: requests.Session, lambda_fake: RunningFake
) -> None:
    add_key(lam)
    lambda_fake.control.fault("html", op="list_instance_types", status=502)
    page = lam.get(url(lam, "/instance-types"))
    assert (page.status_code, page.headers["Content-Type"].split(";")[0]) == (502, "text/html")
    lambda_fake.control.fault("drop", op="launch", handle_first=True)
    with pytest.raises(requests.ConnectionError):
        launch(lam)
    assert len(lam.get(url(lam, "/instances")).json()["data"]) == 1


def test_a_delayed_answer_times_the_client_out(lam: requests.Session,
                                               lambda_fake: RunningFake) -> None:  # fmt: skip
    lambda_fake.control.fault("delay", op="list_instances", seconds=1.0)
    with pytest.raises(requests.Timeout):
        lam.get(url(lam, "/instances"), timeout=0.2)


def test_boot_forever_keeps_an_instance_booting(lam: requests.Session,
                                                lambda_fake: RunningFake) -> None:  # fmt: skip
    add_key(lam)
    lambda_fake.control.knobs(boot_forever=True)
    instance_id = launched(lam)
    statuses = {lam.get(url(lam, f"/instances/{instance_id}")).json()["data"]["status"]
                for _ in range(5)}  # fmt: skip
    assert statuses == {"booting"}
    lambda_fake.control.instance(instance_id, stuck=False)
    assert lam.get(url(lam, f"/instances/{instance_id}")).json()["data"]["status"] == "active"


def test_restart_rename_and_malformed_id(lam: requests.Session, lambda_fake: RunningFake) -> None:
    add_key(lam)
    instance_id = launched(lam)
    booting = lam.post(url(lam, "/instance-operations/restart"),
                       json={"instance_ids": [instance_id]})  # fmt: skip
    assert booting.status_code == 409
    assert lam.get(url(lam, f"/instances/{instance_id}")).json()["data"]["status"] == "active"
    restarted = lam.post(url(lam, "/instance-operations/restart"),
                         json={"instance_ids": [instance_id]})  # fmt: skip
    assert restarted.json()["data"]["restarted_instances"][0]["status"] == "booting"
    renamed = lam.post(url(lam, f"/instances/{instance_id}"), json={"name": "renamed"})
    assert renamed.json()["data"]["name"] == "renamed"
    malformed = lam.get(url(lam, "/instances/ab"))
    assert malformed.status_code == 400
    assert error_of(malformed)["code"] == "global/invalid-parameters"


def test_ssh_keys_generate_list_delete(lam: requests.Session) -> None:
    made = lam.post(url(lam, "/ssh-keys"), json={"name": "generated"}).json()["data"]
    assert made["private_key"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    listed = lam.get(url(lam, "/ssh-keys")).json()["data"]
    assert listed == [{"id": made["id"], "name": "generated", "public_key": made["public_key"]}]
    assert lam.delete(url(lam, f"/ssh-keys/{made['id']}")).json() == {"data": {}}
    assert lam.delete(url(lam, f"/ssh-keys/{made['id']}")).status_code == 404


def test_filesystems_keep_the_path_asymmetry_and_in_use(lam: requests.Session) -> None:
    add_key(lam)
    fs = lam.post(url(lam, "/filesystems"), json={"name": "ckpt", "region": REGION}).json()["data"]
    assert fs["mount_point"] == "/lambda/nfs/ckpt"
    dup = lam.post(url(lam, "/filesystems"), json={"name": "ckpt", "region": REGION})
    assert error_of(dup)["code"] == "global/duplicate"
    wrong = launch(lam, region_name="us-west-1", file_system_names=["ckpt"])
    assert error_of(wrong)["code"] == "instance-operations/launch/file-system-in-wrong-region"
    launched(lam, file_system_names=["ckpt"])
    assert lam.get(url(lam, "/file-systems")).json()["data"][0]["is_in_use"] is True
    busy = lam.delete(url(lam, f"/filesystems/{fs['id']}"))
    assert error_of(busy)["code"] == "filesystems/filesystem-in-use"


def test_firewall_rules_replace_all_and_validate(lam: requests.Session) -> None:
    rules = [{"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0",
              "description": "SSH"}]  # fmt: skip
    assert lam.put(url(lam, "/firewall-rules"), json={"data": rules}).json() == {"data": rules}
    bad = lam.put(url(lam, "/firewall-rules"), json={"data": [{"protocol": "tcp"}]})
    assert error_of(bad)["code"] == "global/invalid-parameters"
    assert lam.get(url(lam, "/firewall-rules")).json() == {"data": rules}


def test_firewall_rulesets_attach_at_launch_in_their_region_and_go_once_unused(
    lam: requests.Session,
) -> None:
    add_key(lam)
    rule = {"protocol": "tcp", "port_range": [29400, 29400], "source_network": "192.0.2.7",
            "description": "rendezvous"}  # fmt: skip
    made = lam.post(url(lam, "/firewall-rulesets"),
                    json={"name": "job", "region": REGION, "rules": []}).json()["data"]  # fmt: skip
    assert (made["region"]["name"], made["rules"], made["instance_ids"]) == (REGION, [], [])
    wrong = launch(lam, region_name="us-west-1", firewall_rulesets=[{"id": made["id"]}])
    assert error_of(wrong)["code"] == "global/invalid-parameters"
    instance_id = launched(lam, firewall_rulesets=[{"id": made["id"]}])
    patched = lam.patch(url(lam, f"/firewall-rulesets/{made['id']}"), json={"rules": [rule]})
    assert patched.json()["data"]["rules"] == [rule]
    assert patched.json()["data"]["instance_ids"] == [instance_id]
    busy = lam.delete(url(lam, f"/firewall-rulesets/{made['id']}"))
    assert busy.status_code == 400
    assert error_of(busy)["code"] == "firewall-rulesets/firewall-ruleset-in-use"
    lam.post(url(lam, "/instance-operations/terminate"), json={"instance_ids": [instance_id]})
    assert lam.delete(url(lam, f"/firewall-rulesets/{made['id']}")).json() == {"data": {}}
    gone = lam.get(url(lam, f"/firewall-rulesets/{made['id']}"))
    assert gone.status_code == 404 and error_of(gone)["code"] == "global/object-does-not-exist"
    glob = lam.get(url(lam, "/firewall-rulesets/global")).json()["data"]
    assert glob["id"] == "global" and {"protocol": "tcp", "port_range": [22, 22],
                                       "source_network": "0.0.0.0/0",
                                       "description": "Allow SSH"} in glob["rules"]  # fmt: skip


def test_images_and_regions(lam: requests.Session) -> None:
    images = lam.get(url(lam, "/images")).json()["data"]
    assert {"lambda-stack-22-04", "ubuntu-24-04"} <= {i["family"] for i in images}
    regions = lam.get(url(lam, "/regions")).json()["data"]
    assert {"name": "us-west-1", "description": "California, USA"} in regions


def test_requests_are_recorded(lam: requests.Session, lambda_fake: RunningFake) -> None:
    add_key(lam, "recorded")
    (entry,) = lambda_fake.control.requests()
    assert (entry["method"], entry["op"], entry["status"]) == ("POST", "add_ssh_key", 200)
    assert entry["body"]["name"] == "recorded"
