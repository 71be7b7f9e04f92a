"""What the disk can do to the state dir, each as one line naming the path and what to do.

The state db and the files beside it fail in a handful of ways a user can fix: the file is
damaged (a crash mid-write, a truncated copy), the folder is read-only or not theirs, the
disk is full, another gpujob holds the db, or a newer gpujob wrote it. `state_faults` turns
each sqlite or OS error raised while the db is open into a `StateFault` (exit 1); the CLI
does the same for an OS error on any path under the state dir. The db's schema version is
sqlite's `user_version`: a db from a newer gpujob is refused before anything reads it.
Standard library only.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.errors import GpujobError

SCHEMA_VERSION = 2
"""The state db's layout as this gpujob writes it (PRAGMA user_version); 0: from before;
2: a job's record says who is starting it and whether its end was confirmed."""

ELSEWHERE = "or set GPUJOB_STATE_DIR to another folder"


class StateFault(GpujobError):
    """The state dir cannot be read or written as it is: nothing was changed."""


@contextmanager
def state_faults(path: Path) -> Iterator[None]:
    """Around anything that opens, reads or writes the state db at `path`."""
    try:
        yield
    except sqlite3.Error as err:
        raise db_fault(err, path) from None
    except OSError as err:
        raise os_fault(err, Path(err.filename) if err.filename else path) from None


def check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The db's schema version; a newer one than this gpujob's is refused."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StateFault(
            f"{path}: the state db was written by a newer gpujob (schema version {version}; "
            f"this gpujob knows {SCHEMA_VERSION} and leaves it unchanged)",
            f"run the newer gpujob that wrote it, {ELSEWHERE}",
        )
    return version


def mark_version(conn: sqlite3.Connection, version: int) -> None:
    """After the tables are made: the db says which gpujob's layout it has."""
    if version < SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def db_fault(err: sqlite3.Error, path: Path) -> StateFault:
    name = getattr(err, "sqlite_errorname", "") or ""
    text = str(err)
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a db" in text:
        return StateFault(
            f"{path}: the state db is damaged ({text})",
            f"move it aside (mv {path} {path}.damaged) and run again: gpujob starts a new "
            "one and forgets its records of jobs (`gpujob status` still lists the hosts you "
            "rented: they carry this state dir's owner id)",
        )
    if name == "SQLITE_FULL" or "disk is full" in text:
        return _full(path)
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")) or (
        "readonly" in text or "unable to open" in text
    ):
        return StateFault(
            f"{path}: cannot write the state db ({text})",
            f"make {path.parent} and the db writable by you, {ELSEWHERE}",
        )
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StateFault(
            f"{path}: the state db is held by another gpujob ({text})",
            "try again once it has finished",
        )
    return StateFault(f"{path}: the state db failed ({text})", f"check the disk, {ELSEWHERE}")


def os_fault(err: OSError, path: Path) -> StateFault:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return _full(path)
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StateFault(
            f"{path}: cannot write in the state dir ({err.strerror})",
            f"make it writable by you, {ELSEWHERE}",
        )
    return StateFault(f"{path}: {err.strerror}", f"check the state dir's disk, {ELSEWHERE}")


def _full(path: Path) -> StateFault:
    return StateFault(
        f"{path}: the disk of the state dir is full",
        f"free some space on it, {ELSEWHERE}",
    )
