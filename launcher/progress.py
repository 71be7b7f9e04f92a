"""Progress for a wait the user would otherwise sit through in silence (over two seconds):
a spinner with the elapsed time on a terminal, plain lines in a pipe or a log.

`waiting(what)` shows nothing for the first two seconds, so a fast step stays quiet; after
that a terminal gets rich's spinner (rich imported only then: never on the start-up path)
and a pipe gets one line, then one line every `every_s` seconds while it lasts. `note()`
says what the wait is at now (an attempt, a count). Standard library until the spinner.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

QUIET_S = 2.0
_SPINNER = threading.Lock()
"""One spinner at a time on a terminal (rich allows one live display); a second wait at the
same moment (`up --count 4` connecting to four hosts) prints lines instead."""


class Wait:
    """One wait: what it is, what it is at now, and how long it has taken."""

    def __init__(self, what: str, stream: TextIO, every_s: float) -> None:
        self.what = what
        self.now = ""
        self._stream = stream
        self._every_s = every_s
        self._start = time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._spinner: Any = None
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def note(self, now: str) -> None:
        """What the wait is at: `attempt 3: connection refused`, `12 of 41 packages`."""
        with self._lock:
            self.now = now
            if self._spinner is not None:
                self._spinner.update(self._text())

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def _text(self) -> str:
        now = f": {self.now}" if self.now else ""
        return f"gpujob: {self.what}{now} ({self.elapsed():.0f} s)"

    def _watch(self) -> None:
        if self._done.wait(QUIET_S):
            return
        if self._stream.isatty() and _SPINNER.acquire(blocking=False):
            try:
                self._spin()
            finally:
                _SPINNER.release()
            return
        while True:
            with self._lock:
                print(self._text(), file=self._stream, flush=True)
            if self._done.wait(self._every_s):
                return

    def _spin(self) -> None:
        from rich.console import Console

        with self._lock:
            self._spinner = Console(file=self._stream).status(self._text())
            self._spinner.start()
        while not self._done.wait(1.0):
            self.note(self.now)  # the elapsed seconds move on
        with self._lock:
            self._spinner.stop()


@contextmanager
def waiting(what: str, stream: TextIO | None = None, every_s: float = 10.0) -> Iterator[Wait]:
    """`with waiting("connecting to root@h1") as wait: ... wait.note("attempt 2")`."""
    wait = Wait(what, sys.stderr if stream is None else stream, every_s)
    wait._thread.start()
    try:
        yield wait
    finally:
        wait._done.set()
        wait._thread.join()
