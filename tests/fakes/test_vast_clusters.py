"""The Vast fake's clusters, overlays and volumes, in the shapes vast-cli sends and reads
(`create overlay`, `join overlay`, `show overlays`, `delete overlay`, `volume create|list|
delete`)."""

from __future__ import annotations

import requests
from test_vast_api import create, offers, show, url


def test_an_overlay_takes_only_instances_of_its_cluster_and_loses_the_destroyed(
    vast: requests.Session,
) -> None:
    clustered = offers(vast, {"cluster_id": {"neq": None}, "order": [["id", "asc"]]})
    assert {o["cluster_id"] for o in clustered} == {3001, 3002}
    made = vast.post(url(vast, "/overlay/"), json={"cluster_id": 3002, "name": "net-a"})
    assert made.status_code == 200 and made.json()["msg"], made.text
    inside = create(vast, next(o["id"] for o in clustered if o["cluster_id"] == 3002))
    outside = create(vast)  # an RTX 4090 of no cluster
    joined = vast.put(url(vast, "/overlay/"), json={"name": "net-a", "instance_id": inside})
    assert joined.status_code == 200, joined.text
    refused = vast.put(url(vast, "/overlay/"), json={"name": "net-a", "instance_id": outside})
    assert refused.status_code == 400 and refused.json()["error"] == "incompatible_overlay"
    (net,) = vast.get(url(vast, "/overlay/")).json()
    assert (net["name"], net["cluster_id"], net["instances"]) == ("net-a", 3002, [inside])
    assert net["internal_subnet"].endswith("/24")
    assert vast.delete(url(vast, f"/instances/{inside}/"), json={}).status_code == 200
    assert vast.get(url(vast, "/overlay/")).json()[0]["instances"] == []
    gone = vast.delete(url(vast, "/overlay/"), json={"overlay_name": "net-a"})
    assert gone.status_code == 200 and vast.get(url(vast, "/overlay/")).json() == []
    assert (
        vast.post(url(vast, "/overlay/"), json={"cluster_id": 99, "name": "x"}).status_code == 404
    )


def test_a_volume_is_made_on_a_machine_attached_there_only_and_kept_while_used(
    vast: requests.Session,
) -> None:
    (offer,) = offers(vast, {"id": {"eq": 12345601}})
    query = {"machine_id": {"eq": offer["machine_id"]}}
    found = vast.post(url(vast, "/volumes/search/"), json=query).json()["offers"]
    made = vast.put(url(vast, "/volumes/"), json={"id": found[0]["id"], "size": 20, "name": "v1"})
    assert made.status_code == 200, made.text
    volume_id = made.json()["volume_id"]
    info = {"volume_id": volume_id, "mount_path": "/data", "create_new": False, "size": 20}
    body = {"client_id": "me", "image": "vastai/base:cuda-12.4", "disk": 20, "volume_info": info}
    elsewhere = vast.put(url(vast, "/asks/12345604/"), json=body)
    assert elsewhere.status_code == 400  # a volume is local to its machine
    inst = create(vast, offer["id"], volume_info=info)
    assert show(vast, inst)["volume_info"][0]["mount_path"] == "/data"  # type: ignore[index]
    (listed,) = vast.get(url(vast, "/volumes"), params={"owner": "me"}).json()["volumes"]
    assert (listed["name"], listed["instances"]) == ("v1", [inst])
    assert vast.delete(url(vast, "/volumes/"), params={"id": volume_id}).status_code == 400
    vast.delete(url(vast, f"/instances/{inst}/"), json={})
    assert vast.delete(url(vast, "/volumes/"), params={"id": volume_id}).status_code == 200
