"""A progress or status line for the user, on stderr: every command, the targets that run
jobs and the processes that outlive a command say things the same way."""

from __future__ import annotations

import sys


def say(text: str) -> None:
    """A progress or status line for the user: stderr, so stdout stays the command's answer."""
    sys.stderr.write(f"gpujob: {text}\n")
    sys.stderr.flush()
