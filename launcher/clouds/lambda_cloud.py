"""Lambda Cloud (API v1): offers from `/instance-types`, one launch per call, tagged by name.

After shared/reference/lambda-cloud-api.md. An offer is a (type, region) pair the catalog
lists with capacity; capacity is raced, so a launch may still answer
`insufficient-capacity`, which becomes `CapacityError` and `up` moves to the next offer.
The SSH key is registered once under a name derived from its fingerprint (dstack's way), so
two machines of one user share it and nothing is registered twice. Errors are switched on
`code`, never on `message` (§1.3), and shown as Lambda wrote them.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import (
    TAG,
    AutostopCall,
    CapacityError,
    GpuRequest,
    HostLoss,
    Instance,
    Offer,
    ProviderError,
    host_api_url,
    owner_in_name,
    poll_interval,
    poll_until_running,
)
from launcher.clouds.spacing import Spacing
from launcher.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from launcher.clouds.lambda_firewall import PeerPorts, Rulesets
    from launcher.state.hosts import HostsDB

DEFAULT_URL = "https://cloud.lambda.ai/api/v1"
CAPACITY_CODES = {"instance-operations/launch/insufficient-capacity"}
STATUS = {"booting": "booting", "unhealthy": "booting", "active": "running",
          "terminating": "terminating", "terminated": "terminated",
          "preempted": "failed"}  # fmt: skip
FINE = {"booting", "active"}
"""Statuses of a host that is not lost."""
GPU_DESCRIPTION = re.compile(r"^(?:Tesla )?(.+?) \((\d+) GB")
OWNER_TAG, USER_TAG = "gpujob-owner", "gpujob-user"  # keys ^[a-z][a-z0-9-:]+$, values <= 128
LAUNCH_INTERVAL_S = 12.0
"""Lambda takes one launch per 12 s (OpenAPI 1.10 `info.description`). A launch takes one
instance: 1.10 has no `quantity` and Lambda refused values above 1 (reference §2.2), so
`up --count N` makes N calls, spaced (launcher.clouds.spacing) instead of answered 429."""
LAUNCHES = Spacing("GPUJOB_LAMBDA_LAUNCH_INTERVAL_S", LAUNCH_INTERVAL_S)
_BOOTING_LOCK = threading.Lock()
_booting = [0]
"""How many of this process's instances are being waited for (`wait_until_running`)."""


def _read_interval() -> float:
    if os.environ.get("GPUJOB_POLL_S"):
        return poll_interval()
    return 1.0 if _booting[0] <= 1 else 2.0


def _describe_error(reply: Any) -> str:
    from launcher.clouds.http import error_json, text_of

    body = error_json(reply)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or "code" not in error:
        return f"HTTP {reply.status_code}: {text_of(reply)}"
    text = f"{str(error.get('message', '')).rstrip('.')} ({error['code']})"
    if error.get("suggestion"):
        text += f". {error['suggestion']}"
    return text


class LambdaCloud:
    name = "lambda"
    runtime = "docker"  # a VM with Docker and the NVIDIA runtime (Lambda Stack)
    runs_in_image = False  # a VM: the job's image runs in its Docker
    ssh_user = "ubuntu"
    can_stop = False  # launch, restart, terminate: no stop (§0)
    autostop_key = "user"  # no key scoped to one instance: autostop needs the user's on the host

    def __init__(self, api_key: str | None = None, base_url: str | None = None) -> None:
        from launcher.clouds.http import bearer_client

        url = base_url or os.environ.get("GPUJOB_LAMBDA_API_URL") or DEFAULT_URL
        self.host_api_url = host_api_url("GPUJOB_LAMBDA_HOST_API_URL", url)
        self.api = bearer_client(
            self.name,
            api_key,
            "LAMBDA_API_KEY",
            "https://cloud.lambda.ai/api-keys",
            url,
            _describe_error,
        )
        # Lambda logs in on 22; the lab's hosts too. Only a tunnel would change it.
        self.ssh_port = int(os.environ.get("GPUJOB_LAMBDA_SSH_PORT", "22"))
        # Lambda's images log in as ubuntu; the lab's hosts know only root.
        self.ssh_user = os.environ.get("GPUJOB_LAMBDA_SSH_USER", "ubuntu")
        self.filesystem: tuple[str, str] | None = None  # (name, region)
        self.filesystem_to_make = False
        self.rulesets: Rulesets | None = None  # a multi-node job's (clouds.lambda_firewall)

    def use_filesystem(
        self, name: str, create_for: GpuRequest | None = None, dry_run: bool = False
    ) -> str | None:
        """Attach the persistent filesystem `name` to what `launch` makes. Filesystems are
        regional and attach only at launch (§2.8), so offers narrow to its region. One that
        does not exist is made when `create_for` (the request, `--yes`) says so, in the
        region of the cheapest offer for it, by `make_filesystem` once the rental is cleared;
        a dry run's line to say is returned."""
        listed = self._data("GET", "/file-systems", list)
        by_name = {str(fs.get("name")): fs for fs in listed if isinstance(fs, dict)}
        found = by_name.get(name)
        if found is None:
            if create_for is None:
                raise UsageError(f"lambda: no filesystem named {name!r} (yours: "
                                 f"{', '.join(sorted(by_name)) or 'none'})",
                                 "add --yes to create it in the region of the cheapest "
                                 "offer")  # fmt: skip
            return self._create_filesystem(name, create_for, dry_run)
        try:
            self.filesystem = (name, str(found["region"]["name"]))
        except (KeyError, TypeError):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "GET /file-systems", "Filesystem {region}") from None
        return None

    def _create_filesystem(self, name: str, request: GpuRequest, dry_run: bool) -> str | None:
        from launcher.clouds.base import no_offers

        offers = self.offers(request)
        if not offers:
            raise no_offers(self.name, request)
        region, mount = offers[0].region, f"/lambda/nfs/{name}"
        self.filesystem = (name, region)
        self.filesystem_to_make = not dry_run  # made by `make_filesystem`, once cleared
        if dry_run:
            return f"dry run: would create the Lambda filesystem {name} in {region} ({mount})"
        return None

    def make_filesystem(self) -> str | None:
        """The filesystem `use_filesystem` chose a region for, made: called once the rental
        cleared every other check (the budget's), so a refused rental makes none."""
        if self.filesystem is None or not self.filesystem_to_make:
            return None
        name, region = self.filesystem
        self._data("POST", "/filesystems", dict, json={"name": name, "region": region})
        self.filesystem_to_make = False
        return (
            f"created the Lambda filesystem {name} in {region}, mounted at /lambda/nfs/{name} "
            "on each host; it outlives them and bills per GB-month until you delete it"
        )

    def _data(self, method: str, path: str, expected: type, **kwargs: Any) -> Any:
        from launcher.clouds.http import shape_error

        body = self.api.call(method, path, **kwargs)
        if not isinstance(body, dict) or not isinstance(body.get("data"), expected):
            raise shape_error(self.name, f"{method} {path}", f'{{"data": {expected.__name__}}}')
        return body["data"]

    # --- offers ---------------------------------------------------------------------------
    def offers(self, request: GpuRequest) -> list[Offer]:
        found = []
        types = self._data("GET", "/instance-types", dict)
        for type_name, item in types.items():
            try:
                spec = item["instance_type"]
                gpus = int(spec["specs"]["gpus"])
                price = int(spec["price_cents_per_hour"]) / 100
                disk = float(spec["specs"]["storage_gib"])
                regions = [r["name"] for r in item["regions_with_capacity_available"]]
                described = str(spec.get("gpu_description") or spec.get("description", ""))
            except (KeyError, TypeError, ValueError):
                from launcher.clouds.http import shape_error

                raise shape_error(self.name, "GET /instance-types", "InstanceTypes") from None
            model = GPU_DESCRIPTION.match(described.removeprefix(f"{gpus}x "))
            if not model or gpus != request.count:
                continue
            if model.group(1) != request.gpu.lambda_model or not request.gpu.lambda_model:
                continue
            if request.gpu.lambda_form not in described:  # `h100-sxm`: SXM5, not PCIe
                continue
            if int(model.group(2)) < request.gpu.min_memory_gb or disk < request.min_disk_gb:
                continue
            if request.max_price is not None and price > request.max_price:
                continue
            wanted = self.filesystem[1] if self.filesystem else request.region
            for region in regions:
                if wanted in (None, region):
                    found.append(Offer(self.name, type_name, model.group(1), gpus, region,
                                       price, disk, f"{type_name}@{region}"))  # fmt: skip
        return sorted(found, key=lambda o: (o.price_per_hour, o.instance_type, o.region))

    # --- launch ---------------------------------------------------------------------------
    def ensure_ssh_key(self, public_key: str) -> str:
        """The name of a registered key equal to `public_key`, registering it if absent."""
        wanted = " ".join(public_key.split()[:2])
        for key in self._data("GET", "/ssh-keys", list):
            if isinstance(key, dict) and " ".join(str(key.get("public_key")).split()[:2]) == wanted:
                return str(key["name"])
        name = "gpujob-" + hashlib.sha1(wanted.encode()).hexdigest()[-16:]
        self._data("POST", "/ssh-keys", dict, json={"name": name, "public_key": public_key})
        return name

    def remove_added_keys(self, db: HostsDB, dry_run: bool = False) -> list[str]:
        """Lambda's key is one gpujob names (`gpujob-...`) and every launch names it: kept."""
        return []

    def launch(
        self, offer: Offer, name: str, ssh_public_key: str, image: str | None = None
    ) -> Instance:
        from launcher.state.owner import owner

        if not name.startswith(TAG):
            raise ValueError(f"instance names carry the gpujob tag: {name!r}")
        key_name = self.ensure_ssh_key(ssh_public_key)
        type_name, _, region = offer.raw_id.partition("@")
        me = owner()
        body = {"region_name": region, "instance_type_name": type_name,
                "ssh_key_names": [key_name], "name": name,
                "tags": [{"key": OWNER_TAG, "value": me.id},
                         {"key": USER_TAG, "value": me.user[:128]}]}  # fmt: skip
        if self.filesystem:
            body["file_system_names"] = [self.filesystem[0]]
        if self.rulesets is not None and (rulesets := self.rulesets.for_launch(region)):
            body["firewall_rulesets"] = rulesets
        try:
            with LAUNCHES.turn():  # one launch at a time, the last one LAUNCH_INTERVAL_S ago
                data = self._data("POST", "/instance-operations/launch", dict, json=body,
                                  creates=True)  # fmt: skip
        except ProviderError as error:
            if any(code in error.message for code in CAPACITY_CODES):
                raise CapacityError(error.message) from None
            raise
        ids = data.get("instance_ids")
        if not (isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], str)):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "POST /instance-operations/launch", "one instance id")
        return Instance(self.name, ids[0], name, "booting", ssh_user=self.ssh_user,
                        price_per_hour=offer.price_per_hour, created_at=time.time(),
                        owner=me.id, user=me.user)  # fmt: skip

    # --- a multi-node job's firewall (clouds.lambda_firewall) ------------------------------
    def open_to_peers(self, want: PeerPorts) -> None:
        """Launches from now on name the job's ruleset of their region (made if need be)."""
        from launcher.clouds.lambda_firewall import Rulesets

        self.rulesets = Rulesets(self, want)

    def peers_plan(self, want: PeerPorts) -> str:
        from launcher.clouds.lambda_firewall import plan_line

        return plan_line(want)

    def open_peers(self, addresses: Iterable[str]) -> list[str]:
        """The job's rulesets let its hosts (`addresses`, and the kept ones) reach its ports."""
        return self.rulesets.open(addresses) if self.rulesets is not None else []

    def rulesets_made(self) -> list[str]:
        return list(self.rulesets.made) if self.rulesets is not None else []

    def remove_rulesets(
        self, only: Iterable[str] | None = None, hurry: Callable[[], bool] | None = None,
        dry_run: bool = False,
    ) -> list[str]:  # fmt: skip
        from launcher.clouds.lambda_firewall import remove_rulesets

        return remove_rulesets(self, only, hurry or (lambda: False), dry_run)

    def region_of(self, instance_id: str) -> str | None:
        """The region the instance runs in (a replacement is rented there); None if gone."""
        try:
            raw = self._data("GET", f"/instances/{instance_id}", dict)
        except ProviderError:
            return None
        region = raw.get("region")
        return str(region["name"]) if isinstance(region, dict) and "name" in region else None

    # --- instances ------------------------------------------------------------------------
    def _instance(self, raw: Any) -> Instance:
        try:
            status = STATUS.get(raw["status"], "failed")
            ip = raw.get("ip") if status == "running" else None
            price = raw["instance_type"]["price_cents_per_hour"] / 100
            name = str(raw.get("name") or "")
            tags = {str(t.get("key")): str(t.get("value")) for t in raw.get("tags") or []
                    if isinstance(t, dict)}  # fmt: skip
            return Instance(self.name, str(raw["id"]), name, status, ip,
                            self.ssh_port if ip else None, self.ssh_user, price,
                            detail=str(raw["status"]),
                            owner=tags.get(OWNER_TAG) or owner_in_name(name),
                            user=tags.get(USER_TAG))  # fmt: skip
        except (KeyError, TypeError):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "an instance", "Instance {id, status, ...}") from None

    def describe(self, instance_id: str) -> Instance:
        try:
            raw = self._data("GET", f"/instances/{instance_id}", dict)
        except ProviderError as error:
            if "(global/object-does-not-exist)" in error.message:
                return Instance(self.name, instance_id, "", "terminated")
            raise
        return self._instance(raw)

    def wait_until_running(self, instance_id: str, timeout: float) -> Instance:
        """Read every second while this is the one host booting (Lambda allows about 1
        request/s), so a quick boot is seen within a second rather than two; every 2 s, the
        common pace, while several are."""
        with _BOOTING_LOCK:
            _booting[0] += 1
        try:
            return poll_until_running(self, instance_id, timeout, interval=_read_interval)
        finally:
            with _BOOTING_LOCK:
                _booting[0] -= 1

    def terminate(self, instance_id: str) -> None:
        """Skip what is already going (Lambda answers `global/unknown` to a second terminate,
        §2.5) or gone (404)."""
        if self.describe(instance_id).status in ("terminating", "terminated"):
            return
        self._data("POST", "/instance-operations/terminate", dict,
                   json={"instance_ids": [instance_id]})  # fmt: skip

    def list(self) -> list[Instance]:
        found = [self._instance(raw) for raw in self._data("GET", "/instances", list)]
        return [i for i in found if i.name.startswith(TAG) and i.status != "terminated"]

    def autostop_call(self, instance_id: str, down: bool) -> AutostopCall:
        """Terminate, whatever `down` says (Lambda cannot stop), with the user's own key."""
        return AutostopCall(self.name, self.host_api_url, instance_id, "terminate",
                            key=self.api.key)  # fmt: skip

    @staticmethod
    def loss_verdict(inst: Instance, stop_asked: bool) -> HostLoss | None:
        """Lambda's statuses: `preempted` is the cloud taking the host back; unhealthy,
        terminated or gone is `host_lost` (Lambda cannot stop a host: `stop_asked` is moot)."""
        status = inst.detail
        where = f"lambda: instance {inst.id}"
        if inst.status == "terminated" and not status:  # `describe`: 404 object-does-not-exist
            return HostLoss("host_lost", f"{where} is gone (Lambda no longer knows it)")
        if not status:  # not described (`launch`'s answer): nothing said yet, so nothing lost
            return None
        if status in FINE:
            return None
        if status == "preempted":
            return HostLoss("preempted", f"{where} was preempted (status preempted)")
        if status == "unhealthy":
            return HostLoss("host_lost", f"{where} is unhealthy (status unhealthy: Lambda's health "
                            "checks fail)")  # fmt: skip
        if status in ("terminating", "terminated"):
            return HostLoss("host_lost", f"{where} was terminated (status {status})")
        unknown = f"{where} is in a state gpujob does not know (status {status})"
        return HostLoss("host_lost", unknown)
