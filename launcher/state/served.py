"""What a job serves, in the state db beside the jobs: its `ports:` and its TensorBoard
folder, recorded at submit so that `gpujob port-forward JOB` (no PORT) forwards every port,
`gpujob tb JOB` knows the folder, and `status` says how to reach them. A job that serves
nothing has no row. Where the job's cloud publishes its ports (Vast), each port's public
`address:port` too, in a table of its own (`published`), written when node 0 is rented.

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
CREATE TABLE IF NOT EXISTS published (
    job_id TEXT NOT NULL,
    port INTEGER NOT NULL,
    public TEXT NOT NULL,
    PRIMARY KEY (job_id, port)
);
"""


@dataclass(frozen=True)
class Served:
    job_id: str
    ports: list[int] = field(default_factory=list)
    tensorboard_logdir: str | None = None
    public: dict[int, str] = field(default_factory=dict)
    """Port -> the `address:port` its cloud publishes it on (Vast); empty elsewhere."""


class ServedDB(SqliteStore):
    SCHEMA = SCHEMA

    def put(self, served: Served) -> None:
        """The job's row, replaced (a recovery's restart records it again); its published
        addresses are `put_public`'s."""
        with self._connect() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO served VALUES (?,?,?)",
                (served.job_id, json.dumps(served.ports), served.tensorboard_logdir),
            )

    def put_public(self, job_id: str, public: dict[int, str]) -> None:
        """The job's published ports, replacing those of its earlier head node (a
        replacement host publishes elsewhere)."""
        with self._connect() as conn:
            conn.execute("DELETE FROM published WHERE job_id=?", (job_id,))
            conn.executemany("INSERT INTO published VALUES (?,?,?)",
                             [(job_id, port, where) for port, where in public.items()])  # fmt: skip

    def get(self, job_id: str) -> Served | None:
        return self.all(job_id).get(job_id)

    def all(self, job_id: str | None = None) -> dict[str, Served]:
        where, args = (" WHERE job_id=?", (job_id,)) if job_id else ("", ())
        with self._connect() as conn:
            rows = conn.execute(f"SELECT * FROM served{where}", args).fetchall()
            published = conn.execute(f"SELECT * FROM published{where}", args).fetchall()
        public: dict[str, dict[int, str]] = {}
        for job, port, address in published:
            public.setdefault(job, {})[int(port)] = address
        return {row[0]: Served(row[0], json.loads(row[1]), row[2], public.get(row[0], {}))
                for row in rows}  # fmt: skip
