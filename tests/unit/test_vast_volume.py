"""`resources.volume` on Vast: a volume found or created, attached at creation, reported,
and deleted only when gpujob made it with `delete: true`; against the Vast fake on a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests
from clouds import calls, vast_instances

from infra.fakes import VAST_API_KEY, RunningFake
from launcher.spec.volume import VolumeSpec
from launcher.targets.cloud.hosts import UpOptions, launch_hosts
from launcher.targets.cloud.rent import renting

AUTH = {"Authorization": f"Bearer {VAST_API_KEY}"}


def volumes(fake: RunningFake) -> list[dict[str, Any]]:
    reply = requests.get(f"{fake.url}/volumes", params={"owner": "me"}, headers=AUTH, timeout=10)
    reply.raise_for_status()
    return reply.json()["volumes"]


def rent_one(volume: VolumeSpec) -> None:
    """What `submit --up` of a one-node job with this resources.volume rents (no bootstrap)."""
    with renting("submit --up") as rent:
        launch_hosts(UpOptions(gpu="h100", provider="vast", yes=True, bootstrap=False,
                               volume=volume), rent)  # fmt: skip
        rent.keep()


def test_a_volume_is_created_attached_reported_and_deleted_with_delete(
    vast_fake: RunningFake, gpujob: Callable, capsys: pytest.CaptureFixture[str]
) -> None:
    rent_one(VolumeSpec(name="ckpts", size_gb=30, mount="/data", delete=True))
    said = capsys.readouterr().err
    (made,) = calls(vast_fake, "create_volume")
    assert made["body"]["size"] == 30 and made["body"]["name"] == "ckpts"
    (vol,) = volumes(vast_fake)
    (create,) = calls(vast_fake, "create_instance")
    info = create["body"]["volume_info"]
    assert info == {"volume_id": vol["id"], "mount_path": "/data", "create_new": False,
                    "size": 30}  # fmt: skip
    (inst,) = vast_instances(vast_fake)
    assert inst["machine_id"] == vol["machine_id"]  # a volume lives on one machine
    assert inst["volume_info"][0]["volume_id"] == vol["id"]
    assert f"created vast volume ckpts (id {vol['id']}, 30 GB)" in said
    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert volumes(vast_fake) == []
    assert f"deleted vast volume ckpts (id {vol['id']})" in down.stderr


def test_a_volume_gpujob_made_without_delete_is_kept(
    vast_fake: RunningFake, gpujob: Callable
) -> None:
    rent_one(VolumeSpec(name="kept", size_gb=20))
    assert gpujob("down", "--all").exit_code == 0
    assert [v["name"] for v in volumes(vast_fake)] == ["kept"]


def test_your_volume_narrows_offers_to_its_machine_and_is_never_deleted(
    vast_fake: RunningFake, gpujob: Callable
) -> None:
    found = requests.post(f"{vast_fake.url}/volumes/search/", headers=AUTH, timeout=10,
                          json={"machine_id": {"eq": 88010}}).json()["offers"]  # fmt: skip
    made = requests.put(f"{vast_fake.url}/volumes/", headers=AUTH, timeout=10,
                        json={"id": found[0]["id"], "size": 40, "name": "mine"})  # fmt: skip
    made.raise_for_status()
    rent_one(VolumeSpec(name="mine", delete=True))  # delete: true, but not gpujob's to delete
    assert calls(vast_fake, "create_volume")[1:] == []  # only the test's own create
    purchase = calls(vast_fake, "search_offers")[-1]
    assert purchase["body"]["machine_id"] == {"eq": 88010}
    (inst,) = vast_instances(vast_fake)
    assert inst["machine_id"] == 88010
    assert gpujob("down", "--all").exit_code == 0
    assert [v["name"] for v in volumes(vast_fake)] == ["mine"]


def test_a_volume_on_a_job_of_two_nodes_is_refused_in_one_line() -> None:
    from planning import spec_of

    assert spec_of(resources={"volume": {"name": "ckpts"}}).resources.volume is not None
    with pytest.raises(ValueError, match="a Vast volume lives on one machine"):
        spec_of(nodes=2, resources={"volume": {"name": "ckpts"}})
