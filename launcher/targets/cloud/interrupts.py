"""Signals during the commands that rent: SIGINT, SIGTERM and SIGHUP end `up` and
`submit --up` through their cleanup, which terminates what they rented, instead of killing
them with it left running (SIGTERM and SIGHUP would, by default).

`handled()` installs the handlers for the length of one renting command, in the main thread
only (elsewhere, or nested, it changes nothing). The first signal raises `Interrupted`, a
KeyboardInterrupt so that nothing catching Exception swallows it, in the main thread
wherever it is; the command's cleanup runs as for any failure, and the command then exits
with 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP.

A cleanup is never cut short: inside `cleaning()`, and after the first signal, a signal
raises nothing. It prints one line and sets `hurried()`, which ends the cleanup's waiting
(for a launch whose answer is still on its way, for the workers to stop) but never its
terminate calls.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from launcher.say import say

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CLEANUP_LINE = (b"gpujob: cleanup in progress: terminating what this command rented "
                b"(only the waiting is cut short)\n")  # fmt: skip


class Interrupted(KeyboardInterrupt):
    """A signal ended the command; its cleanup runs, then it exits with 128 + `signum`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Now:
    """The one renting command of this process. The handler only reads and sets these
    fields (and writes with os.write): it takes no lock the interrupted code may hold."""

    active = False
    received: int | None = None  # the first signal, the one that raised
    cleaning = 0  # cleanups under way (nested ones count)
    hurry = False


_now = _Now()


def hurried() -> bool:
    """A signal came during the cleanup: stop waiting, go on terminating."""
    return _now.hurry


def _on_signal(signum: int, frame: object) -> None:
    if _now.received is None and not _now.cleaning:
        _now.received = signum
        raise Interrupted(signum)
    _now.hurry = True
    with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) must not stop the cleanup
        os.write(2, CLEANUP_LINE)


@contextmanager
def cleaning() -> Iterator[None]:
    """Signals raise nothing while this runs (a failure's cleanup, or an interrupt's)."""
    _now.cleaning += 1
    try:
        yield
    finally:
        _now.cleaning -= 1


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` in the main thread; the command exits
    with 128 + the signal's number once the exception has passed its cleanups."""
    if _now.active or threading.current_thread() is not threading.main_thread():
        yield
        return
    _now.active, _now.received, _now.hurry = True, None, False
    previous = {sig: signal.signal(sig, _on_signal) for sig in SIGNALS}
    try:
        yield
    except Interrupted as stop:
        with contextlib.suppress(OSError):
            say(f"interrupted ({signal.Signals(stop.signum).name})")
        raise SystemExit(128 + stop.signum) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _now.active = False
