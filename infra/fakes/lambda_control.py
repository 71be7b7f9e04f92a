"""The Lambda fake's own `/_fake/...` endpoints: capacity, per-instance mishaps, reset.

POST /_fake/capacity            {"instance_types": [..]|null, "regions": [..]|null,
                                 "count": 0, "race": false}
    Set the units left for every matching (type, region) (null = all). With `race`,
    those pairs are listed as available while launch still answers insufficient-capacity.
GET  /_fake/capacity            {"capacity": [{"instance_type", "region", "count", "race"}]}
POST /_fake/instances/{id}      {"status": "unhealthy"|"preempted"|"active",
                                 "stuck": bool, "omit_private_ip": bool}
POST /_fake/instances/{id}/reboot     the host crashes and comes back (status unchanged)
POST /_fake/instances/{id}/drop-ssh   open SSH connections to the host are cut
POST /_fake/reset               terminate everything; books, faults, knobs back to new
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.fakes import lambda_catalog as catalog
from infra.fakes.faults import Knobs
from infra.fakes.lambda_state import LambdaBooks
from infra.fakes.server import Reply, Request, json_reply

if TYPE_CHECKING:
    from infra.fakes.lambda_api import LambdaApi


class LambdaControl:
    def control(self: LambdaApi, request: Request, parts: list[str]) -> Reply | None:
        what = (request.method, *parts[:1])
        if what == ("POST", "capacity"):
            return self._set_capacity(request.json())
        if what == ("GET", "capacity"):
            with self.lock:
                return json_reply(200, {"capacity": self._capacity_rows()})
        if what == ("POST", "reset"):
            return self._reset()
        if request.method == "POST" and parts[:1] == ["instances"] and len(parts) in (2, 3):
            return self._instance_control(request, parts[1], parts[2] if len(parts) == 3 else "")
        return None

    def _capacity_rows(self: LambdaApi) -> list[dict[str, Any]]:
        books = self.books
        pairs = sorted(set(books.capacity) | books.race)
        return [{"instance_type": t, "region": r, "count": books.capacity.get((t, r), 0),
                 "race": (t, r) in books.race} for t, r in pairs]  # fmt: skip

    def _set_capacity(self: LambdaApi, body: dict[str, Any]) -> Reply:
        types = body.get("instance_types") or list(catalog.TYPES)
        regions = body.get("regions") or list(catalog.REGIONS)
        unknown = [t for t in types if t not in catalog.TYPES]
        unknown += [r for r in regions if r not in catalog.REGIONS]
        if unknown:
            raise ValueError(f"unknown instance types or regions: {unknown}")
        with self.lock:
            for type_name in types:
                for region in regions:
                    self.books.capacity[(type_name, region)] = int(body.get("count", 0))
                    if body.get("race"):
                        self.books.race.add((type_name, region))
                    else:
                        self.books.race.discard((type_name, region))
            return json_reply(200, {"capacity": self._capacity_rows()})

    def _instance_control(self: LambdaApi, request: Request, instance_id: str, verb: str) -> Reply:
        with self.lock:
            inst = self.books.instances.get(instance_id)
            if inst is None:
                return json_reply(404, {"error": f"no instance {instance_id}"})
            if verb == "reboot":
                self.books.job(inst, "crash", lambda: self.books.backend.reboot(inst.id))
            elif verb == "drop-ssh":
                self.books.job(inst, "drop-ssh", lambda: self.books.backend.drop_ssh(inst.id))
            elif verb == "":
                body = request.json()
                if "stuck" in body:
                    inst.stuck = bool(body["stuck"])
                if "omit_private_ip" in body:
                    inst.omit_private_ip = bool(body["omit_private_ip"])
                status = body.get("status")
                if status == "preempted":
                    self.books.start_terminate(inst, "preempted")
                elif status in ("unhealthy", "active"):
                    self.books.set_status(inst, status)
                elif status is not None:
                    raise ValueError(f"status {status!r} cannot be injected")
            else:
                return json_reply(404, {"error": f"no control verb {verb!r}"})
            return json_reply(200, self.books.instance_json(inst))

    def _reset(self: LambdaApi) -> Reply:
        with self.lock:
            old = self.books
            for inst in list(old.instances.values()):
                if inst.status not in ("terminating", "terminated", "preempted"):
                    old.start_terminate(inst)
            self.knobs.__dict__.update(Knobs().__dict__)
            self.books = LambdaBooks(old.backend, self.knobs, old.clock)
            self.books.lock = old.lock
            self.faults.clear()
            self.buckets.reset()
            self.requests.clear()
        return json_reply(200, {"reset": True})
