"""Renting an offer: `PUT /api/v0/asks/{offer_id}/` (reference §3 and §8.3).

The checks are §8.3's; the container the backend starts gets Vast's predefined variables
(CONTAINER_ID, CONTAINER_API_KEY, VAST_CONTAINERLABEL, SSH_PUBLIC_KEY, ...) and the plain
`NAME: value` entries of `env`; docker-option keys other than `-p` (e.g. `-h`) are accepted
and ignored. A bid under the offer's `min_bid` still creates the instance, stopped, and says
`success: false` with `new_contract` set, as dstack saw (§3.2; the error code is a guess [U]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.fakes.server import Reply, Request, json_reply
from infra.fakes.vast_clusters import check_volume_info
from infra.fakes.vast_errors import fail
from infra.fakes.vast_state import VastInstance, new_api_key, published_ports

if TYPE_CHECKING:
    from infra.fakes.vast_api import VastApi

RUNTYPE_TOKENS = {"ssh", "jupyter", "args", "ssh_proxy", "ssh_direct", "ssh_direc",
                  "jupyter_proxy", "jupyter_direct", "jupyter_direc"}  # fmt: skip


def runtype_of(body: dict[str, Any]) -> str:
    """Both spellings (OpenAPI `ssh_direct`, CLI `ssh_direc ssh_proxy`) as Vast reports them
    back in `image_runtype`: `ssh ssh_direc ssh_proxy`. Plain `ssh` is taken as proxy-only [U]."""
    default = "args" if body.get("args") or body.get("args_str") else "ssh"
    raw = body.get("runtype") or default
    tokens = str(raw).split()
    unknown = [t for t in tokens if t not in RUNTYPE_TOKENS]
    if unknown or not tokens:
        raise fail(400, "invalid_args", f"Invalid args: unknown runtype {raw!r}.")
    if "args" in tokens:
        return "args"
    tokens = [t.replace("_direct", "_direc") for t in tokens]
    base = "jupyter" if any(t.startswith("jupyter") for t in tokens) else "ssh"
    rest = [t for t in tokens if t not in ("ssh", "jupyter")] or [f"{base}_proxy"]
    return " ".join([base, *sorted(set(rest), key=rest.index)])


def _check(body: dict[str, Any], ask_id: int) -> None:
    def bad(why: str) -> Exception:
        return fail(400, "invalid_args", f"error 400/3467: Invalid args: {why}", ask_id=ask_id)

    if not body.get("image"):
        raise bad("image is required (templates are not served by this fake).")
    if len(str(body["image"])) > 1024:
        raise bad("image is longer than 1024 characters.")
    disk = body.get("disk", 10)
    if not isinstance(disk, int | float) or disk < 8:
        raise bad("disk must be a number of GB, at least 8.")
    env = body.get("env") or {}
    if not isinstance(env, dict):
        raise bad("env must be an object of NAME: value (not a '-e ...' string).")
    entries = [f"{k}={v}" for k, v in env.items()]
    if any(len(e) > 256 for e in entries) or sum(map(len, entries)) > 32768:
        raise bad("env entries are limited to 256 characters each, 32768 in all.")
    price = body.get("price")
    if price is not None and not (isinstance(price, int | float) and 0.001 <= price <= 128):
        raise bad("price must be between 0.001 and 128 $/hour.")
    if len(str(body.get("label") or "")) > 256:
        raise bad("label is longer than 256 characters.")
    args = body.get("args") or []
    if not isinstance(args, list):
        raise bad("args must be a list of strings.")
    script = sum(len(str(a)) for a in args) + len(str(body.get("args_str") or ""))
    if script + len(str(body.get("onstart") or "")) > 4096:
        raise bad("args, args_str and onstart together exceed 4096 characters.")


class CreateMixin:
    def create_instance(self: VastApi, request: Request, ask_id: str) -> Reply:
        from infra.fakes.vast_api import body_of

        body = body_of(request)
        if not ask_id.isdigit():
            raise fail(400, "invalid_args", f"Invalid offer id {ask_id!r}.")
        offer_id = int(ask_id)
        _check(body, offer_id)
        runtype = runtype_of(body)
        with self.lock:
            books = self.books
            offer = books.offers.get(offer_id)
            if offer is None or offer_id in books.taken:
                if body.get("cancel_unavail"):
                    raise fail(410, "no_such_ask", f"error 410/3907: no_such_ask Instance type "
                               f"{offer_id} is no longer available.")  # fmt: skip
                raise fail(404, "invalid_args", f"error 404/3603: no_such_ask Instance type by "
                           f"id {offer_id} is not available.", ask_id=offer_id)  # fmt: skip
            if offer_id in books.outbid:  # someone bid more since the search
                offer["min_bid"] = books.outbid.pop(offer_id)
            inst = self._new_instance(body, offer, runtype)
            volume = check_volume_info(books, body, offer)
            inst.volumes = [volume] if volume else []
            books.taken.add(offer_id)
            books.instances[inst.id] = inst
            price = body.get("price")
            low_bid = price is not None and price < offer["min_bid"]
            if low_bid or body.get("target_state") == "stopped":
                inst.intended = inst.cur_state = inst.next_state = inst.actual = "stopped"
            else:
                inst.stuck = self.knobs.boot_forever
                books.start_launch(inst)
            reply: dict[str, Any] = {"success": not low_bid, "new_contract": inst.id,
                                     "instance_api_key": inst.api_key}  # fmt: skip
            if low_bid:
                reply.update(
                    error="insufficient_bid",
                    msg=f"Your bid {price} is below the "
                    f"minimum {offer['min_bid']}; the instance was created stopped.",
                )
            return json_reply(200, reply)

    def _new_instance(self: VastApi, body: dict[str, Any], offer: dict[str, Any],
                      runtype: str) -> VastInstance:  # fmt: skip
        books = self.books
        env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
        inst = VastInstance(
            id=books.new_id(), offer=offer, image=body["image"], runtype=runtype,
            label=body.get("label") or None, onstart=body.get("onstart"),
            args=body.get("args") or None, env=env, disk=float(body.get("disk", 10)),
            price=body.get("price"), api_key=new_api_key(),
            keys_at_creation=books.account_keys(), since=self.clock(),
        )  # fmt: skip
        launch_env = {k: v for k, v in env.items() if not k.startswith("-")}
        if self.knobs.instance_key:
            launch_env["CONTAINER_API_KEY"] = inst.api_key
        launch_env.update({
            "CONTAINER_ID": str(inst.id),
            "VAST_CONTAINERLABEL": f"C.{inst.id}", "GPU_COUNT": str(offer["num_gpus"]),
            "SSH_PUBLIC_KEY": inst.keys_at_creation[0] if inst.keys_at_creation else "",
            "DATA_DIRECTORY": "/workspace/", "JUPYTER_TOKEN": inst.api_key[:32],
        })  # fmt: skip
        for port in published_ports(env):
            number, proto = port.split("/")
            launch_env[f"VAST_{proto.upper()}_PORT_{number}"] = number  # same port: see ports()
        inst.launch_env = launch_env
        return inst
