"""What jobs and rented hosts cost, from what the state db recorded: each host's price as the
cloud quoted it at the rent and its time up (its row's creation to its end, or now while it
is live), each job's times and the hosts it ran on. A host's time up with no job of ours
running on it is its rented-but-idle time, shown apart: the part of a bill nobody asked for.

Pure arithmetic over the two tables (`costs`); `recorded_costs` reads them. A job on a host
with no recorded price (this machine, an SSH host of yours) has hours and no dollars. A job
restarted by recovery is charged for the hosts it runs on now; the hosts it lost still count
in the hosts' figures. Standard library only.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from launcher.state.db import JobRecord, StateDB
from launcher.state.hosts import LIVE, HostRecord, HostsDB

Span = tuple[float, float]


@dataclass(frozen=True)
class HostCost:
    name: str
    provider: str
    gpu: str
    price_per_hour: float | None
    live: bool
    up_h: float
    busy_h: float
    idle_h: float
    cost: float | None
    idle_cost: float | None


@dataclass(frozen=True)
class JobCost:
    id: str
    name: str
    state: str
    hosts: list[str]
    hours: float
    host_hours: float
    cost: float | None
    """None when none of its hosts has a recorded price."""


@dataclass(frozen=True)
class Costs:
    since: float | None
    jobs: list[JobCost]
    hosts: list[HostCost]

    @property
    def total(self) -> float:
        return round(sum(h.cost or 0.0 for h in self.hosts), 2)

    @property
    def idle(self) -> float:
        return round(sum(h.idle_cost or 0.0 for h in self.hosts), 2)

    def as_json(self) -> dict[str, object]:
        return {"since": self.since, "jobs": [asdict(j) for j in self.jobs],
                "hosts": [asdict(h) for h in self.hosts],
                "total": {"cost": self.total, "idle_cost": self.idle}}  # fmt: skip


def host_name(record: str) -> str:
    """A job's host as its record keeps it: a rented or SSH host's entry (JSON), or a name."""
    if record.startswith("{"):
        try:
            return str(json.loads(record).get("name", record))
        except ValueError:
            return record
    return record


def clipped(start: float, end: float, since: float | None) -> Span | None:
    start = max(start, since) if since is not None else start
    return (start, end) if end > start else None


def union_s(spans: list[Span]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def overlap(a: Span, b: Span) -> Span | None:
    start, end = max(a[0], b[0]), min(a[1], b[1])
    return (start, end) if end > start else None


def _h(seconds: float) -> float:
    return round(seconds / 3600, 3)


def _dollars(price: float | None, seconds: float) -> float | None:
    return None if price is None else round(price * seconds / 3600, 2)


def costs(jobs: list[JobRecord], hosts: list[HostRecord], since: float | None,
          now: float) -> Costs:  # fmt: skip
    """Every job and host that was up after `since` (None: ever), their times cut at it."""
    host_spans: dict[str, tuple[HostRecord, Span]] = {}
    for host in hosts:
        end = now if host.status in LIVE else max(host.updated_at, host.created_at)
        span = clipped(host.created_at, end, since)
        if span is not None:
            host_spans[host.name] = (host, span)
    busy: dict[str, list[Span]] = {name: [] for name in host_spans}
    job_rows = []
    for job in jobs:
        end = job.ended_at or (job.created_at if job.terminal else now)
        span = clipped(job.created_at, end, since)
        if span is None:
            continue
        names = list(dict.fromkeys(host_name(h) for h in job.hosts))
        host_s, cost, priced = 0.0, 0.0, False
        for name in names:
            if name not in host_spans:
                host_s += span[1] - span[0]
                continue
            host, host_span = host_spans[name]
            shared = overlap(span, host_span)
            if shared is None:
                continue
            busy[name].append(shared)
            host_s += shared[1] - shared[0]
            if host.price_per_hour is not None:
                cost += host.price_per_hour * (shared[1] - shared[0]) / 3600
                priced = True
        job_rows.append(JobCost(job.id, job.name, job.state, names, _h(span[1] - span[0]),
                                _h(host_s), round(cost, 2) if priced else None))  # fmt: skip
    host_rows = []
    for name, (host, span) in host_spans.items():
        up = span[1] - span[0]
        used = union_s(busy[name])
        price = host.price_per_hour
        host_rows.append(HostCost(name, host.provider, host.gpu, price, host.status in LIVE,
                                  _h(up), _h(used), _h(up - used), _dollars(price, up),
                                  _dollars(price, up - used)))  # fmt: skip
    return Costs(since, job_rows, host_rows)


def recorded_costs(since: float | None, now: float | None = None) -> Costs:
    """`costs` over the state db's jobs and hosts (every one recorded, live or not; a host
    whose name carries another owner's id is not ours, as for `status`)."""
    from launcher.state.owner import is_ours, owner_in_name, read_owner

    now = time.time() if now is None else now
    mine = read_owner()
    hosts = [h for h in HostsDB().hosts(live_only=False)
             if is_ours(owner_in_name(h.name), mine) is not False]  # fmt: skip
    return costs(StateDB().jobs(limit=1 << 31), hosts, since, now)


def job_dollars(job_id: str) -> float | None:
    """What the job's hosts have cost it so far (as `gpujob cost` counts it), None unpriced."""
    found = recorded_costs(None)
    return next((job.cost for job in found.jobs if job.id == job_id), None)
