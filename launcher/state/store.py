"""One SQLite file under the state dir, shared by the tables gpujob keeps there.

Each store names its own schema; opening a connection creates what is missing, so a state
dir from an older gpujob gains new tables on first use.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.paths import state_dir
from launcher.state.faults import check_version, mark_version, state_faults

_MADE: set[tuple[str, str, int, int]] = set()
"""(schema, db path, its device and inode) this process has made the tables of: a store is
made per call in places (`status` reads each job's recovery note), and running the schema
script on every connection cost 3 ms each. A db removed and made again is another file."""


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
                file = os.stat(self.path)
                made = (self.SCHEMA, str(self.path), file.st_dev, file.st_ino)
                if made not in _MADE:
                    version = check_version(conn, self.path)
                    conn.executescript(self.SCHEMA)
                    mark_version(conn, version)
                    _MADE.add(made)
                with conn:
                    yield conn
            finally:
                conn.close()
