"""Every request gpujob sends to the Lambda fake, and every answer the fake gives, checked
against Lambda's own OpenAPI 1.10 document (tests/data/lambda/, with its source): a field
gpujob invents, or one the fake shapes its own way, fails here before it fails on Lambda.

The workload is what a user does: `up` two hosts on a filesystem, a launch refused for
capacity on the way, `status`, `down --all`; with the fake's rate limiters on (Lambda's
intervals, scaled down), gpujob's launches are spaced within the launch limit: no 429.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import requests
from clouds import BannerBackend, BannerServer, point_at

from infra.fakes import LAMBDA_API_KEY, RunningFake, serve_lambda

SPEC = Path(__file__).resolve().parents[1] / "data" / "lambda" / "openapi-1.10.0.json"
ENVELOPE = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"},
        "suggestion": {"type": "string"}}}}}  # fmt: skip
"""Every error's shape, as the document's `info.description` gives it."""
SCALE = 0.02  # the fake's limits: 1 request per 20 ms, a launch per 0.24 s


@cache
def spec() -> dict[str, Any]:
    return json.loads(SPEC.read_text())


def operation(method: str, path: str) -> tuple[str, dict[str, Any]]:
    """The document's path template and operation for a request the fake saw."""
    for template, ops in spec()["paths"].items():
        pattern = "[^/]+".join(map(re.escape, re.split(r"\{[^}]+\}", template)))
        if re.fullmatch(pattern, path) and method.lower() in ops:
            return template, ops[method.lower()]
    raise AssertionError(f"{method} {path} is not in Lambda's API")


def problems(instance: Any, at: str | dict[str, Any]) -> list[str]:
    """What the document's schema at pointer `at` (or the schema `at`) finds wrong with
    `instance` ([] if none)."""
    from jsonschema import Draft202012Validator

    schema = {**spec(), "$ref": at} if isinstance(at, str) else at  # refs resolve in the doc
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in Draft202012Validator(schema).iter_errors(instance)]  # fmt: skip


def escaped(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def check(entry: dict[str, Any]) -> list[str]:
    """One exchange against the document: the request's body against its requestBody, the
    answer against the response of its status (documented for that operation)."""
    method, path = entry["method"], entry["path"].removesuffix("/")
    template, op = operation(method, path)
    where, found = f"{method} {path} ({entry['status']})", []
    if "requestBody" in op:
        at = escaped("paths", template, method.lower(), "requestBody", "content",
                     "application/json", "schema")  # fmt: skip
        found += [f"{where} request {p}" for p in problems(entry["body"], at)]
    status = str(entry["status"])
    if status == "429":  # the 1 request/s limit: Lambda documents no 429 (reference §3), so
        # its body is checked against the error envelope every documented error has
        return found + [f"{where} answer {p}" for p in problems(entry["reply"], ENVELOPE)]
    if status not in op["responses"]:
        return [*found, f"{where}: status {status} is not documented for it"]
    content = op["responses"][status].get("content", {}).get("application/json")
    if content:
        at = escaped("paths", template, method.lower(), "responses", status, "content",
                     "application/json", "schema")  # fmt: skip
        found += [f"{where} answer {p}" for p in problems(entry["reply"], at)]
    return found


@pytest.fixture
def lam(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[RunningFake]:
    banner = BannerServer()
    fake = serve_lambda(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    monkeypatch.setenv("GPUJOB_LAMBDA_LAUNCH_INTERVAL_S", str(12 * SCALE + 0.05))
    monkeypatch.setenv("GPUJOB_POLL_S", "0.1")
    yield fake
    fake.stop()
    banner.close()


def test_what_gpujob_sends_and_the_fake_answers_is_lambdas_api(
    lam: RunningFake, gpujob: Callable
) -> None:
    auth = {"Authorization": f"Bearer {LAMBDA_API_KEY}"}
    made = requests.post(f"{lam.url}/filesystems", json={"name": "ckpts", "region": "us-east-1"},
                         headers=auth, timeout=10)  # fmt: skip
    assert made.ok, made.text
    lam.control.call("DELETE", "/requests")  # from here on, gpujob's
    lam.control.knobs(rate_limits=True, rate_scale=SCALE)
    lam.control.fault(op="launch", status=400,
                      code="instance-operations/launch/insufficient-capacity")  # fmt: skip
    one = gpujob("up", "a10", "--provider", "lambda", "--yes", "--no-bootstrap")
    assert one.exit_code == 0, one.stderr  # refused for capacity, then the next offer
    up = gpujob("up", "a100", "--provider", "lambda", "--count", "2", "--filesystem", "ckpts",
                "--yes", "--no-bootstrap")  # fmt: skip
    assert up.exit_code == 0, up.stderr
    assert gpujob("status").exit_code == 0
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    seen = lam.control.requests()
    launches = [r for r in seen if r["op"] == "launch"]
    # spaced: the launch limit refused none. The 1 request/s limit (scaled to 50/s here)
    # refuses any call now and then, a launch too: gpujob waits as told and sends it again
    assert "launch" not in [r["limited_by"] for r in launches], launches
    launches = [r for r in launches if r["status"] != 429]
    assert [r["status"] for r in launches] == [400, 200, 200, 200]
    for launch in launches:
        assert {t["key"] for t in launch["body"]["tags"]} == {"gpujob-owner", "gpujob-user"}
        assert "quantity" not in launch["body"]  # not in 1.10; above 1, Lambda refused it
    assert [r["body"].get("file_system_names") for r in launches[2:]] == [["ckpts"]] * 2
    assert {r["op"] for r in seen} >= {"list_instance_types", "list_ssh_keys", "launch",
                                       "get_instance", "list_instances", "terminate",
                                       "list_filesystems"}  # fmt: skip
    wrong = [p for entry in seen for p in check(entry)]
    assert wrong == [], "\n".join(wrong)


def test_the_check_catches_what_lambdas_api_does_not_have() -> None:
    """The checker itself: an undocumented status, a bad tag key, an answer out of shape."""
    launch = {"method": "POST", "path": "/api/v1/instance-operations/launch", "status": 200,
              "body": {"region_name": "us-east-1", "instance_type_name": "gpu_1x_a100",
                       "ssh_key_names": ["k"], "tags": [{"key": "Owner", "value": "x"}]},
              "reply": {"data": {"instance_ids": "i-1"}}}  # fmt: skip
    found = check(launch)
    assert any("request tags/0/key" in p and "does not match" in p for p in found), found
    assert any("answer data/instance_ids" in p for p in found), found
    assert check({**launch, "status": 409, "body": {}}) != []
    with pytest.raises(AssertionError, match="not in Lambda's API"):
        operation("POST", "/api/v1/instance-operations/launch-many")
