"""The private folder of a state dir's live sockets: SSH master connections (openssh.py) and
the resident gpujob (resident.py).

`$TMPDIR/gpujob-UID/TAG`, TAG a hash of the state dir: a unix socket path is at most 108
bytes, which a state dir's own path may already exceed, and two state dirs (two sets of
pinned keys, two test runs) never share a socket. Both folders are the user's own and
private: a socket there is a logged-in connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from launcher.errors import GpujobError


def state_path() -> Path:
    """`GPUJOB_STATE_DIR`, else the platform's user state dir (as the state db's)."""
    override = os.environ.get("GPUJOB_STATE_DIR")
    if override:
        return Path(override)
    from platformdirs import user_state_dir

    return Path(user_state_dir("gpujob"))


SOCKET_NAME_ROOM = 60  # a socket's name (17 bytes) and ssh's temporary suffix, with room
SOCKET_PATH_MAX = 104  # the least of Linux's 108 and the BSDs' 104


def run_dir_path(state: Path | None = None) -> Path:
    """Under $TMPDIR, or /tmp where $TMPDIR is too long for a socket path (macOS's is)."""
    tag = hashlib.sha1(str((state or state_path()).resolve()).encode()).hexdigest()[:12]
    base = Path(tempfile.gettempdir())
    if len(str(base)) + len(f"/gpujob-{os.getuid()}/{tag}") + SOCKET_NAME_ROOM > SOCKET_PATH_MAX:
        base = Path("/tmp")
    return base / f"gpujob-{os.getuid()}" / tag


def existing_run_dir(state: Path | None = None) -> Path | None:
    where = run_dir_path(state)
    return where if where.is_dir() else None


def run_dir(state: Path | None = None) -> Path:
    """The folder, made private if it is not there; refuses one someone else planted."""
    where = run_dir_path(state)
    for folder in (where.parent, where):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        facts = folder.lstat()
        if facts.st_uid != os.getuid() or not folder.is_dir() or folder.is_symlink():
            raise GpujobError(
                f"{folder} is not a folder of this user's; it would hold live connections",
                "remove it, or set TMPDIR to a private folder",
            )
        if facts.st_mode & 0o077:
            folder.chmod(0o700)
    return where


def close(state: Path | None = None) -> int:
    """End what a state dir left running (its resident gpujob, its SSH masters) and remove
    its folder: the end of a test or a bench. Returns how many processes were ended."""
    import shutil

    from launcher import resident
    from launcher.remote.openssh import stop_masters

    ended = resident.stop(state) + stop_masters(state)
    folder = existing_run_dir(state)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return ended
