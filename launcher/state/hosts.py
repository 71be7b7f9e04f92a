"""Hosts gpujob rented, in the same sqlite file as the jobs, and how to square them with the
cloud.

A row is written *before* the launch call (status `launching`, no id yet) and completed when
the cloud answers, so an `up` cut short between the two (Ctrl-C, a lost answer) leaves a row
that `reconcile` can match by name to the tagged instance the cloud made. The cloud's tags
are the truth; this table is a cache of them plus what only we know (which `up` made what).
Standard library only.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.state.store import SqliteStore

if TYPE_CHECKING:
    from launcher.clouds.base import Instance

SCHEMA = """
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    instance_id TEXT,
    status TEXT NOT NULL,
    gpu TEXT NOT NULL,
    ip TEXT,
    ssh_port INTEGER,
    ssh_user TEXT,
    price_per_hour REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS host_budgets (
    name TEXT PRIMARY KEY,
    max_cost REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS cloud_keys (
    provider TEXT NOT NULL,
    key_id TEXT NOT NULL,
    added_at REAL NOT NULL,
    PRIMARY KEY (provider, key_id)
);
CREATE TABLE IF NOT EXISTS host_autostop (
    name TEXT PRIMARY KEY,
    idle_s REAL NOT NULL,
    action TEXT NOT NULL,
    since REAL NOT NULL
);
"""
LIVE = ("launching", "booting", "running")


@dataclass(frozen=True)
class HostRecord:
    name: str
    provider: str
    instance_id: str | None
    """None until the cloud answered the launch (a row written before the call)."""
    status: str
    gpu: str
    ip: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    """How the host is reached, as the cloud said once it was running."""
    price_per_hour: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


class HostsDB(SqliteStore):
    SCHEMA = SCHEMA

    def intend(self, name: str, provider: str, gpu: str) -> None:
        """Before the launch call: the name is the tag the cloud will carry."""
        now = time.time()
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO hosts (name, provider, status, gpu, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?)",
                (name, provider, "launching", gpu, now, now),
            )

    def update(self, name: str, inst: Instance | None = None, status: str | None = None) -> None:
        """Record what the cloud said about `name` (id, status, address)."""
        with self._connect() as conn:
            if inst is not None:
                conn.execute(
                    "UPDATE hosts SET instance_id=?, status=?, ip=COALESCE(?, ip),"
                    " ssh_port=COALESCE(?, ssh_port), ssh_user=?,"
                    " price_per_hour=COALESCE(?, price_per_hour), updated_at=? WHERE name=?",
                    (inst.id, status or inst.status, inst.ip, inst.ssh_port, inst.ssh_user,
                     inst.price_per_hour, time.time(), name),
                )  # fmt: skip
            else:
                conn.execute(
                    "UPDATE hosts SET status=?, updated_at=? WHERE name=?",
                    (status, time.time(), name),
                )

    def set_budget(self, name: str, max_cost: float) -> None:
        """The host's share of the budget (`--max-cost`) it is rented under, for `status`."""
        with self._connect() as conn:
            conn.execute("INSERT OR REPLACE INTO host_budgets (name, max_cost) VALUES (?,?)",
                         (name, max_cost))  # fmt: skip

    def budgets(self) -> dict[str, float]:
        with self._connect() as conn:
            try:
                return dict(conn.execute("SELECT name, max_cost FROM host_budgets").fetchall())
            except sqlite3.OperationalError:  # a read-only view of a db older than the table
                return {}

    def set_autostop(self, name: str, idle_s: float, action: str) -> None:
        """The host's watcher runs (since now): its window and what it does at the end."""
        with self._connect() as conn:
            conn.execute("INSERT OR REPLACE INTO host_autostop (name, idle_s, action, since)"
                         " VALUES (?,?,?,?)", (name, idle_s, action, time.time()))  # fmt: skip

    def autostops(self) -> dict[str, dict[str, object]]:
        with self._connect() as conn:
            try:
                rows = conn.execute("SELECT name, idle_s, action, since FROM host_autostop")
                return {name: {"idle_s": idle_s, "action": action, "since": since}
                        for name, idle_s, action, since in rows.fetchall()}  # fmt: skip
            except sqlite3.OperationalError:  # a read-only view of a db older than the table
                return {}

    def add_cloud_key(self, provider: str, key_id: str) -> None:
        """An account SSH key gpujob registered itself (not one the user had): `down`
        removes it once no host of ours is left on that cloud."""
        with self._connect() as conn:
            conn.execute("INSERT OR REPLACE INTO cloud_keys (provider, key_id, added_at)"
                         " VALUES (?,?,?)", (provider, key_id, time.time()))  # fmt: skip

    def cloud_keys(self, provider: str) -> list[str]:
        with self._connect() as conn:
            try:
                rows = conn.execute("SELECT key_id FROM cloud_keys WHERE provider = ?"
                                    " ORDER BY added_at", (provider,))  # fmt: skip
                return [key_id for (key_id,) in rows.fetchall()]
            except sqlite3.OperationalError:  # a read-only view of a db older than the table
                return []

    def forget_cloud_key(self, provider: str, key_id: str) -> None:
        with self._connect() as conn:
            conn.execute("DELETE FROM cloud_keys WHERE provider = ? AND key_id = ?",
                         (provider, key_id))  # fmt: skip

    def hosts(self, provider: str | None = None, live_only: bool = True) -> list[HostRecord]:
        query = "SELECT * FROM hosts WHERE (? IS NULL OR provider = ?)"
        if live_only:
            query += f" AND status IN ({','.join('?' * len(LIVE))})"
        with self._connect() as conn:
            rows = conn.execute(
                query + " ORDER BY created_at",
                (provider, provider, *(LIVE if live_only else ())),
            ).fetchall()
        return [HostRecord(*row) for row in rows]

    def host(self, reference: str) -> HostRecord | None:
        """By name, name without the tag, or instance id."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT * FROM hosts WHERE name IN (?, ?) OR instance_id = ?"
                " ORDER BY created_at DESC",
                (reference, f"gpujob-{reference}", reference),
            ).fetchone()
        return HostRecord(*row) if row else None


def host_rows(db: HostsDB | None = None) -> list[dict[str, object]]:
    """Live rented hosts of ours for `gpujob status`: what each costs per hour and has cost
    so far (from the launch time recorded, at the price the cloud quoted) and its share of
    the budget it was rented under (`max_cost`, None without one), and its autostop window
    (`autostop`: idle_s, action, since; None without one). A row whose name
    carries another owner's id (a state dir whose owner file was replaced) is not ours."""
    from launcher.state.owner import is_ours, owner_in_name, read_owner

    now = time.time()
    rows = []
    mine = read_owner()
    db = db or HostsDB()
    budgets = db.budgets()
    autostops = db.autostops()
    for host in db.hosts():
        if is_ours(owner_in_name(host.name), mine) is False:
            continue
        hours = max(0.0, now - host.created_at) / 3600
        price = host.price_per_hour
        cost = None if price is None else round(price * hours, 2)
        budget = budgets.get(host.name)
        rows.append({
            "name": host.name, "provider": host.provider, "instance_id": host.instance_id,
            "gpu": host.gpu, "status": host.status,
            "address": f"{host.ssh_user}@{host.ip}:{host.ssh_port}" if host.ip else None,
            "price_per_hour": price, "uptime_h": round(hours, 2),
            "cost_so_far": cost, "max_cost": budget,
            "over_budget": budget is not None and cost is not None and cost > budget,
            "autostop": autostops.get(host.name),
        })  # fmt: skip
    return rows
