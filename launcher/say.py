"""A progress or status line for the user, on stderr: every command, the targets that run
jobs and the processes that outlive a command say things the same way."""

from __future__ import annotations

import re
import sys
from typing import TextIO

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str, stream: TextIO | None = None) -> str:
    """`text` from a job or a spec as a terminal should show it: on a terminal every control
    character is shown in caret notation (`^[`, `^G`, `M-^[` for a C1), not obeyed, so a
    spec's `run: "echo \\e]52;..."` cannot set the clipboard while `submit --dry-run`
    shows it; a file or a pipe gets the text as it is (as `logs` does)."""
    stream = stream or sys.stdout
    try:
        on_terminal = stream.isatty()
    except (AttributeError, ValueError):
        return text
    return _CONTROL.sub(_caret, text) if on_terminal else text


def _caret(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code >= 0x80:
        return "M-" + _caret_of(code - 0x80)
    return _caret_of(code)


def _caret_of(code: int) -> str:
    return "^?" if code == 0x7F else "^" + chr(code + 0x40)


def say(text: str) -> None:
    """A progress or status line for the user: stderr, so stdout stays the command's answer."""
    sys.stderr.write(f"gpujob: {shown(text, sys.stderr)}\n")
    sys.stderr.flush()
