"""Whose instances are whose: the owner id every instance gpujob launches carries.

One cloud account is often a team's, so the `gpujob-` tag alone says only that some gpujob
made an instance, not which. Each state dir has an owner id, a random one made once
(`<state>/owner`, mode 0600, written atomically: two first uses at once agree on one), and
every instance launched from it carries its first 8 characters in its name
(`gpujob-<owner8>-<gpu>-<hex>`, within Lambda's 64) and, where the cloud has tags, the
whole id and the user's name. `status`, `down --all` and reconciliation act only on
instances carrying ours; an instance named before owners existed is ours only when the
state db recorded it. Standard library only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from launcher.errors import GpujobError
from launcher.paths import owner_file

# Every instance gpujob creates carries this prefix in its name (Lambda) or label (Vast):
# it is how `down --all` and `reconcile` find them from any machine, with no db at all.
TAG = "gpujob-"
SHORT = 8
OWNER_ID = re.compile(r"[0-9a-f]{32}")
NAMED_OWNER = re.compile(rf"^{TAG}([0-9a-f]{{{SHORT}}})-")


@dataclass(frozen=True)
class Owner:
    """Who rents: the id made once per state dir (every instance carries it) and the user."""

    id: str
    user: str

    def made(self, carried: str) -> bool:
        """Whether an owner id an instance carries (its name's 8 characters, or a whole id
        from a cloud's tags) is this one."""
        return carried == (self.id if len(carried) > SHORT else self.short)

    @property
    def short(self) -> str:
        """What an instance's name carries."""
        return self.id[:SHORT]


def user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no $USER: a container's uid
        return f"uid{os.getuid()}"


def read_owner() -> Owner | None:
    """This state's owner, or None when it has launched nothing yet (a dry run, a status):
    reading never creates the file."""
    path = owner_file()
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not OWNER_ID.fullmatch(text):
        raise GpujobError(
            f"{path}: not an owner id (32 hex characters)",
            "restore it from a backup: instances launched from this state carry it, and "
            "without it gpujob treats them as another owner's",
        )
    return Owner(text, user_name())


def owner() -> Owner:
    """This state's owner, made on first use: written to a private temporary file, then
    linked to its name, which fails if another process made it first (then its id wins)."""
    import secrets

    found = read_owner()
    if found is not None:
        return found
    path = owner_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(16) + "\n")
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    made = read_owner()
    assert made is not None
    return made


def owner_in_name(name: str) -> str | None:
    """The owner id's 8 characters a name carries; None for a name from before owners."""
    found = NAMED_OWNER.match(name)
    return found.group(1) if found else None


def is_ours(carried: str | None, mine: Owner | None) -> bool | None:
    """True or False when the instance carries an owner id; None when it carries none (an
    instance from before owners: the state db decides)."""
    if carried is None:
        return None
    return mine is not None and mine.made(carried)
