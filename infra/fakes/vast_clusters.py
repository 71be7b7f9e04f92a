"""Vast's physical clusters, overlay networks and local volumes, as the Vast fake serves them.

Shapes from vast-ai/vast-cli (`vastai/cli/commands/clusters.py` and `.../storage.py`, the
`create overlay`, `join overlay`, `show overlays`, `delete overlay`, `volume create|delete|
search|list` commands) and Vast's guide "Multi-Node training using Torch + NCCL"
(docs.vast.ai/multi-node-training-using-torch-nccl; shared/reference/vast-api.md §3, §7):

- Offers carry `cluster_id` (null outside a physical cluster); `search offers
  cluster_id!=None` finds the clustered ones, `cluster_id=N` one cluster's.
- `POST /overlay/ {"cluster_id", "name"}` creates an overlay on a cluster; `PUT /overlay/
  {"name", "instance_id"}` joins an instance (it must run on a machine of that cluster);
  `GET /overlay/` lists `{overlay_id, name, internal_subnet, cluster_id, instances}`;
  `DELETE /overlay/ {"overlay_id"}` or `{"overlay_name"}` deletes it ("and removes all of its
  associated instances" from it: the instances themselves stay). Answers carry `msg`.
- `POST /volumes/search/` answers `{"offers": [...]}` (one volume offer per machine here);
  `PUT /volumes/ {"id": <volume offer>, "size", "name"}` creates a volume on that offer's
  machine; `GET /volumes?owner=me` answers `{"volumes": [...]}` with `start_date`;
  `DELETE /volumes/?id=N` deletes one, refused while an instance uses it (the CLI: "All
  instances using the volume must be destroyed before the volume can be deleted").
  An instance takes one with `volume_info: {"volume_id", "mount_path", "create_new", "size"}`
  at creation (vast-api.md §3.1); a volume is local to its machine [V], so the offer must be
  on that machine.

[U]: which address an instance has on its overlay is not in any answer the sources show; the
guide reads it inside the instance. Here each joined instance is given the next address of
the overlay's subnet, kept in the books (the lab backend makes the subnet the lab's own, so
that address is one the other machines reach). The exact `msg` texts are guesses.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infra.fakes.server import Reply, Request, json_reply
from infra.fakes.vast_errors import fail
from infra.fakes.vast_offers import CONTROL_KEYS, QueryError, matches

if TYPE_CHECKING:
    from infra.fakes.vast_api import VastApi
    from infra.fakes.vast_state import VastInstance

OVERLAY_SUBNETS = "10.200.{n}.0/24"
"""Where overlay subnets come from (one /24 each) unless the books name a subnet."""


@dataclass
class Overlay:
    id: int
    name: str
    cluster_id: int
    subnet: str
    members: dict[int, str] = field(default_factory=dict)  # instance id -> its address

    def json(self) -> dict[str, Any]:
        return {"overlay_id": self.id, "name": self.name, "cluster_id": self.cluster_id,
                "internal_subnet": self.subnet, "instances": sorted(self.members)}  # fmt: skip


@dataclass
class Volume:
    id: int
    name: str
    size: int
    machine_id: int
    offer_id: int
    start_date: float = field(default_factory=time.time)

    def json(self, users: list[int]) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "disk_space": self.size,
                "machine_id": self.machine_id, "start_date": self.start_date,
                "status": "in_use" if users else "available",
                "instances": users, "storage_cost": 0.15}  # fmt: skip


def volume_offers(offers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One volume offer per machine that sells GPUs: its id 5550000 + the machine's."""
    seen: dict[int, dict[str, Any]] = {}
    for o in offers:
        seen.setdefault(o["machine_id"], {
            "id": 5550000 + o["machine_id"] % 10000, "machine_id": o["machine_id"],
            "disk_space": o["disk_space"], "storage_cost": o["storage_cost"],
            "geolocation": o["geolocation"], "reliability": o["reliability"],
            "verified": o["verification"] == "verified", "verification": o["verification"],
            "external": False, "inet_up": o["inet_up"], "inet_down": o["inet_down"],
            "disk_bw": o["disk_bw"], "score": o["score"],
        })  # fmt: skip
    return list(seen.values())


class ClusterMixin:
    overlay_subnet: str | None = None
    """Every overlay's subnet, when set (the lab's network, so members reach each other)."""

    def cluster_routes(self: VastApi, prefix: str) -> None:
        get, put, post, delete = "GET", "PUT", "POST", "DELETE"
        for method, path, op, handler in [
            (post, "/overlay/", "create_overlay", self.create_overlay),
            (put, "/overlay/", "join_overlay", self.join_overlay),
            (get, "/overlay/", "show_overlays", self.show_overlays),
            (delete, "/overlay/", "delete_overlay", self.delete_overlay),
            (post, "/volumes/search/", "search_volumes", self.search_volumes),
            (put, "/volumes/", "create_volume", self.create_volume),
            (get, "/volumes/", "show_volumes", self.show_volumes),
            (delete, "/volumes/", "delete_volume", self.delete_volume),
        ]:  # fmt: skip
            self.route(method, prefix + path, op, handler)

    # --- overlays ---------------------------------------------------------------------------
    def create_overlay(self: VastApi, request: Request) -> Reply:
        from infra.fakes.vast_api import body_of

        body = body_of(request)
        cluster, name = body.get("cluster_id"), body.get("name")
        if not isinstance(cluster, int) or not isinstance(name, str) or not name:
            raise fail(400, "invalid_args", "cluster_id (int) and name are required.")
        with self.lock:
            books = self.books
            if not any(o.get("cluster_id") == cluster for o in books.offers.values()):
                raise fail(404, "no_such_cluster", f"Cluster {cluster} not found.")
            if any(o.name == name for o in books.overlays.values()):
                raise fail(400, "overlay_exists", f"An overlay named {name} exists.")
            n = len(books.overlays) + books.overlays_made
            books.overlays_made += 1
            subnet = self.overlay_subnet or OVERLAY_SUBNETS.format(n=n % 250)
            overlay = Overlay(books.new_id(), name, cluster, subnet)
            books.overlays[overlay.id] = overlay
            said = f"Created overlay {name} on cluster {cluster}."
            return json_reply(200, {"success": True, "overlay_id": overlay.id, "msg": said})

    def join_overlay(self: VastApi, request: Request) -> Reply:
        from infra.fakes.vast_api import body_of

        body = body_of(request)
        name, instance_id = body.get("name"), body.get("instance_id")
        with self.lock:
            books = self.books
            overlay = next((o for o in books.overlays.values() if o.name == name), None)
            if overlay is None:
                raise fail(404, "no_such_overlay", f"Overlay {name} not found.")
            inst = books.instances.get(instance_id) if isinstance(instance_id, int) else None
            if inst is None:
                raise fail(404, "no_such_instance", f"Instance {instance_id} not found.")
            if inst.offer.get("cluster_id") != overlay.cluster_id:
                raise fail(400, "incompatible_overlay", f"Instance {inst.id} is not on a "
                           f"machine of cluster {overlay.cluster_id}.")  # fmt: skip
            overlay.members[inst.id] = self._overlay_address(overlay, inst)
            said = f"Instance {inst.id} joined overlay {name}."
            return json_reply(200, {"success": True, "msg": said})

    def _overlay_address(self: VastApi, overlay: Overlay, inst: VastInstance) -> str:
        if self.overlay_subnet and inst.host:  # the lab: the machine's own lab address
            return inst.host
        hosts = ipaddress.ip_network(overlay.subnet).hosts()
        taken = set(overlay.members.values())
        return next(str(a) for a in hosts if str(a) not in taken and not str(a).endswith(".1"))

    def show_overlays(self: VastApi, request: Request) -> Reply:
        with self.lock:
            return json_reply(200, [o.json() for o in self.books.overlays.values()])

    def delete_overlay(self: VastApi, request: Request) -> Reply:
        from infra.fakes.vast_api import body_of

        body = body_of(request)
        with self.lock:
            books = self.books
            wanted = (body.get("overlay_id"), body.get("overlay_name"))
            found = [o for o in books.overlays.values() if wanted[0] == o.id or wanted[1] == o.name]
            if not found:
                raise fail(404, "no_such_overlay", "No such overlay.")
            del books.overlays[found[0].id]
            return json_reply(200, {"success": True, "msg": f"Deleted overlay {found[0].name}."})

    # --- volumes ----------------------------------------------------------------------------
    def search_volumes(self: VastApi, request: Request) -> Reply:
        from infra.fakes.vast_api import body_of

        query = body_of(request)
        try:
            with self.lock:
                offers = volume_offers(list(self.books.offers.values()))
                filters = {k: v for k, v in query.items() if k not in CONTROL_KEYS}
                found = [o for o in offers if all(matches(o, f, c) for f, c in filters.items())]
        except (QueryError, ValueError, TypeError) as bad:
            raise fail(400, "invalid_request", str(bad)) from None
        return json_reply(200, {"offers": found})

    def create_volume(self: VastApi, request: Request) -> Reply:
        from infra.fakes.vast_api import body_of

        body = body_of(request)
        offer_id, size = body.get("id"), body.get("size")
        if not isinstance(offer_id, int) or not isinstance(size, int) or size < 1:
            raise fail(400, "invalid_args", "id (a volume offer) and size (GB) are required.")
        with self.lock:
            books = self.books
            offer = next((o for o in volume_offers(list(books.offers.values()))
                          if o["id"] == offer_id), None)  # fmt: skip
            if offer is None:
                raise fail(404, "no_such_ask", f"Volume offer {offer_id} is not available.")
            volume = Volume(books.new_id(), str(body.get("name") or f"V.{offer_id}"), size,
                            offer["machine_id"], offer_id)  # fmt: skip
            books.volumes[volume.id] = volume
            return json_reply(200, {"success": True, "volume_id": volume.id,
                                    "machine_id": volume.machine_id})  # fmt: skip

    def show_volumes(self: VastApi, request: Request) -> Reply:
        with self.lock:
            books = self.books
            return json_reply(200, {"volumes": [v.json(books.volume_users(v.id))
                                                for v in books.volumes.values()]})  # fmt: skip

    def delete_volume(self: VastApi, request: Request) -> Reply:
        raw = request.query.get("id", "")
        with self.lock:
            books = self.books
            volume = books.volumes.get(int(raw)) if raw.isdigit() else None
            if volume is None:
                raise fail(404, "no_such_volume", f"Volume {raw} not found.")
            if books.volume_users(volume.id):
                raise fail(400, "volume_in_use", f"Volume {volume.id} is used by an instance: "
                           "destroy it first.")  # fmt: skip
            del books.volumes[volume.id]
            return json_reply(200, {"success": True, "msg": f"Deleted volume {volume.id}."})


def check_volume_info(books: Any, body: dict[str, Any], offer: dict[str, Any]) -> dict | None:
    """`volume_info` of a create: an existing volume on the offer's machine (create_new is
    not served here) -> what the instance reports in its own `volume_info`."""
    info = body.get("volume_info")
    if not info:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("volume_id"), int):
        raise fail(400, "invalid_args", "volume_info needs volume_id and mount_path.")
    volume = books.volumes.get(info["volume_id"])
    if volume is None:
        raise fail(404, "no_such_volume", f"Volume {info['volume_id']} not found.")
    if volume.machine_id != offer["machine_id"]:
        raise fail(400, "invalid_args", f"Volume {volume.id} is on machine {volume.machine_id}"
                   f", not on this offer's {offer['machine_id']}.")  # fmt: skip
    mount = str(info.get("mount_path") or "")
    if not mount.startswith("/"):
        raise fail(400, "invalid_args", "volume_info.mount_path must be an absolute path.")
    return {"volume_id": volume.id, "mount_path": mount, "name": volume.name}
