"""The Vast fake answers as the reference says Vast.ai's API does (null backend)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from infra.fakes import VAST_API_KEY, RunningFake
from infra.fakes.keys import VAST_READONLY_KEY

IMAGE = "10.77.0.1:5000/gpujob-lab/base:bookworm"


def url(vast: requests.Session, path: str) -> str:
    return vast.base + path  # type: ignore[attr-defined]


def v1(vast: requests.Session) -> str:
    return url(vast, "/instances/").replace("/api/v0/", "/api/v1/")


def offers(vast: requests.Session, query: dict[str, Any]) -> list[dict[str, Any]]:
    reply = vast.post(url(vast, "/bundles/"), json=query)
    assert reply.status_code == 200, reply.text
    return reply.json()["offers"]


def create(vast: requests.Session, offer_id: int | None = None, **extra: Any) -> int:
    if offer_id is None:
        offer_id = offers(vast, {"gpu_name": {"eq": "RTX 4090"}, "order": [["dph_total", "asc"]],
                                 "limit": 1})[0]["id"]  # fmt: skip
    body = {"client_id": "me", "image": IMAGE, "disk": 20, "runtype": "ssh_direc ssh_proxy",
            "env": {"HF_HOME": "/workspace/hf", "-p 8000:8000": "1"}, "label": "job-head",
            **extra}  # fmt: skip
    reply = vast.put(url(vast, f"/asks/{offer_id}/"), json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["success"] is True
    return reply.json()["new_contract"]


def show(vast: requests.Session, instance_id: int) -> dict[str, Any] | None:
    reply = vast.get(url(vast, f"/instances/{instance_id}/"), params={"owner": "me"})
    assert reply.status_code == 200
    return reply.json()["instances"]


@pytest.mark.parametrize("auth", [{}, {"Authorization": "Bearer nope"}])
def test_missing_or_wrong_key_is_401_auth_error(vast_fake: RunningFake, auth: dict) -> None:
    reply = requests.get(f"{vast_fake.url}/instances/1/", headers=auth)
    assert reply.status_code == 401
    assert reply.json() == {"success": False, "error": "auth_error", "msg": "Invalid user key"}


def test_api_key_query_parameter_and_anonymous_search(vast_fake: RunningFake) -> None:
    me = requests.get(f"{vast_fake.url}/users/current/", params={"api_key": VAST_API_KEY})
    assert me.status_code == 200 and {"id", "email", "credit", "ssh_key"} <= set(me.json())
    assert requests.post(f"{vast_fake.url}/bundles/", json={}).status_code == 200


def test_read_only_key_cannot_create(vast_fake: RunningFake) -> None:
    reply = requests.put(f"{vast_fake.url}/asks/12345601/", json={"image": IMAGE},
                         headers={"Authorization": f"Bearer {VAST_READONLY_KEY}"})  # fmt: skip
    assert reply.status_code == 403
    assert reply.json()["error"] == "not_authorized"


def test_search_with_a_spaced_gpu_name_and_filters(vast: requests.Session) -> None:
    found = offers(vast, {
        "verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True},
        "rented": {"eq": False}, "num_gpus": {"eq": 1}, "gpu_name": {"eq": "RTX 4090"},
        "reliability": {"gt": 0.98}, "cuda_max_good": {"gte": 12.4}, "disk_space": {"gte": 50},
        "dph_total": {"lte": 0.6}, "order": [["dph_total", "asc"]], "type": "on-demand",
        "limit": 5, "allocated_storage": 50,
    })  # fmt: skip
    assert [o["id"] for o in found] == [12345601, 12345603]
    assert all(o["gpu_name"] == "RTX 4090" and o["num_gpus"] == 1 for o in found)
    assert found[0]["dph_total"] < found[1]["dph_total"]
    assert found[0]["dph_total"] == pytest.approx(0.35 + 50 * 0.15 / 720, abs=1e-4)


@pytest.mark.parametrize("query, ids", [
    ({"gpu_name": {"eq": "RTX_4090"}}, []),
    ({"gpu_name": {"in": ["H100 SXM", "H200"]}, "num_gpus": {"gte": 8}}, [12345608, 12345614]),
    ({"gpu_name": {"eq": "A100 SXM4"}, "num_gpus": {"gte": 2, "lte": 8}}, [12345606]),
    ({"geolocation": {"in": ["CA"]}}, [12345602, 12345610]),
    ({"verified": {"eq": False}, "reliability": {"lt": 0.95}}, [12345612, 12345613]),
    ({"gpu_name": {"notin": ["RTX 4090", "RTX 3090"]}, "dph_total": {"lte": 0.5}},
     [12345612, 12345613, 12345615, 12345617, 12345618]),
    ({"direct_port_count": {"gte": 1}, "gpu_name": {"eq": "RTX 4090"}}, [12345601, 12345602]),
])  # fmt: skip
def test_query_language(vast: requests.Session, query: dict[str, Any], ids: list[int]) -> None:
    found = offers(vast, {**query, "order": [["id", "asc"]]})
    assert [o["id"] for o in found] == ids


def test_limit_defaults_to_64_and_order_has_several_keys(vast: requests.Session) -> None:
    found = offers(vast, {"order": [["num_gpus", "desc"], ["dph_total", "asc"]]})
    assert len(found) == 24  # fewer offers than the default limit of 64
    assert [o["num_gpus"] for o in found[:3]] == [8, 8, 8]
    assert found[0]["dph_total"] < found[1]["dph_total"] < found[2]["dph_total"]
    assert len(offers(vast, {"limit": 3})) == 3


def test_unknown_search_field_is_refused(vast: requests.Session) -> None:
    reply = vast.post(url(vast, "/bundles/"), json={"gpu_nme": {"eq": "RTX 4090"}})
    assert reply.status_code == 400
    assert reply.json()["error"] == "invalid_request"


def test_create_loads_then_runs_with_ssh_fields(vast: requests.Session,
                                                vast_fake: RunningFake) -> None:  # fmt: skip
    vast_fake.control.knobs(boot_reads=2)
    vast.post(url(vast, "/ssh/"), json={"ssh_key": "ssh-ed25519 AAAA lab"})
    instance_id = create(vast)
    first = show(vast, instance_id)
    assert first is not None
    assert (first["actual_status"], first["intended_status"], first["cur_state"]) == (
        "loading",
        "running",
        "running",
    )
    assert first["ports"] is None
    assert first["ssh_host"].startswith("127.0.100.") and first["ssh_port"] > 0
    show(vast, instance_id)
    running = show(vast, instance_id)
    assert running is not None and running["actual_status"] == "running"
    assert running["ports"]["22/tcp"] == [{"HostIp": "0.0.0.0",
                                           "HostPort": str(running["ssh_port"])}]  # fmt: skip
    assert running["ports"]["8000/tcp"][0]["HostPort"] == "8000"
    assert running["image_runtype"] == "ssh ssh_direc ssh_proxy"
    assert running["extra_env"] == [["HF_HOME", "/workspace/hf"], ["-p 8000:8000", "1"]]
    assert running["label"] == "job-head"
    assert vast_fake.api.books.backend.keys[str(instance_id)] == ["ssh-ed25519 AAAA lab"]


def test_rented_offer_leaves_the_market_and_comes_back_on_destroy(vast: requests.Session) -> None:
    instance_id = create(vast, 12345601)
    assert 12345601 not in [o["id"] for o in offers(vast, {})]
    again = vast.put(url(vast, "/asks/12345601/"), json={"image": IMAGE})
    assert again.status_code == 404
    assert "no_such_ask" in again.json()["msg"]
    assert again.json()["ask_id"] == 12345601
    assert vast.delete(url(vast, f"/instances/{instance_id}/")).json() == {"success": True}
    assert show(vast, instance_id) is None
    second = vast.delete(url(vast, f"/instances/{instance_id}/"))
    assert second.json()["error"] == "no_such_instance"
    assert 12345601 in [o["id"] for o in offers(vast, {})]


@pytest.mark.parametrize("body, why", [
    ({}, "image"),
    ({"image": IMAGE, "disk": 4}, "disk"),
    ({"image": IMAGE, "env": "-e A=1"}, "env"),
    ({"image": IMAGE, "price": 500}, "price"),
    ({"image": IMAGE, "runtype": "telnet"}, "runtype"),
])  # fmt: skip
def test_create_validation(vast: requests.Session, body: dict[str, Any], why: str) -> None:
    reply = vast.put(url(vast, "/asks/12345604/"), json=body)
    assert reply.status_code == 400
    assert reply.json()["error"] == "invalid_args"
    assert why in reply.json()["msg"]


def test_low_bid_creates_a_stopped_instance_and_says_failure(vast: requests.Session) -> None:
    reply = vast.put(url(vast, "/asks/12345604/"), json={"image": IMAGE, "price": 0.01}).json()
    assert reply["success"] is False and reply["new_contract"]
    shown = show(vast, reply["new_contract"])
    assert shown is not None
    assert (shown["actual_status"], shown["intended_status"]) == ("stopped", "stopped")


def test_v0_instance_list_answers_410(vast: requests.Session) -> None:
    reply = vast.get(url(vast, "/instances/"), params={"owner": "me"})
    assert reply.status_code == 410
    assert "Use /api/v1/instances/ instead" in reply.text


def test_v1_list_pages_filters_and_refuses_computed_columns(vast: requests.Session) -> None:
    ids = [create(vast, offer_id, label=f"n{offer_id % 100}")
           for offer_id in range(12345601, 12345614)]  # fmt: skip
    first = vast.get(v1(vast), params={"limit": 5}).json()
    assert (first["instances_found"], first["total_instances"]) == (5, 13)
    assert first["label_counts"]["n1"] == 1
    second = vast.get(v1(vast), params={"limit": 25, "after_token": first["next_token"]}).json()
    assert [i["id"] for i in first["instances"] + second["instances"]] == ids
    assert second["next_token"] is None
    running = vast.get(v1(vast), params={
        "select_filters": '{"label": {"in": ["n1", "n2"]}}', "select_cols": '["id", "label"]',
    }).json()  # fmt: skip
    assert running["instances"] == [{"id": ids[0], "label": "n1"}, {"id": ids[1], "label": "n2"}]
    refused = vast.get(v1(vast), params={"select_filters": '{"dph_total": {"lte": 1}}'})
    assert refused.status_code == 400
    assert refused.json()["msg"] == "Error in query parameters: dph_total is not a valid search key"
    assert vast.get(v1(vast), params={"after_token": "garbage"}).json()["error"] == "invalid_token"


@pytest.mark.parametrize("code, check", [
    (None, lambda r: r.text.startswith("API requests too frequent")),
    ("detail", lambda r: "detail" in r.json()),
    ("rate_limit_exceeded", lambda r: r.json()["error"] == "rate_limit_exceeded"),
])  # fmt: skip
def test_429_in_three_bodies_without_retry_after_then_success(
    vast: requests.Session, vast_fake: RunningFake, code: str | None, check: Any
) -> None:
    vast_fake.control.fault(op="show_instance", status=429, code=code)
    limited = vast.get(url(vast, "/instances/1/"))
    assert limited.status_code == 429 and check(limited)
    assert "Retry-After" not in limited.headers
    assert vast.get(url(vast, "/instances/1/")).status_code == 200


def test_rate_limiter_per_endpoint(vast: requests.Session, vast_fake: RunningFake) -> None:
    vast_fake.control.knobs(rate_limits=True)
    assert vast.get(url(vast, "/instances/1/")).status_code == 200
    assert vast.get(url(vast, "/instances/1/")).status_code == 429
    assert vast.get(v1(vast)).status_code == 200  # another endpoint, its own interval


def test_stop_start_label_and_injected_states(vast: requests.Session,
                                              vast_fake: RunningFake) -> None:  # fmt: skip
    instance_id = create(vast)
    assert vast.put(url(vast, f"/instances/{instance_id}/"),
                    json={"state": "stopped"}).json() == {"success": True}  # fmt: skip
    stopped = show(vast, instance_id)
    assert stopped is not None
    assert (stopped["actual_status"], stopped["cur_state"], stopped["ports"]) == (
        "stopped",
        "stopped",
        None,
    )
    vast.put(url(vast, f"/instances/{instance_id}/"), json={"state": "running", "label": "x"})
    shown = show(vast, instance_id)
    assert shown is not None and (shown["actual_status"], shown["label"]) == ("running", "x")
    too_long = vast.put(url(vast, f"/instances/{instance_id}/"), json={"label": "x" * 1025})
    assert too_long.json()["error"] == "label_too_long"
    vast_fake.control.instance(instance_id, actual_status="created",
                               status_msg="error: OCI runtime create failed: boom")  # fmt: skip
    assert [show(vast, instance_id)["actual_status"] for _ in range(3)] == ["created"] * 3
    vast_fake.control.instance(instance_id, spot_interrupted=True)
    shown = show(vast, instance_id)
    assert shown is not None
    assert {shown["intended_status"], shown["cur_state"], shown["next_state"]} == {"stopped"}


def test_instance_key_may_destroy_only_its_own_instance(
    vast: requests.Session, vast_fake: RunningFake
) -> None:
    reply = vast.put(url(vast, "/asks/12345604/"), json={"image": IMAGE}).json()
    own = {"Authorization": f"Bearer {reply['instance_api_key']}"}
    other = create(vast)
    assert requests.delete(url(vast, f"/instances/{other}/"), headers=own).status_code == 401
    mine = requests.delete(url(vast, f"/instances/{reply['new_contract']}/"), headers=own)
    assert mine.json() == {"success": True}


def test_ssh_keys_account_and_instance(vast: requests.Session, vast_fake: RunningFake) -> None:
    added = vast.post(url(vast, "/ssh/"), json={"ssh_key": "ssh-ed25519 AAAA one"}).json()["key"]
    assert [k["public_key"] for k in vast.get(url(vast, "/ssh/")).json()] == [
        "ssh-ed25519 AAAA one"
    ]
    instance_id = create(vast)
    vast.post(url(vast, f"/instances/{instance_id}/ssh/"), json={"ssh_key": "ssh-ed25519 AAAA two"})
    backend = vast_fake.api.books.backend
    assert backend.keys[str(instance_id)] == ["ssh-ed25519 AAAA one", "ssh-ed25519 AAAA two"]
    vast_fake.control.rewrite_keys(instance_id)
    assert ("replace_keys", str(instance_id)) in backend.calls
    assert vast.delete(url(vast, f"/ssh/{added['id']}/")).json() == {"success": True}
    assert vast.delete(url(vast, f"/ssh/{added['id']}/")).status_code == 404


def test_taken_offer_is_no_such_ask_and_cancel_unavail_is_410(
    vast: requests.Session, vast_fake: RunningFake
) -> None:
    vast_fake.control.call("POST", "offers", {"take": [12345605]})
    assert vast.put(url(vast, "/asks/12345605/"), json={"image": IMAGE}).status_code == 404
    gone = vast.put(url(vast, "/asks/12345605/"), json={"image": IMAGE, "cancel_unavail": True})
    assert (gone.status_code, gone.json()["error"]) == (410, "no_such_ask")


def test_non_json_5xx(vast: requests.Session, vast_fake: RunningFake) -> None:
    vast_fake.control.fault(op="search_offers", status=500)
    vast_fake.control.fault(op="search_offers", status=504)
    plain = vast.post(url(vast, "/bundles/"), json={})
    assert (plain.status_code, plain.headers["Content-Type"].split(";")[0]) == (500, "text/plain")
    assert vast.post(url(vast, "/bundles/"), json={}).status_code == 504
