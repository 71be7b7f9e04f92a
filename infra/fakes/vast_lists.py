"""The v1 instance list (§4.2) and the SSH key endpoints (§5) of the Vast fake.

The v1 list pages 25 at a time; its `next_token` is opaque to clients (here base64 of a JSON
offset, shaped like Vast's `{"values": {"id": ...}}` tokens). `GET /ssh/` answers a list of
`{id, user_id, public_key, created_at}` (Vast's OpenAPI: "SSH key record with id, user_id,
public_key"); the `ssh_key_field` knob names the text otherwise, as other answers did. `POST
/ssh/` answers `{"success": true, "key": {...the record}}`, whose `key.id` vast-cli's live
test reads.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from infra.fakes.server import Reply, Request, json_reply
from infra.fakes.vast_errors import fail
from infra.fakes.vast_offers import QueryError, matches
from infra.fakes.vast_state import STORED_COLUMNS

if TYPE_CHECKING:
    from infra.fakes.vast_api import VastApi


def _jsonish(value: str) -> Any:
    """Query values are JSON-encoded when not strings (the CLI's rule), plain otherwise."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def _token(offset: int, last_id: int) -> str:
    return base64.b64encode(json.dumps({"values": {"id": last_id}, "offset": offset}).encode()
                            ).decode()  # fmt: skip


def _offset(token: str) -> int:
    try:
        return int(json.loads(base64.b64decode(token, validate=True))["offset"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise fail(400, "invalid_token", "Invalid after_token.") from None


class ListMixin:
    def list_v1(self: VastApi, request: Request) -> Reply:
        q = {k: _jsonish(v) for k, v in request.query.items() if k != "api_key"}
        limit = int(q.get("limit") or 25)
        limit = 5 if limit <= 0 else min(limit, 25)
        filters = q.get("select_filters") or {}
        if not isinstance(filters, dict):
            raise fail(400, "invalid_request", "select_filters must be an object.")
        for column in filters:
            if column not in STORED_COLUMNS:
                raise fail(
                    400,
                    "invalid_request",
                    f"Error in query parameters: {column} is not a valid search key",
                )
        order = [*(q.get("order_by") or []), {"col": "id", "dir": "asc"}]
        with self.lock:
            rows = [self.books.observe(i) for i in list(self.books.instances.values())]
        try:
            rows = [r for r in rows if all(matches(r, c, f) for c, f in filters.items())]
        except QueryError as bad:
            raise fail(400, "invalid_request", str(bad)) from None
        for item in reversed(order):
            col, desc = item.get("col", "id"), item.get("dir", "asc") == "desc"
            rows.sort(key=lambda r, c=col, d=desc: ((r.get(c) is None) != d, r.get(c)),
                      reverse=desc)  # fmt: skip
        start = _offset(q["after_token"]) if q.get("after_token") else 0
        page = rows[start : start + limit]
        more = start + limit < len(rows)
        cols = q.get("select_cols") or ["*"]
        if cols != ["*"]:
            page = [{c: r.get(c) for c in cols} for r in page]
        return json_reply(200, {
            "success": True, "instances_found": len(page), "total_instances": len(rows),
            "label_counts": dict(Counter(r.get("label") or "" for r in rows)),
            "next_token": _token(start + limit, rows[start + limit - 1]["id"]) if more else None,
            "instances": page,
        })  # fmt: skip

    # --- account keys ------------------------------------------------------------------------
    def _key_text(self: VastApi, request: Request) -> str:
        from infra.fakes.vast_api import body_of

        key = body_of(request).get("ssh_key")
        if not isinstance(key, str) or not key.strip().startswith(("ssh-", "ecdsa-")):
            raise fail(400, "invalid_args", "ssh_key must be an OpenSSH public key.")
        return key.strip()

    def list_keys(self: VastApi, request: Request) -> Reply:
        field = self.knobs.ssh_key_field
        with self.lock:
            keys = [dict(key) for key in self.books.ssh_keys.values()]
            for key in keys:
                key[field] = key.pop("public_key")
            return json_reply(200, keys)

    def add_key(self: VastApi, request: Request) -> Reply:
        text = self._key_text(request)
        with self.lock:
            self.books.next_key_id += 1
            key = {"id": self.books.next_key_id, "user_id": 4242, "public_key": text,
                   "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
            self.books.ssh_keys[key["id"]] = key
            return json_reply(200, {"success": True, "key": key})

    def update_key(self: VastApi, request: Request, key_id: str) -> Reply:
        text = self._key_text(request)
        with self.lock:
            key = self.books.ssh_keys.get(int(key_id)) if key_id.isdigit() else None
            if key is None:
                raise fail(404, "no_such_ssh_key", f"SSH key {key_id} not found.")
            key["public_key"] = text
            return json_reply(200, {"success": True, "key": key})

    def delete_key(self: VastApi, request: Request, key_id: str) -> Reply:
        with self.lock:
            if not key_id.isdigit() or self.books.ssh_keys.pop(int(key_id), None) is None:
                raise fail(404, "no_such_ssh_key", f"SSH key {key_id} not found.")
            return json_reply(200, {"success": True})

    # --- keys of one instance (reach a running instance; survive Vast's rewrites) ----------
    def instance_keys(self: VastApi, request: Request, instance_id: str) -> Reply:
        with self.lock:
            inst = self._instance(instance_id)
            keys = [{"id": i, "public_key": k} for i, k in inst.attached_keys.items()]
            return json_reply(200, {"success": True, "ssh_keys": json.dumps(keys)})

    def attach_key(self: VastApi, request: Request, instance_id: str) -> Reply:
        text = self._key_text(request)
        with self.lock:
            inst = self._instance(instance_id)
            self.books.next_key_id += 1
            inst.attached_keys[self.books.next_key_id] = text
            backend = self.books.backend
            self.books.job(
                inst,
                "attach-key",
                lambda: backend.set_authorized_keys(str(inst.id), [text], replace=False),
            )
            return json_reply(200, {"success": True, "msg": "SSH key attached to the instance."})

    def detach_key(self: VastApi, request: Request, instance_id: str, key_id: str) -> Reply:
        with self.lock:
            inst = self._instance(instance_id)
            if not key_id.isdigit() or inst.attached_keys.pop(int(key_id), None) is None:
                raise fail(404, "no_such_ssh_key", f"SSH key {key_id} not found.")
            keys, backend = self.books.registered_keys(inst), self.books.backend
            self.books.job(
                inst,
                "detach-key",
                lambda: backend.set_authorized_keys(str(inst.id), keys, replace=True),
            )
            return json_reply(200, {"success": True})
