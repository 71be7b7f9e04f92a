"""Reconciling the hosts db with a cloud's tagged instances: the db is a cache, the cloud's
tags the truth. Run by `up` and `down` before they act.

`reconcile` only compares: it returns the rows it would change, and `record` writes them,
on the real path only. A dry run shows the same Reconciliation as what it would do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from launcher.providers.base import Instance, Provider
from launcher.state.hosts import HostRecord, HostsDB
from launcher.state.readonly import HostsView

LAUNCH_GRACE_S = 120
"""A `launching` row the cloud has no instance for, older than this: its launch never
reached the cloud (or what it made is gone already)."""


@dataclass(frozen=True)
class RowChange:
    """One row of the hosts db as `record` sets it: the instance's id, status and address
    (`inst`), or a status alone."""

    name: str
    inst: Instance | None = None
    status: str | None = None


@dataclass
class Reconciliation:
    """What `reconcile` found: `adopted` are tagged instances of an interrupted `up` (their
    rows get the id); `unknown` are tagged instances this db never heard of (another
    machine's, or a db that was lost); `vanished` are rows whose instance the cloud no longer
    has; `expired` are `launching` rows whose launch never reached the cloud."""

    adopted: list[Instance] = field(default_factory=list)
    unknown: list[Instance] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    changes: list[RowChange] = field(default_factory=list)

    def lines(self, *, would: bool = False) -> list[str]:
        """What was done to the db, or with `would` (a dry run) what would be."""
        adopt, mark = ("would adopt", "would mark it") if would else ("adopted", "marked")
        out = [f"{adopt} {i.name} ({i.provider} {i.id}): an earlier `up` was cut short"
               for i in self.adopted]  # fmt: skip
        out += [f"unknown tagged instance {i.name} ({i.provider} {i.id}, {i.status}): "
                f"not made from this machine; `gpujob down {i.id}` removes it"
                for i in self.unknown]  # fmt: skip
        out += [f"{name} is gone from the cloud; {mark} terminated" for name in self.vanished]
        out += [f"{name}: its launch never reached the cloud; {mark} failed"
                for name in self.expired]  # fmt: skip
        return out


def reconcile(
    provider: Provider, db: HostsDB | None = None, tagged: list[Instance] | None = None
) -> Reconciliation:
    """Compare the cloud's tagged instances (`tagged`, else listed now) with the db; changes
    nothing (`record` applies the result)."""
    db = db or HostsView()
    return compare(
        provider.list() if tagged is None else tagged,
        db.hosts(provider.name),
        {r.instance_id for r in db.hosts(provider.name, live_only=False) if r.instance_id},
        time.time(),
    )


def compare(
    tagged: list[Instance], rows: list[HostRecord], ever: set[str], now: float
) -> Reconciliation:
    """A `launching` row whose name the cloud carries is completed (its id was lost with the
    answer); a tagged instance no row names is reported, never silently ignored; a live row
    the cloud lacks is closed. `rows`: the live rows; `ever`: every id the db has held."""
    found = Reconciliation()
    by_name = {r.name: r for r in rows}
    by_id = {r.instance_id: r for r in rows if r.instance_id}
    for inst in tagged:
        if inst.id in by_id or (inst.id in ever and inst.status == "terminating"):
            continue  # ours; a terminated one may show as terminating for a while
        row = by_name.get(inst.name)
        if row is not None and row.instance_id is None:
            found.changes.append(RowChange(row.name, inst=inst))
            found.adopted.append(inst)
            by_id[inst.id] = row
        else:
            found.unknown.append(inst)
    live_ids = {i.id for i in tagged}
    tagged_names = {i.name for i in tagged}
    for row in rows:
        if row.instance_id and row.instance_id not in live_ids:
            found.changes.append(RowChange(row.name, status="terminated"))
            found.vanished.append(row.name)
        elif (
            row.instance_id is None
            and row.name not in tagged_names
            and now - row.created_at > LAUNCH_GRACE_S
        ):
            found.changes.append(RowChange(row.name, status="failed"))
            found.expired.append(row.name)
    return found


def record(db: HostsDB, found: Reconciliation) -> None:
    """The real path's half: the rows `reconcile` said would change, changed."""
    for change in found.changes:
        db.update(change.name, change.inst, status=change.status)
