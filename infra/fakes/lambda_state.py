"""The Lambda fake's books: instances and their lifecycle, SSH keys, filesystems, capacity.

Every method is called with `LambdaBooks.lock` held by the API layer, except the backend
jobs, which run on worker threads (one at a time per instance, so a terminate never
overtakes the launch that makes the host) and take the lock only to record what happened.
"""

from __future__ import annotations

import sys
import threading
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infra.fakes.backend import HostBackend
from infra.fakes.faults import Knobs
from infra.fakes.lambda_catalog import START_CAPACITY, region_json, type_json
from infra.fakes.server import ApiError, Reply, json_reply

# code: (status, default message, default suggestion); texts from the spec's ApiError*
# schemas (§3). `global/rate-limited` is not in Lambda's specs: a guess many fakes share [U].
CODES: dict[str, tuple[int, str, str | None]] = {
    "global/invalid-api-key": (401, "API key was invalid, expired, or deleted.",
                               "Check your API key or create a new one, then try again."),
    "global/account-inactive": (403, "Your account is inactive.",
                                "Make sure you have verified your email address and have a valid "
                                "payment method. Contact Support if problems continue."),
    "global/invalid-address": (403, "Your billing address is invalid.", None),
    "global/forbidden": (403, "Forbidden.", None),
    "global/invalid-parameters": (400, "Invalid request data.",
                                  "Retry the request after fixing the request parameters."),
    "global/object-does-not-exist": (404, "Specified instance does not exist.", None),
    "global/not-found": (404, "The requested resource was not found.", None),
    "global/quota-exceeded": (400, "Quota exceeded.", "Contact Support to increase your quota."),
    "global/duplicate": (400, "A resource with that name already exists.", None),
    "global/conflict": (409, "The request conflicts with the current state of the resource.",
                        None),
    "global/unknown": (500, "An unknown error occurred.", None),
    "global/rate-limited": (429, "Too many requests.", "Wait a moment, then try again."),
    "provider/internal-unavailable": (503, "Provider unavailable", "Try again shortly"),
    "instance-operations/launch/insufficient-capacity": (
        400, "Not enough capacity to fulfill launch request.", None),
    "instance-operations/launch/file-system-in-wrong-region": (
        400, "File system is in a different region than the instance.", None),
    "filesystems/filesystem-in-use": (400, "Filesystem is in use.", None),
    "firewall-rulesets/firewall-ruleset-in-use": (
        400, "Firewall ruleset is in use by one or more instances.",
        "Terminate all instances that are using the ruleset before deleting it."),
}  # fmt: skip
DEFAULT_CODE = {400: "global/invalid-parameters", 401: "global/invalid-api-key",
                403: "global/account-inactive", 404: "global/object-does-not-exist",
                409: "global/conflict", 429: "global/rate-limited", 500: "global/unknown",
                502: "provider/internal-unavailable", 503: "provider/internal-unavailable",
                504: "provider/internal-unavailable"}  # fmt: skip


def error_reply(
    status: int | None, code: str | None, message: str | None = None, suggestion: str | None = None
) -> Reply:
    """`{"error": {"code", "message", "suggestion"?}}`, the one error envelope of the API."""
    code = code or DEFAULT_CODE.get(status or 500, "global/unknown")
    default_status, default_message, default_suggestion = CODES.get(code, (500, code, None))
    error = {"code": code, "message": message or default_message}
    if suggestion or default_suggestion:
        error["suggestion"] = suggestion or default_suggestion
    return json_reply(status or default_status, {"error": error})


def fail(code: str, message: str | None = None, *, status: int | None = None) -> ApiError:
    return ApiError(error_reply(status, code, message))


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Instance:
    id: str
    type_name: str
    region: str
    ssh_key_names: list[str]
    name: str | None
    hostname: str | None
    file_system_names: list[str]
    file_system_mounts: list[dict[str, str]]
    tags: list[dict[str, str]]
    firewall_rulesets: list[dict[str, str]]
    since: float
    status: str = "booting"
    reads: int = 0
    ip: str | None = None
    host_ready: bool = False
    host_gone: bool = False
    stuck: bool = False
    omit_private_ip: bool = False
    holds_capacity: bool = True
    jupyter_token: str = field(default_factory=new_id)
    jobs: threading.Lock = field(default_factory=threading.Lock, repr=False)


NOT_LAUNCHED = {"available": False, "reason_code": "vm-has-not-launched",
                "reason_description": "The instance has not launched yet."}  # fmt: skip
TERMINATING = {"available": False, "reason_code": "vm-is-terminating",
               "reason_description": "The instance is terminating."}  # fmt: skip
TOO_OLD = {"available": False, "reason_code": "vm-is-too-old",
           "reason_description": "The instance is too old to be migrated."}  # fmt: skip
YES = {"available": True}


def actions(status: str) -> dict[str, dict[str, Any]]:
    """`actions` kept consistent with the status, as the reference's §7.5 asks."""
    if status == "booting":
        return {"migrate": NOT_LAUNCHED, "rebuild": NOT_LAUNCHED, "restart": NOT_LAUNCHED,
                "cold_reboot": NOT_LAUNCHED, "terminate": YES}  # fmt: skip
    if status == "preempted":
        return {**actions("terminating"), "terminate": YES}
    if status in ("terminating", "terminated"):
        return {k: TERMINATING for k in ("migrate", "rebuild", "restart", "cold_reboot",
                                         "terminate")}  # fmt: skip
    return {"migrate": TOO_OLD, "rebuild": YES, "restart": YES, "cold_reboot": YES,
            "terminate": YES}  # fmt: skip


class LambdaBooks:
    def __init__(self, backend: HostBackend, knobs: Knobs, clock: Callable[[], float]) -> None:
        self.backend = backend
        self.knobs = knobs
        self.clock = clock
        self.lock = threading.RLock()
        self.instances: dict[str, Instance] = {}
        self.ssh_keys: dict[str, dict[str, str]] = {}
        self.filesystems: dict[str, dict[str, Any]] = {}
        self.rulesets: dict[str, dict[str, Any]] = {}  # id: {id, name, region, rules, created}
        self.firewall_rules: list[dict[str, Any]] = [
            {"protocol": "icmp", "source_network": "0.0.0.0/0", "description": "Allow ICMP"},
            {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0",
             "description": "Allow SSH"},
        ]  # fmt: skip
        self.capacity: dict[tuple[str, str], int] = dict(START_CAPACITY)
        self.race: set[tuple[str, str]] = set()  # listed as available, launch still refused

    # --- lifecycle -----------------------------------------------------------------------
    def set_status(self, inst: Instance, status: str) -> None:
        inst.status, inst.since, inst.reads = status, self.clock(), 0

    def _advance(self, inst: Instance) -> bool:
        """Move `inst` along its lifecycle; False once it is gone from the API."""
        elapsed = self.clock() - inst.since
        k = self.knobs
        if (inst.status == "booting" and inst.host_ready and not inst.stuck
                and inst.reads >= k.boot_reads and elapsed >= k.boot_seconds):  # fmt: skip
            self.set_status(inst, "active")
        elif (inst.status == "terminating" and inst.host_gone
              and inst.reads >= k.terminate_reads and elapsed >= k.terminate_seconds):  # fmt: skip
            self.set_status(inst, "terminated")
        elif inst.status == "terminated" and inst.reads >= 1:
            # Listed once as `terminated`, then gone: "may still be listed briefly" [U].
            del self.instances[inst.id]
            return False
        return True

    def observe(self, instance_id: str) -> dict[str, Any]:
        inst = self.instances.get(instance_id)
        if inst is None or not self._advance(inst):
            raise fail("global/object-does-not-exist")
        inst.reads += 1
        return self.instance_json(inst)

    def observe_all(self) -> list[dict[str, Any]]:
        seen = []
        for inst in list(self.instances.values()):
            if self._advance(inst):
                inst.reads += 1
                seen.append(self.instance_json(inst))
        return seen

    def instance_json(self, inst: Instance) -> dict[str, Any]:
        out: dict[str, Any] = {"id": inst.id}
        if inst.name is not None:
            out["name"] = inst.name
        if inst.status in ("active", "unhealthy") and inst.ip:
            # No ip, private_ip, hostname or jupyter_* while booting (§7.5). The lab has one
            # network, so the private address is the public one.
            out["ip"] = inst.ip
            if not inst.omit_private_ip:
                out["private_ip"] = inst.ip
            out["hostname"] = inst.hostname or inst.ip.replace(".", "-")
            out["jupyter_token"] = inst.jupyter_token
            out["jupyter_url"] = (f"https://jupyter-{inst.id}.lambdaspaces.com/"
                                  f"?token={inst.jupyter_token}")  # fmt: skip
        out.update({
            "status": inst.status, "ssh_key_names": inst.ssh_key_names,
            "file_system_names": inst.file_system_names,
            "region": region_json(inst.region), "instance_type": type_json(inst.type_name),
            "actions": actions(inst.status), "tags": inst.tags,
            "firewall_rulesets": inst.firewall_rulesets,
        })  # fmt: skip
        if inst.file_system_mounts:
            out["file_system_mounts"] = inst.file_system_mounts
        return out

    def filesystem_in_use(self, name: str) -> bool:
        return any(name in i.file_system_names and not i.host_gone
                   for i in self.instances.values())  # fmt: skip

    # --- backend jobs ----------------------------------------------------------------------
    def job(self, inst: Instance, what: str, work: Callable[[], None]) -> None:
        """Run `work` for one instance, serially with its other jobs, off the request thread."""

        def run() -> None:
            with inst.jobs:
                try:
                    work()
                except Exception:
                    print(f"lambda fake: {what} of {inst.id} failed", file=sys.stderr)
                    traceback.print_exc(file=sys.stderr)
                    with self.lock:  # a host that never came up: unhealthy [U]
                        if inst.status == "booting":
                            self.set_status(inst, "unhealthy")

        if getattr(self.backend, "synchronous", False):
            run()
        else:
            threading.Thread(target=run, name=f"lambda-{what}-{inst.id[:8]}", daemon=True).start()

    def start_launch(self, inst: Instance, public_key: str) -> None:
        def work() -> None:
            ip, _port = self.backend.launch_vm(inst.id, public_key)  # Lambda: always port 22
            with self.lock:
                inst.ip, inst.host_ready = ip, True

        self.job(inst, "launch", work)

    def start_restart(self, inst: Instance) -> None:
        inst.host_ready = False
        self.set_status(inst, "booting")  # during a restart: booting, then active [U]

        def work() -> None:
            self.backend.reboot(inst.id)
            with self.lock:
                inst.host_ready = True

        self.job(inst, "restart", work)

    def start_terminate(self, inst: Instance, status: str = "terminating") -> None:
        self.set_status(inst, status)
        if inst.holds_capacity:
            key = (inst.type_name, inst.region)
            self.capacity[key] = self.capacity.get(key, 0) + 1
            inst.holds_capacity = False

        def work() -> None:
            self.backend.terminate(inst.id)
            with self.lock:
                inst.host_gone = True

        self.job(inst, "terminate", work)
