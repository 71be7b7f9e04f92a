"""`gpujob cost` from a state db seeded through the code that records rents and jobs
(HostsDB.intend/update as `up` does, StateDB.add_job as a launch does), only the times moved
into the past: per job and per host hours and dollars, rented-but-idle time apart."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from launcher.clouds.base import Instance
from launcher.remote.hosts import HostEntry
from launcher.state.db import JobRecord, StateDB
from launcher.state.hosts import HostsDB

H = 3600.0


def rent(db: HostsDB, name: str, price: float, up_from: float, gone_at: float | None) -> None:
    db.intend(name, "lambda", "a100")
    db.update(name, Instance("lambda", f"i-{name}", name, "running", ip="192.0.2.7",
                             ssh_port=22, price_per_hour=price))  # fmt: skip
    if gone_at is not None:
        db.update(name, status="terminated")
    with sqlite3.connect(db.path) as conn:  # the rent happened hours ago
        conn.execute("UPDATE hosts SET created_at=?, updated_at=? WHERE name=?",
                     (up_from, gone_at or time.time(), name))  # fmt: skip


def job(db: StateDB, job_id: str, hosts: list[str], start: float, end: float | None) -> None:
    records = [HostEntry(name=h, address="192.0.2.7", instance=f"lambda:i-{h}").to_record()
               if h != "local" else h for h in hosts]  # fmt: skip
    db.add_job(JobRecord(id=job_id, name=job_id.split("-")[0], spec_path="x.yaml",
                         provider="lambda" if hosts != ["local"] else "local", runtime="bare",
                         hosts=records, node_dirs=["/j/node-0"] * len(hosts),
                         state="succeeded" if end else "running", exit_code=0 if end else None,
                         created_at=start, ended_at=end, last_line=None))  # fmt: skip


@pytest.fixture
def seeded(state_dir) -> float:
    """Host A ($2/h) up 10 h ago, ended 2 h ago: job one ran 9 h -> 7 h ago, job two 5 h ->
    3 h ago (idle 1 + 2 + 1 = 4 h). Host B ($0.50/h) up 3 h ago, still live: job three on it
    for the last hour (idle 2 h). A local job of 20 days ago: hours, no dollars."""
    now = time.time()
    hosts, jobs = HostsDB(), StateDB()
    rent(hosts, "gpujob-a100-aaaa", 2.0, now - 10 * H, now - 2 * H)
    rent(hosts, "gpujob-a100-bbbb", 0.5, now - 3 * H, None)
    job(jobs, "one-1", ["gpujob-a100-aaaa"], now - 9 * H, now - 7 * H)
    job(jobs, "two-2", ["gpujob-a100-aaaa"], now - 5 * H, now - 3 * H)
    job(jobs, "three-3", ["gpujob-a100-bbbb"], now - 1 * H, None)
    job(jobs, "old-4", ["local"], now - 20 * 24 * H, now - 20 * 24 * H + 2 * H)
    return now


def test_cost_per_job_and_per_host_with_idle_time_apart(seeded, gpujob) -> None:
    result = gpujob("cost", "--json")
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    jobs = {j["id"]: j for j in found["jobs"]}
    assert {k: (round(j["hours"], 1), j["cost"]) for k, j in jobs.items()} == {
        "one-1": (2.0, 4.0), "two-2": (2.0, 4.0), "three-3": (1.0, 0.5), "old-4": (2.0, None),
    }  # fmt: skip
    hosts = {h["name"]: h for h in found["hosts"]}
    a, b = hosts["gpujob-a100-aaaa"], hosts["gpujob-a100-bbbb"]
    assert (round(a["up_h"], 1), round(a["busy_h"], 1), round(a["idle_h"], 1)) == (8.0, 4.0, 4.0)
    assert (a["cost"], a["idle_cost"], a["live"]) == (16.0, 8.0, False)
    assert (round(b["idle_h"], 1), b["cost"], b["idle_cost"], b["live"]) == (2.0, 1.5, 1.0, True)
    assert found["total"] == {"cost": 17.5, "idle_cost": 9.0}


def test_since_cuts_the_window_and_the_table_shows_idle_apart(seeded, gpujob) -> None:
    result = gpujob("cost", "--since", "4h")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["JOB", "STATE", "HOSTS", "HOURS", "COST"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.strip()}
    assert "one-1" not in rows and "old-4" not in rows  # ended before the window
    assert rows["two-2"][-2:] == ["1.00", "$2.00"]  # its last hour falls in the window
    host = rows["gpujob-a100-aaaa"]
    assert host[3:9] == ["2.00", "1.00", "1.00", "$4.00", "$2.00", "no"]
    assert lines[-1] == ("total in the last 4h: $5.50 for rented hosts, of which $3.00 idle "
                         "(up with no job running)")  # fmt: skip


def test_a_bad_since_is_one_line_and_exit_2(state_dir, gpujob) -> None:
    result = gpujob("cost", "--since", "lately")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "gpujob: error: --since lately: a duration is a number of seconds or text like `30m`, "
        "`2h`, `1d`. e.g. --since 7d or --since 12h"
    ]
