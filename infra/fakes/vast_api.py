"""A fake of Vast.ai's REST API (`/api/v0/...` and `GET /api/v1/instances/`), after
shared/reference/vast-api.md, §8 "For a test double" above all.

Served: auth (Bearer or `?api_key=`, anonymous search), offer search, create, show, the v1
list (and the retired v0 list answering 410), stop/start/label, reboot, destroy, account and
instance SSH keys. Instances are containers from the `HostBackend`. Not served: templates,
logs, copy, execute, bulk create, bid changes. Clusters, overlays and volumes:
vast_clusters.
"""

from __future__ import annotations

import re
from typing import Any

from infra.fakes.backend import HostBackend
from infra.fakes.keys import VAST_API_KEY, VAST_READONLY_KEY
from infra.fakes.ratelimit import Buckets
from infra.fakes.server import ApiError, FakeApi, Reply, Request, json_reply
from infra.fakes.vast_clusters import ClusterMixin
from infra.fakes.vast_control import VastControl
from infra.fakes.vast_create import CreateMixin
from infra.fakes.vast_errors import RATE_VARIANTS, error_reply, fail, rate_limited
from infra.fakes.vast_lists import ListMixin
from infra.fakes.vast_offers import QueryError, search
from infra.fakes.vast_state import VastBooks, VastInstance

V0 = "/api/v0"
ANONYMOUS = {"search_offers", "search_asks"}
INSTANCE_KEY_OPS = {"show_instance", "manage_instance", "destroy_instance"}
INSTANCE_PATH = re.compile(r"/instances/(\d+)/?$")
# Seconds between calls per (key, endpoint), from the OAS `x-rate-limit` notes (§6).
THRESHOLDS = {"create_instance": 4.5, "show_instance": 2.0, "list_instances_v1": 1.0,
              "manage_instance": 1.0, "destroy_instance": 3.0, "add_ssh_key": 1.0,
              "attach_ssh": 1.0, "detach_ssh": 2.0, "search_offers": 6.0}  # fmt: skip


def body_of(request: Request) -> dict[str, Any]:
    try:
        body = request.json()
    except ValueError:
        raise fail(400, "invalid_args", "Invalid JSON body.") from None
    if not isinstance(body, dict):
        raise fail(400, "invalid_args", "The body must be a JSON object.")
    return body


def caller_key(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query.get("api_key")


class VastApi(VastControl, CreateMixin, ListMixin, ClusterMixin, FakeApi):
    name = "vast"

    def __init__(self, backend: HostBackend) -> None:
        super().__init__()
        self.books = VastBooks(backend, self.knobs, lambda: self.clock())
        self.overlay_subnet = getattr(backend, "overlay_subnet", None)  # the lab's network
        self.lock = self.books.lock
        self.buckets = Buckets(lambda: self.clock())
        self.rate_turn = 0
        get, put, post, delete = "GET", "PUT", "POST", "DELETE"
        for method, path, op, handler in [
            (get, "/users/current/", "current_user", self.current_user),
            (post, "/bundles/", "search_offers", self.search_offers),
            (put, "/search/asks/", "search_asks", self.search_asks),
            (put, "/asks/{ask_id}/", "create_instance", self.create_instance),
            (get, "/instances/", "list_instances_v0", self.list_v0),
            (delete, "/instances/", "destroy_instances", self.destroy_many),
            (put, "/instances/reboot/{instance_id}/", "reboot_instance", self.reboot_instance),
            (get, "/instances/{instance_id}/ssh/", "show_instance_ssh", self.instance_keys),
            (post, "/instances/{instance_id}/ssh/", "attach_ssh", self.attach_key),
            (delete, "/instances/{instance_id}/ssh/{key_id}/", "detach_ssh", self.detach_key),
            (get, "/instances/{instance_id}/", "show_instance", self.show_instance),
            (put, "/instances/{instance_id}/", "manage_instance", self.manage_instance),
            (delete, "/instances/{instance_id}/", "destroy_instance", self.destroy_instance),
            (get, "/ssh/", "show_ssh_keys", self.list_keys),
            (post, "/ssh/", "add_ssh_key", self.add_key),
            (put, "/ssh/{key_id}/", "update_ssh_key", self.update_key),
            (delete, "/ssh/{key_id}/", "delete_ssh_key", self.delete_key),
        ]:  # fmt: skip
            self.route(method, V0 + path, op, handler)
        self.cluster_routes(V0)
        self.route("GET", "/api/v1/instances/", "list_instances_v1", self.list_v1)

    # --- FakeApi hooks ------------------------------------------------------------------
    def error_reply(self, status: int, code: str | None, message: str | None) -> Reply:
        return error_reply(status, code, message)

    def not_found(self, request: Request, why: str) -> Reply:
        return error_reply(404 if why == "path" else 405, "not_found", f"No route {request.path}")

    def authenticate(self, request: Request, op: str) -> None:
        key = caller_key(request)
        if key == VAST_API_KEY or (key is None and op in ANONYMOUS):
            return
        if key == VAST_READONLY_KEY:
            if request.method == "GET" or op in ANONYMOUS:
                return
            raise fail(403, "not_authorized", "This API key lacks the permission for this call.")
        with self.lock:
            owner = next((i for i in self.books.instances.values() if i.api_key == key), None)
        found = INSTANCE_PATH.search(request.path)
        if owner and op in INSTANCE_KEY_OPS and found and int(found.group(1)) == owner.id:
            return  # the per-instance key may start, stop or destroy its own instance (§3.3)
        retired = self.books.retired_keys.get(key or "")
        if op == "show_instance" and found and retired == int(found.group(1)):
            return  # ... and read it back once destroyed: `{"instances": null}` [U]
        raise fail(401, "auth_error", "Invalid user key")

    def caller(self, request: Request) -> str | None:
        """`account`, `readonly`, `instance ID` (its own instance key) or None."""
        key = caller_key(request)
        if key in (VAST_API_KEY, VAST_READONLY_KEY) or key is None:
            return {VAST_API_KEY: "account", VAST_READONLY_KEY: "readonly"}.get(key or "")
        with self.lock:
            owner = next((i for i in self.books.instances.values() if i.api_key == key), None)
            retired = self.books.retired_keys.get(key)
        if owner or retired:
            return f"instance {owner.id if owner else retired}"
        return "unknown"

    def rate_limit(self, request: Request, op: str) -> None:
        """A minimum interval per (key, endpoint); the three 429 bodies take turns."""
        threshold = THRESHOLDS.get(op)
        if not self.knobs.rate_limits or threshold is None:
            return
        who = caller_key(request) or "anonymous"
        if self.buckets.take(who, op, threshold * self.knobs.rate_scale):
            self.rate_turn += 1
            raise ApiError(rate_limited(RATE_VARIANTS[self.rate_turn % 3], threshold=threshold))

    def close(self) -> None:
        self.books.backend.close()

    # --- account and offers --------------------------------------------------------------
    def current_user(self, request: Request) -> Reply:
        with self.lock:
            keys = self.books.account_keys()
            return json_reply(200, {"id": 4242, "username": "gpujob-lab",
                                    "email": "lab@gpujob.invalid", "credit": 100.0,
                                    "ssh_key": keys[0] if keys else None})  # fmt: skip

    def _search(self, query: dict[str, Any]) -> Reply:
        try:
            with self.lock:
                return json_reply(200, {"offers": search(self.books.available_offers(), query)})
        except (QueryError, ValueError, TypeError) as bad:
            raise fail(400, "invalid_request", str(bad)) from None

    def search_offers(self, request: Request) -> Reply:
        return self._search(body_of(request))

    def search_asks(self, request: Request) -> Reply:
        query = body_of(request).get("q") or {}
        if not isinstance(query, dict):
            raise fail(400, "invalid_request", "q must be an object")
        return self._search(query)

    # --- one instance --------------------------------------------------------------------
    def _instance(self, instance_id: str, missing: int = 404) -> VastInstance:
        if not instance_id.isdigit():
            raise fail(400, "invalid_id", f"Invalid instance id {instance_id!r}.")
        inst = self.books.instances.get(int(instance_id))
        if inst is None:
            raise fail(missing, "no_such_instance", f"Instance {instance_id} not found.")
        return inst

    def show_instance(self, request: Request, instance_id: str) -> Reply:
        with self.lock:
            if not instance_id.isdigit():
                raise fail(400, "invalid_id", f"Invalid instance id {instance_id!r}.")
            inst = self.books.instances.get(int(instance_id))
            # Unknown or destroyed: `{"instances": null}`; 200 or 404 is undocumented [U].
            return json_reply(200, {"instances": inst and self.books.observe(inst)})

    def manage_instance(self, request: Request, instance_id: str) -> Reply:
        body = body_of(request)
        with self.lock:
            inst = self._instance(instance_id)
            if "label" in body:
                if len(str(body["label"] or "")) > 1024:
                    raise fail(400, "label_too_long", "Label is longer than 1024 characters.")
                inst.label = body["label"]
            if "state" in body:
                if body["state"] not in ("running", "stopped"):
                    raise fail(400, "invalid_args", "state must be running or stopped.")
                self.books.set_state(inst, body["state"])
            return json_reply(200, {"success": True})

    def reboot_instance(self, request: Request, instance_id: str) -> Reply:
        with self.lock:
            self.books.reboot(self._instance(instance_id))
            return json_reply(200, {"success": True})

    def destroy_instance(self, request: Request, instance_id: str) -> Reply:
        with self.lock:
            self.books.destroy(self._instance(instance_id))
            return json_reply(200, {"success": True})

    def destroy_many(self, request: Request) -> Reply:
        ids = body_of(request).get("instance_ids")
        if not isinstance(ids, list):
            raise fail(400, "invalid_args", "instance_ids must be a list.")
        with self.lock:
            for instance_id in ids:
                inst = self.books.instances.get(int(instance_id))
                if inst is not None:
                    self.books.destroy(inst)
            return json_reply(200, {"success": True})

    def list_v0(self, request: Request) -> Reply:
        """Retired in 2026 (§4.3): 410 so that a client still using it fails loudly. The body
        is not recorded anywhere; SkyPilot quotes the text `Use /api/v1/instances/ instead` [U]."""
        return error_reply(410, "gone", "Use /api/v1/instances/ instead")
