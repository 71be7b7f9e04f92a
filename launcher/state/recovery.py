"""The recovery controller's record, in the state db beside the jobs: one row per job that
has recovery (what to rent again, how many restarts were made, the controller's pid and
phase) and one line per event (each recovery, the stop), which `status` and `logs -f` show.

Standard library only: `gpujob status` reads it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from launcher.state.store import SqliteStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS recoveries (
    job_id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    max_restarts INTEGER NOT NULL,
    restarts INTEGER NOT NULL,
    phase TEXT NOT NULL,
    pid INTEGER,
    line TEXT,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS recovery_events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    restarts INTEGER NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
"""

WATCHING, RECOVERING, STOPPED, FINISHED = "watching", "recovering", "stopped", "finished"
OVER = frozenset({STOPPED, FINISHED})
"""Phases after which the controller has let the job go (its hosts are terminated)."""


@dataclass(frozen=True)
class RecoveryRecord:
    job_id: str
    request: dict[str, Any]
    """What `submit --up` was asked (spec, sets, GPU, provider...): what is rented again."""
    max_restarts: int
    restarts: int
    phase: str
    pid: int | None
    line: str | None
    updated_at: float

    @property
    def over(self) -> bool:
        return self.phase in OVER


@dataclass(frozen=True)
class RecoveryEvent:
    seq: int
    at: float
    restarts: int
    line: str


class RecoveryDB(SqliteStore):
    SCHEMA = SCHEMA

    def add(self, job_id: str, request: dict[str, Any], max_restarts: int) -> None:
        with self._connect() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO recoveries VALUES (?,?,?,?,?,?,?,?)",
                (job_id, json.dumps(request), max_restarts, 0, WATCHING, None, None, time.time()),
            )

    def get(self, job_id: str) -> RecoveryRecord | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM recoveries WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            return None
        return RecoveryRecord(row[0], json.loads(row[1]), *row[2:])

    def update(
        self,
        job_id: str,
        *,
        phase: str | None = None,
        restarts: int | None = None,
        pid: int | None = None,
        line: str | None = None,
    ) -> None:
        with self._connect() as conn:
            conn.execute(
                "UPDATE recoveries SET phase=COALESCE(?, phase), restarts=COALESCE(?, restarts),"
                " pid=COALESCE(?, pid), line=COALESCE(?, line), updated_at=? WHERE job_id=?",
                (phase, restarts, pid, line, time.time(), job_id),
            )

    def say(self, job_id: str, restarts: int, line: str, headline: bool = True) -> None:
        """One event line (a recovery, a retry, a stop); a `headline` is also the row's
        line, which `status` shows."""
        with self._connect() as conn:
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM recovery_events WHERE job_id=?", (job_id,)
            ).fetchone()
            now = time.time()
            conn.execute("INSERT INTO recovery_events VALUES (?,?,?,?,?)",
                         (job_id, last + 1, now, restarts, line))  # fmt: skip
            if headline:
                conn.execute("UPDATE recoveries SET line=?, updated_at=? WHERE job_id=?",
                             (line, now, job_id))  # fmt: skip

    def events(self, job_id: str, after: int = 0) -> list[RecoveryEvent]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT seq, at, restarts, line FROM recovery_events WHERE job_id=? AND seq>?"
                " ORDER BY seq",
                (job_id, after),
            ).fetchall()
        return [RecoveryEvent(*row) for row in rows]

    def followed(self, job_ids: list[str]) -> set[str]:
        """Which of these jobs have a recovery record: one query for `status`'s rows, which
        reads each note only for those (a connection per job cost most of its time over a
        long history; issue 32)."""
        marks = ",".join("?" * len(job_ids))
        with self._connect() as conn:
            rows = conn.execute(f"SELECT job_id FROM recoveries WHERE job_id IN ({marks})",
                                job_ids).fetchall()  # fmt: skip
        return {row[0] for row in rows}
