"""The state db as a dry run (or a plain lookup) sees it: read, never written, never created.

`HostsDB` and `StateDB` make the state dir and the db file (and their tables) on first use,
which is right for the commands that record something and wrong for a dry run, which must
leave the state dir as it found it. These views answer the same queries from a read-only
connection; a db that is not there (or lacks the table) reads as empty.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.paths import state_dir
from launcher.state import db as jobs_db
from launcher.state import hosts as hosts_db
from launcher.state.faults import check_version, state_faults


@contextmanager
def read_only(path: Path, schema: str, table: str) -> Iterator[sqlite3.Connection]:
    with state_faults(path):
        conn = None
        if path.is_file():
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
            check_version(conn, path)
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()
            if found is None:
                conn.close()
                conn = None
        if conn is None:  # nothing recorded yet: the same tables, empty, in memory
            conn = sqlite3.connect(":memory:")
            conn.executescript(schema)
        try:
            yield conn
        finally:
            conn.close()


class ReadOnly(Exception):
    """A write reached a read-only view: a dry run tried to change the state db."""


class HostsView(hosts_db.HostsDB):
    """The rented hosts as recorded, for dry runs and plain lookups."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "state.db"  # no mkdir: nothing is created

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with read_only(self.path, hosts_db.SCHEMA, "hosts") as conn:
            yield conn

    def intend(self, name: str, provider: str, gpu: str) -> None:
        raise ReadOnly(f"a dry run would have recorded host {name}")

    def update(self, name: str, inst: object = None, status: str | None = None) -> None:
        raise ReadOnly(f"a dry run would have changed the row of host {name}")


class JobsView(jobs_db.StateDB):
    """The recorded jobs, for dry runs."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "state.db"
        self._schema_ready = True  # a db from before `logs_to` reads without it (12 columns)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with read_only(self.path, jobs_db.SCHEMA, "jobs") as conn:
            yield conn

    def add_job(self, job: jobs_db.JobRecord) -> None:
        raise ReadOnly(f"a dry run would have recorded job {job.id}")

    def update_job(self, job_id: str, state: str, *args: object, **kwargs: object) -> None:
        raise ReadOnly(f"a dry run would have marked job {job_id} {state}")

    def set_offset(self, job_id: str, node: int, offset: int) -> None:
        raise ReadOnly(f"a dry run would have recorded a log offset of job {job_id}")
