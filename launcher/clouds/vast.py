"""Vast.ai (API v0, and v1 for the instance list): search offers, rent one, label it, destroy.

After shared/reference/vast-api.md. A Vast instance is a container from the image named at
creation, so `launch` names the job's image (`GPUJOB_VAST_IMAGE` overrides it; a PyTorch image
without either) and an onstart that makes
SSH sessions see the container's environment. Offers churn: a rented or vanished offer
answers 404/410 `no_such_ask`, which becomes `CapacityError`, and `up` searches again.
The account key is registered before creation (Vast copies account keys into new instances
only) and attached to the instance after, since Vast rewrites authorized_keys from what is
registered (§7.6). Instances are listed through `/api/v1/instances/`: the v0 list answers
410 since 2026, and an SDK that read that as "no instances" polled for ever (§4.3).
"""

from __future__ import annotations

import builtins
import os
import time
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import (
    TAG,
    AutostopCall,
    CapacityError,
    HostLoss,
    Instance,
    Offer,
    ProviderError,
    host_api_url,
    owner_in_name,
    poll_until_running,
)
from launcher.clouds.spacing import Spacing
from launcher.clouds.vast_keys import VastKeys
from launcher.clouds.vast_overlay import VastOverlays
from launcher.clouds.vast_ports import VastPorts, public_ports
from launcher.clouds.vast_volume import VastVolumes

if TYPE_CHECKING:
    from launcher.clouds.base import GpuRequest

DEFAULT_URL = "https://console.vast.ai/api/v0"
DEFAULT_IMAGE = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
ONSTART = (
    "touch ~/.no_auto_tmux; "
    '[ -n "$CONTAINER_API_KEY" ] && (umask 077; mkdir -p ~/.gpujob/autostop && '
    'printf "%s\\n" "$CONTAINER_API_KEY" > ~/.gpujob/autostop/instance-key); '
    "env | grep _ | grep -v '^CONTAINER_API_KEY=' >> /etc/environment"
)
"""Run by Vast at every container start. SSH sessions get the container's variables from
/etc/environment (world-readable), all but the instance's own key: that goes to a 0600 file
of its own (umask 077), where only the autostop watcher reads it."""
MIN_RELIABILITY = 0.95
MIN_CUDA = 12.1
MIN_DISK_GB = 20
GONE_CODES = ("no_such_ask",)
CREATES = Spacing("GPUJOB_VAST_CREATE_INTERVAL_S", 4.5)
DESTROYS = Spacing("GPUJOB_VAST_DESTROY_INTERVAL_S", 3.0)
"""Vast takes one create per 4.5 s and one destroy per 3 s a key (its OAS `x-rate-limit`):
`up --count N` and `down --all` space them rather than collect 429s, which ran a down of 8
out of its tries and left a host billing."""
BOOTING = {None, "loading", "created", "restarting", "rebooting", "scheduling"}
FAILED = {"exited", "unknown", "offline", "stopped", "frozen"}
GONE = {"offline", "unknown"}
"""The host stopped answering Vast: never `running` again on its own (§4.5)."""
STOPPED = {"stopped", "exited", "frozen"}
STATUS_FIELDS = ("actual_status", "intended_status", "cur_state", "next_state", "status_msg",
                 "is_bid")  # fmt: skip
"""What Vast says of an instance's state (§4.5), kept whole for loss verdicts (providers.loss)."""


def _describe_error(reply: Any) -> str:
    from launcher.clouds.http import error_json, text_of

    body = error_json(reply)
    if isinstance(body, dict):
        message = body.get("msg") or body.get("message") or body.get("detail")
        code = body.get("error")
        if message or code:
            return f"{message or code}" + (f" ({code})" if code and message else "")
    return f"HTTP {reply.status_code}: {text_of(reply)}"


class Vast(VastKeys, VastOverlays, VastVolumes, VastPorts):
    name = "vast"
    single_use_offers = True  # an offer is one machine: rented, it is gone (launcher.clouds.fleet)
    runtime = "bare"  # the instance is a container: no Docker inside
    runs_in_image = True  # ... of the job's image, named at launch: the job runs in it as it is
    ssh_user = "root"
    can_stop = True  # PUT state stopped: the GPU is freed, the disk still bills (§5)
    autostop_key = "instance"  # CONTAINER_API_KEY: start, stop or destroy this instance only
    can_spot = True  # interruptible offers: `type: bid` searched, created with `price` (§3.1)

    def __init__(self, api_key: str | None = None, base_url: str | None = None) -> None:
        from launcher.clouds.http import bearer_client

        url = (base_url or os.environ.get("GPUJOB_VAST_API_URL") or DEFAULT_URL).rstrip("/")
        self.api = bearer_client(
            self.name,
            api_key,
            "VAST_API_KEY",
            "https://cloud.vast.ai/manage-keys",
            url,
            _describe_error,
        )
        self.v1_list = url.rsplit("/api/v0", 1)[0] + "/api/v1/instances/"
        self.host_api_url = host_api_url("GPUJOB_VAST_HOST_API_URL", url)
        self.image = os.environ.get("GPUJOB_VAST_IMAGE")  # the image every launch uses (the lab)
        self.keys_seen: set[str] = set()
        self.machines: dict[str, int] = {}

    def _call(self, method: str, path: str, expected_key: str | None, **kwargs: Any) -> Any:
        from launcher.clouds.http import shape_error

        body = self.api.call(method, path, **kwargs)
        if not isinstance(body, dict if expected_key else (dict, list)):
            raise shape_error(self.name, f"{method} {path}", "a JSON object")
        if expected_key and expected_key not in body:
            raise shape_error(self.name, f"{method} {path}", f'an object with "{expected_key}"')
        if isinstance(body, dict) and body.get("success") is False:
            raise ProviderError(f"{self.name}: {body.get('msg') or body.get('error')}")
        return body[expected_key] if expected_key and isinstance(body, dict) else body

    # --- offers ---------------------------------------------------------------------------
    def query(self, request: GpuRequest) -> dict[str, Any]:
        """The search body: Vast's own spaced GPU names, and the filters dstack and the CLI
        use so that an offer found is one that boots (verified, reliable, direct SSH port).
        Interruptible: ordered and capped by `min_bid` (any offer field orders and filters,
        vast-api.md §2.2-2.3), so the 64 answered are the cheapest bids, not the cheapest
        on-demand prices."""
        disk = max(request.min_disk_gb, MIN_DISK_GB)
        query: dict[str, Any] = {
            "verified": {"eq": True}, "external": {"eq": False},
            "rentable": {"eq": True}, "rented": {"eq": False},
            "gpu_name": {"in": list(request.gpu.vast_names)},
            "num_gpus": {"eq": request.count}, "reliability": {"gte": MIN_RELIABILITY},
            "cuda_max_good": {"gte": MIN_CUDA}, "disk_space": {"gte": disk},
            "direct_port_count": {"gte": 1},
            "order": [["min_bid" if request.spot else "dph_total", "asc"]],
            "type": "bid" if request.spot else "on-demand",
            "limit": 64, "allocated_storage": disk,
        }  # fmt: skip
        if request.gpu.min_memory_gb:
            query["gpu_ram"] = {"gte": request.gpu.min_memory_gb * 1000 - 2000}  # MB, with slack
        if request.max_price is not None:  # a bid's host costs the bid plus the disk: a bid
            # over the cap is out here, and `offers` applies the whole cap once it has priced it
            query["min_bid" if request.spot else "dph_total"] = {"lte": request.max_price}
        if request.region:
            query["geolocation"] = {"in": [request.region.upper()]}
        if request.cluster is not None:  # a multi-node job's cluster (clouds.vast_overlay)
            query["cluster_id"] = {"eq": request.cluster}
        return {**query, **self.volume_query()}  # a volume you have: its machine's offers

    def offers(self, request: GpuRequest) -> list[Offer]:
        if not request.gpu.vast_names:
            return []
        raw = self._call("POST", "/bundles/", "offers", json=self.query(request))
        if not isinstance(raw, list):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "POST /bundles/", '{"offers": [...]}')
        disk = max(request.min_disk_gb, MIN_DISK_GB)
        found = []
        for o in raw:
            try:
                bid, price = _bid_and_price(o, disk) if request.spot else (None, o["dph_total"])
                found.append(Offer(self.name, f"{o['num_gpus']}x {o['gpu_name']}",
                                   str(o["gpu_name"]), int(o["num_gpus"]),
                                   str(o.get("geolocation") or "").strip(),
                                   float(price), float(disk), str(o["id"]), bid))  # fmt: skip
                if isinstance(o.get("machine_id"), int):  # where a new volume would go
                    self.machines[str(o["id"])] = o["machine_id"]
            except (KeyError, TypeError, ValueError):
                from launcher.clouds.http import shape_error

                wanted = "offers with id, min_bid" if request.spot else "offers with id, dph_total"
                raise shape_error(self.name, "POST /bundles/", wanted) from None
        if request.spot and request.max_price is not None:  # the cap on what the host costs
            found = [o for o in found if o.price_per_hour <= request.max_price]
        return sorted(found, key=lambda o: o.price_per_hour)

    # --- launch ---------------------------------------------------------------------------
    def launch(
        self, offer: Offer, name: str, ssh_public_key: str, image: str | None = None
    ) -> Instance:
        if not name.startswith(TAG):
            raise ValueError(f"instance labels carry the gpujob tag: {name!r}")
        self.ensure_ssh_key(ssh_public_key)
        body = {"client_id": "me", "image": self.image or image or DEFAULT_IMAGE,
                "disk": int(offer.disk_gb), "label": name, "runtype": "ssh_direc ssh_proxy",
                "onstart": ONSTART, "env": self.port_env(), "price": offer.bid,
                "cancel_unavail": True}  # fmt: skip
        volume = self.volume_info(offer)  # resources.volume, made on this machine if new
        if volume is not None:
            body["volume_info"] = volume
        try:
            with CREATES.turn():
                reply = self.api.call("PUT", f"/asks/{offer.raw_id}/", json=body, creates=True)
        except ProviderError as error:
            if any(code in error.message for code in GONE_CODES):
                raise CapacityError(error.message) from None
            raise
        if not isinstance(reply, dict) or not isinstance(reply.get("new_contract"), int):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "PUT /asks/{id}/", '{"new_contract": <id>}')
        instance_id = str(reply["new_contract"])
        if reply.get("success") is False:  # created, but stopped: do not leave it billing disk
            self.terminate(instance_id)
            said = f"{self.name}: {reply.get('msg') or reply.get('error')}"
            if offer.bid is not None:  # outbid since the search: search again (§3.2)
                raise CapacityError(said)
            raise ProviderError(said)
        try:
            self._call("POST", f"/instances/{instance_id}/ssh/", None,
                       json={"ssh_key": ssh_public_key.strip()})  # fmt: skip
            self.join(instance_id)  # its overlay, for a multi-node job
        except ProviderError:
            self.terminate(instance_id)  # created but unusable: not left billing
            raise
        return Instance(self.name, instance_id, name, "booting", ssh_user=self.ssh_user,
                        price_per_hour=offer.price_per_hour, created_at=time.time(),
                        owner=owner_in_name(name))  # fmt: skip

    # --- instances ------------------------------------------------------------------------
    def _instance(self, raw: Any) -> Instance:
        try:
            actual = raw.get("actual_status")
            spot_out = raw.get("cur_state") == raw.get("intended_status") == "stopped"
            oci = "oci runtime" in str(raw.get("status_msg") or "").lower()
            if actual == "running":
                status = "running"
            elif actual in FAILED or spot_out or oci:
                status = "failed"
            else:
                status = "booting" if actual in BOOTING else "failed"
            host, port = _ssh_address(raw) if status == "running" else (None, None)
            label = str(raw.get("label") or "")  # the name: its owner is in it
            said = {k: raw.get(k) for k in STATUS_FIELDS}
            return Instance(self.name, str(raw["id"]), label, status, host,
                            port, self.ssh_user, raw.get("dph_total"),
                            raw.get("start_date"), str(actual), owner_in_name(label),
                            cloud_status=said,
                            public=public_ports(raw) if status == "running" else {})  # fmt: skip
        except (KeyError, TypeError, AttributeError, ValueError):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "an instance", "{id, actual_status, ...}") from None

    def describe(self, instance_id: str) -> Instance:
        raw = self._call("GET", f"/instances/{instance_id}/", "instances")
        if raw is None:  # Vast's answer for an unknown or destroyed id (§4.1)
            return Instance(self.name, instance_id, "", "terminated")
        return self._instance(raw)

    def wait_until_running(self, instance_id: str, timeout: float) -> Instance:
        return poll_until_running(self, instance_id, timeout)

    def terminate(self, instance_id: str) -> None:
        """Destroy; an id Vast no longer knows (`no_such_instance`) is already done."""
        try:
            with DESTROYS.turn():
                self.api.call("DELETE", f"/instances/{instance_id}/", json={})
        except ProviderError as error:
            if "no_such_instance" not in error.message and "not_found" not in error.message:
                raise

    def list(self) -> list[Instance]:
        from launcher.clouds.http import shape_error

        found: list[Instance] = []
        token: str | None = None
        for _ in range(1000):  # 25 a page; a bound rather than trusting next_token for ever
            params = {"limit": 25, **({"after_token": token} if token else {})}
            body = self.api.call("GET", "/instances/", params=params, url=self.v1_list)
            page = body.get("instances") if isinstance(body, dict) else None
            if not isinstance(page, list):
                raise shape_error(self.name, "GET /api/v1/instances/", '{"instances": [...]}')
            found.extend(self._instance(raw) for raw in page)
            token = body.get("next_token")
            if not token:
                break
        return [i for i in found if i.name.startswith(TAG)]

    def sweep_made(
        self, dry_run: bool, going: set[str] | frozenset[str] = frozenset()
    ) -> builtins.list[str]:
        """What gpujob made beside instances and no host of ours uses any more (overlays;
        volumes made with `delete: true`), deleted: `down`, and a job's release."""
        return [*self.sweep_overlays(dry_run, going), *self.sweep_volumes(dry_run)]

    def autostop_call(self, instance_id: str, down: bool) -> AutostopCall:
        """Destroy, or stop; with the instance's own key, which Vast put in its environment
        (§3.3, §7.1): the user's never goes to the host."""
        return AutostopCall(self.name, self.host_api_url, instance_id,
                            "terminate" if down else "stop")  # fmt: skip

    @staticmethod
    def loss_verdict(inst: Instance, stop_asked: bool) -> HostLoss | None:
        """Vast's states (§4.5): outbid, or stopped without gpujob asking, is `preempted`;
        destroyed, released, offline or a container that never started is `host_lost`."""
        said = inst.cloud_status
        where = f"vast: instance {inst.id}"
        if inst.status == "terminated":  # `describe` found no such id: destroyed (by whom, Vast
            return HostLoss("host_lost", f"{where} is gone (Vast no longer knows it)")  # says not)
        if not said:  # not described (`launch`'s answer): nothing said yet, so nothing lost
            return None
        actual = said.get("actual_status")
        states = (said.get("intended_status"), said.get("cur_state"), said.get("next_state"))
        message = str(said.get("status_msg") or "").strip()
        words = f"actual_status {actual}" + (f": {message}" if message else "")
        if said.get("cur_state") == "unloaded":
            return HostLoss("host_lost", f"{where} was released (cur_state unloaded; {words})")
        outbid = states == ("stopped", "stopped", "stopped")
        if outbid or actual in STOPPED or said.get("intended_status") == "stopped":
            if stop_asked:
                return None
            if outbid and said.get("is_bid"):
                return HostLoss("preempted", f"{where} was outbid: intended, current and next "
                                f"state stopped ({words})")  # fmt: skip
            return HostLoss("preempted", f"{where} stopped without gpujob asking ({words}; "
                            f"intended_status {states[0]}, cur_state {states[1]})")  # fmt: skip
        if actual in GONE:
            return HostLoss("host_lost", f"{where} is {actual}: its host stopped answering Vast "
                            f"({words})")  # fmt: skip
        if actual == "created" and "oci runtime" in message.lower():
            return HostLoss("host_lost", f"{where}: its container failed to start ({words})")
        if actual == "running" or actual in BOOTING:
            return None
        return HostLoss("host_lost", f"{where} is in a state gpujob does not know ({words})")


def _bid_and_price(offer: dict[str, Any], disk_gb: float) -> tuple[float, float]:
    """An interruptible offer's bid (its `min_bid`, as SkyPilot and dstack bid) and the host's
    hourly price at that bid: the bid plus the disk at `storage_cost` $/GB/month (dstack's
    sum, recovery.md §5.1, vast-api.md §2.3); a bid search's own `dph_total` is not
    documented to price the bid."""
    bid = float(offer["min_bid"])
    storage = offer.get("storage_cost")
    if storage is None:
        return bid, float(offer["dph_total"])
    return bid, round(bid + disk_gb * float(storage) / 30 / 24, 4)


def _ssh_address(raw: dict[str, Any]) -> tuple[str | None, int | None]:
    """Direct (public address + the port mapped to 22) when Vast mapped one, else the proxy;
    strings from Vast may carry stray whitespace (§4.4)."""
    ports = raw.get("ports") or {}
    direct = ports.get("22/tcp") if isinstance(ports, dict) else None
    if direct and raw.get("public_ipaddr"):
        return str(raw["public_ipaddr"]).strip(), int(direct[0]["HostPort"])
    if raw.get("ssh_host") and raw.get("ssh_port"):
        return str(raw["ssh_host"]).strip(), int(raw["ssh_port"])
    return None, None
