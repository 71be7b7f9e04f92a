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


class SqliteStore:
    SCHEMA = ""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "state.db"
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.executescript(self.SCHEMA)
            with conn:
                yield conn
        finally:
            conn.close()
