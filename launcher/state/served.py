"""What a job serves, in the state db beside the jobs: its `ports:` and its TensorBoard
folder, recorded at submit so that `gpujob port-forward JOB` (no PORT) forwards every port,
`gpujob tb JOB` knows the folder, and `status` says how to reach them. A job that serves
nothing has no row.

Standard library only: `gpujob status` reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from launcher.state.store import SqliteStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS served (
    job_id TEXT PRIMARY KEY,
    ports TEXT NOT NULL,
    tensorboard_logdir TEXT
);
"""


@dataclass(frozen=True)
class Served:
    job_id: str
    ports: list[int] = field(default_factory=list)
    tensorboard_logdir: str | None = None


class ServedDB(SqliteStore):
    SCHEMA = SCHEMA

    def put(self, served: Served) -> None:
        """The job's row, replaced (a recovery's restart records it again)."""
        with self._connect() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO served VALUES (?,?,?)",
                (served.job_id, json.dumps(served.ports), served.tensorboard_logdir),
            )

    def get(self, job_id: str) -> Served | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM served WHERE job_id=?", (job_id,)).fetchone()
        return None if row is None else Served(row[0], json.loads(row[1]), row[2])

    def all(self) -> dict[str, Served]:
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM served").fetchall()
        return {row[0]: Served(row[0], json.loads(row[1]), row[2]) for row in rows}
