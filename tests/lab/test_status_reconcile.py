"""`status` squares the rented hosts it shows with their clouds (issue 25): a host ended
through the cloud's own API (what an autostop or a user's console does) shows as ended in
the next `status`, not `running` at a growing cost; a cloud that does not answer leaves its
rows `unverified`, and status still exits 0. Against the Lambda fake backed by lab hosts."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
import test_up_hosts as up_hosts

from infra.fakes import LAMBDA_API_KEY, RunningFake

pytestmark = pytest.mark.lab
backend, clouds, env = up_hosts.backend, up_hosts.clouds, up_hosts.env
gpujob = up_hosts.gpujob


def test_a_host_terminated_through_the_cloud_shows_as_ended_in_the_next_status(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    up = gpujob(env, "up", "a100", "--provider", "lambda", "--yes", "--allow-cpu",
                "--timeout", "300")  # fmt: skip
    assert up.returncode == 0, up.stderr
    name, _, instance_id, *_ = up.stdout.splitlines()[-1].split("\t")
    shown = json.loads(gpujob(env, "status", "--json").stdout)["hosts"]
    assert [(h["name"], h["status"], h["verified"]) for h in shown] == [(name, "running", True)]

    reply = requests.post(f"{clouds['lambda'].url}/instance-operations/terminate", timeout=30,
                          json={"instance_ids": [instance_id]},
                          headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
    assert reply.ok, reply.text
    after = gpujob(env, "status", "--json")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["hosts"] == []
    assert f"{name} is gone from the cloud; marked terminated" in after.stderr

    again = gpujob(env, "up", "a100", "--provider", "lambda", "--yes", "--allow-cpu",
                   "--timeout", "300")  # fmt: skip
    assert again.returncode == 0, again.stderr
    other = again.stdout.splitlines()[-1].split("\t")[0]
    silent = dict(env, GPUJOB_LAMBDA_API_URL="http://127.0.0.1:9/api/v1",
                  GPUJOB_RETRY_BASE_S="0.01")  # fmt: skip
    unanswered = gpujob(silent, "status", "--json")
    assert unanswered.returncode == 0, unanswered.stderr
    rows = json.loads(unanswered.stdout)["hosts"]
    assert [(h["name"], h["verified"]) for h in rows] == [(other, False)]
    assert "(unverified)" in gpujob(silent, "status").stdout
    assert gpujob(env, "down", other).returncode == 0
