"""The Vast fake's own `/_fake/...` endpoints.

POST /_fake/instances/{id}   {"actual_status": "exited"|"unknown"|"offline"|"created"|
                              "loading"|..., "status_msg": str, "stuck": bool,
                              "spot_interrupted": bool, "clear": bool}
    Pin a state (it stays until `clear`), keep an instance loading, or interrupt a spot
    instance (intended, current and next state all `stopped`, as dstack reads an outbid
    one, reference §4.5): its container is stopped as a stop stops it (`docker stop`:
    SIGTERM, SIGKILL after PREEMPT_GRACE_S), its disk kept.
POST /_fake/instances/{id}/reboot        the container dies and restarts (onstart reruns)
POST /_fake/instances/{id}/drop-ssh      open SSH connections are cut
POST /_fake/instances/{id}/rewrite-keys  authorized_keys := the registered keys (§7.6)
POST /_fake/offers           {"take": [offer ids], "restore": [offer ids]}  offers churn;
                             {"outbid": {offer id: $/h}}: that offer's min_bid rises to
                             this at its next create (a bid made between search and create)
POST /_fake/reset            destroy everything; books, faults, knobs back to new
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.fakes.faults import Knobs
from infra.fakes.server import Reply, Request, json_reply
from infra.fakes.vast_state import VastBooks

if TYPE_CHECKING:
    from infra.fakes.vast_api import VastApi

PREEMPT_GRACE_S = 10
"""An outbid instance's container has Docker's default stop grace: Vast documents no notice
before it stops an interruptible instance (reference §7.6) [U]."""


class VastControl:
    def control(self: VastApi, request: Request, parts: list[str]) -> Reply | None:
        if request.method != "POST":
            return None
        if parts == ["reset"]:
            return self._reset()
        if parts == ["offers"]:
            body = request.json()
            with self.lock:
                self.books.taken.update(int(i) for i in body.get("take", []))
                self.books.taken.difference_update(int(i) for i in body.get("restore", []))
                self.books.outbid.update({int(i): float(p) for i, p in
                                          body.get("outbid", {}).items()})  # fmt: skip
                return json_reply(200, {"taken": sorted(self.books.taken)})
        if parts[:1] == ["instances"] and len(parts) in (2, 3):
            return self._instance_control(request, parts[1], parts[2] if len(parts) == 3 else "")
        return None

    def _instance_control(self: VastApi, request: Request, instance_id: str, verb: str) -> Reply:
        with self.lock:
            inst = self.books.instances.get(int(instance_id)) if instance_id.isdigit() else None
            if inst is None:
                return json_reply(404, {"error": f"no instance {instance_id}"})
            backend, books = self.books.backend, self.books
            if verb == "reboot":
                books.reboot(inst)
            elif verb == "drop-ssh":
                books.job(inst, "drop-ssh", lambda: backend.drop_ssh(str(inst.id)))
            elif verb == "rewrite-keys":
                keys = books.registered_keys(inst)
                books.job(
                    inst,
                    "rewrite-keys",
                    lambda: backend.set_authorized_keys(str(inst.id), keys, replace=True),
                )
            elif verb == "":
                body = request.json()
                if "stuck" in body:
                    inst.stuck = bool(body["stuck"])
                if body.get("clear"):
                    inst.injected = False
                if "actual_status" in body:
                    inst.actual, inst.injected = body["actual_status"], True
                if "status_msg" in body:
                    inst.status_msg = body["status_msg"]
                if body.get("spot_interrupted"):
                    inst.injected = True
                    inst.actual = inst.intended = inst.cur_state = inst.next_state = "stopped"
                    if inst.host_ready:  # its container is stopped, as Vast stops the instance
                        inst.host_ready = False
                        books.job(
                            inst,
                            "preempt",
                            lambda: backend.stop(str(inst.id), grace_s=PREEMPT_GRACE_S),
                        )
            else:
                return json_reply(404, {"error": f"no control verb {verb!r}"})
            return json_reply(200, books.instance_json(inst))

    def _reset(self: VastApi) -> Reply:
        with self.lock:
            old = self.books
            for inst in list(old.instances.values()):
                old.destroy(inst)
            self.knobs.__dict__.update(Knobs().__dict__)
            self.books = VastBooks(old.backend, self.knobs, old.clock)
            self.books.lock = old.lock
            self.faults.clear()
            self.buckets.reset()
            self.requests.clear()
        return json_reply(200, {"reset": True})
