"""The time from a ladder rung's start to the first line of its log that names a step
(`step 1`, `step=1`), read from the log as the follow writes it to stdout: no timestamp in
the job's log is needed, on any target."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

FIRST_STEP = re.compile(r"\bstep\s*[=:]?\s*\d", re.I)


class StepClock:
    """The time from the rung's start to the first line of its log that names a step, read
    from the log as the follow writes it to stdout."""

    def __init__(self, begun: float) -> None:
        self.begun = begun
        self.seen: float | None = None
        self.carry = b""

    def first_step(self) -> str:
        return "-" if self.seen is None else f"{self.seen - self.begun:.1f}s"

    def heard(self, data: bytes) -> None:
        if self.seen is not None:
            return
        lines = (self.carry + data).split(b"\n")
        self.carry = lines.pop()[-4096:]
        if any(FIRST_STEP.search(line.decode(errors="replace")) for line in lines):
            self.seen = time.monotonic()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        real = sys.stdout
        sys.stdout = _Tapped(real, self)
        try:
            yield
        finally:
            sys.stdout = real


class _Tapped:
    """stdout whose `buffer` tells the clock what goes through it."""

    def __init__(self, real: Any, clock: StepClock) -> None:
        self._real, self.buffer = real, _TappedBuffer(real.buffer, clock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _TappedBuffer:
    def __init__(self, real: Any, clock: StepClock) -> None:
        self._real, self._clock = real, clock

    def write(self, data: bytes) -> int:
        self._clock.heard(bytes(data))
        return int(self._real.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
