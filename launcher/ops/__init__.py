"""The apply side: each command's work, carried out (submit, logs, status, cancel, up, down,
ssh). A command in `launcher.cli` calls one function here; nothing below imports `ops`.

Plans come from `launcher.plan` (pure); hosts from `launcher.providers`; commands reach hosts
through `launcher.remote` and their agents through `launcher.runtime`.
"""

from __future__ import annotations

import sys


def say(text: str) -> None:
    """A progress or status line for the user: stderr, so stdout stays the command's answer."""
    sys.stderr.write(f"gpujob: {text}\n")
    sys.stderr.flush()
