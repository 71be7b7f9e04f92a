"""`gpujob up/down --provider vast` against the Vast fake on a thread (no root, fast)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from clouds import calls, vast_instances

from infra.fakes import RunningFake


@pytest.fixture
def env(vast_fake: RunningFake) -> RunningFake:
    return vast_fake


def test_search_create_destroy(env: RunningFake, gpujob: Callable) -> None:
    result = gpujob("up", "rtx4090", "--provider", "vast", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    search = calls(env, "search_offers")[-1]  # the table's search, then one per purchase
    assert search["body"]["gpu_name"] == {"in": ["RTX 4090"]}  # Vast's spaced name
    (create,) = calls(env, "create_instance")
    assert re.fullmatch(r"gpujob-[0-9a-f]{8}-rtx4090-[0-9a-f]{6}", create["body"]["label"])
    assert create["body"]["onstart"]
    assert calls(env, "list_instances_v0") == []  # the v0 list answers 410 since 2026
    assert calls(env, "list_instances_v1")
    (inst,) = vast_instances(env)
    assert inst["actual_status"] == "running"
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert calls(env, "destroy_instance")
    assert vast_instances(env) == []


def test_a_taken_offer_moves_to_the_next(env: RunningFake, gpujob: Callable) -> None:
    env.control.fault(op="create_instance", status=404, body={
        "success": False, "error": "invalid_args",
        "msg": "error 404/3603: no_such_ask Instance type by id 1 is not available."})  # fmt: skip
    result = gpujob("up", "h100", "--provider", "vast", "--yes", "--no-bootstrap")
    assert result.exit_code == 0, result.stderr
    asks = [(c["path"], c["status"]) for c in calls(env, "create_instance")]
    assert [status for _, status in asks] == [404, 200]
    assert asks[0][0] != asks[1][0]
    # the table's search, bought from at once (up --yes); read again after the refusal
    assert len(calls(env, "search_offers")) == 2
    assert gpujob("down", "--all").exit_code == 0
    assert vast_instances(env) == []


def test_invalid_key_is_vasts_message(
    env: RunningFake, gpujob: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAST_API_KEY", "f" * 64)
    result = gpujob("up", "rtx4090", "--provider", "vast", "--yes", "--no-bootstrap")
    assert result.exit_code == 1
    assert "vast: Invalid user key (auth_error)" in result.stderr
    assert "f" * 64 not in result.stderr


def test_reconcile_leaves_an_ownerless_tagged_instance_alone(
    env: RunningFake, gpujob: Callable
) -> None:
    from launcher.clouds.base import parse_gpu_request
    from launcher.clouds.vast import Vast
    from launcher.state.hosts import HostsDB
    from launcher.targets.cloud.reconcile import reconcile

    vast = Vast()
    offer = vast.offers(parse_gpu_request("rtx4090"))[0]
    made = vast.launch(offer, "gpujob-stranger", "ssh-ed25519 AAAAC3Nza other")
    found = reconcile(vast, HostsDB())
    assert found.unknown == [] and found.ours == []
    assert [(i.name, i.id) for i in found.foreign] == [("gpujob-stranger", made.id)]
    vast.terminate(made.id)
    vast.terminate(made.id)  # idempotent
    assert vast_instances(env) == []
