"""A fake of Lambda Cloud's API v1 (`/api/v1/...`), after shared/reference/lambda-cloud-api.md.

Faithful in what a provisioning client sees: auth (Bearer or Basic), the `{"data": ...}` and
`{"error": {code, message, suggestion}}` envelopes, launch validation in the order §7.4
suggests, one instance per launch and exactly one SSH key, capacity that launches consume
and terminations free, `booting -> active -> terminating -> terminated -> gone`, and 429s
(when the limiter is on). Hosts come from the `HostBackend`. Not served: 1-Click Clusters,
audit events, tickets. Firewall rulesets: infra/fakes/lambda_rulesets.py.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from infra.fakes import lambda_catalog as catalog
from infra.fakes.backend import HostBackend
from infra.fakes.keys import LAMBDA_API_KEY, LAMBDA_INACTIVE_KEY
from infra.fakes.lambda_checks import (
    bad,
    body_of,
    check_firewall_rule,
    check_id,
    data,
    generate_key_pair,
    keys_from,
)
from infra.fakes.lambda_control import LambdaControl
from infra.fakes.lambda_rulesets import LambdaRulesets
from infra.fakes.lambda_state import Instance, LambdaBooks, error_reply, fail, new_id
from infra.fakes.ratelimit import Buckets
from infra.fakes.server import ApiError, FakeApi, Reply, Request

BASE = "/api/v1"
HOSTNAME = re.compile(r"^[a-z0-9][0-9a-z-]{0,62}$")
TAG_KEY = re.compile(r"^[a-z][a-z0-9-:]+$")
MOUNT_POINT = re.compile(r"^(/home|/lambda/nfs|/data)[/a-zA-Z0-9-]*$")
FS_NAME = re.compile(r"^[a-zA-Z]+[0-9a-zA-Z-]*$")


class LambdaApi(LambdaControl, LambdaRulesets, FakeApi):
    name = "lambda"

    def __init__(self, backend: HostBackend) -> None:
        super().__init__()
        self.buckets = Buckets(lambda: self.clock())
        self.books = LambdaBooks(backend, self.knobs, lambda: self.clock())
        self.lock = self.books.lock
        get, post = "GET", "POST"
        for method, path, op, handler in [
            (get, "/instance-types", "list_instance_types", self.list_instance_types),
            (post, "/instance-operations/launch", "launch", self.launch),
            (post, "/instance-operations/terminate", "terminate", self.terminate),
            (post, "/instance-operations/restart", "restart", self.restart),
            (get, "/instances", "list_instances", self.list_instances),
            (get, "/instances/{instance_id}", "get_instance", self.get_instance),
            (post, "/instances/{instance_id}", "rename_instance", self.rename_instance),
            (get, "/ssh-keys", "list_ssh_keys", self.list_ssh_keys),
            (post, "/ssh-keys", "add_ssh_key", self.add_ssh_key),
            ("DELETE", "/ssh-keys/{key_id}", "delete_ssh_key", self.delete_ssh_key),
            (get, "/file-systems", "list_filesystems", self.list_filesystems),
            (post, "/filesystems", "create_filesystem", self.create_filesystem),
            ("DELETE", "/filesystems/{fs_id}", "delete_filesystem", self.delete_filesystem),
            (get, "/images", "list_images", lambda _r: data(catalog.images_json())),
            (get, "/regions", "list_regions",
             lambda _r: data([catalog.region_json(r) for r in catalog.REGIONS])),
            (get, "/firewall-rules", "list_firewall_rules", self.list_firewall_rules),
            ("PUT", "/firewall-rules", "set_firewall_rules", self.set_firewall_rules),
        ]:  # fmt: skip
            self.route(method, BASE + path, op, handler)
        self.route_rulesets(BASE)

    # --- FakeApi hooks ------------------------------------------------------------------
    def error_reply(self, status: int, code: str | None, message: str | None) -> Reply:
        return error_reply(status, code, message)

    def not_found(self, request: Request, why: str) -> Reply:
        return error_reply(404 if why == "path" else 405, "global/not-found")

    def authenticate(self, request: Request, op: str) -> None:
        keys = keys_from(request.headers)
        if LAMBDA_INACTIVE_KEY in keys:
            raise fail("global/account-inactive")
        if LAMBDA_API_KEY not in keys:
            raise fail("global/invalid-api-key")

    def caller(self, request: Request) -> str | None:
        keys = keys_from(request.headers)
        return "account" if LAMBDA_API_KEY in keys else ("inactive" if keys else None)

    def rate_limit(self, request: Request, op: str) -> None:
        """About 1 request/s overall; launch 1 per 12 s (the stricter of the two documented
        figures). Burst sizes are not documented [U]: 2 overall, 1 for launch."""
        if not self.knobs.rate_limits:
            return
        scale = self.knobs.rate_scale
        wait = self.buckets.take(LAMBDA_API_KEY, "all", 1.0 * scale, burst=2)
        request.limited_by = "all"
        if not wait and op == "launch":
            wait = self.buckets.take(LAMBDA_API_KEY, "launch", 12.0 * scale)
            request.limited_by = "launch"
        if wait:
            reply = error_reply(429, "global/rate-limited")
            reply.headers["Retry-After"] = str(max(1, math.ceil(wait)))  # optional [U]
            raise ApiError(reply)
        request.limited_by = None

    def close(self) -> None:
        self.books.backend.close()

    # --- instance types and instances ---------------------------------------------------
    def list_instance_types(self, request: Request) -> Reply:
        with self.lock:
            books = self.books
            return data({
                name: {"instance_type": catalog.type_json(name),
                       "regions_with_capacity_available": [
                           catalog.region_json(r) for r in catalog.REGIONS
                           if books.capacity.get((name, r), 0) > 0 or (name, r) in books.race]}
                for name in catalog.TYPES
            })  # fmt: skip

    def launch(self, request: Request) -> Reply:
        body = body_of(request)
        with self.lock:
            inst, public_key = self._validate_launch(body)
            self.books.instances[inst.id] = inst
            self.books.capacity[(inst.type_name, inst.region)] -= 1
            inst.stuck = self.knobs.boot_forever
            self.books.start_launch(inst, public_key)
            return data({"instance_ids": [inst.id]})

    def _validate_launch(self, body: dict[str, Any]) -> tuple[Instance, str]:
        """The order is the reference's suggestion (§7.4); Lambda's own order is unknown [U]."""
        books = self.books
        if body.get("quantity", 1) != 1:
            raise bad("Requested too many instances.")
        region = body.get("region_name")
        if region not in catalog.REGIONS:
            raise bad(f"Unknown region_name: {region!r}.")
        type_name = body.get("instance_type_name")
        if type_name not in catalog.TYPES:  # 400 or 404 in the spec; 404 chosen [U]
            raise fail("global/object-does-not-exist", f"Instance type {type_name!r} not found.")
        names = body.get("ssh_key_names")
        if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
            raise bad("Exactly one SSH key must be specified in ssh_key_names.")
        key = next((k for k in books.ssh_keys.values() if k["name"] == names[0]), None)
        if key is None:
            raise fail("global/object-does-not-exist", f"SSH key {names[0]!r} does not exist.")
        fs_names = body.get("file_system_names") or []
        mounts = body.get("file_system_mounts") or []
        self._check_filesystems(fs_names, mounts, region)
        name, hostname = body.get("name"), body.get("hostname")
        if name is not None and (not isinstance(name, str) or len(name) > 64):
            raise bad("name must be a string of at most 64 characters.")
        if hostname is not None and not HOSTNAME.match(str(hostname)):
            raise bad("hostname must match ^[a-z0-9][0-9a-z-]{0,62}$.")
        tags = body.get("tags") or []
        for tag in tags:
            if not (
                isinstance(tag, dict)
                and TAG_KEY.match(str(tag.get("key", "")))
                and len(tag["key"]) <= 55
                and len(str(tag.get("value", ""))) <= 128
            ):
                raise bad(f"Invalid tag: {tag!r}.")
        self._check_image(body.get("image"))
        self.check_launch_rulesets(body.get("firewall_rulesets") or [], region)
        if len(str(body.get("user_data") or "")) > 1_000_000:
            raise bad("user_data is larger than 1 MB.")
        live = [i for i in books.instances.values() if i.status in ("booting", "active",
                                                                     "unhealthy")]  # fmt: skip
        if len(live) >= self.knobs.quota:
            raise fail("global/quota-exceeded")
        if books.capacity.get((type_name, region), 0) <= 0 or (type_name, region) in books.race:
            raise fail("instance-operations/launch/insufficient-capacity")
        inst = Instance(
            id=new_id(), type_name=type_name, region=region, ssh_key_names=[names[0]],
            name=name, hostname=hostname, file_system_names=list(fs_names),
            file_system_mounts=mounts, tags=tags,
            firewall_rulesets=body.get("firewall_rulesets") or [], since=self.clock(),
        )  # fmt: skip
        return inst, key["public_key"]

    def _check_filesystems(self, names: list[Any], mounts: list[Any], region: str) -> None:
        by_name = {fs["name"]: fs for fs in self.books.filesystems.values()}
        for fs_name in names:
            fs = by_name.get(fs_name)
            if fs is None:
                raise fail("global/object-does-not-exist", f"Filesystem {fs_name!r} not found.")
            if fs["region"]["name"] != region:
                raise fail("instance-operations/launch/file-system-in-wrong-region")
        for mount in mounts:
            point = str(mount.get("mount_point", "")) if isinstance(mount, dict) else ""
            if not MOUNT_POINT.match(point) or len(point) > 256:
                raise bad(f"Invalid mount_point: {point!r}.")
            if mount.get("file_system_id") not in self.books.filesystems:
                raise fail("global/object-does-not-exist", "Filesystem was not found.")

    def _check_image(self, image: Any) -> None:
        if image is None:
            return
        ids = {i["id"] for i in catalog.images_json()}
        if not isinstance(image, dict) or not (
            image.get("family") in catalog.IMAGE_FAMILIES or image.get("id") in ids
        ):
            raise fail("global/object-does-not-exist", f"Image {image!r} not found.")

    def list_instances(self, request: Request) -> Reply:
        with self.lock:
            if request.query.get("cluster_id"):
                return data([])  # no 1-Click Clusters here
            return data(self.books.observe_all())

    def get_instance(self, request: Request, instance_id: str) -> Reply:
        with self.lock:
            return data(self.books.observe(check_id(instance_id)))

    def rename_instance(self, request: Request, instance_id: str) -> Reply:
        body = body_of(request)
        with self.lock:
            inst = self.books.instances.get(check_id(instance_id))
            if inst is None:
                raise fail("global/object-does-not-exist")
            name = body.get("name")
            if not isinstance(name, str) or len(name) > 64:
                raise bad("name must be a string of at most 64 characters.")
            inst.name = name
            return data(self.books.instance_json(inst))

    def _targets(self, request: Request) -> list[Instance]:
        ids = body_of(request).get("instance_ids")
        if not isinstance(ids, list) or not ids:
            raise bad("instance_ids must be a non-empty list.")
        found = []
        for instance_id in ids:
            inst = self.books.instances.get(check_id(str(instance_id), "instance_ids"))
            if inst is None:
                raise fail("global/object-does-not-exist")
            found.append(inst)
        return found

    def terminate(self, request: Request) -> Reply:
        with self.lock:
            targets = self._targets(request)
            if any(i.status in ("terminating", "terminated") for i in targets):
                # Seen in 2024 as `global/unknown` (skypilot#3410); the status is a guess [U].
                raise fail("global/unknown", status=500)
            for inst in targets:
                self.books.start_terminate(inst)
            return data({"terminated_instances": [self.books.instance_json(i) for i in targets]})

    def restart(self, request: Request) -> Reply:
        with self.lock:
            targets = self._targets(request)
            if any(not restart_available(i.status) for i in targets):
                raise fail("global/conflict")
            for inst in targets:
                self.books.start_restart(inst)
            return data({"restarted_instances": [self.books.instance_json(i) for i in targets]})

    # --- SSH keys ------------------------------------------------------------------------
    def list_ssh_keys(self, request: Request) -> Reply:
        with self.lock:
            return data(list(self.books.ssh_keys.values()))

    def add_ssh_key(self, request: Request) -> Reply:
        body = body_of(request)
        name, public_key = body.get("name"), body.get("public_key")
        if not isinstance(name, str) or not 1 <= len(name) <= 64:
            raise bad("name must be 1 to 64 characters.")
        private_key = None
        if public_key is None:
            public_key, private_key = generate_key_pair(name)
        elif not isinstance(public_key, str) or not 1 <= len(public_key) <= 4096:
            raise bad("public_key must be 1 to 4096 characters.")
        with self.lock:
            if any(k["name"] == name for k in self.books.ssh_keys.values()):
                # Duplicate names: undocumented [U]; refused here so clients list first.
                raise bad(f"An SSH key named {name!r} already exists.")
            key = {"id": new_id(), "name": name, "public_key": public_key.strip()}
            self.books.ssh_keys[key["id"]] = key
            return data({**key, "private_key": private_key} if private_key else key)

    def delete_ssh_key(self, request: Request, key_id: str) -> Reply:
        with self.lock:
            if self.books.ssh_keys.pop(check_id(key_id), None) is None:
                raise fail("global/not-found")
            return data({})

    # --- filesystems ----------------------------------------------------------------------
    def _fs_json(self, fs: dict[str, Any]) -> dict[str, Any]:
        return {**fs, "is_in_use": self.books.filesystem_in_use(fs["name"])}

    def list_filesystems(self, request: Request) -> Reply:
        with self.lock:
            return data([self._fs_json(fs) for fs in self.books.filesystems.values()])

    def create_filesystem(self, request: Request) -> Reply:
        body = body_of(request)
        name, region = body.get("name"), body.get("region")
        if not isinstance(name, str) or not FS_NAME.match(name) or len(name) > 60:
            raise bad("name must match ^[a-zA-Z]+[0-9a-zA-Z-]*$ and be 1 to 60 characters.")
        if region not in catalog.REGIONS:
            raise bad(f"Unknown region: {region!r}.")
        with self.lock:
            if any(fs["name"] == name for fs in self.books.filesystems.values()):
                raise fail("global/duplicate", f"A filesystem named {name!r} already exists.")
            fs = {
                "id": new_id(), "name": name, "mount_point": f"/lambda/nfs/{name}",
                "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "created_by": {"id": "3da5a70a57a7422ea8a7203f98b2198b",
                               "email": "lab@gpujob.invalid", "status": "active"},
                "region": catalog.region_json(region), "bytes_used": 0,
            }  # fmt: skip
            self.books.filesystems[fs["id"]] = fs
            return data(self._fs_json(fs))

    def delete_filesystem(self, request: Request, fs_id: str) -> Reply:
        with self.lock:
            fs = self.books.filesystems.get(check_id(fs_id))
            if fs is None:
                raise fail("global/object-does-not-exist", "Filesystem was not found.")
            if self.books.filesystem_in_use(fs["name"]):
                raise fail("filesystems/filesystem-in-use")
            del self.books.filesystems[fs_id]
            return data({"deleted_ids": [fs_id]})

    # --- firewall --------------------------------------------------------------------------
    def list_firewall_rules(self, request: Request) -> Reply:
        with self.lock:
            return data(self.books.firewall_rules)

    def set_firewall_rules(self, request: Request) -> Reply:
        rules = body_of(request).get("data")
        if not isinstance(rules, list):
            raise bad('Body must be {"data": [FirewallRule, ...]}.')
        for rule in rules:
            check_firewall_rule(rule)
        with self.lock:
            self.books.firewall_rules = rules
            return data(rules)


def restart_available(status: str) -> bool:
    """Whether `actions.restart` is available in this status."""
    return status in ("active", "unhealthy")
