"""The user's SSH key: one rule for which key `up` registers and which key logs in later.

`GPUJOB_SSH_KEY` (a private key path) wins; else the first of ~/.ssh/id_ed25519, id_ecdsa,
id_rsa that has its `.pub` beside it. The key registered with a cloud and the key that logs
in to the hosts it made must be the same one, so both ask here.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.errors import UsageError

DEFAULT_NAMES = ("id_ed25519", "id_ecdsa", "id_rsa")


def candidate_keys() -> list[Path]:
    chosen = os.environ.get("GPUJOB_SSH_KEY")
    if chosen:
        return [Path(os.path.expanduser(chosen))]
    return [Path.home() / ".ssh" / name for name in DEFAULT_NAMES]


def user_key() -> Path:
    """The private key path whose public half exists."""
    names = candidate_keys()
    for path in names:
        if Path(f"{path}.pub").is_file():
            return path
    raise UsageError(
        f"no SSH public key found ({', '.join(f'{n}.pub' for n in names)})",
        "create one with `ssh-keygen -t ed25519` or set GPUJOB_SSH_KEY",
    )


def public_key() -> str:
    return Path(f"{user_key()}.pub").read_text().strip()
