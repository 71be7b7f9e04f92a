"""The Vast fake's books: offers, instances and their lifecycle, SSH keys (reference §3-5).

`actual_status` goes `null -> loading -> running` once the backend has the container up
and the boot knobs are met; `intended_status`/`cur_state`/`next_state` follow the user's
stop and start. Destroy removes an instance at once (its container goes in the background)
and gives its offer back to the market. Injected states (`exited`, `offline`, ...) stay put
until cleared, as the reference says they never turn into `running` on their own.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infra.fakes.backend import HostBackend
from infra.fakes.faults import Knobs
from infra.fakes.vast_offers import seed_offers

# Columns the v1 list may filter on (stored); computed ones such as dph_total are refused.
STORED_COLUMNS = {"id", "label", "actual_status", "intended_status", "cur_state", "next_state",
                  "gpu_name", "verification", "machine_id", "host_id", "image_uuid",
                  "geolocation", "is_bid", "status_msg", "ssh_host", "public_ipaddr"}  # fmt: skip


@dataclass
class VastInstance:
    id: int
    offer: dict[str, Any]
    image: str
    runtype: str
    label: str
    onstart: str | None
    args: list[str] | None
    env: dict[str, str]
    disk: float
    price: float | None
    api_key: str
    keys_at_creation: list[str]
    since: float
    start_date: float = field(default_factory=time.time)
    actual: str | None = None
    intended: str = "running"
    cur_state: str = "running"
    next_state: str = "running"
    status_msg: str | None = None
    reads: int = 0
    host: str | None = None
    ssh_port: int | None = None
    host_ready: bool = False
    stuck: bool = False
    injected: bool = False
    attached_keys: dict[int, str] = field(default_factory=dict)
    launch_env: dict[str, str] = field(default_factory=dict)
    launched: bool = False
    volumes: list[dict[str, Any]] = field(default_factory=list)
    jobs: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def direct(self) -> bool:
        return any(t in self.runtype.split() for t in ("ssh_direc", "jupyter_direc"))

    def ports(self) -> dict[str, list[dict[str, str]]] | None:
        """Docker-shaped port map, only while running. In the lab a container shares its
        machine's network, so a `-p X:Y` port is published as itself (HostPort Y) rather
        than on a random external port; only 22 is moved, to the instance's own port."""
        if self.actual != "running":
            return None
        mapped: dict[str, list[dict[str, str]]] = {}
        if self.direct and self.ssh_port:
            mapped["22/tcp"] = [{"HostIp": "0.0.0.0", "HostPort": str(self.ssh_port)}]
        for inner in published_ports(self.env):
            mapped.setdefault(inner, [{"HostIp": "0.0.0.0", "HostPort": inner.split("/")[0]}])
        return mapped


def published_ports(env: dict[str, str]) -> list[str]:
    """`"-p 8000:8000": "1"` keys as `8000/tcp`; requests >= 70000 keep the internal number."""
    found = []
    for key in env:
        parts = key.split()
        if len(parts) == 2 and parts[0] == "-p":
            inner = parts[1].split(":")[-1]
            number, _, proto = inner.partition("/")
            found.append(f"{number}/{proto or 'tcp'}")
    return found


class VastBooks:
    def __init__(self, backend: HostBackend, knobs: Knobs, clock: Callable[[], float]) -> None:
        self.backend = backend
        self.knobs = knobs
        self.clock = clock
        self.lock = threading.RLock()
        self.offers = seed_offers()
        self.taken: set[int] = set()
        self.outbid: dict[int, float] = {}  # offer id -> the min_bid its next create meets
        self.instances: dict[int, VastInstance] = {}
        self.retired_keys: dict[str, int] = {}  # a destroyed instance's key -> its id
        self.ssh_keys: dict[int, dict[str, Any]] = {}
        self.next_id = 7835600
        self.next_key_id = 100
        self.overlays: dict[int, Any] = {}  # vast_clusters.Overlay by id
        self.overlays_made = 0
        self.volumes: dict[int, Any] = {}  # vast_clusters.Volume by id

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def available_offers(self) -> list[dict[str, Any]]:
        return [o for i, o in self.offers.items() if i not in self.taken]

    def volume_users(self, volume_id: int) -> list[int]:
        return [i.id for i in self.instances.values()
                if any(v["volume_id"] == volume_id for v in i.volumes)]  # fmt: skip

    def account_keys(self) -> list[str]:
        return [k["public_key"] for k in self.ssh_keys.values()]

    def registered_keys(self, inst: VastInstance) -> list[str]:
        """What Vast writes into authorized_keys: creation-time account keys + attached ones."""
        return [*inst.keys_at_creation, *inst.attached_keys.values()]

    # --- lifecycle -----------------------------------------------------------------------
    def _advance(self, inst: VastInstance) -> None:
        if inst.injected:
            return
        if inst.intended == "stopped":
            return  # the stop job marks it stopped once the container is down
        k = self.knobs
        if (inst.host_ready and not inst.stuck and inst.reads >= k.boot_reads
                and self.clock() - inst.since >= k.boot_seconds):  # fmt: skip
            if inst.actual != "running":
                inst.actual = "running"
                inst.status_msg = f"success, running {inst.image.replace(':', '_')}/ssh"
        elif inst.actual not in ("rebooting",) and (inst.host_ready or inst.reads > 0):
            inst.actual = "loading"

    def observe(self, inst: VastInstance) -> dict[str, Any]:
        self._advance(inst)
        inst.reads += 1
        return self.instance_json(inst)

    def instance_json(self, inst: VastInstance) -> dict[str, Any]:
        offer = inst.offer
        copied = ("machine_id", "host_id", "num_gpus", "gpu_name", "gpu_ram", "cpu_cores_effective",
                  "cpu_ram", "cuda_max_good", "driver_version", "dph_base", "min_bid",
                  "reliability2", "geolocation", "verification", "static_ip",
                  "direct_port_count")  # fmt: skip
        return {
            "id": inst.id, "label": inst.label, **{k: offer[k] for k in copied},
            "actual_status": inst.actual, "intended_status": inst.intended,
            "cur_state": inst.cur_state, "next_state": inst.next_state,
            "status_msg": inst.status_msg, "image_uuid": inst.image,
            "image_runtype": inst.runtype, "image_args": inst.args or [],
            "onstart": inst.onstart, "extra_env": [[k, v] for k, v in inst.env.items()],
            "ssh_host": inst.host, "ssh_port": inst.ssh_port,
            "ssh_idx": "1", "public_ipaddr": inst.host, "local_ipaddrs": f"{inst.host or ''} \n",
            "direct_port_start": 40000, "direct_port_end": 40099, "ports": inst.ports(),
            "gpu_totalram": offer["gpu_total_ram"], "gpu_util": 0.0, "gpu_temp": 39.0,
            "cpu_util": 0.01, "mem_usage": 0.01, "mem_limit": 64.0, "disk_space": inst.disk,
            "disk_usage": 0.05, "disk_util": 0.05, "is_bid": inst.price is not None,
            "dph_total": round((inst.price or offer["dph_base"])
                               + inst.disk * offer["storage_cost"] / 720, 4),
            "start_date": inst.start_date, "end_date": offer["end_date"],
            "uptime_mins": round((time.time() - inst.start_date) / 60, 1),
            "jupyter_token": inst.api_key[:32], "template_id": None, "template_hash_id": None,
            "volume_info": list(inst.volumes), "cluster_id": offer.get("cluster_id"),
        }  # fmt: skip

    # --- backend jobs ----------------------------------------------------------------------
    def job(self, inst: VastInstance, what: str, work: Callable[[], None]) -> None:
        def run() -> None:
            with inst.jobs:
                try:
                    work()
                except Exception as error:
                    print(f"vast fake: {what} of {inst.id} failed", file=sys.stderr)
                    traceback.print_exc(file=sys.stderr)
                    with self.lock:  # shown the way dstack expects a failed start [U]
                        inst.actual, inst.injected = "created", True
                        inst.status_msg = f"Error response from daemon: {what} failed: {error}"

        if getattr(self.backend, "synchronous", False):
            run()
        else:
            threading.Thread(target=run, name=f"vast-{what}-{inst.id}", daemon=True).start()

    def start_launch(self, inst: VastInstance) -> None:
        mode_args = inst.args if inst.runtype.split()[0] == "args" else None
        inst.launched, env = True, inst.launch_env

        volumes = {str(v["volume_id"]): v["mount_path"] for v in inst.volumes}
        more = {"volumes": volumes} if volumes else {}

        def work() -> None:
            host, port = self.backend.launch_container(
                str(inst.id), inst.image, "\n".join(inst.keys_at_creation), inst.onstart, env,
                machine_id=inst.offer["machine_id"], args=mode_args, **more,
            )  # fmt: skip
            with self.lock:
                inst.host, inst.ssh_port = host, port or None
                inst.host_ready = True

        self.job(inst, "launch", work)

    def set_state(self, inst: VastInstance, state: str) -> None:
        if state == inst.intended:
            return
        inst.intended = inst.next_state = state
        inst.host_ready = False
        if state == "stopped":

            def stop() -> None:
                self.backend.stop(str(inst.id))
                with self.lock:
                    inst.actual = inst.cur_state = "stopped"

            self.job(inst, "stop", stop)
        else:
            inst.cur_state, inst.since, inst.reads = "running", self.clock(), 0
            if not inst.launched:  # created stopped (a low bid): its container starts now
                self.start_launch(inst)
                return

            def start() -> None:
                self.backend.start(str(inst.id))
                with self.lock:
                    inst.host_ready = True

            self.job(inst, "start", start)

    def reboot(self, inst: VastInstance) -> None:
        inst.host_ready, inst.actual, inst.since, inst.reads = False, "rebooting", self.clock(), 0

        def work() -> None:
            self.backend.reboot(str(inst.id))
            self.backend.set_authorized_keys(str(inst.id), self.registered_keys(inst),
                                             replace=True)  # fmt: skip
            with self.lock:
                inst.host_ready, inst.actual = True, "loading"

        self.job(inst, "reboot", work)

    def destroy(self, inst: VastInstance) -> None:
        del self.instances[inst.id]
        for overlay in self.overlays.values():  # it leaves its overlay; the overlay stays
            overlay.members.pop(inst.id, None)
        self.retired_keys[inst.api_key] = inst.id
        self.taken.discard(inst.offer["id"])
        self.job(inst, "destroy", lambda: self.backend.terminate(str(inst.id)))


def new_api_key() -> str:
    return secrets.token_hex(32)
