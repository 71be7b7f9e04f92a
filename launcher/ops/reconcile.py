"""Reconciling the hosts db with a cloud's tagged instances: the db is a cache, the cloud's
tags the truth. Run by `up` and `down` before they act."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from launcher.providers.base import Instance, Provider
from launcher.state.hosts import HostsDB


@dataclass
class Reconciliation:
    """What `reconcile` found: `adopted` were tagged instances of an interrupted `up` (now
    recorded); `unknown` are tagged instances this db never heard of (another machine's, or
    a db that was lost); `vanished` are rows whose instance the cloud no longer has."""

    adopted: list[Instance] = field(default_factory=list)
    unknown: list[Instance] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"adopted {i.name} ({i.provider} {i.id}): an earlier `up` was cut short"
               for i in self.adopted]  # fmt: skip
        out += [f"unknown tagged instance {i.name} ({i.provider} {i.id}, {i.status}): "
                f"not made from this machine; `gpujob down {i.id}` removes it"
                for i in self.unknown]  # fmt: skip
        out += [f"{name} is gone from the cloud; marked terminated" for name in self.vanished]
        return out


def reconcile(provider: Provider, db: HostsDB | None = None) -> Reconciliation:
    """Compare the cloud's tagged instances with the db. A `launching` row whose name the
    cloud carries is completed (its id was lost with the answer); a tagged instance no row
    names is reported, never silently ignored; a live row the cloud lacks is closed."""
    db = db or HostsDB()
    found = Reconciliation()
    tagged = provider.list()
    rows = {r.name: r for r in db.hosts(provider.name)}
    by_id = {r.instance_id: r for r in rows.values() if r.instance_id}
    ever = {r.instance_id for r in db.hosts(provider.name, live_only=False) if r.instance_id}
    for inst in tagged:
        if inst.id in by_id or (inst.id in ever and inst.status == "terminating"):
            continue  # ours; a terminated one may show as terminating for a while
        row = rows.get(inst.name)
        if row is not None and row.instance_id is None:
            db.update(row.name, inst)
            found.adopted.append(inst)
            by_id[inst.id] = row
        else:
            found.unknown.append(inst)
    live_ids = {i.id for i in tagged}
    for row in rows.values():
        if row.instance_id and row.instance_id not in live_ids:
            db.update(row.name, status="terminated")
            found.vanished.append(row.name)
        elif row.instance_id is None and row.name not in {i.name for i in tagged}:
            # The launch never reached the cloud, or what it made is already gone.
            age = time.time() - row.created_at
            if age > 120:
                db.update(row.name, status="failed")
    return found
