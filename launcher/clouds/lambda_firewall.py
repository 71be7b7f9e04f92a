"""Lambda firewall rulesets that let a multi-node job's hosts reach each other's ports.

Lambda's inbound firewall lets in only ICMP and TCP 22 by default (reference §2.10), so the
rendezvous port and NCCL's sockets between two hosts' public addresses are dropped and the
job would time out forming its world: gpujob's nodes dial each other's public `ip`, and
neither the OpenAPI 1.10 document nor Lambda's firewall docs exempt traffic between one
account's instances, in one region or not. A ruleset (OpenAPI 1.10 `/firewall-rulesets`) is
regional and attached only at launch, before the hosts' addresses are known: so one is made
per job and region, empty, named at each launch there, and its rules written once the hosts
run: each port range the job needs, from each of the job's hosts (`/32`), nothing from
anywhere else. Where the firewall would block nothing it is not made: in us-south-1 (rules
do not apply there, per the document) or where the global ruleset already lets every port
in from any address; a rule the global ruleset already grants for a host is left out.

A ruleset is removed once no instance uses it: on every way out of the command that made it
(targets.cloud.rent), at the job's end, and by `down`. Lambda refuses to delete one still
attached (`firewall-rulesets/firewall-ruleset-in-use`), so the removal waits, bounded, for
the terminated instances to go; what it could not remove `down --all` removes later.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import TAG, ProviderError, poll_interval
from launcher.state.owner import owner

if TYPE_CHECKING:
    from launcher.clouds.lambda_cloud import LambdaCloud

UNFILTERED_REGIONS = frozenset({"us-south-1"})
"""Firewall rules do not apply there (OpenAPI 1.10, `/firewall-rules`)."""
IN_USE = "firewall-rulesets/firewall-ruleset-in-use"
REMOVE_WAIT_S = 180.0
"""How long a removal waits for terminated instances to leave a ruleset
(GPUJOB_LAMBDA_RULESET_WAIT_S)."""
ORPHAN_AFTER_S = 300.0
"""A ruleset of ours with neither instances nor rules is another command's, its launches
still to come, for this long after it was made; after that `down` removes it (one whose
rules were written had its hosts: unused, it goes at once)."""


@dataclass(frozen=True)
class PeerPorts:
    """What one job's hosts must reach on each other: TCP port ranges (with what each is
    for), and the addresses of hosts the job keeps (a recovery renting a replacement)."""

    job_id: str
    ports: tuple[tuple[int, int, str], ...]
    kept: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """`gpujob-<owner8>-fw-<job>`: one per job and region, at most 64 characters."""
        name = f"{prefix()}{self.job_id}"
        if len(name) > 64:
            name = f"{prefix()}{hashlib.sha1(self.job_id.encode()).hexdigest()[:24]}"
        return name


def prefix() -> str:
    return f"{TAG}{owner().short}-fw-"


def _covers(rule: dict[str, Any], low: int, high: int, source: str | None) -> bool:
    """Whether `rule` lets TCP `low..high` in from `source` (None: from every address)."""
    if rule.get("protocol") not in ("tcp", "all"):
        return False
    span = rule.get("port_range")
    if isinstance(span, list) and len(span) == 2 and not span[0] <= low <= high <= span[1]:
        return False
    try:
        network = ipaddress.ip_network(str(rule.get("source_network")), strict=False)
        if source is None:
            return network.prefixlen == 0
        return ipaddress.ip_address(source) in network
    except ValueError:
        return False


class Rulesets:
    """The rulesets of one job on Lambda, made as its launches need them (worker threads)."""

    def __init__(self, cloud: LambdaCloud, want: PeerPorts) -> None:
        self.cloud, self.want = cloud, want
        self.by_region: dict[str, str] = {}
        self.made: list[str] = []
        self._lock = threading.Lock()
        self._global: list[dict[str, Any]] | None = None

    def _global_rules(self) -> list[dict[str, Any]]:
        if self._global is None:
            found = self.cloud._data("GET", "/firewall-rulesets/global", dict)
            self._global = [r for r in found.get("rules") or [] if isinstance(r, dict)]
        return self._global

    def _allowed(self, low: int, high: int, source: str | None) -> bool:
        return any(_covers(rule, low, high, source) for rule in self._global_rules())

    def for_launch(self, region: str) -> list[dict[str, str]]:
        """The launch's `firewall_rulesets`: this job's ruleset in `region` (found or made
        empty), or none where the firewall would block none of its ports."""
        if region in UNFILTERED_REGIONS:
            return []
        with self._lock:
            if all(self._allowed(low, high, None) for low, high, _ in self.want.ports):
                return []
            if region not in self.by_region:
                self.by_region[region] = self._find_or_make(region)
            return [{"id": self.by_region[region]}]

    def _find_or_make(self, region: str) -> str:
        name = self.want.name
        for found in self.cloud._data("GET", "/firewall-rulesets", list):
            if isinstance(found, dict) and found.get("name") == name and \
                    (found.get("region") or {}).get("name") == region:  # fmt: skip
                return str(found["id"])  # a recovery's: the kept hosts use it
        made = self.cloud._data("POST", "/firewall-rulesets", dict,
                                json={"name": name, "region": region, "rules": []})  # fmt: skip
        self.made.append(str(made["id"]))
        return str(made["id"])

    def open(self, addresses: Iterable[str]) -> list[str]:
        """Each of the job's rulesets lets in, from each of the job's hosts, the ports the
        global ruleset does not already let in from it; a line for what was opened."""
        if not self.by_region:
            return []
        hosts = sorted({a for a in [*addresses, *self.want.kept] if _ipv4(a)})
        rules = [{"protocol": "tcp", "port_range": [low, high], "source_network": f"{host}/32",
                  "description": f"gpujob {self.want.job_id}: {what}"[:128]}
                 for host in hosts for low, high, what in self.want.ports
                 if not self._allowed(low, high, host)]  # fmt: skip
        for ruleset_id in sorted(set(self.by_region.values())):
            self.cloud._data("PATCH", f"/firewall-rulesets/{ruleset_id}", dict,
                             json={"rules": rules})  # fmt: skip
        regions = ", ".join(sorted(self.by_region))
        return [f"lambda firewall: TCP {spans(self.want)} opened between the job's "
                f"{len(hosts)} hosts only (ruleset {self.want.name} in {regions}, removed "
                "with them)"]  # fmt: skip


def spans(want: PeerPorts) -> str:
    return ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi, _ in want.ports)


def plan_line(want: PeerPorts) -> str:
    """What a dry run says the launch would do to the firewall."""
    return (f"dry run: would open TCP {spans(want)} between the job's hosts only (a Lambda "
            f"firewall ruleset {want.name} in their region, unless the firewall lets them in "
            "already; removed with them)")  # fmt: skip


def _ipv4(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address)
    except ValueError:
        return False


def remove_rulesets(
    cloud: LambdaCloud,
    only: Iterable[str] | None = None,
    hurry: Callable[[], bool] = lambda: False,
    dry_run: bool = False,
) -> list[str]:
    """Delete gpujob's rulesets of this owner that no running instance uses (`only`: just
    those ids, made by this command); wait, bounded, for terminated instances to leave
    them. One line per ruleset removed, or left for later."""
    wanted = set(only) if only is not None else None
    live = {i.id for i in cloud.list() if i.status not in ("terminating", "terminated")}
    deadline = time.monotonic() + float(os.environ.get("GPUJOB_LAMBDA_RULESET_WAIT_S",
                                                       REMOVE_WAIT_S))  # fmt: skip
    lines: list[str] = []
    pending = _ours(cloud, wanted, live)
    while pending:
        for found in list(pending.values()):
            what = f"firewall ruleset {found['name']} ({found['id']})"
            if dry_run:
                lines.append(f"would delete the lambda {what}")
                del pending[found["id"]]
                continue
            try:
                cloud._data("DELETE", f"/firewall-rulesets/{found['id']}", dict)
            except ProviderError as error:
                if IN_USE not in error.message:
                    lines.append(f"could not delete the lambda {what}: {error.one_line()}")
                    del pending[found["id"]]
                continue
            lines.append(f"deleted the lambda {what}")
            del pending[found["id"]]
        if not pending or time.monotonic() >= deadline or hurry():
            break
        time.sleep(poll_interval())
        pending = {k: v for k, v in _ours(cloud, set(pending), live).items() if k in pending}
    for found in pending.values():
        lines.append(f"the lambda firewall ruleset {found['name']} ({found['id']}) waits for "
                     "its terminating instances to go; `gpujob down` (or the next multi-node "
                     "`submit --up`) removes it")  # fmt: skip
    return lines


def _ours(cloud: LambdaCloud, wanted: set[str] | None, live: set[str]) -> dict[str, Any]:
    """This owner's rulesets that no live instance uses (of `wanted`, when given), but for
    one that another command made and has not launched on yet (ORPHAN_AFTER_S)."""
    found: dict[str, Any] = {}
    for ruleset in cloud._data("GET", "/firewall-rulesets", list):
        if not isinstance(ruleset, dict) or not str(ruleset.get("name")).startswith(prefix()):
            continue
        ruleset_id, attached = str(ruleset.get("id")), list(ruleset.get("instance_ids") or [])
        if wanted is not None and ruleset_id not in wanted:
            continue
        if any(i in live for i in attached):
            continue
        waiting = not attached and not ruleset.get("rules")  # made, its launches to come
        if wanted is None and waiting and _age_s(ruleset) < ORPHAN_AFTER_S:
            continue
        found[ruleset_id] = {"id": ruleset_id, "name": str(ruleset.get("name"))}
    return found


def _age_s(ruleset: dict[str, Any]) -> float:
    try:
        made = datetime.fromisoformat(str(ruleset.get("created")).replace("Z", "+00:00"))
    except ValueError:
        return ORPHAN_AFTER_S  # unreadable: as old as an abandoned one
    return (datetime.now(UTC) - made).total_seconds()
