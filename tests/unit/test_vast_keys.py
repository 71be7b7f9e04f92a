"""Vast's account SSH key: registered once over many creates, whatever field Vast's answer
names its text in, and removed by `down` only when gpujob added it. Against the Vast fake on
a thread; its request log says which calls were made."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from clouds import PUBLIC_KEY, calls, vast_instances

from infra.fakes import VAST_API_KEY, RunningFake

GPUS = ("rtx4090", "a100", "h100", "l4", "a10")


@pytest.fixture
def vast(vast_fake: RunningFake) -> RunningFake:
    return vast_fake


def account_keys(fake: RunningFake) -> list[dict]:
    reply = requests.get(f"{fake.url}/ssh/", timeout=10,
                         headers={"Authorization": f"Bearer {VAST_API_KEY}"})  # fmt: skip
    reply.raise_for_status()
    return reply.json()


@pytest.mark.parametrize("field", ["public_key", "key", "ssh_key"])
def test_five_creates_register_the_key_once_and_down_removes_it(
    vast: RunningFake, gpujob: Callable, field: str
) -> None:
    vast.control.knobs(ssh_key_field=field)
    for gpu in GPUS:
        result = gpujob("up", gpu, "--provider", "vast", "--yes", "--no-bootstrap")
        assert result.exit_code == 0, result.stderr
    assert len(calls(vast, "create_instance")) == 5
    assert len(calls(vast, "add_ssh_key")) == 1
    (key,) = account_keys(vast)
    assert key[field].split()[:2] == PUBLIC_KEY.split()[:2]
    dry = gpujob("down", "--all", "--dry-run")
    assert f"would remove the SSH key gpujob registered with vast (id {key['id']})" in dry.stdout
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert f"removed the SSH key gpujob registered with vast (id {key['id']})" in down.stderr
    assert account_keys(vast) == [] and vast_instances(vast) == []


def test_a_key_the_user_registered_is_used_and_left_there(
    vast: RunningFake, gpujob: Callable
) -> None:
    auth = {"Authorization": f"Bearer {VAST_API_KEY}"}
    mine = requests.post(f"{vast.url}/ssh/", json={"ssh_key": PUBLIC_KEY + " my laptop"},
                         headers=auth, timeout=10)  # fmt: skip
    mine.raise_for_status()
    for gpu in GPUS[:2]:
        assert gpujob("up", gpu, "--provider", "vast", "--yes", "--no-bootstrap").exit_code == 0
    dry = gpujob("down", "--all", "--dry-run")
    assert dry.exit_code == 0 and "SSH key" not in dry.stdout + dry.stderr
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert len(calls(vast, "add_ssh_key")) == 1  # the user's own, above
    assert calls(vast, "delete_ssh_key") == []
    assert [k["id"] for k in account_keys(vast)] == [mine.json()["key"]["id"]]


def test_parallel_launches_register_the_key_once(vast: RunningFake) -> None:
    from launcher.clouds.vast import Vast

    provider = Vast()
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(lambda _: provider.ensure_ssh_key(PUBLIC_KEY), range(5)))
    assert len(calls(vast, "add_ssh_key")) == 1
    assert len(account_keys(vast)) == 1


def test_down_keeps_the_key_while_an_instance_of_ours_still_runs_there(
    vast: RunningFake, gpujob: Callable
) -> None:
    """The cloud's list is the truth: another instance of ours left running keeps the key,
    whether the hosts db has its row or not (a row closed while Vast's list lagged)."""
    import sqlite3

    from launcher.paths import state_dir

    for gpu in GPUS[:3]:
        assert gpujob("up", gpu, "--provider", "vast", "--yes", "--no-bootstrap").exit_code == 0
    first, second, third = sorted(vast_instances(vast), key=lambda i: int(i["id"]))
    with sqlite3.connect(state_dir() / "state.db") as db:  # its row gone, its instance not
        db.execute("DELETE FROM hosts WHERE instance_id = ?", (str(third["id"]),))
    down = gpujob("down", str(first["id"]))
    assert down.exit_code == 0, down.stderr
    assert calls(vast, "delete_ssh_key") == [] and len(account_keys(vast)) == 1
    dry = gpujob("down", str(second["id"]), "--dry-run")
    assert "SSH key" not in dry.stdout + dry.stderr
    down = gpujob("down", str(second["id"]))
    assert down.exit_code == 0, down.stderr
    assert calls(vast, "delete_ssh_key") == [] and len(account_keys(vast)) == 1
    assert gpujob("down", "--all").exit_code == 0
    assert account_keys(vast) == [] and vast_instances(vast) == []
