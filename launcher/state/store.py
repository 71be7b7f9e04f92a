"""One SQLite file under the state dir, shared by the tables gpujob keeps there.

Each store names its own schema; opening a connection creates what is missing, so a state
dir from an older gpujob gains new tables on first use.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.paths import state_dir
from launcher.state.faults import check_version, mark_version, state_faults


class SqliteStore:
    SCHEMA = ""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "state.db"
        with state_faults(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with state_faults(self.path):
            conn = sqlite3.connect(self.path, timeout=30)
            try:
                version = check_version(conn, self.path)
                conn.executescript(self.SCHEMA)
                mark_version(conn, version)
                with conn:
                    yield conn
            finally:
                conn.close()
