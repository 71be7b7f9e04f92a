"""One exception type for everything a user can cause or fix, and the exit codes.

The CLI catches `GpujobError` in one place and prints one line; anything else is a bug and
shows a traceback only with `--debug` (httpie's `status.py` shape).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


class GpujobError(Exception):
    """A failure the user should read: what went wrong, and what to do about it."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        if self.hint:
            text += f". {self.hint.rstrip('.')}"
        return " ".join(text.split("\n"))

    def lines(self) -> list[str]:
        """What the CLI prints, one `gpujob: error:` line each."""
        return [self.one_line()]


class UsageError(GpujobError):
    """Bad input: a spec, a flag, a value. Exit code 2, nothing changed."""

    exit_code = ExitCode.USAGE


class ManyUsageErrors(UsageError):
    """Every mistake of one input at once (each already names its file:line), so a file
    with four problems takes one try, not four."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__(messages[0])
        self.messages = messages

    def one_line(self) -> str:
        more = len(self.messages) - 1
        tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
        return self.lines()[0] + tail

    def lines(self) -> list[str]:
        return [" ".join(text.split("\n")) for text in self.messages]
