"""Reconciling the hosts db with a cloud's tagged instances: the db is a cache, the cloud's
tags the truth. Run by `up` and `down` before they act.

Only our own instances are reconciled: those carrying this state's owner id
(launcher.state.owner), and those from before owners that the db recorded. Any other
`gpujob-` instance is a colleague's on a shared account: listed as not ours, never adopted,
never terminated unless named with `--force`.

`reconcile` only compares: it returns the rows it would change, and `record` writes them,
on the real path only. A dry run shows the same Reconciliation as what it would do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from launcher.clouds.base import TAG, Instance, Provider
from launcher.errors import UsageError
from launcher.remote.hostkeys import instance_key
from launcher.state.hosts import HostRecord, HostsDB
from launcher.state.owner import Owner, is_ours, read_owner
from launcher.state.readonly import HostsView

ENDING = ("terminating", "terminated")
"""An instance in one of these has ended for its row, though the cloud lists it a while."""
LAUNCH_GRACE_S = 120
STATUS_TIMEOUT_S = 5.0
"""`status` asks each cloud once, this long at most."""
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
    """What `reconcile` found: `adopted` are our instances of an interrupted `up` (their rows
    get the id); `unknown` are instances carrying our owner id that the db has no row for
    (a db that was lost); `vanished` are rows whose instance the cloud no longer has (`gone`:
    their instances, whose pins go too); `expired` are `launching` rows whose launch never
    reached the cloud. `ours` is every tagged instance of ours the cloud lists, `foreign`
    every other one."""

    adopted: list[Instance] = field(default_factory=list)
    unknown: list[Instance] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    changes: list[RowChange] = field(default_factory=list)
    ours: list[Instance] = field(default_factory=list)
    foreign: list[Instance] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)

    def lines(self, *, would: bool = False, foreign: bool = True) -> list[str]:
        """What was done to the db, or with `would` (a dry run) what would be; with
        `foreign`, the instances left alone too."""
        adopt, mark = ("would adopt", "would mark it") if would else ("adopted", "marked")
        out = [f"{adopt} {i.name} ({i.provider} {i.id}): an earlier `up` was cut short"
               for i in self.adopted]  # fmt: skip
        out += [f"instance of ours with no row in the state db: {i.name} ({i.provider} {i.id},"
                f" {i.status}); `gpujob down {i.id}` removes it"
                for i in self.unknown]  # fmt: skip
        out += [f"not ours, left alone: {i.name} ({i.provider} {i.id}{whose(i)})"
                for i in self.foreign if foreign]  # fmt: skip
        out += [f"{name} is gone from the cloud; {mark} terminated" for name in self.vanished]
        out += [f"{name}: its launch never reached the cloud; {mark} failed"
                for name in self.expired]  # fmt: skip
        return out


def whose(inst: Instance) -> str:
    """`, owner 1a2b3c4d, user ana`: as much as the instance carries."""
    said = f", owner {inst.owner[:8]}" if inst.owner else ", from before owners"
    return said + (f", user {inst.user}" if inst.user else "")


def named(inst: Instance, reference: str) -> bool:
    """`reference` names the instance: its id, its name, or its name without the tag."""
    return reference in (inst.id, inst.name, inst.name.removeprefix(TAG))


def not_ours(inst: Instance) -> UsageError:
    return UsageError(
        f"{inst.name} ({inst.provider} {inst.id}) is not ours: another owner's gpujob "
        f"instance{whose(inst)}",
        f"`gpujob down {inst.id} --force` terminates it anyway, without cancelling or "
        "syncing its owner's jobs",
    )


def reconcile(
    provider: Provider,
    db: HostsDB | None = None,
    tagged: list[Instance] | None = None,
    fresh_s: float = 0.0,
) -> Reconciliation:
    """Compare the cloud's tagged instances (`tagged`, else listed now) with the db; changes
    nothing (`record` applies the result)."""
    db = db or HostsView()
    return compare(
        provider.list() if tagged is None else tagged,
        db.hosts(provider.name),
        {r.instance_id for r in db.hosts(provider.name, live_only=False) if r.instance_id},
        time.time(),
        read_owner(),
        fresh_s,
    )


def compare(
    tagged: list[Instance],
    rows: list[HostRecord],
    ever: set[str],
    now: float,
    owner: Owner | None = None,
    fresh_s: float = 0.0,
) -> Reconciliation:
    """A `launching` row whose name the cloud carries is completed (its id was lost with the
    answer); an instance of ours no row names is reported, never silently ignored; a live row
    the cloud lacks is closed. `rows`: the live rows; `ever`: every id the db has held;
    `owner`: this state's (None: it has launched nothing, so only the db's rows are ours).
    A row written within `fresh_s` is left: a fresh launch the cloud does not list yet
    is not terminated."""
    found = Reconciliation()
    by_name = {r.name: r for r in rows}
    by_id = {r.instance_id: r for r in rows if r.instance_id}
    for inst in tagged:
        verdict = is_ours(inst.owner, owner)
        if verdict is None:  # from before owners: ours only if the db knows what `up` made it
            verdict = inst.id in ever or inst.name in by_name
        if not verdict:
            found.foreign.append(inst)
            continue
        found.ours.append(inst)
        if inst.id in by_id or (inst.id in ever and inst.status == "terminating"):
            continue  # ours; a terminated one may show as terminating for a while
        row = by_name.get(inst.name)
        if row is not None and row.instance_id is None:
            found.changes.append(RowChange(row.name, inst=inst))
            found.adopted.append(inst)
            by_id[inst.id] = row
        else:
            found.unknown.append(inst)
    live_ids = {i.id for i in tagged if i.status not in ENDING}  # terminating: billing stopped
    tagged_names = {i.name for i in found.ours}
    for row in rows:
        fresh = now - max(row.created_at, row.updated_at) <= fresh_s
        if row.instance_id and row.instance_id not in live_ids and not fresh:  # lists lag
            found.changes.append(RowChange(row.name, status="terminated"))
            found.vanished.append(row.name)
            found.gone.append(instance_key(row.provider, row.instance_id))
        elif (
            row.instance_id is None
            and row.name not in tagged_names
            and now - row.created_at > LAUNCH_GRACE_S
        ):
            found.changes.append(RowChange(row.name, status="failed"))
            found.expired.append(row.name)
    return found


def record(db: HostsDB, found: Reconciliation) -> None:
    """The real path's half: the rows `reconcile` said would change, changed, and the host
    keys pinned for instances that are gone dropped."""
    for change in found.changes:
        db.update(change.name, change.inst, status=change.status)
    if found.gone:
        from launcher.paths import known_hosts_file
        from launcher.remote.hostkeys import KnownHosts

        pins = KnownHosts(known_hosts_file())
        for instance in found.gone:
            pins.forget_instance(instance)


def for_status(db: HostsDB | None = None) -> set[str]:
    """`status`: each cloud with live hosts of ours recorded is asked once (one list call)
    and the db squared with it, so a host that ended itself (autostop) or was killed shows
    ended instead of running on at a growing cost. Returns the clouds that did not answer:
    their rows are shown `unverified`, and status goes on. One try each, within
    STATUS_TIMEOUT_S (http.quick_calls): a cloud that hangs does not hold `status` up."""
    from launcher.clouds.registry import CLOUDS, get_provider
    from launcher.errors import GpujobError
    from launcher.say import say

    db = db or HostsDB()
    unanswered = set()
    for name in sorted({host.provider for host in db.hosts()} & set(CLOUDS)):
        from launcher.clouds.http import quick_calls  # requests: only with a cloud to ask

        try:
            with quick_calls(STATUS_TIMEOUT_S):
                found = reconcile(get_provider(name), db)
        except (GpujobError, OSError):  # no key, or the cloud did not answer
            unanswered.add(name)
            continue
        record(db, found)
        for line in found.lines(foreign=False):
            say(line)
    return unanswered
