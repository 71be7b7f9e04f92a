"""`status` squares rented hosts with their clouds (issue 25) without waiting on one: a
cloud that hangs is asked once, within a few seconds, and its rows read `unverified`."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

import pytest
from clouds import point_at

from infra.fakes import LAMBDA_API_KEY
from launcher.clouds.base import Instance
from launcher.state.hosts import HostsDB
from launcher.targets.cloud.reconcile import for_status


def _row(db: HostsDB, name: str, age_s: float) -> None:
    db.intend(name, "lambda", "A100")
    db.update(name, Instance("lambda", f"id-{name}", name, "running"))
    with sqlite3.connect(db.path) as conn:
        conn.execute("UPDATE hosts SET created_at=created_at-?, updated_at=updated_at-?"
                     " WHERE name=?", (age_s, age_s, name))  # fmt: skip


def test_a_cloud_that_hangs_is_unverified_within_seconds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path
) -> None:
    point_at(monkeypatch, tmp_path)
    with socket.socket() as hanging:  # accepts the connection (backlog), never answers
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)
        monkeypatch.setenv("LAMBDA_API_KEY", LAMBDA_API_KEY)
        monkeypatch.setenv("GPUJOB_LAMBDA_API_URL", f"http://127.0.0.1:{hanging.getsockname()[1]}")
        monkeypatch.setenv("GPUJOB_RETRY_BASE_S", "1.0")
        db = HostsDB()
        _row(db, "old", 3600)
        began = time.monotonic()
        assert for_status(db) == {"lambda"}
        assert time.monotonic() - began < 10
    assert {h.name: h.status for h in db.hosts()} == {"old": "running"}
