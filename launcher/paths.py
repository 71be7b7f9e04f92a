"""Every folder and file gpujob keeps on this machine, in one place.

One scheme: the platform's user dirs (platformdirs), each overridden by one variable for
tests and for users who keep state elsewhere:

| what | variable | default (Linux) |
| --- | --- | --- |
| state: jobs and hosts db, host-key pins, owner id | `GPUJOB_STATE_DIR` | `~/.local/state/gpujob` |
| cache: job environments, image wheels | `GPUJOB_CACHE_DIR` | `~/.cache/gpujob` |
| config: S3 remotes (config.yaml) | `GPUJOB_CONFIG_DIR` | `~/.config/gpujob` |
| SSH hosts you have | `GPUJOB_HOSTS_FILE` | `<config>/hosts.yaml` |
| OpenSSH's config | `GPUJOB_SSH_CONFIG` | `~/.ssh/config` |

Live sockets (SSH master connections) live apart from the state dir, in
`$TMPDIR/gpujob-UID/TAG`, TAG a hash of the state dir: a unix socket path is at most 108
bytes, which a state dir's own path may already exceed, and two state dirs (two sets of
pinned keys, two test runs) never share a socket. The folder is the user's own and private:
a socket there is a logged-in connection.

Standard library only, and cheap to import (platformdirs, tempfile and hashlib load when
a path is asked for): every layer imports this module, `gpujob status` included.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.errors import GpujobError


def _user_dir(variable: str, kind: str) -> Path:
    override = os.environ.get(variable)
    if override:
        return Path(override)
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("gpujob"))


def state_dir() -> Path:
    return _user_dir("GPUJOB_STATE_DIR", "state")


def cache_dir() -> Path:
    return _user_dir("GPUJOB_CACHE_DIR", "cache")


def config_dir() -> Path:
    return _user_dir("GPUJOB_CONFIG_DIR", "config")


def config_file() -> Path:
    return config_dir() / "config.yaml"


def hosts_file() -> Path:
    override = os.environ.get("GPUJOB_HOSTS_FILE")
    return Path(override) if override else config_dir() / "hosts.yaml"


def known_hosts_file() -> Path:
    """gpujob's own host-key pins, never the user's ~/.ssh/known_hosts."""
    return state_dir() / "known_hosts"


def owner_file() -> Path:
    """The owner id that every instance this state launches carries (launcher.state.owner)."""
    return state_dir() / "owner"


def ssh_config_file() -> Path:
    return Path(os.environ.get("GPUJOB_SSH_CONFIG", Path.home() / ".ssh" / "config"))


def envs_dir() -> Path:
    """Job environments built on this machine, keyed by a hash of their pins."""
    return cache_dir() / "envs"


def images_cache_dir() -> Path:
    """Image wheels by sha256 and build contexts."""
    return cache_dir() / "images"


SOCKET_NAME_ROOM = 60  # a socket's name (17 bytes) and ssh's temporary suffix, with room
SOCKET_PATH_MAX = 104  # the least of Linux's 108 and the BSDs' 104


def run_dir_path(state: Path | None = None) -> Path:
    """Under $TMPDIR, or /tmp where $TMPDIR is too long for a socket path (macOS's is)."""
    import hashlib
    import tempfile

    tag = hashlib.sha1(str((state or state_dir()).resolve()).encode()).hexdigest()[:12]
    base = Path(tempfile.gettempdir())
    if len(str(base)) + len(f"/gpujob-{os.getuid()}/{tag}") + SOCKET_NAME_ROOM > SOCKET_PATH_MAX:
        base = Path("/tmp")
    return base / f"gpujob-{os.getuid()}" / tag


def existing_run_dir(state: Path | None = None) -> Path | None:
    where = run_dir_path(state)
    return where if where.is_dir() else None


def run_dir(state: Path | None = None) -> Path:
    """The folder, made private if it is not there; refuses one someone else planted."""
    import contextlib

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
